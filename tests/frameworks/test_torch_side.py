"""PyTorch eager as a side: a zoo ViT against its own module, conversion defects edited into the converted model,
float64 truth on a cancellation, recorded torch runs, and the inputs a PyTorch side refuses."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import openvino as ov  # noqa: E402
import openvino.opset13 as ops  # noqa: E402

from bisect_ov import bisect  # noqa: E402
from bisect_ov.core.errors import InputError  # noqa: E402
from bisect_ov.frameworks import Torch  # noqa: E402
from tests.zoo.conftest import needs_zoo, zoo_inputs, zoo_model  # noqa: E402

pytestmark = [pytest.mark.zoo, needs_zoo]

FAST = dict(progress=False, noise=False, impact=0)


@pytest.fixture(scope="module")
def vit():
    """The zoo's small ViT: the cached converted model, its module (same seed, same weights) and inputs."""
    from bisect_ov.zoo.hf import vit_module

    return zoo_model("vit"), vit_module("small", 0), zoo_inputs("vit")


def _edit(model: ov.Model, name: str, change) -> ov.Model:
    """A copy of `model` whose op `name` is replaced by `change(op)` (a conversion defect, simulated)."""
    clone = model.clone()
    op = next(o for o in clone.get_ordered_ops() if o.get_friendly_name() == name)
    new = change(op)
    new.set_friendly_name(name)
    for target in op.output(0).get_target_inputs():
        target.replace_source_output(new.output(0))
    return clone


def test_vit_against_its_module_agrees_and_reports_coverage(vit):
    model, module, inputs = vit
    report = bisect(model, ref=Torch(module), target="CPU:f32", inputs=inputs, **FAST)
    assert report.first_divergence is None and not report.diverges
    (match,) = report.frameworks
    assert (match.role, match.framework, match.dtype) == ("ref", "torch", "f32")
    # Every compute node of the traced ViT has a value of the eager run (query, key and value told apart).
    assert match.coverage == 1.0 and match.unmatched == () and match.by_kind.get("aten", 0) > 30
    assert "46 of the model's 46 compute nodes" in report.to_text() or match.matched == match.compute_nodes
    assert report.ref.precision == "f32" and report.ref.name == "torch"


@pytest.mark.parametrize("defect", ["scaled weight", "gelu as tanh"])
def test_conversion_defect_is_named_at_its_node_with_the_module_path(vit, defect):
    model, module, inputs = vit
    if defect == "scaled weight":
        name = "__module.encoder.layer.1.attention.attention.value/aten::linear/MatMul"

        def change(op):
            weight = op.input_value(1).get_node()
            data = np.array(weight.get_data()) * 1.01
            return ops.matmul(op.input_value(0), ops.constant(data.astype(np.float32)), *_transposes(op))
    else:
        name = "__module.encoder.layer.0.intermediate.intermediate_act_fn/aten::gelu/Gelu"

        def change(op):
            return ops.gelu(op.input_value(0), approximation_mode="tanh")
    broken = _edit(model, name, change)
    report = bisect(broken, ref=module, target="CPU:f32", inputs=inputs, **FAST)
    first = report.first_divergence
    assert first is not None and first.name == name, report.to_text()
    assert report.nodes_in(name.split("/")[0][len("__module."):])


def _scale_weights(model: ov.Model, op) -> str:
    """Gives `op` (an op of `model` reading weights) weights 1.2x, as a conversion defect would; its name."""
    op.input(1).replace_source_output(ops.multiply(op.input_value(1), ops.constant(np.float32(1.2))).output(0))
    model.validate_nodes_and_infer_types()
    return op.get_friendly_name()


def _assert_named(report, name: str) -> None:
    """`name` is the report's first divergence, or in its fused group."""
    first = report.first_divergence
    assert first is not None and name in (first.name, *first.group), report.to_text()


def _transposes(op) -> tuple[bool, bool]:
    attributes = op.get_attributes()
    return bool(attributes.get("transpose_a", False)), bool(attributes.get("transpose_b", False))


class _Offset(torch.nn.Module):
    """x - mean(x) on data 1000 away from zero: f32 rounds the offset, the subtraction magnifies it."""

    def forward(self, x):
        y = x + 1000.0
        return (y - y.mean(dim=-1, keepdim=True)) * 2.0


