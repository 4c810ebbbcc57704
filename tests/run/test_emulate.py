"""Tests of bisect_ov.run.emulate: arithmetic rounding ops and the emulated low-precision device."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov.core.errors import InputError
from bisect_ov.run.emulate import emulate_precision, round_array, round_output

F32 = {"INFERENCE_PRECISION_HINT": "f32"}  # this CPU runs bf16 by default
CORE = ov.Core()


def run(model: ov.Model, *inputs: np.ndarray) -> list[np.ndarray]:
    compiled = CORE.compile_model(model, "CPU", F32)
    result = compiled(list(inputs))
    return [result[out] for out in compiled.outputs]


def same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: identical float32 bit patterns (signed zeros distinguished), or both NaN."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def ulp(x: np.ndarray, precision: str) -> np.ndarray:
    """Spacing of the low-precision numbers at |x| (normal range)."""
    if precision == "f16":
        return np.spacing(np.abs(x).astype(np.float16)).astype(np.float32)
    return np.spacing(np.abs(x).astype(np.float32)) * 2**16


def sweep_values() -> np.ndarray:
    """Values across every magnitude, the f16 edges, random bit patterns (incl. NaN/inf/subnormals)."""
    rng = np.random.default_rng(1234)
    magnitudes = 10.0 ** rng.uniform(-45, 38.5, 200_000)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504, 65519, 65519.996, 65520, -65520, 65536, 1e5,
                3.4028235e38, -3.4028235e38, 1e-45, -1e-45, 2**-14, 2**-24, 2**-25, -(2**-25), 3 * 2**-26, 1e-40]
    return np.concatenate([
        (rng.choice([-1.0, 1.0], magnitudes.size) * magnitudes).astype(np.float32),
        rng.integers(0, 2**32, 300_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
        np.geomspace(1e-8, 1e-4, 50_001, dtype=np.float32),  # f16 subnormals and smallest normals
        -np.geomspace(1e-8, 1e-4, 50_001, dtype=np.float32),
        np.linspace(65400, 65600, 20_001, dtype=np.float32),  # around the largest f16 and its rounding edge
        np.arange(1, 2**12, dtype=np.uint32).view(np.float32),  # f32 subnormals (bf16 subnormal rounding)
        np.array(specials, dtype=np.float32),
    ])


# ----------------------------------------------------------------------------------------- round_array
def test_round_array_known_values():
    x = np.array([1 + 2**-11, 1 + 3 * 2**-11, 65519, 65520, -1e6, 2**-25, 1e-30, np.nan], np.float32)
    f16 = round_array(x, "f16")
    assert f16.dtype == np.float32
    np.testing.assert_array_equal(f16[:7], [1.0, 1 + 2**-9, 65504, np.inf, -np.inf, 0.0, 0.0])  # ties to even
    assert np.isnan(f16[7])
    bf16 = round_array(np.array([1 + 2**-8, 1 + 3 * 2**-8, 3.4028235e38, np.nan], np.float32), "bf16")
    np.testing.assert_array_equal(bf16[:3], [1.0, 1 + 2**-6, np.inf])
    assert np.isnan(bf16[3])
    # A NaN whose payload sits only in the low 16 bits must not turn into inf.
    low_payload_nan = np.array([0x7F800001], np.uint32).view(np.float32)
    assert np.isnan(round_array(low_payload_nan, "bf16")).all()
    y = np.array([0.1, 1e-30], np.float32)
    assert same_bits(round_array(y, "f32"), y).all()


@pytest.mark.parametrize("bad", ["fp16", "f64", None, 16])
def test_unknown_precision_is_an_input_error(bad):
    with pytest.raises(InputError, match="'f16', 'bf16'"):
        round_array(np.zeros(2), bad)
    p = ops.parameter([2], ov.Type.f32)
    with pytest.raises(InputError, match="'f16', 'bf16'"):
        emulate_precision(ov.Model([ops.relu(p)], [p]), bad)


# ---------------------------------------------------------------------------------------- round_output
@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_round_output_is_bit_exact_to_round_array(precision):
    x = sweep_values()
    p = ops.parameter([-1], ov.Type.f32)
    # A preceding Multiply/Add by a constant would let graph optimisations fuse into the rounding ops.
    tensors = [p.output(0), ops.multiply(p, np.float32(0.3)).output(0), ops.add(p, np.float32(0.1)).output(0)]
    outputs = [t for v in tensors for t in (v, round_output(v, precision))]
    results = run(ov.Model(outputs, [p]), x)
    for value, rounded in zip(results[::2], results[1::2]):
        expected = round_array(value, precision)
        mismatch = ~same_bits(rounded, expected)
        assert not mismatch.any(), (value[mismatch][:5], rounded[mismatch][:5], expected[mismatch][:5])
        finite = np.isfinite(value) & (value != 0)
        assert np.mean(rounded[finite] != value[finite]) > 0.99  # the rounding was not optimised away


@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_round_output_static_4d_shape(precision):
    # Static shapes take other CPU code paths (fused/JIT eltwise kernels) than the dynamic sweep above.
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((1, 16, 24, 24)) * 10.0 ** rng.integers(-7, 5, (1, 16, 24, 24))).astype(np.float32)
    p = ops.parameter(list(x.shape), ov.Type.f32)
    y = ops.sigmoid(ops.multiply(p, np.float32(1.7)))
    value, rounded = run(ov.Model([y.output(0), round_output(y.output(0), precision)], [p]), x)
    assert same_bits(rounded, round_array(value, precision)).all()
    assert rounded.shape == x.shape


def test_round_output_f32_returns_the_input_and_names_new_ops():
    p = ops.parameter([3], ov.Type.f32, name="x")
    assert round_output(p.output(0), "f32") == p.output(0)
    r = round_output(p.output(0), "f16", name="x/rounded")
    assert r.get_node().get_friendly_name().startswith("x/rounded/")
    with pytest.raises(InputError, match="floating"):
        round_output(ops.parameter([3], ov.Type.i32).output(0), "f16")


# ------------------------------------------------------------------------------------ emulate_precision
def small_model(rng: np.random.Generator) -> tuple[ov.Model, dict[str, np.ndarray]]:
    """x[?, 8] @ w[8, 6] + b -> relu -> softmax; outputs (softmax, relu). Batch is dynamic."""
    w = (rng.integers(-32, 33, (8, 6)) / 16).astype(np.float32)  # dyadic: the f32 MatMul is exact in any order
    b = rng.standard_normal(6).astype(np.float32)
    x = ops.parameter([-1, 8], ov.Type.f32, name="x")
    x.output(0).get_tensor().set_names({"input"})
    mm = ops.matmul(x, ops.constant(w, name="w"), False, False, name="mm")
    add = ops.add(mm, ops.constant(b, name="b"), name="add")
    relu = ops.relu(add, name="relu")
    relu.output(0).get_tensor().set_names({"hidden"})
    sm = ops.softmax(relu, -1, name="sm")
    sm.output(0).get_tensor().set_names({"probs"})
    return ov.Model([sm, relu], [x], "small"), {"w": w, "b": b}


@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_emulated_small_model_matches_numpy_rounding_after_every_op(precision):
    rng = np.random.default_rng(0)
    model, weights = small_model(rng)
    x = (rng.integers(-32, 33, (5, 8)) / 8).astype(np.float32)
    before = run(model, x)
    names_before = [op.get_friendly_name() for op in model.get_ordered_ops()]

    emulated = emulate_precision(model, precision)

    r = lambda a: round_array(a, precision)  # noqa: E731
    hidden = r(np.maximum(r(r(r(x) @ r(weights["w"])) + r(weights["b"])), 0))
    e = np.exp(hidden - hidden.max(-1, keepdims=True))
    probs = r(e / e.sum(-1, keepdims=True))
    got_probs, got_hidden = run(emulated, x)
    assert same_bits(got_hidden, hidden).all()
    # exp differs between numpy and the CPU in the last f32 bits: at most one f16 ulp apart after rounding.
    assert np.all(np.abs(got_probs - probs) <= ulp(probs, precision))
    assert np.mean(got_probs == probs) > 0.9
    assert not np.array_equal(got_probs, before[0])  # something was really rounded

    # Same outputs (count, order, names), same inputs, original ops keep their friendly names.
    assert [o.get_names() for o in emulated.outputs] == [{"probs"}, {"hidden"}]
    assert [o.get_names() for o in emulated.inputs] == [{"input"}]
    emulated_names = {op.get_friendly_name() for op in emulated.get_ordered_ops()}
    assert {"x", "w", "b", "mm", "add", "relu", "sm"} <= emulated_names
    assert any(n.startswith(f"relu/emulated_{precision}/") for n in emulated_names)
    # The input model is untouched.
    assert [op.get_friendly_name() for op in model.get_ordered_ops()] == names_before
    for old, new in zip(before, run(model, x)):
        assert same_bits(old, new).all()


def test_constants_are_rounded_and_keep_their_name():
    p = ops.parameter([2], ov.Type.f32, name="x")
    model = ov.Model([ops.add(p, ops.constant(np.float32([0.1, 1e-7]), name="bias"), name="add")], [p])
    emulated = emulate_precision(model, "f16")
    (bias,) = [op for op in emulated.get_ordered_ops() if op.get_friendly_name() == "bias"]
    assert bias.get_type_name() == "Constant"
    assert same_bits(bias.get_data(), round_array(np.float32([0.1, 1e-7]), "f16")).all()


@pytest.mark.parametrize("precision, expected", [("f16", np.inf), ("bf16", 70144.0)])
def test_overflow_beyond_f16_range(precision, expected):
    p = ops.parameter([3], ov.Type.f32)
    model = ov.Model([ops.multiply(p, np.float32(1000.0))], [p])
    (out,) = run(emulate_precision(model, precision), np.float32([70.0, -70.0, 1.0]))
    np.testing.assert_array_equal(out, [expected, -expected, 1000.0])


def mean_abs_error(model: ov.Model, x: np.ndarray, **options) -> float:
    (reference,) = run(model, x)
    (emulated,) = run(emulate_precision(model, "f16", **options), x)
    return float(np.mean(np.abs(emulated.astype(np.float64) - reference)))


def test_error_levels_match_real_f16_devices():
    # Real GPU/NPU runs of these cases gave mean abs errors of 4.6e-5 (softmax) and 6.0e-5 (activations).
    rng = np.random.default_rng(42)
    p = ops.parameter([1, 5], ov.Type.f32)
    x = rng.standard_normal((1, 5)).astype(np.float32)
    assert 1e-6 < mean_abs_error(ov.Model([ops.softmax(p, 1)], [p]), x) < 1e-3
    x = rng.standard_normal(10_000).astype(np.float32)
    for activation in (ops.relu, ops.sigmoid, lambda t: ops.gelu(t, "erf")):
        p = ops.parameter([10_000], ov.Type.f32)
        assert 1e-5 < mean_abs_error(ov.Model([activation(p)], [p]), x) < 1e-3


def test_f16_accumulation_of_a_long_softmax_is_much_worse():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 10_000)).astype(np.float32)
    p = ops.parameter([1, 10_000], ov.Type.f32)
    p.output(0).get_tensor().set_names({"logits"})
    sm = ops.softmax(p, -1, name="softmax")
    sm.output(0).get_tensor().set_names({"probs"})
    model = ov.Model([sm], [p])
    stored_only = mean_abs_error(model, x)
    accumulated = mean_abs_error(model, x, reductions=True)
    assert accumulated > 3 * stored_only
    emulated = emulate_precision(model, "f16", reductions=["Softmax"])
    assert len(emulated.get_ordered_ops()) < 1000  # the 625 sequential steps live in one Loop op
    final = emulated.output(0).get_node().input_value(0)
    assert final.get_node().get_friendly_name() == "softmax"  # tools tapping "softmax" see the emulation
    assert emulated.output(0).get_names() == {"probs"} and final.get_names() == {"probs"}
    assert "Softmax" not in {op.get_type_name() for op in emulated.get_ordered_ops()}


def lane_sum(x: np.ndarray, axis: int, lanes: int, precision: str) -> np.ndarray:
    """Numpy model of the emulated reduction: lane k % lanes, sequential adds, then a pairwise tree."""
    r = lambda a: round_array(a, precision)  # noqa: E731
    x = np.moveaxis(x, axis, -1)
    n = x.shape[-1]
    steps = -(-n // lanes)
    if steps == 1:
        acc = r(x)
    else:
        x = np.concatenate([x, np.zeros(x.shape[:-1] + (steps * lanes - n,), np.float32)], -1)
        chunks = x.reshape(x.shape[:-1] + (steps, lanes))
        acc = r(chunks[..., 0, :])
        for i in range(1, steps):
            acc = r(acc + chunks[..., i, :])
    while acc.shape[-1] > 1:
        half = acc.shape[-1] // 2
        acc = np.concatenate([r(acc[..., :half] + acc[..., half:2 * half]), acc[..., 2 * half:]], -1)
    return acc[..., 0]


@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_emulated_reductions_match_the_lane_model_exactly(precision):
    rng = np.random.default_rng(3)
    r = lambda a: round_array(a, precision)  # noqa: E731
    x = (rng.standard_normal((4, 3, 37)) * 10).astype(np.float32)
    w = rng.standard_normal((7, 37)).astype(np.float32)
    p = ops.parameter([4, -1, 37], ov.Type.f32)  # a dynamic axis that is not reduced is fine
    model = ov.Model([ops.reduce_sum(p, np.array([0, 2]), False),
                      ops.reduce_mean(p, np.array([-1]), True),
                      ops.matmul(p, ops.constant(w), False, True),
                      ops.mvn(p, ops.constant(np.array([0, 2])), True, 1e-5, "inside_sqrt")], [p])
    emulated = emulate_precision(model, precision, reductions=True, lanes=8)
    total, mean, product, normalized = run(emulated, x)

    xr = r(x)
    assert same_bits(total, lane_sum(np.moveaxis(xr, 1, 0).reshape(3, -1), 1, 8, precision)).all()
    assert same_bits(mean, r(lane_sum(xr, 2, 8, precision) / np.float32(37))[..., None]).all()
    products = xr[..., :, None] * r(w).T  # [4, 3, 37, 7], exact in f32
    assert same_bits(product, lane_sum(products, 2, 8, precision)).all()
    per_channel = lambda a: np.moveaxis(a, 1, 0).reshape(3, -1)  # noqa: E731 - axes (0, 2), row-major
    mu = r(lane_sum(per_channel(xr), 1, 8, precision) / np.float32(148))[None, :, None]
    d = r(xr - mu)
    var = r(lane_sum(per_channel(r(d * d)), 1, 8, precision) / np.float32(148))[None, :, None]
    expected = r(d / r(np.sqrt(r(var + r(np.float32(1e-5))))))
    assert np.all(np.abs(normalized - expected) <= ulp(expected, precision))  # allow sqrt/divide last bits
    assert np.mean(normalized == expected) > 0.99
    types = {op.get_type_name() for op in emulated.get_ordered_ops()}
    assert not types & {"ReduceSum", "ReduceMean", "MatMul", "MVN"}  # all four were replaced


def test_short_reductions_use_only_the_pairwise_tree():
    # 5 <= lanes elements, one per lane: (0+2, 1+3; 4 waits), then (02 + 13), then + 4, rounding each add.
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((3, 5)) * 100).astype(np.float32)
    w = rng.standard_normal((5, 2)).astype(np.float32)
    p = ops.parameter([3, 5], ov.Type.f32)
    model = ov.Model([ops.reduce_sum(p, np.array([1]), False), ops.matmul(p, ops.constant(w), False, False)], [p])
    total, product = run(emulate_precision(model, "f16", reductions=True), x)
    xr = round_array(x, "f16")
    assert same_bits(total, lane_sum(xr, 1, 16, "f16")).all()
    assert same_bits(product, lane_sum(xr[:, :, None] * round_array(w, "f16"), 1, 16, "f16")).all()


def test_reductions_over_a_dynamic_axis_are_emulated_at_run_time():
    p = ops.parameter([2, -1], ov.Type.f32)
    model = ov.Model([ops.softmax(p, 1, name="sm")], [p])
    emulated = emulate_precision(model, "f16", reductions=True, lanes=4)
    assert "Softmax" not in {op.get_type_name() for op in emulated.get_ordered_ops()}
    for length in (3, 50):  # the length is known only when the model runs
        x = np.random.default_rng(length).standard_normal((2, length)).astype(np.float32)
        (out,) = run(emulated, x)
        x = round_array(x, "f16")
        e = round_array(np.exp(round_array(x - x.max(1, keepdims=True), "f16")), "f16")
        expected = round_array(e / lane_sum(e, 1, 4, "f16")[:, None], "f16")
        assert np.all(np.abs(out - expected) <= ulp(expected, "f16"))  # numpy's exp vs the op's: last bits
        assert np.mean(out == expected) > 0.9


def test_reductions_with_computed_axes_keep_per_op_rounding():
    p = ops.parameter([2, 6], ov.Type.f32)
    # Axes computed from the input's shape: [2] - 3 = [-1], not a Constant before constant folding.
    axes = ops.subtract(ops.gather(ops.shape_of(p), np.int64([0]), np.int64(0)), np.int64(3), name="axis")
    model = ov.Model([ops.reduce_sum(p, axes, False, name="sum")], [p])
    emulated = emulate_precision(model, "f16", reductions=True)
    assert "ReduceSum" in {op.get_type_name() for op in emulated.get_ordered_ops()}
    (out,) = run(emulated, np.linspace(-3, 3, 12, dtype=np.float32).reshape(2, 6))
    assert same_bits(out, round_array(out, "f16")).all()  # still stored in f16


def test_integer_and_shape_tensors_pass_through_unchanged():
    ids = ops.parameter([3], ov.Type.i32, name="ids")
    x = ops.parameter([2, -1], ov.Type.f32, name="x")
    int_out = ops.add(ids, np.int32(70_001), name="int_add")
    # Float shape arithmetic (as in resize ops): must not be rounded, 1/3 in f16 would change the shape.
    scaled = ops.multiply(ops.convert(ops.shape_of(x), ov.Type.f32), np.float32(1 / 3), name="shape_scale")
    new_shape = ops.convert(ops.ceil(scaled), ov.Type.i64, name="new_shape")
    filled = ops.broadcast(ops.constant(np.float32(2.0)), new_shape, name="filled")
    model = ov.Model([int_out, filled, ops.relu(x, name="relu")], [ids, x])
    emulated = emulate_precision(model, "f16")
    names = {op.get_friendly_name() for op in emulated.get_ordered_ops()}
    untouched = ("int_add/emulated", "ids/emulated", "shape_scale/emulated", "new_shape/emulated")
    assert not any(n.startswith(untouched) for n in names)
    assert any(n.startswith("relu/emulated_f16/") for n in names)
    args = [np.int32([1, 70_000, -5]), np.zeros((2, 30_000), np.float32)]
    int_result, filled_result, _ = run(emulated, *args)
    assert int_result.dtype == np.int32
    np.testing.assert_array_equal(int_result, [70_002, 140_001, 69_996])
    assert filled_result.shape == (1, 10_000)  # ceil([2, 30000] * 0.33333334): f16 1/3 would give 9998


def test_invalid_options_are_input_errors():
    p = ops.parameter([2], ov.Type.f32)
    model = ov.Model([ops.relu(p)], [p])
    with pytest.raises(InputError, match="Softmax"):
        emulate_precision(model, reductions=["Convolution"])
    with pytest.raises(InputError, match="lanes"):
        emulate_precision(model, lanes=0)
    with pytest.raises(InputError, match="openvino.Model"):
        emulate_precision("model.xml")


def attention_models(mask_kind: str) -> tuple[ov.Model, ov.Model]:
    """ScaledDotProductAttention, and the same written out as MatMul, Multiply, Add/Select, Softmax, MatMul.

    `mask_kind` 'float' (added) or 'bool' (False: -inf), with an explicit scale; 'causal': no mask and the
    default scale.
    """
    q, k, v = (ops.parameter([2, 3, 20, 24], ov.Type.f32, name=n) for n in "qkv")
    minus_inf = ops.constant(np.float32(-np.inf))
    if mask_kind == "causal":
        sdpa = ops.scaled_dot_product_attention(q, k, v, causal=True)
        scale = ops.constant(np.float32(1.0) / np.sqrt(np.float32(24)))
        scores = ops.multiply(ops.matmul(q, k, False, True), scale)
        scores = ops.select(ops.constant(np.tril(np.ones((20, 20), bool))), scores, minus_inf)
        inputs = [q, k, v]
    else:
        mask = ops.parameter([1, 1, 20, 20], ov.Type.boolean if mask_kind == "bool" else ov.Type.f32, name="mask")
        scale = ops.constant(np.float32(0.3), name="scale")
        sdpa = ops.scaled_dot_product_attention(q, k, v, mask, scale)
        scores = ops.multiply(ops.matmul(q, k, False, True), scale)
        scores = ops.select(mask, scores, minus_inf) if mask_kind == "bool" else ops.add(scores, mask)
        inputs = [q, k, v, mask]
    written_out = ops.matmul(ops.softmax(scores, -1), v, False, False)
    return ov.Model([sdpa], inputs), ov.Model([written_out], inputs)


@pytest.mark.parametrize("mask_kind", ["float", "bool", "causal"])
@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_emulated_attention_is_its_written_out_form(precision, mask_kind):
    rng = np.random.default_rng(9)
    inputs = [rng.standard_normal((2, 3, 20, 24)).astype(np.float32) * 2 for _ in range(3)]
    if mask_kind == "float":
        inputs.append(np.where(rng.random((1, 1, 20, 20)) < 0.2, -1e9, 0).astype(np.float32))
    elif mask_kind == "bool":
        inputs.append(rng.random((1, 1, 20, 20)) > 0.2)
    fused, written_out = attention_models(mask_kind)
    emulated = emulate_precision(fused, precision, reductions=True, lanes=8)
    assert "ScaledDotProductAttention" not in {op.get_type_name() for op in emulated.get_ordered_ops()}
    (got,) = run(emulated, *inputs)
    (expected,) = run(emulate_precision(written_out, precision, reductions=True, lanes=8), *inputs)
    assert same_bits(got, expected).all()
    (stored_only,) = run(emulate_precision(fused, precision), *inputs)
    assert not np.array_equal(got, stored_only)  # the accumulation was emulated


# ------------------------------------------------------------------- emulated models in the rest of bisect_ov
def test_clone_keeps_the_custom_ops():
    rng = np.random.default_rng(0)
    model, _ = small_model(rng)
    emulated = emulate_precision(model, "f16", reductions=True)
    clone = emulated.clone()
    kinds = lambda m: [op.get_type_name() for op in m.get_ordered_ops()]  # noqa: E731
    assert kinds(clone) == kinds(emulated) and "EmulatedRound" in kinds(clone)
    x = rng.standard_normal((3, 8)).astype(np.float32)
    for a, b in zip(run(emulated, x), run(clone, x)):
        assert same_bits(a, b).all()


def test_an_emulated_model_saved_to_ir_cannot_be_read_back(tmp_path):
    # Why EmulatedDevice emulates inside its compile: an IR holding the custom ops needs their Python classes.
    p = ops.parameter([4], ov.Type.f32)
    ov.save_model(emulate_precision(ov.Model([ops.relu(p)], [p]), "f16"), tmp_path / "emulated.xml")
    with pytest.raises(RuntimeError, match="EmulatedRound"):
        CORE.read_model(tmp_path / "emulated.xml")


def test_async_requests_and_threads_give_the_same_bits():
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(2)
    model, _ = small_model(rng)
    compiled = CORE.compile_model(emulate_precision(model, "f16", reductions=True), "CPU", F32)
    samples = [rng.standard_normal((64, 8)).astype(np.float32) for _ in range(12)]
    request = compiled.create_infer_request()
    expected = [request.infer([x])[0].copy() for x in samples]
    got: dict[int, np.ndarray] = {}
    queue = ov.AsyncInferQueue(compiled, 4)
    queue.set_callback(lambda request, i: got.__setitem__(i, request.get_output_tensor(0).data.copy()))
    for i, x in enumerate(samples):
        queue.start_async([x], userdata=i)
    queue.wait_all()
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda x: compiled.create_infer_request().infer([x])[0].copy(), samples))
    for i, e in enumerate(expected):
        assert same_bits(got[i], e).all() and same_bits(threaded[i], e).all()


def test_emulated_device_taps_see_the_stored_values():
    from bisect_ov.run.devices import EmulatedDevice

    rng = np.random.default_rng(4)
    model, _ = small_model(rng)
    tapped = model.clone()
    add_op = next(op for op in tapped.get_ordered_ops() if op.get_friendly_name() == "add")
    tapped.add_outputs([add_op.output(0)])
    compiled = EmulatedDevice("bf16").compile(tapped, taps=(2,))
    assert compiled.info.emulated and compiled.info.precision == "bf16"
    x = rng.standard_normal((5, 8)).astype(np.float32)
    _, hidden, add = compiled.infer([x])
    assert add.dtype == np.float32 and same_bits(add, round_array(add, "bf16")).all()
    assert same_bits(hidden, np.maximum(add, 0)).all()  # relu read the stored (rounded) value


@pytest.mark.parametrize("node", ["mm", "add", "relu"])
def test_a_fault_between_two_emulated_devices_is_named(node):
    from bisect_ov import bisect, inject_fault

    model, _ = small_model(np.random.default_rng(0))
    x = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
    report = bisect(model, "EMU:f16", "EMU:f16", [x], target_model=inject_fault(model, node, "offset", 1.0),
                    noise=False, progress=False)
    assert report.first_divergence is not None and report.first_divergence.name == node, report.to_text()


def test_an_emulated_compile_that_the_snippets_pass_fails_is_made_without_snippets(monkeypatch):
    # The CPU plugin's snippets tokenization throws on some rewritten graphs (an ONNX MobileBERT's attention mask):
    # the emulated device compiles again without snippets and says so; a failure that remains is the first one.
    from bisect_ov.core.errors import DeviceError
    from bisect_ov.run.emulated_device import EmulatedDevice
    from bisect_ov.run.openvino_device import OpenVINODevice
    from tests.conftest import tiny_chain

    real = OpenVINODevice._compile
    asked = []

    def snippets_fail(self, model, taps=(), fed=(), *, extra=None):
        asked.append(dict(extra or {}))
        if not extra:
            raise DeviceError("Compiling for EMU:f16 failed: Topological order is required, but not set.")
        return real(self, model, taps, fed, extra=extra)

    monkeypatch.setattr(OpenVINODevice, "_compile", snippets_fail)
    compiled = EmulatedDevice("f16").compile(tiny_chain())
    assert asked == [{}, {"SNIPPETS_MODE": "DISABLE"}]
    assert "SNIPPETS_MODE=DISABLE" in compiled.info.note and "Topological order" in compiled.info.note

    monkeypatch.setattr(OpenVINODevice, "_compile", lambda self, model, taps=(), fed=(), *, extra=None: (_ for _ in ()).throw(
        DeviceError(f"failed {extra}")))
    with pytest.raises(DeviceError, match="failed None"):
        EmulatedDevice("f16").compile(tiny_chain())


def test_ops_marked_to_stay_in_f32_are_not_rounded_as_the_gpu_honours_the_mark(tmp_path):
    """A fix's patched model marks its nodes ``disable_fp16_compression``: the emulated device computes them as the
    reference does (the GPU and NPU plugins honour the mark), in memory and as read back from IR."""
    import openvino as ov
    from openvino import opset13 as ops

    from bisect_ov.experiments.partitioned import patch_model
    from bisect_ov.run.emulate import emulate_precision, keeps_precision

    x = ops.parameter([64], np.float32, name="x")
    third = ops.multiply(x, ops.constant(np.float32(1 / 3)), name="third")
    out = ops.add(third, ops.constant(np.float32(0.1)), name="offset")
    model = ov.Model([out.output(0)], [x], "chain")
    values = np.linspace(1.0, 2.0, 64, dtype=np.float32)

    def run(m):
        compiled = ov.Core().compile_model(emulate_precision(m, "f16"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        return np.array(compiled([values])[compiled.outputs[0]])

    x16 = values.astype(np.float16).astype(np.float32)  # the input is stored in f16 either way
    f16 = lambda a: a.astype(np.float16).astype(np.float32)  # noqa: E731
    plain = run(model)
    np.testing.assert_array_equal(plain, f16(f16(x16 * f16(np.float32(1 / 3))) + f16(np.float32(0.1))))  # weights too
    marked = patch_model(model, ["third", "offset"])
    assert [keeps_precision(op) for op in marked.get_ordered_ops() if op.get_friendly_name() in ("third", "offset")] \
        == [True, True]
    kept = run(marked)
    reference = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    np.testing.assert_array_equal(kept, np.array(reference([x16])[reference.outputs[0]]))  # as the f32 CPU computes
    assert not np.array_equal(kept, plain)
    ov.save_model(marked, str(tmp_path / "marked.xml"))
    np.testing.assert_array_equal(run(ov.Core().read_model(str(tmp_path / "marked.xml"))), kept)
    # Only the first marked: its weight stays f32, its value reaches the unmarked Add rounded, as a GPU stores it
    # for an f16 kernel.
    np.testing.assert_array_equal(run(patch_model(model, ["third"])),
                                  f16(f16(x16 * np.float32(1 / 3)) + f16(np.float32(0.1))))


def test_f16_weights_past_the_range_saturate_as_openvino_converts_them_while_activations_overflow():
    """An attention mask's ``(1 - mask) * finfo(float32).min``: stored in f16 by OpenVINO's precision conversion, the
    constant becomes -65,504 (finite values clamp; inf and NaN stay), so ``0 * min`` is 0, not NaN. An activation
    that leaves the range at run time still becomes inf."""
    import openvino as ov
    from openvino import opset13 as ops

    from bisect_ov.run.emulate import emulate_precision

    x = ops.parameter([5], np.float32, name="x")
    weights = np.array([np.finfo(np.float32).min, 1e5, np.inf, 2.0, 3e4], np.float32)
    product = ops.multiply(x, ops.constant(weights), name="product")
    model = ov.Model([product.output(0)], [x], "saturating_weights")
    compiled = ov.Core().compile_model(emulate_precision(model, "f16"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    out = np.array(compiled([np.array([0.0, 1.0, 1.0, 1.0, 4.0], np.float32)])[compiled.outputs[0]])
    assert out[0] == 0.0 and not np.isnan(out[0])  # 0 * -65,504, where a rounded -inf would give NaN
    assert out[1] == 65504.0 and out[2] == np.inf and out[3] == 2.0
    assert out[4] == np.inf  # 4 * 30,000 = 120,000: computed at run time, past f16: inf, as on a device


def test_bf16_weights_past_the_range_saturate_too():
    """``finfo(float32).min`` is past bf16's largest value (3.39e38): rounded to nearest it would be -inf, and the
    mask's ``0 * min`` NaN; stored as OpenVINO's conversion stores it, it is -3.39e38."""
    import openvino as ov
    from openvino import opset13 as ops

    from bisect_ov.run.emulate import emulate_precision

    x = ops.parameter([3], np.float32, name="x")
    weights = np.array([np.finfo(np.float32).min, np.finfo(np.float32).max, 1.5], np.float32)
    model = ov.Model([ops.multiply(x, ops.constant(weights), name="product").output(0)], [x], "bf16_weights")
    compiled = ov.Core().compile_model(emulate_precision(model, "bf16"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    out = np.array(compiled([np.array([0.0, 1.0, 2.0], np.float32)])[compiled.outputs[0]])
    assert out[0] == 0.0 and out[1] == np.float32(3.3895313892515355e38) and out[2] == 3.0


def _cancel_onnx(kind: str):
    """tanh((x + 1000) - 1000) as plain ops, inside both branches of an If, or as the body of a two-trip Loop that
    carries x through (an ONNX model, read by OpenVINO)."""
    from onnx import TensorProto, helper, numpy_helper

    c = numpy_helper.from_array(np.array(1000.0, np.float32), "c")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])
    flat = [helper.make_node("Add", ["x", "c"], ["a"]), helper.make_node("Sub", ["a", "c"], ["s"]),
            helper.make_node("Tanh", ["s"], ["t"])]
    out = helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 64])
    inputs, nodes = [x], flat
    if kind == "if":
        branch = [helper.make_graph(flat, name, [], [out]) for name in ("then", "else")]
        inputs = [x, helper.make_tensor_value_info("cond", TensorProto.BOOL, [])]
        nodes = [helper.make_node("If", ["cond"], ["t"], then_branch=branch[0], else_branch=branch[1])]
    elif kind == "loop":
        body = helper.make_graph(
            [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
             helper.make_node("Add", ["x_in", "c"], ["a"]), helper.make_node("Sub", ["a", "c"], ["s"]),
             helper.make_node("Tanh", ["s"], ["x_out"])], "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
             helper.make_tensor_value_info("x_in", TensorProto.FLOAT, [1, 64])],
            [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
             helper.make_tensor_value_info("x_out", TensorProto.FLOAT, [1, 64])])
        trips = numpy_helper.from_array(np.array(2, np.int64), "trips")
        yes = numpy_helper.from_array(np.array(True), "yes")
        nodes = [helper.make_node("Loop", ["trips", "yes", "x"], ["t"], body=body)]
    constants = [c, trips, yes] if kind == "loop" else [c]
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, [out], constants),
                              opset_imports=[helper.make_opsetid("", 17)])
    return ov.Core().read_model(model.SerializeToString(), b"")


def test_the_bodies_of_if_and_loop_are_emulated_as_the_ops_outside():
    # Only an If's or a Loop's outputs were rounded: a cancellation inside the body, 1.7e-1 off in f16 as plain ops,
    # read 2.6e-4 ("no divergence") inside an If.
    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    flat = run(emulate_precision(_cancel_onnx("flat")), x)[0]
    assert not same_bits(flat, run(_cancel_onnx("flat"), x)[0]).all()  # the cancellation shows in f16
    branch = run(emulate_precision(_cancel_onnx("if")), x, np.array(True))[0]
    assert same_bits(branch, flat).all()
    twice = run(emulate_precision(_cancel_onnx("flat")), flat)[0]  # the body's second trip, on the first's output
    assert same_bits(run(emulate_precision(_cancel_onnx("loop")), x)[0], twice).all()


def test_a_loop_is_compared_as_one_node_and_the_report_says_its_body_is_not_tapped():
    # A Loop's error (rounding carried over its trips) read "concentrated ... look for a wrong index, a bad lane or a
    # race in its kernel": a body is many ops, no kernel's mark; the report says what it cannot see inside.
    from bisect_ov import bisect

    x = np.random.default_rng(0).standard_normal((1, 64)).astype(np.float32)
    report = bisect(_cancel_onnx("loop"), "CPU:f32", "EMU:f16", {"x": x}, progress=False)
    looped = next(n for n in report.nodes if n.op_type == "Loop")
    assert looped.error > looped.tolerance and report.first_divergence is looped
    assert not any(c.kind == "concentrated" for c in looped.diagnosis)
    assert any("runs a body of ops inside it: those ops are not tapped" in note for note in report.notes)


def test_a_static_input_read_only_for_its_shape_is_not_rounded():
    """A decoder's encoder states read only by a ShapeOf (its cross-attention cache comes from past inputs): the
    rounding op the emulation put after that input was all that read it once the plugin folded the ShapeOf of a
    static model, and the compile failed ("Node encoder_hidden_states contains empty child edge")."""
    rng = np.random.default_rng(0)
    x = ops.parameter([1, 8, 16], np.float32, name="x")
    states = ops.parameter([1, 5, 16], np.float32, name="encoder_hidden_states")
    shape = ops.shape_of(states)
    target = ops.concat([ops.gather(shape, ops.constant(np.array([0])), ops.constant(np.int64(0))),
                         ops.constant(np.array([8], np.int64)),
                         ops.gather(shape, ops.constant(np.array([2])), ops.constant(np.int64(0)))], 0)
    h = ops.matmul(x, ops.constant(rng.standard_normal((16, 16)).astype(np.float32)), False, False)
    model = ov.Model([ops.softmax(ops.reshape(h, target, False), -1).output(0)], [x, states], "shape_only_input")
    xs = rng.standard_normal((1, 8, 16)).astype(np.float32)
    (out,) = run(emulate_precision(model, "f16"), xs, np.zeros((1, 5, 16), np.float32))
    (exact,) = run(model, xs, np.zeros((1, 5, 16), np.float32))
    assert out.shape == (1, 8, 16) and np.abs(out - exact).max() < 1e-2


def test_a_tensor_a_shape_op_also_reads_gives_its_name_to_the_rounded_value():
    """The rounded tensor takes the names (a tensor name denotes the stored value): a shape op among the readers,
    which reads no value and is left unrounded, kept them on the unrounded one."""
    x = ops.parameter([2, 3], np.float32, name="x")
    y = ops.relu(x)
    y.output(0).get_tensor().set_names({"y"})
    z = ops.reshape(ops.negative(y), ops.shape_of(y), False)
    emulated = emulate_precision(ov.Model([z.output(0)], [x], "shape_reader"), "f16")
    named = [op for op in emulated.get_ordered_ops() if any("y" in o.get_names() for o in op.outputs())]
    assert [op.get_type_name() for op in named] == ["EmulatedRound"]
    (out,) = run(emulated, np.full((2, 3), 1 / 3, np.float32))
    assert np.all(out == -np.float32(np.float16(1 / 3)))
