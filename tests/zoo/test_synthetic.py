"""Tests of the models built in code (`bisect_ov.zoo.synthetic`)."""

from __future__ import annotations

import re
from typing import Callable

import numpy as np
import openvino as ov
import pytest

from bisect_ov.core.errors import InputError
from bisect_ov.zoo import synthetic as zoo

F32 = {"INFERENCE_PRECISION_HINT": "f32"}
STRUCTURAL = {"Constant", "Parameter", "Result"}
EXACT_INT_CONV = 127 * 127 * 11111  # 179,209,319

# Every single-model builder, under a readable test id. The int8 twin gets its own entry.
MODELS: dict[str, Callable[[], ov.Model]] = {
    **{name: build for name, build in zoo.BUILDERS.items()},
    "softmax": zoo.softmax_model,
    "softmax_3d": lambda: zoo.softmax_model((2, 3, 7), axis=-1),
    **{f"elementwise_{op}": (lambda op=op: zoo.elementwise_model(op)) for op in ("relu", "sigmoid", "gelu", "tanh")},
    "int_conv": zoo.int_conv,
    "int_conv_i32": lambda: zoo.int_conv(input_type="i32"),
    "int_conv_f32": lambda: zoo.int_conv(input_type="f32"),
    "mobilenet_fp32": lambda: zoo.fp32_and_int8()[0],
    "mobilenet_int8": lambda: zoo.fp32_and_int8()[1],
}


@pytest.fixture(scope="module")
def core() -> ov.Core:
    return ov.Core()


@pytest.fixture(scope="module")
def mobilenets() -> tuple[ov.Model, ov.Model]:
    return zoo.fp32_and_int8()


def compute_ops(model: ov.Model) -> list[ov.Node]:
    return [op for op in model.get_ordered_ops() if op.get_type_name() not in STRUCTURAL]


def run(core: ov.Core, model: ov.Model, inputs: dict[str, np.ndarray], precision: str = "f32") -> list[np.ndarray]:
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": precision})
    result = compiled(inputs)
    return [np.asarray(result[out]) for out in compiled.outputs]


def run_all_nodes(core: ov.Core, model: ov.Model, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every compute op's first output, by friendly name, from one f32 run of a copy with all of them exposed."""
    tapped = model.clone()
    ops = compute_ops(tapped)
    tapped.add_outputs([op.output(0) for op in ops])
    compiled = core.compile_model(tapped, "CPU", F32)
    result = compiled(inputs)
    # Our builders name each compute op's output tensor after the op, so look outputs up by that name.
    return {op.get_friendly_name(): np.asarray(result[compiled.output(op.get_friendly_name())]) for op in ops}


# ---------------------------------------------------------------------------------------------------------
# Every model: valid, compiles, runs, finite, well named, deterministic
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(MODELS))
def test_model_compiles_runs_and_is_finite(core: ov.Core, name: str) -> None:
    model = MODELS[name]()
    model.validate_nodes_and_infer_types()
    assert not model.is_dynamic()
    if name.startswith("int_conv"):
        ptype = model.get_parameters()[0].get_element_type().get_type_name()
        inputs = {"input": zoo.int_conv_input(input_type=ptype)}
    else:
        inputs = zoo.sample_inputs(model, seed=7)
    outputs = run(core, model, inputs)
    assert outputs
    for out in outputs:
        assert out.size > 0
        assert np.all(np.isfinite(out)), f"{name}: non-finite output"
    # Float parameters of every builder except int_conv are f32.
    for param in model.get_parameters():
        if not name.startswith("int_conv"):
            assert param.get_element_type() == ov.Type.f32


@pytest.mark.parametrize("name", list(MODELS))
def test_every_op_has_a_unique_meaningful_name(name: str) -> None:
    model = MODELS[name]()
    names = [op.get_friendly_name() for op in model.get_ordered_ops()]
    assert len(names) == len(set(names)), f"duplicate friendly names in {name}"
    # OpenVINO's automatic names look like "Constant_123" / "Result_45": none may be left.
    auto = [n for n in names if re.fullmatch(r"[A-Za-z]+_\d+", n)]
    assert not auto, f"{name}: automatically named ops {auto}"
    tensor_names: list[str] = []
    for op in model.get_ordered_ops():
        if op.get_type_name() in ("Constant", "Result"):
            continue
        for out in op.outputs():
            assert out.get_names(), f"{name}: output of {op.get_friendly_name()} has no tensor name"
            tensor_names.extend(out.get_names())
        assert op.get_friendly_name() in op.output(0).get_names()
    assert len(tensor_names) == len(set(tensor_names))
    for param in model.get_parameters():
        assert param.get_friendly_name().startswith("input")


