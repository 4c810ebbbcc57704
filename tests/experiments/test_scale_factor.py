"""The activation scale factor: the rewrite keeps the model's values, and the smallest power of two that cures an
f16 overflow between a linear layer and the next norm is found and checked against the one half as large."""

import math

import numpy as np
import pytest

from bisect_ov import InputError, bisect
from bisect_ov.model.scaling import scale_activations


def _ffn_block(peak: float):
    """A T5-style block written out as ops: RMSNorm -> FFN (up, Relu, down) -> residual Add -> RMSNorm -> MatMul.
    The FFN's output reaches about `peak` in one channel: above 256 its square, in the next norm, leaves f16."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    width = 32

    def rms(t, name):
        square = ops.power(t, ops.constant(np.float32(2)), name=f"{name}/square")
        mean = ops.reduce_mean(square, ops.constant(np.array([-1])), True, name=f"{name}/mean")
        root = ops.sqrt(ops.add(mean, ops.constant(np.float32(1e-6))), name=f"{name}/sqrt")
        return ops.divide(t, root, name=f"{name}/div")

    x = ops.parameter([1, 8, width], np.float32, name="x")
    up = ops.matmul(rms(x, "norm0"), ops.constant(rng.normal(0, 0.3, (width, 64)).astype(np.float32)), False, False,
                    name="ffn/up")
    down_weights = rng.normal(0, 0.1, (64, width)).astype(np.float32)
    down_weights[:, 3] = np.abs(down_weights[:, 3]) * peak / 8  # one channel of massive values
    down = ops.matmul(ops.relu(up, name="ffn/relu"), ops.constant(down_weights), False, False, name="ffn/down")
    residual = ops.add(x, down, name="residual")
    head = ops.matmul(rms(residual, "norm1"), ops.constant(rng.normal(0, 0.2, (width, 16)).astype(np.float32)),
                      False, False, name="head")
    inputs = {"x": rng.normal(0, 1, (1, 8, width)).astype(np.float32)}
    return ov.Model([head.output(0)], [x], "ffn_block"), inputs


def _run(model, inputs):
    import openvino as ov

    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return [np.array(a) for a in compiled(list(inputs.values())).values()]


@pytest.mark.parametrize("factor", [2.0, 16.0, 1024.0])
def test_the_rewrite_keeps_every_output_in_exact_arithmetic(factor):
    model, inputs = _ffn_block(2000.0)
    scaled = scale_activations(model, factor)
    assert len(scaled.get_ops()) > len(model.get_ops())
    np.testing.assert_allclose(_run(scaled, inputs)[0], _run(model, inputs)[0], rtol=1e-5, atol=1e-6)
    with pytest.raises(InputError, match="above 1"):
        scale_activations(model, 1.0)


def test_the_rewrite_divides_what_lies_between_a_linear_layer_and_the_next_norm():
    import openvino as ov

    model, inputs = _ffn_block(2000.0)
    scaled = scale_activations(model, 8.0)
    names = ("ffn/down", "residual", "norm1/square", "norm1/div", "ffn/relu")

    def values(m):
        by = {op.get_friendly_name(): op for op in m.get_ordered_ops()}
        m.add_outputs([by[n].output(0) for n in names])
        compiled = ov.Core().compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        out = compiled(list(inputs.values()))
        found = {n: np.abs(np.array(out[compiled.outputs[1 + i]])).max() for i, n in enumerate(names)}
        return {**found, "head": np.abs(np.array(out[compiled.outputs[0]])).max()}

    plain, small = values(model.clone()), values(scaled)
    assert small["ffn/down"] == pytest.approx(plain["ffn/down"] / 8, rel=1e-5)
    assert small["residual"] == pytest.approx(plain["residual"] / 8, rel=1e-5)
    assert small["norm1/square"] == pytest.approx(plain["norm1/square"] / 64, rel=1e-5)
    assert small["ffn/relu"] == pytest.approx(plain["ffn/relu"] / 8, rel=1e-5)  # Relu(x / s) = Relu(x) / s
    for unchanged in ("norm1/div", "head"):  # after the norm: as before
        assert small[unchanged] == pytest.approx(plain[unchanged], rel=1e-5)


def test_the_smallest_factor_that_cures_the_overflow_is_found_and_the_one_half_as_large_fails():
    model, inputs = _ffn_block(2000.0)  # the square reaches ~4e6: (2000 / s)**2 < 65,504 needs s >= 8
    report = bisect(model, "CPU:f32", "EMU:f16", inputs, fix=True, progress=False)
    found = report.scale_factor
    assert found is not None and found.solved and found.emulated and found.device == "EMU:f16"
    assert found.factor == 8.0
    assert found.error_after <= found.tolerance < found.error_at(4.0)
    assert found.error_before > found.tolerance
    assert all(math.log2(f).is_integer() for f, _ in found.tried)
    text = " ".join(report.to_text().split())
    assert "ACTIVATIONS_SCALE_FACTOR=8 brings the final error from" in text and "; 4 does not (" in text
    assert '{"ACTIVATIONS_SCALE_FACTOR": "8"}' in text
    again = type(report).from_dict(report.to_dict())
    assert again.scale_factor == found


def test_no_search_without_an_overflow_or_on_a_target_without_the_setting():
    model, inputs = _ffn_block(20.0)  # squares of ~400: f16 holds them
    assert bisect(model, "CPU:f32", "EMU:f16", inputs, fix=True, progress=False).scale_factor is None
    model, inputs = _ffn_block(2000.0)
    bf16 = bisect(model, "CPU:f32", "EMU:bf16", inputs, fix=True, progress=False)
    assert bf16.scale_factor is None and not [n for n in bf16.notes if "scale factor" in n]


def test_values_the_scaling_does_not_reach_are_reported_as_such():
    """An overflow of values that come from the model's input (no linear layer before the norm): no factor helps,
    and the search stops after a few factors."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 4, 16], np.float32, name="x")
    square = ops.power(x, ops.constant(np.float32(2)), name="square")
    mean = ops.reduce_mean(square, ops.constant(np.array([-1])), True, name="mean")
    norm = ops.divide(x, ops.sqrt(ops.add(mean, ops.constant(np.float32(1e-6)))), name="div")
    weights = np.random.default_rng(1).normal(0, 0.3, (16, 8)).astype(np.float32)
    head = ops.matmul(norm, ops.constant(weights), False, False, name="head")  # after the norm: scaled back there
    values = np.random.default_rng(0).normal(0, 1, (1, 4, 16)).astype(np.float32)
    values[..., 0] = 1000.0
    report = bisect(ov.Model([head.output(0)], [x], "norm_of_input"), "CPU:f32", "EMU:f16", {"x": values}, fix=True,
                    progress=False)
    found = report.scale_factor
    assert found is not None and not found.solved and 1 <= len(found.tried) <= 6
    assert "not only between a linear layer and a norm" in " ".join(report.to_text().split())
    # Without any Convolution or MatMul the search is not run at all, and the notes say why.
    bare = ov.Model([norm.output(0)], [x], "norm_only")
    report = bisect(bare, "CPU:f32", "EMU:f16", {"x": values}, fix=True, progress=False)
    assert report.scale_factor is None
    assert any("no Convolution or MatMul for the activation scaling to act on" in n for n in report.notes)
