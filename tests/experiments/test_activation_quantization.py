"""The target without quantizing the activations of matrix products over compressed weights
(``DYNAMIC_QUANTIZATION_GROUP_SIZE=0``): tried when a target whose plain compile quantized them diverges, reported
as a verified remedy when it brings the outputs within their tolerance, said not to explain the divergence when it
does not, and the products it quantized get that cause in place of "long reduction".

Most cases use a CPU device that stands for a plugin quantizing those activations: it computes the products over
compressed weights wrong (times 1.5) in every compile but those made with the setting at 0, and says it quantized
(as the CPU plugin's compile reports), on any CPU. The last case is the CPU plugin's own quantization, skipped where
the plugin does not quantize them.
"""

import json

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov import bisect, inject_fault
from bisect_ov.core.remedies import KernelSetting
from bisect_ov.experiments.generated import better_setting
from bisect_ov.run.compressed import DYNAMIC_QUANTIZATION, compressed_products, quantizing
from bisect_ov.run.devices import make_device
from bisect_ov.run.openvino_device import OpenVINODevice, shared_core


def _weights(rng, shape, kind):
    """A weight as NNCF writes a compressed one: int8 times a per-column scale; u4 minus a zero point, times a
    scale; or plain f32."""
    if kind == "f32":
        return ops.constant(rng.normal(0, 0.05, shape).astype(np.float32))
    scale = ops.constant(rng.uniform(0.001, 0.01, (1, shape[1])).astype(np.float32))
    if kind == "i8":
        return ops.multiply(ops.convert(ops.constant(rng.integers(-127, 128, shape).astype(np.int8)), ov.Type.f32), scale)
    q = ops.convert(ops.constant(rng.integers(0, 16, shape).astype(np.uint8), ov.Type.u4), ov.Type.f32)
    return ops.multiply(ops.subtract(q, ops.constant(np.float32(8))), scale)


def _mlp(kinds=("i8", "i8", "i8")):
    """Matrix products with ReLUs between them, each over a weight of the given kind."""
    rng = np.random.default_rng(0)
    x = ops.parameter([1, 16, 256], np.float32, name="x")
    h = x
    for i, kind in enumerate(kinds):
        h = ops.matmul(h, _weights(rng, (256, 256), kind), False, False, name=f"fc{i}")
        if i < len(kinds) - 1:
            h = ops.relu(h, name=f"act{i}")
    return ov.Model([h.output(0)], [x], "mlp"), {"x": rng.standard_normal((1, 16, 256)).astype(np.float32)}


class Quantizing(OpenVINODevice):
    """The CPU in f32 standing for a plugin that quantizes compressed-weight products' activations: `node` is
    computed wrong in every compile but one with the setting at 0 (with `everywhere`, in those too), and the plain
    compile says it quantized in groups of 32."""

    def __init__(self, node: str, everywhere: bool = False):
        super().__init__("CPU", {"INFERENCE_PRECISION_HINT": "f32"}, name="CPU:f32")
        self.node, self.everywhere = node, everywhere

    def without_activation_quantization(self):
        return None if self.config.get(DYNAMIC_QUANTIZATION) == "0" else self._with_setting(DYNAMIC_QUANTIZATION, "0")

    def _compile(self, model, taps=(), fed=(), *, extra=None):
        on = self.config.get(DYNAMIC_QUANTIZATION) != "0"
        if (on or self.everywhere) and any(op.get_friendly_name() == self.node for op in model.get_ops()):
            model = inject_fault(model, self.node, "scale", 0.5)
        compiled = super()._compile(model, taps, fed, extra={**(extra or {}), DYNAMIC_QUANTIZATION: "0"})
        if on and not (taps or fed):
            from dataclasses import replace

            compiled.info = replace(compiled.info, activation_groups=32)
        return compiled


def _flat(report) -> str:
    return " ".join(report.to_text().split())


def test_compressed_products_are_found_through_their_decompression():
    model, _ = _mlp(("i8", "f32", "u4"))
    assert compressed_products(model) == ("fc0", "fc2")
    assert compressed_products(_mlp(("f32",))[0]) == ()


