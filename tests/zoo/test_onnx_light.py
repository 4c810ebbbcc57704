"""Tests of bisect_ov.zoo.onnx_light: the onnx wheel's light topologies with seeded random weights.

Only SqueezeNet and ShuffleNet are compiled (a fraction of a second each); ResNet-50 is run once, as the
model whose residual sums would blow up without BatchNorm calibration.
"""

from __future__ import annotations

import numpy as np
import onnx
import openvino as ov
import pytest
from onnx import numpy_helper

from bisect_ov.core.errors import InputError
from bisect_ov.zoo.onnx_light import (
    LIGHT_MODELS,
    light_model_path,
    load_light_model,
    load_light_onnx,
    save_light_onnx,
)

# Small enough to compile and run in every test session; an empty list skips the tests that need them.
SMALL = [name for name in ("squeezenet", "shufflenet") if name in LIGHT_MODELS]

_CPU_RUNS_BF16 = ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT") == ov.Type.bf16


def _original(name: str) -> onnx.ModelProto:
    return onnx.load(str(light_model_path() / f"light_{name}.onnx"))


def _image(model: ov.Model, seed: int = 1) -> np.ndarray:
    # Standard normal, as the module's calibration input; a different seed, so not the calibration input itself.
    return np.random.default_rng(seed).standard_normal(tuple(model.inputs[0].shape)).astype(np.float32)


def _run(model: ov.Model, precision: str, image: np.ndarray) -> np.ndarray:
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": precision})
    return compiled({0: image})[0].astype(np.float64)


@pytest.fixture(scope="module")
def protos() -> dict[str, onnx.ModelProto]:
    return {name: load_light_onnx(name) for name in SMALL}


@pytest.fixture(scope="module")
def outputs() -> dict[str, dict[str, np.ndarray]]:
    """f32 (and, where the CPU has it, bf16) outputs of each small model on one image."""
    results = {}
    for name in SMALL:
        model = load_light_model(name)
        image = _image(model)
        precisions = ("f32", "bf16") if _CPU_RUNS_BF16 else ("f32",)
        results[name] = {precision: _run(model, precision, image) for precision in precisions}
    return results


def test_light_models_lists_the_files_present() -> None:
    assert set(LIGHT_MODELS) <= {
        "resnet50", "squeezenet", "shufflenet", "densenet121", "inception_v1",
        "inception_v2", "vgg19", "zfnet512", "bvlc_alexnet",
    }  # fmt: skip
    for name in LIGHT_MODELS:
        assert (light_model_path() / f"light_{name}.onnx").is_file()


@pytest.mark.parametrize("load", [load_light_onnx, load_light_model])
def test_unknown_name_lists_the_available_ones(load) -> None:
    with pytest.raises(InputError, match="Unknown light model 'resnet51'") as caught:
        load("resnet51")
    for name in LIGHT_MODELS:
        assert name in str(caught.value)


def test_save_unknown_name_writes_nothing(tmp_path) -> None:
    with pytest.raises(InputError, match="Available"):
        save_light_onnx("nope", tmp_path / "nope.onnx")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("seed", [-1, 1.5, True])
def test_bad_seed_is_an_input_error(seed) -> None:
    name = LIGHT_MODELS[0] if LIGHT_MODELS else "squeezenet"
    with pytest.raises(InputError, match="seed"):
        load_light_onnx(name, seed)


@pytest.mark.parametrize("name", SMALL[:1])
def test_loads_are_deterministic_per_seed(name: str, protos) -> None:
    again = load_light_onnx(name, seed=0).SerializeToString()
    assert again == protos[name].SerializeToString()
    assert load_light_onnx(name, seed=1).SerializeToString() != again