@pytest.mark.parametrize("name", list(zoo.BUILDERS))
def test_builders_are_deterministic_per_seed(name: str) -> None:
    build = zoo.BUILDERS[name]

    def signature(model: ov.Model) -> list[tuple[str, str, bytes]]:
        def data(op: ov.Node) -> bytes:
            return op.get_data().tobytes() if op.get_type_name() == "Constant" else b""

        return [(op.get_friendly_name(), op.get_type_name(), data(op)) for op in model.get_ordered_ops()]

    first, again, other = build(seed=3), build(seed=3), build(seed=4)
    assert first is not again  # a fresh model each call
    assert signature(first) == signature(again)
    assert [s[:2] for s in signature(first)] == [s[:2] for s in signature(other)]  # same graph ...
    assert signature(first) != signature(other)  # ... other weights


# ---------------------------------------------------------------------------------------------------------
# Particular builders
# ---------------------------------------------------------------------------------------------------------


def test_builders_registry() -> None:
    expected = {"chain", "diamond", "multi_io", "attention_block", "conv_bn_net", "face_resnet", "demo"}
    assert set(zoo.BUILDERS) == expected
    for name, build in zoo.BUILDERS.items():
        assert build().get_friendly_name() == name


def test_chain_depth_and_width(core: ov.Core) -> None:
    model = zoo.chain(depth=5, width=12)
    assert [int(d) for d in model.output(0).get_shape()] == [1, 12]
    names = {op.get_friendly_name() for op in model.get_ordered_ops()}
    assert {"layer4/matmul", "layer2/sigmoid", "layer3/exp", "layer1/tanh"} <= names
    assert "layer5/matmul" not in names
    types = {op.get_type_name() for op in model.get_ordered_ops()}
    assert {"MatMul", "Add", "Relu", "Sigmoid", "Tanh", "Multiply", "Subtract", "Exp", "Clamp"} <= types


def test_multi_io_shapes(core: ov.Core) -> None:
    model = zoo.multi_io()
    shapes = {p.get_friendly_name(): [int(d) for d in p.get_output_shape(0)] for p in model.get_parameters()}
    assert shapes == {"input_a": [1, 8], "input_b": [1, 4]}
    assert len(model.outputs) == 2
    probs = run(core, model, zoo.sample_inputs(model))[1]
    assert probs.sum() == pytest.approx(1.0, abs=1e-5)


def test_attention_block_shape_and_heads() -> None:
    model = zoo.attention_block(seq=8, dim=24, heads=3)
    assert [int(d) for d in model.output(0).get_shape()] == [1, 8, 24]
    ops = {op.get_friendly_name(): op for op in model.get_ordered_ops()}
    assert [int(d) for d in ops["attn/softmax"].get_output_shape(0)] == [1, 3, 8, 8]
    assert ops["mlp/gelu"].get_type_name() == "Gelu" and ops["ln2/mvn"].get_type_name() == "MVN"
    with pytest.raises(InputError):
        zoo.attention_block(dim=30, heads=4)


def test_conv_bn_net_is_a_classifier(core: ov.Core) -> None:
    model = zoo.conv_bn_net()
    types = {op.get_type_name() for op in model.get_ordered_ops()}
    assert {"Convolution", "BatchNormInference", "MaxPool", "ReduceMean", "MatMul", "Softmax"} <= types
    probs = run(core, model, zoo.sample_inputs(model))[0]
    assert probs.shape == (1, 10) and probs.sum() == pytest.approx(1.0, abs=1e-5)


def test_face_resnet_structure(core: ov.Core) -> None:
    model = zoo.face_resnet()
    ops = {op.get_friendly_name(): op for op in model.get_ordered_ops()}
    assert len(compute_ops(model)) >= 100
    assert [int(d) for d in model.get_parameters()[0].get_output_shape(0)] == [1, 3, 56, 56]
    # The preprocessing Multiply reads the raw input directly.
    mul = ops["preprocess/mul"]
    assert mul.get_type_name() == "Multiply"
    assert mul.input_value(0).get_node().get_type_name() == "Parameter"
    assert ops["inorm/sub"].get_type_name() == "Subtract"
    assert ops["inorm/sqdiff"].get_type_name() == "SquaredDifference"
    assert ops["inorm/offset"].get_type_name() == "Add"
    assert {"PRelu", "BatchNormInference", "Convolution"} <= {op.get_type_name() for op in ops.values()}
    embedding = run(core, model, zoo.sample_inputs(model))[0]
    assert embedding.shape == (1, 128)
    assert np.linalg.norm(embedding) == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("name", ["face_resnet", "demo"])