def test_a_divergence_the_quantization_makes_goes_with_the_setting_and_is_named():
    model, inputs = _mlp()
    report = bisect(model, ref="CPU:f32", target=Quantizing("fc1"), inputs=inputs, strategy="full")
    found = report.kernel_setting
    assert found is not None and found.quantization and found.setting == f"{DYNAMIC_QUANTIZATION}=0"
    assert found.solved and found.explains and found.kernels == ("fc0", "fc1", "fc2")
    assert report.first_divergence is not None and report.first_divergence.name == "fc1"
    kinds = [c.kind for c in report.first_divergence.diagnosis]
    assert "quantized_activations" in kinds and "long_reduction" not in kinds
    text = _flat(report)
    assert "Activation quantization: compiled without it (DYNAMIC_QUANTIZATION_GROUP_SIZE=0)" in text
    # as the target compiled, with the setting: the plugin's default precision (bf16 on some CPUs) would not solve
    assert ('apply: core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", '
            '"DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"})') in text
    again = type(report).from_dict(json.loads(json.dumps(report.to_dict())))  # a saved report keeps them
    assert again.kernel_setting == found and again.target.activation_groups == 32


def test_a_divergence_that_stays_without_it_is_said_not_to_be_the_quantization():
    model, inputs = _mlp()
    report = bisect(model, ref="CPU:f32", target=Quantizing("fc1", everywhere=True), inputs=inputs)
    found = report.kernel_setting
    assert found is not None and found.quantization and not found.solved
    assert "does not explain the divergence" in _flat(report)


def test_with_fix_the_setting_that_solves_is_ranked_and_costed():
    model, inputs = _mlp()
    report = bisect(model, ref="CPU:f32", target=Quantizing("fc1"), inputs=inputs, fix=True)
    assert report.kernel_setting is not None and report.kernel_setting.cost is not None
    ranked = report.remedies()
    assert ranked and ranked[0].kind == "kernel_setting" and ranked[0].solves


def test_it_is_not_tried_without_compressed_products_or_for_an_emulated_target():
    model, inputs = _mlp(("f32", "f32"))
    assert bisect(model, ref="CPU:f32", target=Quantizing("fc1"), inputs=inputs).kernel_setting is None
    assert make_device("EMU:f16").without_activation_quantization() is None  # it computes every product in f32
    assert make_device("CPU:f32", {DYNAMIC_QUANTIZATION: "0"}).without_activation_quantization() is None  # already


def test_of_two_settings_the_one_that_solves_is_kept():
    def made(option, after):
        return KernelSetting(option=option, value="0", error_before=1.0, error_after=after, tolerance=0.1, device="CPU")

    snippets, quantization = made("SNIPPETS_MODE", 0.5), made(DYNAMIC_QUANTIZATION, 0.01)
    assert better_setting(snippets, quantization) is quantization
    assert better_setting(quantization, made("SNIPPETS_MODE", 0.001)).option == "SNIPPETS_MODE"
    assert better_setting(None, snippets) is snippets and better_setting(snippets, None) is snippets
    assert better_setting(snippets, made(DYNAMIC_QUANTIZATION, 0.9)) is snippets


def _plugin_quantizes(model) -> bool:
    core = shared_core()
    if DYNAMIC_QUANTIZATION not in core.get_property("CPU", "SUPPORTED_PROPERTIES"):
        return False
    return bool(quantizing(core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}), model, "CPU"))


def test_the_cpu_plugin_s_own_quantization_is_found_where_it_quantizes():
    """An int8-weight MLP on this CPU at f32 against the f32 reference (which computes those products exactly):
    5.4e-03 off, 0 with the setting (measured on a Zen 4 EPYC, OpenVINO 2026.4.1)."""
    model, inputs = _mlp()
    if not _plugin_quantizes(model):
        pytest.skip("this CPU plugin does not quantize compressed-weight products' activations at f32")
    report = bisect(model, ref="CPU:f32", target="CPU:f32", inputs=inputs)
    assert report.target.activation_groups > 0 and report.ref.activation_groups == 0
    found = report.kernel_setting
    assert found is not None and found.quantization and found.explains, found
    assert report.first_divergence is not None and report.first_divergence.name == "fc0"
    assert "quantized_activations" in [c.kind for c in report.first_divergence.diagnosis]


