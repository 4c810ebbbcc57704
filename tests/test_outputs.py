"""Final outputs are paired by the model's output order (not topological order), in every path that reads them."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov import InputError, bisect, inject_fault


def _two_outputs(order: str = "deep_first") -> ov.Model:
    """x -> tanh (out_shallow), and x -> mm -> tanh -> mm -> tanh (out_deep); out_deep is listed first."""
    rng = np.random.default_rng(0)
    x = ops.parameter([1, 8], np.float32, name="x")
    shallow = ops.tanh(x, name="shallow")
    h = x
    for i in range(2):
        w = ops.constant((rng.standard_normal((8, 8)) / 3).astype(np.float32))
        h = ops.tanh(ops.matmul(h, w, False, False, name=f"mm{i}"), name=f"deep{i}")
    r_deep, r_shallow = ops.result(h, name="out_deep"), ops.result(shallow, name="out_shallow")
    results = [r_deep, r_shallow] if order == "deep_first" else [r_shallow, r_deep]
    return ov.Model(results, [x], "two_outputs")


@pytest.mark.parametrize("order", ["deep_first", "shallow_first"])
def test_the_faulted_output_is_the_one_reported(order):
    model = _two_outputs(order)
    twin = inject_fault(model, "mm1", "scale", 0.3)
    report = bisect(model, "CPU", "CPU:f32", target_model=twin, progress=False)
    outputs = {o.name: o for o in report.outputs}
    assert set(outputs) == {"out_deep", "out_shallow"}
    assert outputs["out_deep"].diverged and not outputs["out_shallow"].diverged
    assert report.first_divergence.name == "mm1"


def test_partitioned_runs_quote_the_error_of_the_right_output():
    # The contribution curve's last point runs everything on the target: its error is the worst output's.
    model = _two_outputs("shallow_first")
    report = bisect(model, "CPU", "CPU:bf16", curve=2, progress=False, noise=False)
    outputs = {o.name: o.error for o in report.outputs}
    full = report.curve[-1].error
    assert full == pytest.approx(max(outputs.values()), rel=1e-6)


def test_an_integer_output_keeps_its_own_tolerance():
    x = ops.parameter([1, 16], np.float32, name="x")
    scores = ops.tanh(ops.multiply(x, ops.constant(np.float32(3.0))), name="scores")
    index = ops.topk(scores, ops.constant(np.int64(1)), axis=1, mode="max", sort="value").output(1)
    model = ov.Model([ops.result(index, name="index"), ops.result(scores, name="scores_out")], [x], "int_and_float")
    report = bisect(model, "CPU", "CPU:bf16", progress=False, noise=False)
    tol = {o.name: o.tolerance for o in report.outputs}
    assert tol["index"] == 0.0 and tol["scores_out"] > 0.0


def test_a_model_without_outputs_is_refused():
    from bisect_ov import InputError

    x = ops.parameter([1, 4], np.float32, name="x")
    model = ov.Model([], [x], "empty")
    with pytest.raises(InputError, match="has no outputs"):
        bisect(model, "CPU", "CPU:f32", progress=False)


def _twin_with_outputs(extra: str | None = None, prefix: str = "") -> ov.Model:
    """x -> mm0 -> tanh0 -> mm1 -> tanh1 -> relu (out); `extra`: another output ('branch': sigmoid(tanh0),
    'first': the same listed first, 'mid': tanh0 itself); `prefix` renames every compute node but relu."""
    rng = np.random.default_rng(0)
    x = ops.parameter([1, 8], np.float32, name="x")
    h = mid = x
    for i in range(2):
        w = ops.constant((rng.standard_normal((8, 8)) / 3).astype(np.float32), name=f"w{i}")
        h = ops.tanh(ops.matmul(h, w, False, False, name=f"{prefix}mm{i}"), name=f"{prefix}tanh{i}")
        mid = h if i == 0 else mid
    results = [ops.result(ops.relu(h, name="relu"), name="out")]
    if extra in ("branch", "first"):
        side = ops.result(ops.sigmoid(mid, name="extra"), name="extra_out")
        results = [side] + results if extra == "first" else results + [side]
    elif extra == "mid":
        results.append(ops.result(mid, name="mid_out"))
    return ov.Model(results, [x], "twin")


@pytest.mark.parametrize("extra", ["branch", "first", "mid"])
def test_a_twin_with_an_extra_output_runs_every_partitioned_experiment(extra):
    twin = inject_fault(_twin_with_outputs(extra), "mm1")
    report = bisect(_twin_with_outputs(), "CPU", "CPU:f32", target_model=twin, fix=True, curve=3, delegation=True,
                    progress=False)
    assert [o.name for o in report.outputs] == ["out"] and report.outputs[0].diverged
    assert report.first_divergence.name == "mm1" and report.fix.on_reference == ("mm1",) and report.fix.solved
    assert report.curve[-1].error == pytest.approx(report.outputs[0].error, rel=1e-6)


@pytest.mark.parametrize("extra", ["branch", "first"])
def test_a_model_output_the_twin_lacks_is_refused_not_compared_with_another(extra):
    # It was compared with the twin's only output: 'extra' showed rel_l2 0.78 against 'out'.
    with pytest.raises(InputError, match=r"output\(s\) \['extra_out'\] have no counterpart in target_model"):
        bisect(_twin_with_outputs(extra), "CPU", "CPU:f32", target_model=_twin_with_outputs(), progress=False)


@pytest.mark.parametrize("strategy", ["auto", "full"])
def test_the_coverage_of_a_renamed_twin_counts_only_matched_nodes(strategy):
    # Four of the five compute nodes renamed: the fusion strategy's group at relu held them all (coverage 1.0).
    report = bisect(_twin_with_outputs(), "CPU", "CPU:f32", target_model=_twin_with_outputs(prefix="r_"),
                    strategy=strategy, progress=False)
    assert sorted(report.unmatched["model"]) == ["mm0", "mm1", "tanh0", "tanh1"]
    assert report.coverage == pytest.approx(1 / 5)


def test_outputs_with_nothing_finite_on_the_reference_are_said_not_compared():
    # One NaN and one Inf in the input made every output NaN: "no divergence ... cosine 1.000000, mismatches 0/8"
    # with nothing compared, and "headroom inf powers of two".
    x = np.zeros((1, 8), np.float32)
    x[0, 0], x[0, 1] = np.nan, np.inf
    h = ops.parameter([1, 8], np.float32, name="x")
    mixed = ops.matmul(h, ops.constant(np.ones((8, 8), np.float32)), False, False, name="mixed")
    model = ov.Model([ops.result(ops.tanh(mixed, name="t"), name="out")], [h], "all_nan")
    report = bisect(model, "CPU:f32", "EMU:f16", {"x": x}, progress=False)
    assert any("1 of 1 final output(s) (e.g. 'out', 8 NaN and 0 Inf of 8) hold no finite value on the reference"
               in note for note in report.notes), report.notes
    assert "f16 headroom: no compared node holds a finite nonzero value on the reference." in report.to_text()
