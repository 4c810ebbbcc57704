"""A report as a pandas DataFrame and as Model Explorer node data."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys

import pytest

from bisect_ov import bisect, inject_fault
from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.core.records import Cause
from bisect_ov.report.export import (
    DATAFRAME_COLUMNS,
    ME_COLORS,
    ME_NONFINITE_VALUE,
    ME_ZERO_VALUE,
    to_dataframe,
    to_model_explorer,
)
from bisect_ov.zoo import synthetic

REQUIRED = ("name", "op_type", "index", "role", "rank", "first", "diverged", "error", "input_error", "tolerance",
            "times_tolerance", "growth", "local_error", "amplification", "impact", "samples_mean", "samples_p50",
            "samples_p90", "samples_max", "causes", "shape", "dtype", "ref_precision", "ref_kernel",
            "target_precision", "target_kernel", "fused_with")
# What the report shows as figures (text table, verdict, HTML cards): each must be a sortable number column.
FIGURES = ("error", "input_error", "tolerance", "times_tolerance", "growth", "local_error", "amplification", "impact",
           "samples_mean", "samples_p50", "samples_p90", "samples_max", "index", "rank", "ref_nan", "ref_inf",
           "target_nan", "target_inf", "out_max_abs", "out_cosine", "out_sqnr_db", "out_mismatches", "out_numel")
TEXT = ("name", "op_type", "role", "ref_precision", "ref_kernel", "target_precision", "target_kernel", "out_dtype",
        "out_note")
LISTS = ("causes", "shape", "dtype", "tensor_names", "inputs", "group", "fused_with")


@pytest.fixture(scope="module")
def report():
    m = synthetic.demo()
    return bisect(m, "CPU", "CPU:f32", target_model=inject_fault(m, "block1/conv1"), strategy="full", progress=False)


# ----- DataFrame --------------------------------------------------------------------------------------------------

def test_dataframe_one_row_per_node_indexed_by_key(report):
    pytest.importorskip("pandas")
    df = to_dataframe(report)
    assert len(df) == len(report.nodes)
    assert list(df.columns) == list(DATAFRAME_COLUMNS)
    for col in REQUIRED:
        assert col in df.columns
    for field in dataclasses.fields(TensorStats):
        assert f"out_{field.name}" in df.columns
    assert df.index.name == "key" and list(df.index) == [n.key for n in report.nodes] and df.index.is_unique
    assert list(df["name"]) == [n.name for n in report.nodes]
    assert list(df["index"]) == [n.index for n in report.nodes]
    assert df["error"].tolist() == [n.error for n in report.nodes]
    first = df.loc["block1/conv1"]
    assert bool(first["first"]) and bool(first["diverged"])
    assert first["role"] == "source" and first["rank"] == 1
    assert first["shape"] == [(1, 16, 32, 32)] and first["dtype"] == ["float32"]
    assert first["out_shape"] == (1, 16, 32, 32) and first["out_numel"] == 16 * 32 * 32
    assert first["out_max_abs"] == report.node("block1/conv1").stats.max_abs
    assert first["times_tolerance"] == pytest.approx(first["error"] / first["tolerance"])
    assert df[df["first"]].index.tolist() == ["block1/conv1"]
    # rank is a nullable integer: missing for nodes within tolerance
    assert str(df["rank"].dtype) == "Int64"
    assert df.loc[df["role"] == "ok", "rank"].isna().all()
    assert df.loc[df["role"] != "ok", "rank"].notna().all()
    # culprits in rank order come back from the frame
    assert df[df.diverged].sort_values("rank").index.tolist() == list(report.ranking)


def test_dataframe_every_figure_is_a_sortable_number_column(report):
    pd = pytest.importorskip("pandas")
    df = to_dataframe(report)
    for col in FIGURES:
        assert pd.api.types.is_numeric_dtype(df[col]), (col, df[col].dtype)
        df.sort_values(col)  # sorts without error, NaN last
    worst = df.sort_values("error", ascending=False).iloc[0]
    assert worst["error"] == max(n.error for n in report.nodes)


def test_dataframe_text_columns_share_one_dtype_and_lists_are_lists(report):
    pd = pytest.importorskip("pandas")
    n0 = report.nodes[0]
    runtime = {"ref": {"precision": "f32", "kernel": "jit_avx512_f32", "fused": [n0.name, "Multiply_1", "x/relu"]},
               "target": {"precision": "bf16", "kernel": "jit_avx512_bf16", "fused": [n0.name, "x/relu"]}}
    nodes = (dataclasses.replace(n0, runtime=runtime, diagnosis=(Cause("note", "one"), Cause("note", "two"))),
             dataclasses.replace(report.nodes[1], runtime={}, diagnosis=()),
             dataclasses.replace(report.nodes[2], runtime={"ref": {"precision": "f32"}}, outputs=()))
    df = to_dataframe(dataclasses.replace(report, nodes=nodes))
    for col in TEXT:  # the same dtype whether the column holds values or only missing ones
        assert df[col].dtype == pd.StringDtype(), (col, df[col].dtype)
    row = df.iloc[0]
    assert (row["ref_precision"], row["ref_kernel"]) == ("f32", "jit_avx512_f32")
    assert (row["target_precision"], row["target_kernel"]) == ("bf16", "jit_avx512_bf16")
    assert row["fused_with"] == ["x/relu"]  # the target's fused ops, without the node itself
    assert row["causes"] == ["one", "two"]
    empty = df.iloc[1]
    for col in ("ref_precision", "ref_kernel", "target_precision", "target_kernel"):
        assert empty[col] is pd.NA
    assert empty["causes"] == [] and empty["fused_with"] == []
    partial = df.iloc[2]
    assert partial["ref_precision"] == "f32" and partial["ref_kernel"] is pd.NA and partial["target_kernel"] is pd.NA
    assert math.isnan(partial["out_max_abs"]) and partial["out_mismatches"] is pd.NA
    assert partial["n_outputs"] == 0 and partial["shape"] == [] and partial["out_shape"] is None
    for col in LISTS:
        assert all(isinstance(v, list) for v in df[col]), col
    assert df.explode("causes")["causes"].dropna().tolist() == ["one", "two"]


def test_dataframe_has_the_experiments_and_per_sample_columns(report):
    pytest.importorskip("pandas")
    n = report.nodes
    nodes = (dataclasses.replace(n[0], local_error=1e-3, amplification=2.5, impact=4e-2,
                                 over_samples={"mean": 1.0, "p50": 0.5, "p90": 2.0, "max": 3.0}),
             *n[1:])
    df = to_dataframe(dataclasses.replace(report, nodes=nodes))
    row = df.loc[n[0].key]
    assert (row["local_error"], row["amplification"], row["impact"]) == (1e-3, 2.5, 4e-2)
    assert [row[f"samples_{k}"] for k in ("mean", "p50", "p90", "max")] == [1.0, 0.5, 2.0, 3.0]
    rest = df.drop(index=n[0].key)
    assert rest["samples_mean"].isna().all()  # one sample: no spread
    assert rest["impact"].isna().sum() == sum(x.impact is None for x in n[1:])
    assert df.loc[[x.key for x in n if x.impact is not None], "impact"].tolist() == \
        [x.impact for x in n if x.impact is not None]


def test_dataframe_needs_pandas(report, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"pip install pandas \(or, in a checkout of bisect_ov: pip install -e '\.\[dataframe\]'\)"):
        to_dataframe(report)


# ----- Model Explorer ---------------------------------------------------------------------------------------------

def test_model_explorer_results_for_every_node(report):
    data = to_model_explorer(report)
    assert set(data) == {"name", "results", "thresholds"}  # the single-graph form: whatever graph is shown
    assert data["name"].startswith("bisect_ov log10(rel_l2), -2 = 1e-2: ")  # what Model Explorer shows: logarithms
    results = data["results"]
    assert set(results) == {n.name for n in report.nodes}  # node ids (Model Explorer's ONNX adapter ignores tensors)
    conv = results["block1/conv1"]
    assert conv["value"] == pytest.approx(math.log10(report.node("block1/conv1").error), abs=1e-6)
    assert conv["bgColor"] == ME_COLORS["far"]  # 5e-1 against a tolerance of 1.3e-6
    exact = report.nodes[0]
    assert exact.error == 0 and results[exact.name]["value"] == ME_ZERO_VALUE
    assert results[exact.name]["bgColor"] == ME_COLORS["within"]
    assert all(re.fullmatch(r"#[0-9a-f]{6}", r["bgColor"]) for r in results.values())


def test_model_explorer_thresholds_sorted_and_from_tolerance(report):
    thresholds = to_model_explorer(report)["thresholds"]
    values = [t["value"] for t in thresholds]
    assert values == sorted(values) and len(values) == 3
    assert [t["bgColor"] for t in thresholds] == [ME_COLORS["within"], ME_COLORS["over"], ME_COLORS["far"]]
    tols = sorted(n.tolerance for n in report.nodes)
    assert values[0] == pytest.approx(math.log10(tols[len(tols) // 2]), abs=1e-6)
    assert values[1] == pytest.approx(values[0] + 1, abs=1e-6)  # 10x the tolerance
    assert values[2] == ME_NONFINITE_VALUE


def test_model_explorer_nonfinite_and_colours_against_own_tolerance(report):
    n = report.nodes
    nodes = (dataclasses.replace(n[0], error=math.inf), dataclasses.replace(n[1], error=math.nan),
             dataclasses.replace(n[2], error=5e-6, tolerance=1e-6),
             dataclasses.replace(n[3], error=1e-6, tolerance=1e-6))
    data = to_model_explorer(dataclasses.replace(report, nodes=nodes), graph_id="main_graph")
    results = data["main_graph"]["results"]
    assert results[n[0].name] == {"value": ME_NONFINITE_VALUE, "bgColor": ME_COLORS["far"]}
    assert results[n[1].name] == {"value": ME_NONFINITE_VALUE, "bgColor": ME_COLORS["far"]}
    assert results[n[2].name]["bgColor"] == ME_COLORS["over"]
    assert results[n[3].name]["bgColor"] == ME_COLORS["within"]
    json.dumps(data, allow_nan=False)  # only finite numbers


def test_model_explorer_writes_the_file(report, tmp_path):
    path = tmp_path / "node_data.json"
    data = to_model_explorer(report, path, graph_id="g")
    assert json.loads(path.read_text(encoding="utf-8")) == data
    assert os.listdir(tmp_path) == ["node_data.json"]  # written atomically, no temporary left behind
    assert to_model_explorer(report, str(path)) == json.loads(path.read_text(encoding="utf-8"))