def test_float64_truth_says_the_f32_reference_is_the_imprecise_side():
    """The target computes the subtraction without the offset (x - mean(x), equal in exact arithmetic), as a
    kernel that cancels better would; the f32 reference rounds x + 1000 first and loses ~1e-5 of every value.

    Editing the target is what makes the two sides disagree on every CPU: the same formula in f32 can give the
    same bits in PyTorch and OpenVINO (their sums run in the same order on an AVX2-only CPU)."""
    x = np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)
    module = _Offset().eval()
    model = ov.convert_model(module, example_input=torch.from_numpy(x))
    name = next(o.get_friendly_name() for o in model.get_ordered_ops() if o.get_type_name() == "Subtract")

    def without_offset(op):
        offset = op.input_value(0).get_node()  # x + 1000
        x = next(v for v in offset.input_values() if v.get_node().get_type_name() == "Parameter")
        return ops.subtract(x, ops.reduce_mean(x, np.int64([-1]), keep_dims=True))

    exact = _edit(model, name, without_offset)
    report = bisect(exact, ref=module, target="CPU:f32", inputs=[x], truth="f64", **FAST)
    first = report.first_divergence
    assert first is not None and first.name == name, report.to_text()  # far beyond f32's tolerance
    truth = report.truth
    assert truth is not None and truth.side == "torch/f64" and truth.compared >= 1
    ref_error, target_error = first.truth_errors
    assert ref_error > first.tolerance > target_error  # the reference itself is far from float64, the target not
    assert first.key in truth.imprecise_ref and first.key not in truth.target_off
    assert "the f32 reference is itself the imprecise side" in report.to_text()


def test_float64_truth_blames_the_target_for_a_real_defect():
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    module = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh()).eval()
    model = ov.convert_model(module, example_input=torch.from_numpy(x))
    name = next(o.get_friendly_name() for o in model.get_ordered_ops() if o.get_type_name() == "Tanh")
    broken = _edit(model, name, lambda op: ops.multiply(ops.tanh(op.input_value(0)), ops.constant(np.float32(1.001))))
    report = bisect(broken, ref=Torch(module), target="CPU:f32", inputs=[x], truth=Torch(module, dtype="f64"), **FAST)
    assert report.first_divergence is not None and report.first_divergence.name == name
    assert report.truth.target_off == (report.first_divergence.key,) and report.truth.closer == "ref"


def test_recorded_torch_run_replays_as_the_reference(tmp_path, vit):
    from bisect_ov import record

    model, module, inputs = vit
    path = record(model, Torch(module), inputs, tmp_path / "torch.npz")
    live = bisect(model, ref=Torch(module), target="CPU:f32", inputs=inputs, **FAST)
    replayed = bisect(model, ref=f"capture:{path}", target="CPU:f32", **FAST)
    assert [n.name for n in replayed.nodes] == [n.name for n in live.nodes]
    assert [n.error for n in replayed.nodes] == pytest.approx([n.error for n in live.nodes], rel=1e-6, abs=1e-12)


class _Two(torch.nn.Module):
    def forward(self, x):
        return x * 2.0, x + 1.0


def test_a_module_with_other_outputs_is_refused_saying_what_differs():
    x = np.ones((2, 4), np.float32)
    model = ov.convert_model(torch.nn.Tanh(), example_input=torch.from_numpy(x))
    with pytest.raises(InputError, match=r"gives 2 output\(s\) but the OpenVINO model has 1"):
        bisect(model, ref=_Two(), target="CPU:f32", inputs=[x], **FAST)
    wider = torch.nn.Linear(4, 3).eval()
    other = ov.convert_model(torch.nn.Linear(4, 5).eval(), example_input=torch.from_numpy(x))
    with pytest.raises(InputError, match=r"shape \[2, 3\] in the module.*\[2, 5\] in the OpenVINO model"):
        bisect(other, ref=wider, target="CPU:f32", inputs=[x], **FAST)


