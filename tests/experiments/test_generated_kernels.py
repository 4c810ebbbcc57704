"""The target without the kernels its plugin generates for fused subgraphs (the CPU's snippets,
``SNIPPETS_MODE=DISABLE``): tried when an f32 target diverges, reported as a verified remedy when it brings the
outputs within their tolerance, and said not to explain the divergence when it does not.

Most cases use a CPU device that stands for a plugin with a faulty generated kernel: it computes one node wrong in
every compile but those made with ``SNIPPETS_MODE=DISABLE``, on any CPU. The last case is a real one, where this
machine's CPU plugin has it: its snippets attention kernel (scaled inputs, heads moved back by a Transpose) is off
in f32 when the number of heads equals the number of tokens (about 7% for four of each here, measured) while its
ordinary kernels agree to 1e-7; it is skipped where the plugin's kernel is exact.
"""

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov import Report, bisect, inject_fault
from bisect_ov.experiments.generated import generated_kernels
from bisect_ov.model.runtime import read_runtime_graph
from bisect_ov.run.openvino_device import GENERATED_LAYER, SNIPPETS, OpenVINODevice


def _chain():
    """Two MatMuls with elementwise chains between them (Multiply, Add, Relu, Multiply): the CPU plugin generates a
    kernel for such a chain."""
    rng = np.random.default_rng(0)
    x = ops.parameter([4, 32], np.float32, name="x")
    a = ops.matmul(x, ops.constant(rng.normal(0, 0.3, (32, 32)).astype(np.float32)), False, False, name="a")
    scaled = ops.multiply(a, ops.constant(np.float32(1.5)), name="scaled")
    shifted = ops.add(scaled, ops.constant(rng.normal(0, 0.1, (32,)).astype(np.float32)), name="shifted")
    act = ops.relu(shifted, name="act")
    gated = ops.multiply(act, ops.constant(np.float32(0.7)), name="gated")
    b = ops.matmul(gated, ops.constant(rng.normal(0, 0.3, (32, 8)).astype(np.float32)), False, False, name="b")
    return ov.Model([b.output(0)], [x], "chain"), {"x": rng.normal(0, 1, (4, 32)).astype(np.float32)}


class FaultyKernels(OpenVINODevice):
    """The CPU in f32 whose generated kernels compute `node` wrong (times 1.5): every compile but those made
    without them (``SNIPPETS_MODE=DISABLE``, as the copy `without_generated_kernels` gives is) carries the fault;
    with `everywhere`, those too (the fault is then not the kernels')."""

    def __init__(self, node: str, everywhere: bool = False):
        super().__init__("CPU", {"INFERENCE_PRECISION_HINT": "f32"}, name="CPU:f32")
        self.node, self.everywhere = node, everywhere

    def _compile(self, model, taps=(), fed=(), *, extra=None):
        generated = self.config.get(SNIPPETS[0]) != SNIPPETS[1]
        if (generated or self.everywhere) and any(op.get_friendly_name() == self.node for op in model.get_ops()):
            model = inject_fault(model, self.node, "scale", 0.5)
        return super()._compile(model, taps, fed, extra=extra)


def _flat(report) -> str:
    """The printed report with its lines joined (it wraps sentences)."""
    return " ".join(report.to_text().split())


def _generates_kernels(model) -> bool:
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return any(layer.layer_type == GENERATED_LAYER for layer in read_runtime_graph(compiled).layers)


@pytest.fixture(scope="module")
def chain():
    model, inputs = _chain()
    if not _generates_kernels(model):
        pytest.skip("this CPU plugin generates no kernel for an elementwise chain (no snippets here)")
    return model, inputs


