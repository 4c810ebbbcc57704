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


def test_every_fault_shape_runs_and_a_movement_site_counts_its_producer():
    bench = _bench()
    model = chain()
    result = bench.run_model("chain", model, sample_inputs(model), target="EMU:bf16", sites=1, seed=0,
                             faults=tuple(bench.FAULTS))
    assert [r["fault"] for r in result["rows"]] == list(bench.FAULTS)
    assert all(r["regime"] in ("over", "within") for r in result["rows"])  # none raised
    # Each fault's own size at its node, on f32: a constant 1.2x changes it by 0.2; every shape changes it.
    size = {r["fault"]: r["fault_size"] for r in result["rows"]}
    assert abs(size["scale"] - 0.2) < 1e-4 and all(0 < s < 2 for s in size.values()), size
    assert all(r["site_tolerance"] is not None and r["site_tolerance"] > 0 for r in result["rows"])
    s = bench.summary([result])
    assert set(s["by_fault"]) == set(bench.FAULTS) and all(v["sites"] == 1 for v in s["by_fault"].values())
    from bisect_ov.model.graph import ModelGraph
    from bisect_ov.zoo.synthetic import attention_block

    graph = ModelGraph(attention_block())
    views = [n for n in graph.candidates() if n.op_type in bench.VIEWS]
    assert views
    for node in views:
        assert bench.producers_of(graph, node.name) and node.name not in bench.producers_of(graph, node.name)
    assert not bench.producers_of(graph, next(n.name for n in graph.candidates() if n.op_type not in bench.VIEWS))