def test_a_setting_that_removes_most_of_the_error_says_so_and_applies_as_the_target_compiled():
    """A bf16 target whose quantized activations made 86% of a divergence read "does not explain the divergence";
    the apply line dropped the target's precision (compiled as printed, the CPU ran bf16 and still diverged)."""
    from types import SimpleNamespace

    from bisect_ov.core.records import DeviceInfo
    from bisect_ov.report.blocks import _kernel_setting

    target = DeviceInfo(name="CPU:bf16", device="CPU", config={"INFERENCE_PRECISION_HINT": "bf16"})

    def block(before: float, after: float) -> str:
        found = KernelSetting(option=DYNAMIC_QUANTIZATION, value="0", error_before=before, error_after=after,
                              tolerance=3.1e-2, device="CPU:bf16", kernels=("q_proj", "k_proj"))
        return " ".join(" ".join(_kernel_setting(SimpleNamespace(kernel_setting=found, target=target)).lines).split())

    assert "makes most of the divergence (86% of the final error), not all of it" in block(2.8e-1, 3.8e-2)
    assert "does not explain the divergence" in block(2.8e-1, 1.4e-1)
    assert ('apply: core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "bf16", '
            '"DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"})') in block(2.8e-1, 1e-2)


def test_a_reference_that_quantizes_is_said_to_be_the_side_that_does():
    """Given the setting on the reference and 0 on the target, the products read "error 5240x the tolerance of f32
    rounding" with no word of the quantization (only a target's was looked at)."""
    model, inputs = _mlp()
    if not _plugin_quantizes(model):
        pytest.skip("this CPU plugin does not quantize compressed-weight products' activations at f32")
    report = bisect(model, ref="CPU:f32", target="CPU:f32", inputs=inputs, ref_config={DYNAMIC_QUANTIZATION: "32"},
                    target_config={DYNAMIC_QUANTIZATION: "0"})
    assert report.ref.activation_groups == 32 and report.target.activation_groups == 0
    first = report.first_divergence
    assert first is not None and first.name == "fc0"
    cause = next(c for c in first.diagnosis if c.kind == "quantized_activations")
    assert "the reference's plugin quantizes its input" in cause.text and "where the target computes" in cause.text
    assert report.kernel_setting is None  # the target has nothing to turn off


def test_it_is_not_tried_for_a_twin():
    """A twin's target model differs from the reference's (its weights compressed on purpose): the setting would
    not say what the reference's model does, and the twin's own tolerance holds its quantization."""
    model, inputs = _mlp(("f32", "f32", "f32"))
    twin, _ = _mlp()
    report = bisect(model, ref="CPU:f32", target=Quantizing("fc1"), inputs=inputs, target_model=twin)
    assert report.target.activation_groups == 32 and report.kernel_setting is None


def test_a_cpu_without_integer_dot_products_is_not_said_to_quantize(monkeypatch):
    """The CPU plugin reports its group size (32) on a CPU whose kernels cannot quantize (an AVX2-only EPYC computes
    the products in f32, the same bits as with the setting at 0): the report said the target quantized them."""
    import bisect_ov.run.compressed as compressed

    model, _ = _mlp()
    compiled = shared_core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    if int(compiled.get_property(DYNAMIC_QUANTIZATION)) == 0:
        pytest.skip("this CPU plugin reports no group size")
    monkeypatch.setattr(compressed, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    assert quantizing(compiled, model, "CPU") == 0
    assert quantizing(compiled, model, "GPU") > 0  # another plugin's word is kept
    monkeypatch.setattr(compressed, "cpu_flags", lambda: frozenset({"avx2", "avx_vnni"}))
    assert quantizing(compiled, model, "CPU") > 0
    monkeypatch.setattr(compressed, "cpu_flags", lambda: None)  # flags unknown: the plugin's word
    assert quantizing(compiled, model, "CPU") > 0