def test_every_value_fits_f16_for_pixel_inputs(core: ov.Core, name: str) -> None:
    model = zoo.BUILDERS[name]()
    inputs = zoo.sample_inputs(model, seed=11)
    assert inputs["input"].min() >= 0.0 and inputs["input"].max() <= 255.0
    assert inputs["input"].max() > 200.0  # raw pixel scale, not [0, 1]
    values = run_all_nodes(core, model, inputs)
    assert len(values) == len(compute_ops(model))
    peak = {k: float(np.abs(v).max()) for k, v in values.items()}
    assert all(np.isfinite(list(peak.values())))
    assert max(peak.values()) < 60000.0, max(peak.items(), key=lambda kv: kv[1])
    # The offset tensor is the one with a large mean, and its spread is small next to it.
    x = values["inorm/offset"]
    assert np.abs(x.mean()) > 500.0 and x.std(axis=(2, 3)).max() < 5.0


@pytest.mark.parametrize("name", ["face_resnet", "demo"])
def test_instance_norm_cancels_in_f16(core: ov.Core, name: str) -> None:
    """Store the instance norm's input in f16 (numpy) and redo x - mean: mostly rounding noise.

    Device-independent stand-in for a GPU f16 run; with `inorm_offset=0` the same rounding is harmless.
    """

    def sub_error(offset: float) -> tuple[float, float]:
        model = zoo.BUILDERS[name](inorm_offset=offset)
        values = run_all_nodes(core, model, zoo.sample_inputs(model, seed=2))
        x16 = values["inorm/offset"].astype(np.float16).astype(np.float32)
        sub16 = x16 - x16.mean(axis=(2, 3), keepdims=True)
        exact = values["inorm/sub"]
        input_rel = float(np.abs(x16 - values["inorm/offset"]).max() / np.abs(values["inorm/offset"]).max())
        return float(np.sqrt(np.mean((sub16 - exact) ** 2)) / np.sqrt(np.mean(exact**2))), input_rel

    bad, bad_input = sub_error(1000.0)
    good, _ = sub_error(0.0)
    assert bad_input < 1e-3  # the input itself is stored to f16's usual ~0.05 % ...
    assert bad > 0.1  # ... but x - mean loses more than 10 % of its signal
    assert good < 0.01


@pytest.mark.bf16
def test_demo_diverges_in_bf16_because_of_the_offset(core: ov.Core) -> None:
    if "BF16" not in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        pytest.skip("this CPU does not run bf16")

    def output_error(offset: float) -> float:
        model = zoo.demo(inorm_offset=offset)
        inputs = zoo.sample_inputs(model, seed=1)
        ref = run(core, model, inputs, "f32")[0]
        low = run(core, model, inputs, "bf16")[0]
        return float(np.abs(low - ref).max() / np.abs(ref).max())

    bad, good = output_error(1000.0), output_error(0.0)
    assert bad > 0.03 and bad > 10 * good, (bad, good)


def test_demo_is_small_and_has_the_pattern() -> None:
    model = zoo.demo()
    n = len(compute_ops(model))
    assert 30 <= n <= 60
    names = {op.get_friendly_name() for op in model.get_ordered_ops()}
    assert {"preprocess/mul", "stem/conv", "inorm/offset", "inorm/sub", "head/matmul", "head/softmax"} <= names
    assert zoo.INPUT_RANGES["demo"] == (0.0, 255.0)


def test_case1_models() -> None:
    model = zoo.softmax_model()
    assert [op.get_friendly_name() for op in compute_ops(model)] == ["softmax"]
    assert [int(d) for d in model.get_parameters()[0].get_output_shape(0)] == [1, 5]
    for op in ("relu", "sigmoid", "gelu", "tanh"):
        model = zoo.elementwise_model(op, n=300)
        assert [o.get_friendly_name() for o in compute_ops(model)] == [op]
        assert [int(d) for d in model.get_parameters()[0].get_output_shape(0)] == [1, 300]
    with pytest.raises(InputError, match="relu"):
        zoo.elementwise_model("swish")
    with pytest.raises(InputError):
        zoo.softmax_model((1, 5), axis=2)


