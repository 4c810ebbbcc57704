"""Values the untouched target never computed are not reported as its values.

A tensor the target computes only inside a fused kernel (a member of a runtime layer's ``originalLayersNames``
that is not the layer's output, or an op the plugin folded in without naming it) is never stored: a tap there
shows what a compile exposing it computed. `kernel_tensors` finds such tensors from the runtime graph of the
untouched compile; the report marks them (`NodeResult.inside_kernel`) and sets aside, with a note, those over
tolerance whose kernel's output is within it. Tested on hand-made runtime graphs, on real CPU compiles (an
RMSNorm the plugin fuses into one ``RMS`` layer, the demo's instance norm), with a device whose tapped compile
shows an error its kernel never had, and on the CPU's bf16 where it runs.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov import bisect
from bisect_ov.analysis.scoring import score_graph
from bisect_ov.model.fusion import KernelTensors, kernel_tensors
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.match import identity_match
from bisect_ov.model.runtime import RuntimeGraph, RuntimeLayer, read_runtime_graph
from bisect_ov.report.report import Report
from bisect_ov.report.view import INSIDE_LEGEND, view
from bisect_ov.run.openvino_device import OpenVINODevice
from bisect_ov.zoo import synthetic
from tests.conftest import FaultyCPU, needs_bf16

FAST = {"local": False, "noise": False, "progress": False}


def rms_norm(width: int = 64) -> ov.Model:
    """x -> resid (+0.5) -> RMSNorm (x*x, mean, +eps, sqrt, divide, gamma) -> MatMul: the CPU plugin fuses the
    norm into one ``RMS`` layer named after ``gamma`` alone."""
    rng = np.random.default_rng(0)
    x = ops.parameter([1, 8, width], np.float32, name="x")
    h = ops.add(x, ops.constant(np.float32(0.5)), name="resid")
    sq = ops.multiply(h, h, name="sq")
    mean = ops.reduce_mean(sq, ops.constant(np.array([-1])), True, name="mean")
    eps = ops.add(mean, ops.constant(np.float32(1e-6)), name="eps")
    root = ops.sqrt(eps, name="sqrt")
    div = ops.divide(h, root, name="div")
    gamma = ops.multiply(div, ops.constant(rng.standard_normal(width).astype(np.float32)), name="gamma")
    mm = ops.matmul(gamma, ops.constant(rng.standard_normal((width, width)).astype(np.float32)), False, True,
                    name="mm")
    return ov.Model([mm.output(0)], [x], "rms_norm")


def layer(name: str, *members: str, kind: str = "Subgraph") -> RuntimeLayer:
    return RuntimeLayer(name, kind, tuple(members), "f32", ("f32",), "jit_f32", 0)


def runtime_of(*layers: RuntimeLayer) -> RuntimeGraph:
    by_original: dict[str, RuntimeLayer] = {}
    for item in layers:
        for name in item.original_names:
            by_original.setdefault(name, item)
    return RuntimeGraph(tuple(layers), by_original)


def chain() -> ov.Model:
    """x -> a (mul) -> b (add) -> r (reshape) -> c (relu) -> d (tanh) -> out; b also feeds e (sigmoid) -> out2."""
    x = ops.parameter([2, 4], np.float32, name="x")
    a = ops.multiply(x, ops.constant(np.float32(2.0)), name="a")
    b = ops.add(a, ops.constant(np.float32(1.0)), name="b")
    r = ops.reshape(b, ops.constant(np.array([4, 2])), False, name="r")
    c = ops.relu(r, name="c")
    d = ops.tanh(c, name="d")
    e = ops.sigmoid(b, name="e")
    return ov.Model([d.output(0), e.output(0)], [x], "chain")


# ----- which tensors exist only inside a kernel -----------------------------------------------------------------

def test_members_read_only_inside_their_layer_are_internal():
    graph = ModelGraph(chain())
    # One layer runs a, b, r, c: a is read only inside it; b is read by e outside; c (its output) by d.
    kernels = kernel_tensors(graph, runtime_of(layer("k", "a", "b", "r", "c"), layer("d", "d"), layer("e", "e")))
    assert dict(kernels.inside) == {"a": "k", "r": "k"}
    assert kernels.outputs["k"] == ("b", "c")
    assert kernels.kernel_of("b") is None and kernels.kernel_of("d") is None


def test_unnamed_ops_join_the_kernel_that_reads_them_and_results_are_stored():
    graph = ModelGraph(chain())
    # a, r and c unnamed: a is folded into b's kernel (its only reader); the reshape r holds b's (stored) values;
    # c, read by d's kernel, is folded into it; d and e are read by results: stored.
    kernels = kernel_tensors(graph, runtime_of(layer("kb", "b"), layer("kd", "d"), layer("ke", "e")))
    assert dict(kernels.inside) == {"a": "kb", "c": "kd"}
    assert kernels.outputs == {"kb": ("b",), "kd": ("r", "d"), "ke": ("e",)}


def test_an_unnamed_op_read_by_two_kernels_is_not_called_internal():
    x = ops.parameter([4], np.float32, name="x")
    u = ops.exp(x, name="u")
    y1, y2 = ops.tanh(u, name="y1"), ops.sigmoid(u, name="y2")
    graph = ModelGraph(ov.Model([y1.output(0), y2.output(0)], [x], "fork"))
    kernels = kernel_tensors(graph, runtime_of(layer("k1", "y1"), layer("k2", "y2")))
    assert "u" not in kernels.inside


def test_no_runtime_graph_says_nothing():
    assert kernel_tensors(ModelGraph(chain()), RuntimeGraph()) == KernelTensors()


def test_the_cpu_rms_kernel_never_stores_x_squared():
    model = rms_norm()
    graph = ModelGraph(model)
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    runtime = read_runtime_graph(compiled)
    kernels = kernel_tensors(graph, runtime, identity_match(graph))
    if runtime.layer_of("gamma") is None or runtime.layer_of("gamma").layer_type != "RMS":  # type: ignore[union-attr]
        pytest.skip("this CPU plugin does not fuse the RMSNorm into one RMS layer")
    kernel = runtime.layer_of("gamma").name  # type: ignore[union-attr]
    assert {k: kernels.inside.get(k) for k in ("sq", "mean", "eps", "sqrt", "div")} == dict.fromkeys(
        ("sq", "mean", "eps", "sqrt", "div"), kernel)
    assert kernels.outputs[kernel] == ("gamma",)
    assert "resid" not in kernels.inside and "mm" not in kernels.inside


@pytest.mark.parametrize("precision", ["f32", pytest.param("bf16", marks=needs_bf16)])
def test_the_demo_instance_norm_is_one_kernel(precision):
    model = synthetic.demo()
    graph = ModelGraph(model)
    runtime = read_runtime_graph(ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": precision}))
    kernels = kernel_tensors(graph, runtime)
    kernel = kernels.kernel_of("inorm/sub")
    if kernel is None:
        pytest.skip("this CPU plugin does not fuse the instance norm's subtraction")
    assert "inorm/shift" in kernels.outputs[kernel]
    # What other kernels read is stored.
    for stored in ("inorm/mean", "inorm/shift", "stem/relu", "head/softmax"):
        assert kernels.kernel_of(stored) is None, stored


# ----- scoring: set aside ---------------------------------------------------------------------------------------

def test_an_internal_node_is_not_blamed_and_its_readers_read_clean_inputs():
    graph = ModelGraph(chain())
    errors = {("a", 0): 0.5, ("b", 0): 0.01, ("c", 0): 0.01, ("d", 0): 0.01, ("e", 0): 0.01}
    tol = dict.fromkeys(("a", "b", "c", "d", "e"), 0.03)
    plain = score_graph(graph, errors, tol)
    assert plain.first == ("a",)
    scores = score_graph(graph, errors, tol, internal={"a"})
    assert scores.nodes["a"].role == "internal" and not scores.nodes["a"].diverged
    assert scores.first == () and scores.ranking == ()


# ----- a tap that shows an error the kernel never had -----------------------------------------------------------

class TapOnlyFault(OpenVINODevice):
    """The CPU in f32, with noise added to `node`'s value only where a compile exposes it (on the way to the
    tap): what its readers compute, and the untouched run, stay clean, as a kernel that never stores the tensor."""

    def __init__(self, node: str, magnitude: float = 0.5):
        super().__init__("CPU", {"INFERENCE_PRECISION_HINT": "f32"}, name=f"CPU:f32 with taps of '{node}' off")
        self.node, self.magnitude = node, magnitude

    def _compile(self, model, taps=(), fed=()):
        tapped = [i for i in taps if model.outputs[i].get_node().input_value(0).get_node().get_friendly_name()
                  == self.node]
        if tapped:
            model = model.clone()
            for i in tapped:
                result = model.outputs[i].get_node()
                source = result.input_value(0)
                shape = [int(d) for d in source.get_shape()]
                noise = (np.random.default_rng(7).standard_normal(shape) * self.magnitude).astype(np.float32)
                result.input(0).replace_source_output(ops.add(source, ops.constant(noise)).output(0))
            model.validate_nodes_and_infer_types()
        return super()._compile(model, taps, fed)


@pytest.fixture(scope="module")
def demo_inputs():
    return synthetic.sample_inputs(synthetic.demo(), seed=1)


@pytest.fixture(scope="module")
def set_aside_report(demo_inputs):
    model = synthetic.demo()
    kernels = kernel_tensors(ModelGraph(model), read_runtime_graph(
        ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})))
    if kernels.kernel_of("inorm/sub") is None:
        pytest.skip("this CPU plugin does not fuse the instance norm's subtraction")
    return bisect(model, "CPU:f32", TapOnlyFault("inorm/sub"), demo_inputs, strategy="full", **FAST)


def test_a_tap_inside_a_clean_kernel_is_set_aside_and_the_report_says_why(set_aside_report):
    report = set_aside_report
    node = report.node("inorm/sub")
    assert node.error > node.tolerance, report.to_text()  # the tap shows the error ...
    assert node.inside_kernel is not None and node.role == "internal"  # ... the kernel never had
    shift = report.node("inorm/shift")
    assert shift.inside_kernel is None and shift.error <= shift.tolerance
    assert report.first_divergence is None and "inorm/sub" not in report.ranking and not report.culprits
    assert not node.diverged and not node.absorbed and node.set_aside
    notes = [n for n in report.notes if "set aside" in n]
    assert len(notes) == 1 and "'inorm/sub'" in notes[0] and node.inside_kernel in notes[0]
    assert "never stored" in notes[0]
    v = view(report)
    assert v.verdict.kind == "no_divergence" and v.verdict.set_aside == (node,)
    assert v.verdict.closest is not None and v.verdict.closest.name != "inorm/sub"
    assert any(f.kind == "set_aside" and "'inorm/sub'" in f.text for f in v.verdict.facts)
    text = report.to_text()
    assert "Set aside: 1 node(s)" in text and "never computed" in text


def test_set_aside_survives_json(set_aside_report, tmp_path):
    path = set_aside_report.save(tmp_path / "r.json")
    saved = json.loads(path.read_text())
    assert any(n["name"] == "inorm/sub" and n["inside_kernel"] and n["role"] == "internal" for n in saved["nodes"])
    loaded = Report.load(path)
    assert loaded == set_aside_report and loaded.node("inorm/sub").inside_kernel == \
        set_aside_report.node("inorm/sub").inside_kernel
    df = loaded.to_dataframe()
    assert df.loc["inorm/sub", "inside_kernel"] == loaded.node("inorm/sub").inside_kernel
    assert df["inside_kernel"].isna()["inorm/shift"]


def test_a_real_fault_inside_a_kernel_is_still_named_and_marked(demo_inputs):
    model = synthetic.demo()
    report = bisect(model, "CPU:f32", FaultyCPU("inorm/sub", magnitude=0.5), demo_inputs, strategy="full", **FAST)
    first = report.first_divergence
    assert first is not None and first.name == "inorm/sub", report.to_text()
    if first.inside_kernel is None:
        pytest.skip("this CPU plugin does not fuse the instance norm's subtraction")
    assert first.role == "source" and not any("set aside" in n for n in report.notes)
    v = view(report)
    assert v.verdict.first[0].inside and "exists only inside the fused kernel" in v.verdict.first[0].text
    assert any(f.kind == "inside_kernel" for f in v.verdict.facts)
    assert INSIDE_LEGEND in report.to_text() and "^" in v.culprits[0].cells[-4]
    html = report._repr_html_()
    assert "Inside a kernel:" in html and INSIDE_LEGEND in html


def test_a_report_saved_before_the_field_reads_it_as_unknown():
    saved = json.loads((pathlib.Path(__file__).parent / "report" / "data" / "report_v2.json").read_text())
    assert all("inside_kernel" not in n for n in saved["nodes"])
    report = Report.from_dict(saved)
    assert all(n.inside_kernel is None for n in report.nodes)


@needs_bf16
def test_the_cpu_bf16_run_marks_the_instance_norm_members(demo_inputs):
    report = bisect(synthetic.demo(), "CPU", "CPU:bf16", demo_inputs, **FAST)
    first = report.first_divergence
    assert first is not None and first.name == "inorm/sub", report.to_text()
    assert first.inside_kernel is not None  # the CPU computes it inside the instance norm's kernel
    assert report.node("inorm/shift").inside_kernel is None  # the kernel's output, stored
    assert report.node("inorm/mean").inside_kernel is None
    assert not any(n.set_aside for n in report.nodes)  # the kernel's output diverges: nothing set aside
    assert "exists only inside the fused kernel" in report.to_text()