def test_a_fault_the_generated_kernels_make_goes_without_them_and_is_named(chain, tmp_path):
    model, inputs = chain
    report = bisect(model, "CPU:f32", FaultyKernels("shifted"), inputs, progress=False)
    found = report.kernel_setting
    assert found is not None and found.solved
    assert (found.option, found.value) == SNIPPETS
    assert found.error_before > found.tolerance >= found.error_after
    assert found.error_before == pytest.approx(max(o.error for o in report.outputs))
    assert report.first_divergence is not None and report.first_divergence.name == "shifted"
    assert any("shifted" in k.split(": ", 1)[1] for k in found.kernels)
    text = _flat(report)
    assert "the divergence is made by the" in text
    # the properties the target ran with too: the precision without them is the plugin's default (bf16 here)
    assert 'apply: core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "SNIPPETS_MODE": "DISABLE"})' in text
    assert "The first divergence 'shifted' is inside one" in text
    path = tmp_path / "report.json"
    report.save(path)
    assert Report.load(path).kernel_setting == found


def test_a_fault_that_stays_without_them_is_said_not_to_be_the_kernels(chain):
    model, inputs = chain
    report = bisect(model, "CPU:f32", FaultyKernels("shifted", everywhere=True), inputs, progress=False)
    found = report.kernel_setting
    assert found is not None and not found.solved
    assert found.error_after == pytest.approx(found.error_before, rel=1e-3)
    assert report.first_divergence.name == "shifted"
    assert "do not explain the divergence" in _flat(report)


def test_with_fix_a_kernel_setting_that_solves_is_ranked_and_costed(chain):
    model, inputs = chain
    report = bisect(model, "CPU:f32", FaultyKernels("shifted"), inputs, fix=True, progress=False)
    assert report.kernel_setting.solved and report.kernel_setting.cost is not None
    assert report.kernel_setting.cost.seconds > 0
    from bisect_ov.report.remedies import rank

    kinds = [r.kind for r in rank(report) if r.solves]
    assert "kernel_setting" in kinds


def test_it_is_not_tried_when_it_cannot_be_the_answer(chain):
    model, inputs = chain
    faulty = inject_fault(model, "shifted", "scale", 0.5)
    # A twin: the models differ, not the kernels.
    assert bisect(model, "CPU:f32", "CPU:f32", inputs, target_model=faulty, progress=False).kernel_setting is None
    # Outputs within their tolerance: nothing to explain.
    assert bisect(model, "CPU:f32", "CPU:f32", inputs, progress=False).kernel_setting is None
    # A lower precision explains error the ordinary kernels make too; an emulated device has no plugin kernels.
    assert bisect(model, "CPU:f32", "EMU:f16", inputs, progress=False).kernel_setting is None
    assert OpenVINODevice("CPU", {"SNIPPETS_MODE": "DISABLE"}).without_generated_kernels() is None
    # The fast budget makes no compile beyond the measurement's.
    assert bisect(model, "CPU:f32", FaultyKernels("shifted"), inputs, budget="fast", progress=False).kernel_setting is None


def test_generated_kernels_are_listed_those_fusing_several_ops_first():
    from bisect_ov.model.runtime import RuntimeLayer

    def layer(name, kind, names, order):
        return RuntimeLayer(name=name, layer_type=kind, original_names=names, runtime_precision="f32",
                            output_precisions=("f32",), primitive_type="jit", exec_order=order)

    layers = (layer("m", GENERATED_LAYER, ("m",), 1), layer("conv", "Convolution", ("conv",), 2),
              layer("out", GENERATED_LAYER, ("a", "b", "out", ""), 3))
    assert generated_kernels(layers) == ("out: a, b, out", "m: m")


def _attention(shape):
    """q, k, v -> softmax(q/2 (k/2)^T) v, heads moved back: what torch's scaled_dot_product_attention exports."""
    q, k, v = (ops.parameter(shape, np.float32, name=n) for n in "qkv")
    half = ops.constant(np.array([0.5], np.float32))
    keys = ops.multiply(ops.transpose(k, ops.constant(np.array([0, 1, 3, 2]))), half, name="k_scaled")
    scores = ops.matmul(ops.multiply(q, half, name="q_scaled"), keys, False, False, name="scores")
    mixed = ops.matmul(ops.softmax(scores, -1, name="weights"), v, False, False, name="mixed")
    out = ops.transpose(mixed, ops.constant(np.array([0, 2, 1, 3])), name="heads")
    return ov.Model([out.output(0)], [q, k, v], "attention")