def test_int_conv_f32_is_close_to_exact(core: ov.Core) -> None:
    model = zoo.int_conv()
    names = {op.get_friendly_name(): op.get_type_name() for op in model.get_ordered_ops()}
    expected = {"input": "Parameter", "to_float": "Convert", "conv": "Convolution", "to_int": "Convert"}
    assert expected.items() <= names.items()
    assert model.get_parameters()[0].get_element_type() == ov.Type.i8
    assert model.output(0).get_element_type() == ov.Type.i32
    inputs = zoo.int_conv_input()
    assert inputs.dtype == np.int8 and inputs.shape == (1, 11111, 1, 1) and np.all(inputs == 127)
    got = int(run(core, model, {"input": inputs})[0].ravel()[0])
    # The sum exceeds 2^24, so f32 accumulation need not be exact; on the reference machine CPU f32 gave
    # 179,207,392 (1,927 low, 0.0011 %).
    assert abs(got - EXACT_INT_CONV) <= 1e-3 * EXACT_INT_CONV, f"CPU f32 gave {got:,}, exact {EXACT_INT_CONV:,}"
    # Small sizes are exact.
    small = zoo.int_conv(channels=10, value=3)
    assert int(run(core, small, {"input": zoo.int_conv_input(10, 3)})[0].ravel()[0]) == 90
    with pytest.raises(InputError):
        zoo.int_conv_input(value=300, input_type="i8")
    with pytest.raises(InputError):
        zoo.int_conv(input_type="u4")


def test_int8_twin_keeps_names_and_adds_fake_quantize(mobilenets: tuple[ov.Model, ov.Model]) -> None:
    fp32, int8 = mobilenets
    fp32_ops = {op.get_friendly_name(): op.get_type_name() for op in fp32.get_ordered_ops()}
    int8_ops = {op.get_friendly_name(): op for op in int8.get_ordered_ops()}
    assert "FakeQuantize" not in fp32_ops.values()
    for name, kind in fp32_ops.items():
        assert name in int8_ops and int8_ops[name].get_type_name() == kind, name
    consumers = [n for n, k in fp32_ops.items() if k in ("Convolution", "GroupConvolution", "MatMul")]
    assert len(consumers) == 6 and "GroupConvolution" in fp32_ops.values()
    for consumer in consumers:
        op = int8_ops[consumer]
        for port, suffix in ((0, "fq_in"), (1, "fq_w")):
            fq = op.input_value(port).get_node()
            assert fq.get_type_name() == "FakeQuantize" and fq.get_friendly_name() == f"{consumer}/{suffix}"
            assert fq.get_attributes()["levels"] == 256
            low, high = (fq.input_value(i).get_node().get_data() for i in (1, 2))
            assert np.all(low < high)
    # Weights are identical in the twins.
    fp32_weight = next(op for op in fp32.get_ordered_ops() if op.get_friendly_name() == "block2/pw/weight")
    np.testing.assert_array_equal(int8_ops["block2/pw/weight"].get_data(), fp32_weight.get_data())
    # Calibrated activation ranges: post-ReLU activations start at 0.
    assert int8_ops["block1/pw/fq_in/in_low"].get_data() == pytest.approx(0.0, abs=1e-6)


def test_int8_twin_output_close_but_not_identical(core: ov.Core, mobilenets: tuple[ov.Model, ov.Model]) -> None:
    fp32, int8 = mobilenets
    inputs = zoo.sample_inputs(fp32, seed=5)
    ref, quant = run(core, fp32, inputs)[0], run(core, int8, inputs)[0]
    diff = float(np.abs(ref - quant).max())
    assert 0.0 < diff < 0.05 * float(np.abs(ref).max()) + 0.01
    assert quant.sum() == pytest.approx(1.0, abs=1e-4)


def test_sample_inputs() -> None:
    model = zoo.multi_io()
    a, b = zoo.sample_inputs(model, seed=1), zoo.sample_inputs(model, seed=1)
    assert set(a) == {"input_a", "input_b"}
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert a["input_a"].dtype == np.float32 and a["input_a"].shape == (1, 8)
    assert np.abs(a["input_a"]).max() <= 1.0
    assert not np.array_equal(a["input_a"], zoo.sample_inputs(model, seed=2)["input_a"])