def test_a_model_converted_with_dynamic_dimensions_is_compared_not_refused():
    """`ov.convert_model(module, example_input=x)` leaves the input dynamic ([?,3,?,?]): the shapes for the given
    inputs are read from a reshaped clone, whose ops are found by name (reshaping folds shape subgraphs, so their
    positions move). ResNet-18 was refused as "[1, 1000] in the module's forward but [2] in the OpenVINO model",
    the [2] being a shape-computing tensor's."""
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    module = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 32, 32)
    model = ov.convert_model(module, example_input=x)
    assert model.inputs[0].get_partial_shape().is_dynamic
    report = bisect(model, ref=module, target="CPU:f32", inputs=[x.numpy()], **FAST)
    assert report.first_divergence is None and len(report.nodes) >= 10
    assert report.outputs[0].stats.shape == (1, 1000)


def test_a_convolution_renamed_by_batchnorm_folding_is_paired_and_named_when_it_is_wrong():
    """The conversion folds each BatchNorm into its convolution and names it ``Multiply_<n>``: no name or module
    places it, but the ReLU that reads it is paired, so it is the BatchNorm's output. An edited weight of the
    eleventh convolution is named there, not at the ReLU after it."""

    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    module = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 32, 32)
    model = ov.convert_model(module, example_input=x)
    conv = [op for op in model.get_ordered_ops() if op.get_type_name() == "Convolution"][10]
    assert conv.get_friendly_name().startswith("Multiply_")
    _scale_weights(model, conv)
    report = bisect(model, ref=module, target="CPU:f32", inputs=[x.numpy()], **FAST)
    first = report.first_divergence
    assert first is not None and first.name == conv.get_friendly_name() and first.op_type == "Convolution"
    assert report.coverage >= 0.8  # the folded convolutions are compared (58% of the compute nodes without them)


class _ShiftedBatchNorm(torch.nn.Module):
    """A convolution with a bias and a BatchNorm of real statistics (its shift survives the fold as an Add), then a
    biased convolution whose bias the conversion merges into the ``+ 1000`` after it, then a cancellation."""

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8)
        self.conv2, self.fc = torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.Linear(16, 10)
        with torch.no_grad():
            self.bn1.weight.uniform_(0.5, 1.5)
            self.bn1.bias.uniform_(0.5, 1.5)
            self.bn1.running_var.uniform_(0.5, 2)

    def forward(self, x):
        y = self.conv2(torch.relu(self.bn1(self.conv1(x)))) + 1000.0
        y = y - y.mean(dim=(2, 3), keepdim=True)
        return torch.softmax(self.fc(y.mean(dim=(2, 3))), -1)


def test_a_convolution_whose_bias_went_elsewhere_is_not_paired_with_its_torch_call():
    """The fold leaves conv(x, W * scale) named ``Multiply_<n>`` and an Add for the BatchNorm's shift and the
    convolution's bias; the second convolution's bias joins the ``+ 1000``. Neither convolution alone is its torch
    call's value (0.45 and 0.1 apart in f32): paired, they were named as the first divergence, not the cancellation."""
    torch.manual_seed(0)
    module = _ShiftedBatchNorm().eval()
    x = torch.randn(1, 3, 16, 16)
    model = ov.convert_model(module, example_input=x)
    convs = [op.get_friendly_name() for op in model.get_ordered_ops() if op.get_type_name() == "Convolution"]
    same = bisect(model, ref=module, target="CPU:f32", inputs=[x.numpy()], **FAST)
    # f32 against f32: the layers up to the cancellation agree to f32 rounding (its 1000 offset amplifies the
    # summation orders' last bits after it); the convolutions alone are not compared.
    assert set(convs) <= set(same.frameworks[0].unmatched) and same.first_divergence is None
    assert all(n.error < 1e-5 for n in same.nodes if n.index < same.node("aten::sub/Subtract").index), same.to_text()
    f16 = bisect(model, ref=module, target="EMU:f16", inputs=[x.numpy()], **FAST)
    assert f16.first_divergence is not None and f16.first_divergence.name == "aten::sub/Subtract", f16.to_text()


def test_inputs_the_module_rejects_surface_its_error():
    module = torch.nn.Linear(4, 3).eval()
    model = ov.convert_model(torch.nn.Tanh(), example_input=torch.ones(2, 5))
    with pytest.raises(InputError, match="rejected the inputs.*RuntimeError"):
        bisect(model, ref=module, target="CPU:f32", inputs=[np.ones((2, 5), np.float32)], **FAST)


