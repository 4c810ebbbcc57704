"""The target without the kernels its plugin generates for fused subgraphs, run whole: does the divergence go?

The CPU plugin compiles chains of ops (an attention's MatMul, Softmax and MatMul; elementwise chains) into kernels
it generates for them (snippets: runtime layers of type ``Subgraph``). Such a kernel is one piece of code: exposing
a tensor inside it, or cutting the graph through it, compiles another kernel, so the taps and the partitioned runs
cannot always say whether it is the one that diverges. One more compile can: the untouched model with the device's
setting that replaces them by the plugin's ordinary kernels (`Device.without_generated_kernels`,
``SNIPPETS_MODE=DISABLE``), run on the examined sample, its final outputs against the reference's untouched ones.
When that brings them within their tolerance, the divergence is made by the generated kernels, and the setting is
a remedy verified the way the user would apply it.

It runs when the outputs diverge, the target computes in f32 (so its precision explains no error: against a
lower precision the ordinary kernels round as much) and runs the same model as the reference, and the plain
compile generated at least one kernel.

The other setting tried the same way: plugins quantize the activations of matrix products over compressed (int8,
int4) weights to int8, in groups, at any inference precision (``DYNAMIC_QUANTIZATION_GROUP_SIZE``,
`bisect_ov.run.compressed`). When the plain compile did and the outputs diverge, the untouched model is compiled
with the setting at 0 and run whole (`without_activation_quantization`): within tolerance then, that
quantization makes the divergence, not the model's numbers or its precision.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.core.errors import BisectError
from bisect_ov.core.records import KernelSetting
from bisect_ov.engine.engine import Engine
from bisect_ov.experiments.whole import compile_variant, final_error
from bisect_ov.model.runtime import RuntimeLayer
from bisect_ov.run.compressed import DYNAMIC_QUANTIZATION, compressed_products
from bisect_ov.run.openvino_device import GENERATED_LAYER, SNIPPETS

log = logging.getLogger(__name__)

__all__ = ["without_generated_kernels", "generated_kernels", "without_activation_quantization", "better_setting",
           "setting_device"]


def generated_kernels(layers: tuple[RuntimeLayer, ...]) -> tuple[str, ...]:
    """The generated kernels among runtime `layers`, each as ``"<output>: <the model's ops it fused>"``, those
    fusing several ops first (in execution order within each kind)."""
    found = [layer for layer in layers if layer.layer_type == GENERATED_LAYER]
    found.sort(key=lambda layer: (len(layer.original_names) < 2, layer.exec_order))
    return tuple(f"{layer.name}: {', '.join(n for n in layer.original_names if n)}" for layer in found)


def without_generated_kernels(engine: Engine, error_of: Callable[[TensorStats], float], limit: float,
                              final: float, scales: Sequence[float] = ()) -> KernelSetting | None:
    """The untouched target model compiled without generated kernels and run whole (see the module docstring);
    None when the target has no such setting or its plain compile generated no kernel."""
    target = engine.runner.comparison.target
    device = target.without_generated_kernels()
    if device is None:
        return None
    kernels = generated_kernels(engine.untouched.target_runtime.layers)
    if not kernels:
        return None
    return _run_whole(engine, device, error_of, limit, final, scales, SNIPPETS, kernels, "without generated kernels")


def without_activation_quantization(engine: Engine, error_of: Callable[[TensorStats], float], limit: float,
                                    final: float, scales: Sequence[float] = ()) -> KernelSetting | None:
    """The untouched target model compiled with ``DYNAMIC_QUANTIZATION_GROUP_SIZE=0`` and run whole (see the
    module docstring); `kernels`: its matrix products over compressed weights. None when the target has no such
    setting or the model no such products."""
    target = engine.runner.comparison.target
    device = target.without_activation_quantization()
    model = engine.runner.comparison.target_graph.model
    products = compressed_products(model) if device is not None else ()
    if not products:
        return None
    return _run_whole(engine, device, error_of, limit, final, scales, (DYNAMIC_QUANTIZATION, "0"), products,
                      "without activation quantization")


def setting_device(target, setting: KernelSetting):
    """The target with `setting` applied (the device `without_generated_kernels` or
    `without_activation_quantization` compiled on), or None when it has no such setting."""
    if setting.option == DYNAMIC_QUANTIZATION:
        return target.without_activation_quantization()
    return target.without_generated_kernels()


def better_setting(first: KernelSetting | None, second: KernelSetting | None) -> KernelSetting | None:
    """Of two settings tried, the one that solves, else the one that leaves the smaller error (the first on a tie)."""
    if first is None or second is None:
        return first or second
    return second if (second.solved, -second.error_after) > (first.solved, -first.error_after) else first


def _run_whole(engine: Engine, device, error_of: Callable[[TensorStats], float], limit: float, final: float,
               scales: Sequence[float], setting: tuple[str, str], kernels: tuple[str, ...],
               what: str) -> KernelSetting | None:
    """The untouched target model compiled on `device` (the target with `setting`) and run whole."""
    try:
        compiled = compile_variant(engine, device, engine.runner.comparison.target_graph.model)
        after = final_error(engine, compiled, error_of, scales)
    except (BisectError, RuntimeError) as err:  # an auxiliary run: the verdict stands without it
        log.info("The target %s did not run: %s", what, err)
        return None
    return KernelSetting(option=setting[0], value=setting[1], error_before=final, error_after=after,
                         tolerance=limit, device=engine.runner.comparison.target.name, kernels=kernels)