@pytest.mark.parametrize("name", SMALL)
def test_only_the_weights_change(name: str, protos) -> None:
    model, original = protos[name], _original(name)
    onnx.checker.check_model(model)
    assert not [node for node in model.graph.node if node.op_type == "ConstantOfShape"]
    kept = [node for node in original.graph.node if node.op_type != "ConstantOfShape"]
    assert [node.SerializeToString() for node in model.graph.node] == [n.SerializeToString() for n in kept]
    assert [o.SerializeToString() for o in model.graph.output] == [o.SerializeToString() for o in original.graph.output]
    assert _data_inputs(model) == _data_inputs(original)
    assert (model.ir_version, model.opset_import) == (original.ir_version, original.opset_import)

    weights = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    # A calibrated BatchNorm variance is one value per layer, by design; every other weight varies.
    variances = {node.input[4] for node in model.graph.node if node.op_type == "BatchNormalization"}
    for node in original.graph.node:
        if node.op_type == "ConstantOfShape":
            weight = weights[node.output[0]]
            assert weight.shape == tuple(numpy_helper.to_array(_initializer(original, node.input[0])))
            assert weight.size == 1 or node.output[0] in variances or weight.std() > 0


@pytest.mark.parametrize("name", SMALL)
def test_weights_follow_their_role(name: str, protos) -> None:
    model = protos[name]
    weights = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Conv":
            kernel = weights[node.input[1]]
            fan_in = np.prod(kernel.shape[1:])
            # He normal; the bound is loose for the small first and depthwise kernels.
            assert kernel.std() == pytest.approx(np.sqrt(2 / fan_in), rel=0.3)
        if node.op_type == "BatchNormalization":
            scale, bias, mean, var = (weights[t] for t in node.input[1:])
            assert abs(scale.mean() - 1) < 0.1 and np.abs(bias).max() < 1 and np.abs(mean).max() < 1
            assert np.all(np.isfinite(var)) and np.all(var > 0)


@pytest.mark.parametrize("name", SMALL)
def test_f32_output_is_finite_and_varied(name: str, outputs) -> None:
    result = outputs[name]["f32"]
    assert np.all(np.isfinite(result))
    assert np.unique(result).size > 100 and result.std() > 0.1 * np.abs(result).mean()
    # The outputs are softmaxes: they must not collapse to one class.
    assert result.sum() == pytest.approx(1, rel=1e-4)
    assert result.max() < 0.9


@pytest.mark.bf16
@pytest.mark.skipif(not _CPU_RUNS_BF16, reason="this CPU's OpenVINO plugin does not run bf16 (no avx512_bf16 or AMX)")
@pytest.mark.parametrize("name", SMALL)
def test_bf16_differs_from_f32_but_stays_close(name: str, outputs) -> None:
    f32, bf16 = outputs[name]["f32"], outputs[name]["bf16"]
    relative = np.linalg.norm(bf16 - f32) / np.linalg.norm(f32)
    assert 1e-4 < relative < 0.1


@pytest.mark.parametrize("name", SMALL[:1])
def test_save_writes_the_loaded_model_and_load_model_leaves_no_file(name: str, protos, tmp_path, monkeypatch) -> None:
    path = save_light_onnx(name, str(tmp_path / "model.onnx"))
    assert path == tmp_path / "model.onnx"
    assert onnx.load(str(path)).SerializeToString() == protos[name].SerializeToString()

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr("tempfile.tempdir", None)  # make tempfile read TMPDIR again
    model = load_light_model(name)
    assert model.get_friendly_name() == f"light_{name}"
    assert not any(scratch.iterdir())


@pytest.mark.slow
@pytest.mark.skipif("resnet50" not in LIGHT_MODELS, reason="the installed onnx wheel has no light_resnet50.onnx")
def test_resnet50_residual_sums_stay_in_range() -> None:
    model = load_light_model("resnet50")
    assert [i.get_any_name() for i in model.inputs] == ["gpu_0/data_0"]
    assert list(model.inputs[0].shape) == [1, 3, 224, 224]
    assert len(model.get_ordered_ops()) > 200
    result = _run(model, "f32", _image(model))
    # Without calibrated BatchNorms, 16 residual sums each double the variance and the softmax is one-hot.
    assert np.all(np.isfinite(result)) and result.max() < 0.5 and np.unique(result).size > 100


def _initializer(model: onnx.ModelProto, name: str) -> onnx.TensorProto:
    return next(init for init in model.graph.initializer if init.name == name)


def _data_inputs(model: onnx.ModelProto) -> list[bytes]:
    # IR 3 lists every initializer among the inputs too; the inputs a caller feeds are the others.
    initialized = {init.name for init in model.graph.initializer}
    return [info.SerializeToString() for info in model.graph.input if info.name not in initialized]