def test_modules_off_the_cpu_or_in_training_are_refused():
    with pytest.raises(InputError, match="parameters are on meta.*CPU copy"):
        Torch(torch.nn.Linear(4, 3, device="meta"))
    with pytest.raises(InputError, match="training mode.*module.eval"):
        Torch(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Dropout(0.1)))


def _standard_cnn(name: str):
    """A standard CNN with seeded random weights (torchvision's by name, or ``timm:<name>``), eval mode."""
    torch.manual_seed(0)
    if name.startswith("timm:"):
        timm = pytest.importorskip("timm")
        return timm.create_model(name[5:], pretrained=False).eval()
    return getattr(pytest.importorskip("torchvision").models, name)().eval()


@pytest.mark.parametrize("name, among", [("resnet18", ""), ("mobilenet_v3_small", ""), ("timm:efficientnet_b0", ""),
                                         ("timm:convnext_atto", "downsample"), ("shufflenet_v2_x0_5", ""),
                                         ("timm:mobilevit_xxs", "")])
def test_a_standard_cnn_agrees_with_its_module_and_an_edited_convolution_is_named(name, among):
    """Converted with `convert_model`'s defaults (a dynamic input), against the module in PyTorch eager: the two
    f32 implementations differ by their summation orders (about 1e-6 at the outputs after dozens of layers, over the
    1e-6 floor of a classifier's bias Add), which is agreement (the outputs are judged against f32-level agreement
    when another framework is a side); 90% of the compute nodes or more are compared (a downsampling block's two
    renamed convolutions too); one convolution with weights 1.2x, a third into the graph, is named as the first
    divergence (in ConvNeXt a downsampling one: a LayerNorm follows each of its other convolutions and takes a scale
    out, and its block MLPs are scaled by layer scales of 1e-6). ShuffleNet: a renamed convolution reading one half
    of a channel split was paired as if it read its folded BatchNorm's input (the split's second half then held the
    convolution's value). MobileViT: a transformer block's two residual Adds, one reading the other, were one call
    (the first add's value was paired with the second)."""
    module = _standard_cnn(name)
    x = torch.randn(1, 3, 64, 64)
    model = ov.convert_model(module, example_input=x)
    benign = bisect(model, ref=module, target="CPU:f32", inputs=[x.numpy()], **FAST)
    assert not benign.diverges and benign.first_divergence is None, benign.to_text()
    assert benign.outputs[0].tolerance == pytest.approx(1e-5) and benign.coverage >= 0.9
    assert [n for n in benign.notes if "Two implementations of f32 are compared" in n]
    convs = [op for op in model.get_ordered_ops() if op.get_type_name() in ("Convolution", "GroupConvolution")
             and op.input_value(1).get_node().get_type_name() != "Parameter" and among in op.get_friendly_name()]
    conv = convs[len(convs) // 3]
    _scale_weights(model, conv)
    faulty = bisect(model, ref=module, target="CPU:f32", inputs=[x.numpy()], **FAST)
    _assert_named(faulty, conv.get_friendly_name())
    # a tolerance given is the user's: the 1e-6 floor again
    strict = bisect(model, ref=module, target="CPU:f32", inputs=[x.numpy()], tolerance=1e-6, **FAST)
    assert strict.outputs[0].tolerance == pytest.approx(1e-6)


@pytest.mark.parametrize("name, among", [("resnet18", ""), ("timm:convnext_atto", "downsample")])
def test_a_standard_cnn_exported_to_onnx_agrees_with_onnx_runtime_and_an_edited_convolution_is_named(
        name, among, tmp_path):
    """The same through ONNX: the export read by OpenVINO against ONNX Runtime running the file, every ONNX value
    with a counterpart compared."""
    pytest.importorskip("onnxruntime")
    module = _standard_cnn(name)
    x = torch.randn(1, 3, 64, 64)
    path = tmp_path / "model.onnx"
    torch.onnx.export(module, (x,), str(path), dynamo=False)
    benign = bisect(str(path), ref="ORT", target="CPU:f32", inputs=[x.numpy()], **FAST)
    assert not benign.diverges and benign.first_divergence is None and benign.coverage >= 0.9, benign.to_text()
    model = ov.Core().read_model(str(path))
    convs = [op for op in model.get_ordered_ops() if op.get_type_name() in ("Convolution", "GroupConvolution")
             and among in op.get_friendly_name()]
    conv = convs[len(convs) // 3]
    _scale_weights(model, conv)
    from bisect_ov.frameworks import ORT

    faulty = bisect(model, ref=ORT(path), target="CPU:f32", inputs=[x.numpy()], **FAST)
    _assert_named(faulty, conv.get_friendly_name())


def _small_transformer(name: str):
    """The zoo's small BERT, GPT-2 or Llama as the module it converts (token ids and a mask in, one tensor out)."""
    from bisect_ov.zoo.hf import plain_module

    return plain_module(name, "small", 0)


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_a_transformer_through_torch_export_agrees_with_its_program_and_an_edited_linear_is_named(name):
    """Converted from a `torch.export` program: OpenVINO's converter runs its export decompositions first, which
    number the graph's nodes anew (the program's ``view_3`` is the model's ``view_4``), so the program is read as
    the converter read it; read as exported, every name was one off and values of other nodes were paired (a
    Reshape at rel_l2 1.4 in a benign BERT). Benign: no divergence, nearly every node matched by name; a MatMul
    with weights 1.2x, a third into the graph, is named."""
    from bisect_ov.frameworks import Torch

    module = _small_transformer(name)
    ids, mask = torch.randint(0, 1000, (1, 16)), torch.ones(1, 16, dtype=torch.int64)
    program = torch.export.export(module, (ids, mask))
    model = ov.convert_model(program)
    inputs = [ids.numpy(), mask.numpy()]
    benign = bisect(model, ref=Torch(program), target="CPU:f32", inputs=inputs, **FAST)
    assert not benign.diverges and benign.first_divergence is None, benign.to_text()
    assert not [n for n in benign.nodes if n.error > 1e-4]  # no pair of two different tensors
    match = benign.frameworks[0]
    assert match.matched >= 0.75 * match.compute_nodes and benign.coverage >= 0.9
    linears = [op for op in model.get_ordered_ops() if op.get_type_name() == "MatMul"
               and op.input_value(1).get_node().get_type_name() != "Parameter"
               and any(f"aten.{kind}" in op.get_friendly_name() for kind in ("linear", "addmm"))]
    linear = linears[len(linears) // 3]
    _scale_weights(model, linear)
    faulty = bisect(model, ref=Torch(program), target="CPU:f32", inputs=inputs, **FAST)
    _assert_named(faulty, linear.get_friendly_name())


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama"])
def test_a_transformer_exported_to_onnx_agrees_with_onnx_runtime_and_an_edited_matmul_is_named(name, tmp_path):
    """The same transformers through ONNX (the dynamo exporter) against ONNX Runtime running the file."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from bisect_ov.frameworks import ORT

    module = _small_transformer(name)
    ids, mask = torch.randint(0, 1000, (1, 16)), torch.ones(1, 16, dtype=torch.int64)
    path = tmp_path / "model.onnx"
    torch.onnx.export(module, (ids, mask), str(path), dynamo=True, input_names=["input_ids", "attention_mask"])
    inputs = [ids.numpy(), mask.numpy()]
    benign = bisect(str(path), ref="ORT", target="CPU:f32", inputs=inputs, **FAST)
    assert not benign.diverges and benign.first_divergence is None and benign.coverage >= 0.9, benign.to_text()
    assert not [n for n in benign.nodes if n.error > 1e-4]
    model = ov.Core().read_model(str(path))
    matmuls = [op for op in model.get_ordered_ops() if op.get_type_name() == "MatMul"
               and op.input_value(1).get_node().get_type_name() != "Parameter"]
    matmul = matmuls[len(matmuls) // 3]
    _scale_weights(model, matmul)
    faulty = bisect(model, ref=ORT(path), target="CPU:f32", inputs=inputs, **FAST)
    _assert_named(faulty, matmul.get_friendly_name())


def test_weights_saved_in_f16_are_named_as_the_cause_where_they_enter(tmp_path):
    """`ov.save_model` stores weights in f16 by default: against the module (its f32 weights), the first convolution
    that reads them is where the error enters, and the cause says so (not a long reduction's accumulator)."""
    module = _standard_cnn("resnet18")
    x = torch.randn(1, 3, 64, 64)
    ov.save_model(ov.convert_model(module, example_input=x), str(tmp_path / "r18.xml"))  # compress_to_fp16=True
    report = bisect(str(tmp_path / "r18.xml"), ref=module, target="CPU:f32", inputs=[x.numpy()], **FAST)
    first = report.first_divergence
    assert first is not None and first.op_type == "Convolution", report.to_text()
    kinds = [c.kind for c in first.diagnosis]
    assert "compressed_weights" in kinds and "long_reduction" not in kinds
    assert "compress_to_fp16=False" in report.to_text()


def _two_renamed_convolutions(twin_inputs: bool):
    """A graph as a conversion leaves it: two convolutions with their BatchNorms folded in (renamed
    ``Multiply_<n>``), summed, then a ReLU; and the eager run's calls. With `twin_inputs` both read the input (a
    downsampling block without its main path); otherwise the first reads the input and the second the ReLU of a
    third convolution that is paired by name."""
    from bisect_ov.frameworks.torch_match import Event
    from bisect_ov.model.graph import ModelGraph
    from bisect_ov.model.taps import Tap

    x = ops.parameter([1, 3, 8, 8], np.float32, name="x")
    w = ops.constant(np.ones((3, 3, 1, 1), np.float32))
    pre = ops.relu(ops.convolution(x, w, [1, 1], [0, 0], [0, 0], [1, 1], name="__module.pre/aten::_convolution/Convolution"),
                   name="__module.pre_act/aten::relu/Relu")
    a = ops.convolution(x, w, [1, 1], [0, 0], [0, 0], [1, 1], name="Multiply_1")
    b = ops.convolution(x if twin_inputs else pre, w, [1, 1], [0, 0], [0, 0], [1, 1], name="Multiply_2")
    out = ops.relu(ops.add(a, b, name="aten::add/Add"), name="aten::relu/Relu")
    graph = ModelGraph(ov.Model([ops.result(out)], [x], "two"))
    shape = (1, 3, 8, 8)
    events = [Event(0, "pre", "conv2d", (("input", 0),), (shape,)), Event(1, "pre_act", "relu", (("event", 0, 0),), (shape,)),
              Event(2, "a", "conv2d", (("input", 0),), (shape,)), Event(3, "bn_a", "batch_norm", (("event", 2, 0),), (shape,)),
              Event(4, "b", "conv2d", (("input", 0) if twin_inputs else ("event", 1, 0),), (shape,)),
              Event(5, "bn_b", "batch_norm", (("event", 4, 0),), (shape,)),
              Event(6, "", "add", (("event", 3, 0), ("event", 5, 0)), (shape,)), Event(7, "", "relu", (("event", 6, 0),), (shape,))]
    key = {n.name: n.key for n in graph}
    named = {"aten::add/Add": ("event", 6, 0), "aten::relu/Relu": ("event", 7, 0),
             "__module.pre/aten::_convolution/Convolution": ("event", 0, 0),
             "__module.pre_act/aten::relu/Relu": ("event", 1, 0)}
    taken = {Tap(key[name], 0): ref for name, ref in named.items() if name in key}  # pairs made by name
    shapes = {Tap(n.key, 0): shape for n in graph if n.kind == "compute"}
    return graph, events, taken, shapes, key


@pytest.mark.parametrize("twin_inputs", [False, True])
def test_renamed_convolutions_pair_from_their_inputs_only_when_one_chain_fits(twin_inputs):
    """A sum of two renamed convolutions leaves the sum's reading side two values to place. When each reads
    something else, each is the end of the one call chain (convolution, folded BatchNorm) reading that: paired.
    When both read the same input, nothing tells them apart: both stay unpaired (counted), none is guessed."""
    from bisect_ov.frameworks.torch_match import match_neighbours
    from bisect_ov.model.taps import Tap

    graph, events, taken, shapes, key = _two_renamed_convolutions(twin_inputs)
    found = match_neighbours(graph, events, taken, set(), shapes)
    a, b = Tap(key["Multiply_1"], 0), Tap(key["Multiply_2"], 0)
    if twin_inputs:
        assert a not in found and b not in found
    else:
        assert found[b] == ("event", 5, 0) and found[a] == ("event", 3, 0)
