"""Final outputs are paired by the model's output order (not topological order), in every path that reads them."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov import bisect, inject_fault


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
