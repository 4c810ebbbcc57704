"""What each remedy that solves costs on the target, measured: the patched or re-configured model's latency
against the untouched model's (`bisect_ov.experiments.whole.latency`).

A remedy found by its search (an activation scale factor, clamps) is compiled again as the user would apply it
and timed; the untouched target model is compiled and timed once for all of them. A remedy that does not solve
is not timed. On an emulated target the time is the CPU's running the emulation (the report says so), a relative
figure at best.
"""

from __future__ import annotations

import dataclasses
import functools
import logging

from bisect_ov.core.errors import BisectError
from bisect_ov.core.records import Clamp, ScaleFactor
from bisect_ov.engine.engine import Engine
from bisect_ov.experiments.whole import compile_variant, latency, remedy_cost
from bisect_ov.model.clamping import clamp_after

log = logging.getLogger(__name__)

__all__ = ["remedy_costs"]


def remedy_costs(engine: Engine, scale_factor: ScaleFactor | None,
                 clamp: Clamp | None) -> tuple[ScaleFactor | None, Clamp | None]:
    """`scale_factor` and `clamp` with the cost of each one that solves (see the module docstring)."""
    target = engine.comparison.target
    model = engine.comparison.target_graph.model

    @functools.cache
    def untouched() -> float:
        return latency(engine, compile_variant(engine, target, model))

    try:
        if scale_factor is not None and scale_factor.factor is not None:
            device = target.with_activation_scale(scale_factor.factor)
            if device is not None:
                cost = remedy_cost(engine, compile_variant(engine, device, model), untouched)
                scale_factor = dataclasses.replace(scale_factor, cost=cost)
        if clamp is not None and clamp.solved:
            patched = clamp_after(model, dict(clamp.bounds))
            clamp = dataclasses.replace(clamp, cost=remedy_cost(engine, compile_variant(engine, target, patched),
                                                                untouched))
    except (BisectError, RuntimeError) as err:
        log.info("A remedy's cost was not measured: %s", err)
    return scale_factor, clamp