def test_a_real_generated_attention_kernel_that_is_off_in_f32_is_found(tmp_path):
    shape = (4, 4, 4, 20)
    model = _attention(shape)
    rng = np.random.default_rng(0)
    inputs = [(rng.standard_normal(shape) * 0.3).astype(np.float32) for _ in range(3)]
    core = ov.Core()
    plain, ordinary = (np.array(core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", **extra})(inputs)[0])
                       for extra in ({}, {"SNIPPETS_MODE": "DISABLE"}))
    off = np.linalg.norm(plain - ordinary) / np.linalg.norm(ordinary)
    if off < 1e-4:
        pytest.skip(f"this CPU plugin's generated attention kernel agrees with its ordinary kernels here ({off:.1e})")
    report = bisect(model, "CPU:f32", "CPU:f32", inputs, ref_config={"SNIPPETS_MODE": "DISABLE"}, progress=False)
    found = report.kernel_setting
    assert report.diverges and found is not None and found.solved
    assert found.error_before == pytest.approx(off, rel=1e-3)
    attention = [k for k in found.kernels if "weights" in k.split(": ", 1)[1]]
    assert attention and "scores" in attention[0] and "mixed" in attention[0]
    # No node outside the generated kernels is named for it.
    fused = {m for k in found.kernels for m in k.split(": ", 1)[1].split(", ")}
    assert all(n.name in fused for n in report.first_divergences)
    assert "SNIPPETS_MODE=DISABLE" in _flat(report).split("Culprits")[0]
    # The reproducer is the smallest piece ending at the output that shows the plain run's error: the attention
    # with the scaling before it (the kernel alone, fed scaled values, does not show it).
    written = report.repro(tmp_path / "repro")
    assert written.node == "heads" and written.local_error == pytest.approx(off, rel=1e-3)
    assert written.error == pytest.approx(off, rel=0.5)
    assert {"scores", "weights", "mixed", "heads"} <= set(written.nodes)
    readme = " ".join((tmp_path / "repro" / "README.md").read_text().split())
    assert "the final output that shows the divergence" in readme and "its error in the plain run" in readme


def test_a_setting_that_only_tips_a_near_miss_under_the_tolerance_is_not_called_a_defect():
    from types import SimpleNamespace

    from bisect_ov.core.records import DeviceInfo, KernelSetting
    from bisect_ov.report.blocks import _kernel_setting

    def block(before: float, after: float) -> str:
        found = KernelSetting(option="SNIPPETS_MODE", value="DISABLE", error_before=before, error_after=after,
                              tolerance=1e-5, device="CPU:f32", kernels=("out: a, b, out",))
        target = DeviceInfo(name="CPU:f32", device="CPU", config={"INFERENCE_PRECISION_HINT": "f32"})
        shown = _kernel_setting(SimpleNamespace(kernel_setting=found, first_divergence=None, target=target))
        return " ".join(" ".join(shown.lines).split())

    assert KernelSetting("SNIPPETS_MODE", "DISABLE", 6.8e-2, 7.7e-8, 1e-5, "CPU:f32").explains
    # 1.1x over the tolerance, 0.9x with the setting: two correct summation orders differ by as much.
    near = KernelSetting("SNIPPETS_MODE", "DISABLE", 1.1e-5, 0.9e-5, 1e-5, "CPU:f32")
    assert near.solved and not near.explains
    assert "not shown to be a defect" in block(1.1e-5, 0.9e-5)
    assert "the divergence is made by the 1 kernel(s)" in block(6.8e-2, 7.7e-8)
    assert "'out' fuses a, b, out" in block(6.8e-2, 7.7e-8)
