"""The needle-in-noise benchmark's core function runs and returns rows of the documented shape (not a hit rate)."""

from __future__ import annotations

import importlib.util
import pathlib

from bisect_ov.zoo.synthetic import chain, sample_inputs

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "needle_bench.py"


def _bench():
    spec = importlib.util.spec_from_file_location("needle_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_needle_rows_on_the_synthetic_chain():
    bench = _bench()
    model = chain()
    result = bench.run_model("chain", model, sample_inputs(model), target="EMU:bf16", sites=2, seed=0)
    assert result["sites"] == 2 and len(result["rows"]) == 2
    for row in result["rows"]:
        assert {"site", "op_type", "regime", "hit", "top3", "verdict", "named", "named_role", "seconds"} <= set(row)
        assert row["regime"] in ("over", "within")
        assert isinstance(row["hit"], bool) and isinstance(row["top3"], bool)
    assert result["hits"] == sum(r["hit"] for r in result["rows"])
    assert set(result["benign"]) >= {"false_alarm", "verdict", "seconds"}
    s = bench.summary([result])
    assert s["all"]["sites"] == 2 and s["benign_runs"] == 1
    table = bench.format_table(bench.table_rows([result]), markdown=True)
    assert table.splitlines()[0].startswith("| model |") and "chain" in table
