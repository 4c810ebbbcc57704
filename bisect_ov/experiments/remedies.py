"""What each remedy that solves costs on the target, measured: the patched or re-configured model's latency
against the untouched model's (`bisect_ov.experiments.whole.latency`), and the peak memory each takes to compile
and run in a fresh process (`bisect_ov.experiments.peak`).

A remedy found by its search (an activation scale factor, clamps, the f32 island) or tried as it is (the target
without its generated kernels, `bisect_ov.experiments.generated`) is compiled again as the user would apply it and
timed; the untouched target model is compiled and timed once for all of them. The f32 island
is applied as its patched model (the kept nodes marked ``disable_fp16_compression``): on a target that honours
the marks (the GPU and NPU plugins, the emulated devices) that model is also run whole, and its final error
recorded (`Fix.error_on_target`), which checks the fix the way the user applies it and not only by partitioned
runs; on the CPU plugin, which keeps only some marked ops in f32, the patched model runs whole only when it is
written (`patched`), and its error is what the user will see. A remedy that does not
solve is not timed. On an emulated target the time is the CPU's running the emulation (the report says so), a
relative figure at best.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import pathlib
import tempfile
from typing import Callable, Sequence

import openvino as ov

from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.core.errors import BisectError
from bisect_ov.core.records import Clamp, Fix, KernelSetting, ScaleFactor
from bisect_ov.engine.engine import Engine
from bisect_ov.experiments.generated import setting_device
from bisect_ov.experiments.partitioned import patch_model
from bisect_ov.experiments.peak import peak_memory
from bisect_ov.experiments.whole import compile_variant, final_error, latency, remedy_cost
from bisect_ov.model.clamping import clamp_after
from bisect_ov.run.openvino_device import shared_core

log = logging.getLogger(__name__)

__all__ = ["remedy_costs"]


def remedy_costs(engine: Engine, error_of: Callable[[TensorStats], float], scale_factor: ScaleFactor | None,
                 clamp: Clamp | None, fix: Fix | None, kernel_setting: KernelSetting | None = None, *,
                 patched: bool = False, scales: Sequence[float] = ()
                 ) -> tuple[ScaleFactor | None, Clamp | None, Fix | None, KernelSetting | None]:
    """`scale_factor`, `clamp`, `fix` and `kernel_setting` with the cost of each one that solves (see the module
    docstring). `patched`: the fix's patched model is written, so it runs whole on any target, marks or not."""
    target = engine.runner.comparison.target
    graph = engine.runner.comparison.target_graph
    model = graph.model

    inputs = list(engine.sample.target)

    @functools.cache
    def untouched() -> float:
        return latency(engine, compile_variant(engine, target, model))

    @functools.cache
    def untouched_peak() -> float | None:
        return peak_memory(target, model, inputs)

    def cost(device, remedied, compiled):
        peak = peak_memory(device, remedied, inputs)
        return remedy_cost(engine, compiled, untouched, peak, untouched_peak() if peak is not None else None)

    try:
        if kernel_setting is not None and kernel_setting.solved:
            device = setting_device(target, kernel_setting)
            if device is not None:
                kernel_setting = dataclasses.replace(
                    kernel_setting, cost=cost(device, model, compile_variant(engine, device, model)))
        if scale_factor is not None and scale_factor.factor is not None:
            device = target.with_activation_scale(scale_factor.factor)
            if device is not None:
                scale_factor = dataclasses.replace(scale_factor,
                                                   cost=cost(device, model, compile_variant(engine, device, model)))
        if clamp is not None and clamp.solved:
            clamped = clamp_after(model, dict(clamp.bounds))
            clamp = dataclasses.replace(clamp, cost=cost(target, clamped, compile_variant(engine, target, clamped)))
        # A twin's fix keeps layers unquantized (no marks). A patched model the user will run is run whole here
        # even where the plugin is not known to honour marks: the CPU's keeps some marked ops in f32 and fuses
        # others with unmarked ones, and a patched demo gave 4.7e-01 there against 9.0e-02 untouched.
        marks = (target.honours_precision_marks or patched) and not engine.runner.comparison.twin
        if fix is not None and fix.solved and fix.on_reference and marks:
            marked = patch_model(model, [graph[k].name for k in fix.on_reference if k in graph])
            with tempfile.TemporaryDirectory(prefix="bisect_ov_patched_") as folder:
                if patched:  # as the user will read it: the marks saved and read back (a plugin reads an IR's
                    # DisablePrecisionConversion; the CPU's honours it in part, the in-memory mark not at all)
                    saved = pathlib.Path(folder) / "patched.xml"
                    ov.save_model(marked, str(saved), compress_to_fp16=False)
                    marked = shared_core().read_model(str(saved))
                compiled = compile_variant(engine, target, marked)
                fix = dataclasses.replace(fix, error_on_target=final_error(engine, compiled, error_of, scales),
                                          cost=cost(target, marked, compiled))
                del compiled, marked  # before the folder goes
    except (BisectError, RuntimeError) as err:
        log.info("A remedy's cost was not measured: %s", err)
    return scale_factor, clamp, fix, kernel_setting
