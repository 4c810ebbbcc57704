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
from bisect_ov.run.openvino_device import GENERATED_LAYER, SNIPPETS

log = logging.getLogger(__name__)

__all__ = ["without_generated_kernels", "generated_kernels"]


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
    try:
        compiled = compile_variant(engine, device, engine.runner.comparison.target_graph.model)
        after = final_error(engine, compiled, error_of, scales)
    except (BisectError, RuntimeError) as err:  # an auxiliary run: the verdict stands without it
        log.info("The target without generated kernels did not run: %s", err)
        return None
    return KernelSetting(option=SNIPPETS[0], value=SNIPPETS[1], error_before=final, error_after=after,
                         tolerance=limit, device=target.name, kernels=kernels)
