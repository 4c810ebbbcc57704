"""ONNX Runtime as a side: a zoo ViT exported to ONNX against ONNX Runtime, with and without a defect edited
into the OpenVINO side, and what a float64 ONNX Runtime cannot run."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")

import openvino as ov  # noqa: E402
import openvino.opset13 as ops  # noqa: E402

from bisect_ov import bisect  # noqa: E402
from bisect_ov.core.errors import InputError  # noqa: E402
from bisect_ov.frameworks import ORT  # noqa: E402
from tests.zoo.conftest import needs_zoo  # noqa: E402

pytestmark = [pytest.mark.zoo, needs_zoo]
FAST = dict(progress=False, noise=False, impact=0)


@pytest.fixture(scope="module")
def vit_onnx(tmp_path_factory):
    """The zoo's small ViT module exported to ONNX (the TorchScript exporter), and one input."""
    import warnings

    from bisect_ov.zoo.hf import vit_module

    module = vit_module("small", 0)
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    path = tmp_path_factory.mktemp("onnx") / "vit.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), str(path), dynamo=False, input_names=["pixel_values"],
                          output_names=["last_hidden_state"])
    return path, x.numpy()


def test_onnx_export_agrees_with_onnx_runtime(vit_onnx):
    path, x = vit_onnx
    report = bisect(str(path), ref="ORT", target="CPU:f32", inputs=[x], **FAST)
    assert not report.diverges, report.to_text()
    (match,) = report.frameworks
    assert match.framework == "onnxruntime" and match.by_kind["tensor"] > 50 and match.coverage > 0.9
    # What did not match is listed by name, never dropped.
    assert len(match.unmatched) == match.compute_nodes - match.covered


def test_a_defect_in_the_openvino_side_is_named(vit_onnx):
    path, x = vit_onnx
    model = ov.Core().read_model(str(path))
    op = next(o for o in model.get_ordered_ops() if o.get_type_name() == "Gelu")
    name = op.get_friendly_name()
    near = ops.gelu(op.input_value(0), approximation_mode="tanh")
    for reader in op.output(0).get_target_inputs():
        reader.replace_source_output(near.output(0))
    near.set_friendly_name(name)
    near.output(0).set_names(op.output(0).get_names())
    report = bisect(model, ref=ORT(path), target="CPU:f32", inputs=[x], **FAST)
    assert report.first_divergence is not None and report.first_divergence.name == name, report.to_text()


def test_float64_needs_kernels_for_every_op(vit_onnx):
    path, x = vit_onnx
    with pytest.raises(InputError, match="float64.*Conv"):
        bisect(str(path), ref="ORT", target="CPU:f32", inputs=[x], truth="f64", **FAST)


def test_ort_needs_an_onnx_model():
    with pytest.raises(InputError, match="pass the model as an .onnx path"):
        x = ops.parameter([2], np.float32)
        bisect(ov.Model([ops.relu(x)], [x]), ref="ORT", target="CPU", **FAST)


def test_a_convolution_s_halves_count_as_covered_by_its_bias_add(tmp_path):
    """OpenVINO splits an ONNX Conv into ``.../WithoutBiases`` and a bias Add that holds the ONNX value; the bias is
    reshaped through a ShapeOf of the first half, which reads only its shape: every compute node of a torchvision
    ResNet-18's ONNX export is compared or covered (20 convolutions were listed unmatched)."""
    import warnings

    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    module = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 32, 32)
    path = tmp_path / "resnet18.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), str(path), opset_version=17, dynamo=False)
    report = bisect(str(path), ref="ORT", target="CPU:f32", inputs=[x.numpy()], **FAST)
    (match,) = report.frameworks
    assert match.unmatched == () and match.covered == match.compute_nodes


@pytest.mark.parametrize("name", ["bvlc_alexnet", "inception_v1"])
def test_a_light_onnx_network_against_onnx_runtime_names_only_error_of_its_own(name, tmp_path):
    """Benign: the onnx wheel's light topologies with seeded weights, OpenVINO against ONNX Runtime in f32. A
    first divergence, if any, makes error of its own: alone on the target, fed ONNX Runtime's inputs, it is over its
    tolerance (AlexNet's Softmax, 1.2e-7 off alone, turned 1.3e-6 logit differences into 1.1e-5 at the outputs,
    over their 1e-5 floor, and was named with a low-precision accumulator as the cause)."""
    from bisect_ov.zoo.onnx_light import save_light_onnx

    path = save_light_onnx(name, tmp_path / f"{name}.onnx")
    report = bisect(str(path), ref="ORT", target="CPU:f32", progress=False, noise=False)
    for node in report.first_divergences:
        assert node.local_error is not None and node.local_error > node.tolerance, report.to_text()
    assert report.outputs[0].error < 1e-4, report.to_text()
