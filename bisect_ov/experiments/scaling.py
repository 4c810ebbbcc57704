"""The activation scale factor as a remedy for f16 overflow: the smallest power of two that works, verified.

OpenVINO's GPU plugin has a compile property for models whose activations leave f16's range,
``ACTIVATIONS_SCALE_FACTOR``: the values between each Convolution/MatMul and the next normalization are kept
that many times smaller (`bisect_ov.model.scaling`). Nothing says which factor a model needs. This experiment
finds it on the target: the whole target model compiled with a factor and run on the examined sample, its final
error against the reference's; the factor doubles until the error is under the tolerance, then halves while it
still is, so the one given is the smallest power of two that solves it and the factor half as large was run and
did not.

It starts from the headroom the reference's values leave (`bisect_ov.analysis.headroom`): a tensor that
reaches ``2**h`` times the f16 limit needs a factor of at least ``2**h`` where it is between a linear layer and a
norm, and ``2**(h/2)`` where it is a norm's square; it stops at ``2**(h+2)``, past which a larger factor cannot
help the tensors it does not reach (values that come from an embedding table, not from a linear layer).

On an emulated target (`EMU:f16`) the rewrite runs on the CPU before the rounding (norms written out as ops
round their squares there, where a GPU's fused norm kernel may not: the factor found is then an upper bound of
what the GPU needs); on a device whose plugin lists the property it is the plugin's own pass. Each factor tried
is one compile and one run of the whole target model.
"""

from __future__ import annotations

import logging
import math
from typing import Callable, Sequence

from bisect_ov.analysis.headroom import headroom as headroom_of
from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.core.errors import BisectError
from bisect_ov.core.records import ScaleFactor
from bisect_ov.engine.engine import Engine
from bisect_ov.experiments.whole import compile_variant, final_error

log = logging.getLogger(__name__)

__all__ = ["find_scale_factor", "first_factor", "least_headroom", "MAX_FACTOR"]

MAX_FACTOR = 2.0 ** 16
"""The largest factor tried: a model that needs more has values far beyond what scaling between norms fixes."""


def first_factor(headroom: float) -> float:
    """The first factor to try for a model whose least f16 headroom is `headroom` (negative: it overflows):
    ``2**ceil(-headroom / 2)``, at least 2."""
    if not math.isfinite(headroom):
        return 2.0 if headroom > 0 else MAX_FACTOR
    return float(2 ** max(1, math.ceil(-headroom / 2)))


def find_scale_factor(engine: Engine, error_of: Callable[[TensorStats], float], limit: float, error_before: float,
                      headroom: float, *, max_factor: float = MAX_FACTOR, scales: Sequence[float] = ()
                      ) -> ScaleFactor | None:
    """The smallest power-of-two activation scale factor that brings the final error under `limit` (see the
    module docstring); None when the target has no such setting.

    Parameters
    ----------
    engine
        The examined sample's engine (its target device, target model, sample and reference outputs).
    error_of
        The run's metric.
    limit
        The final error a factor must reach.
    error_before
        The untouched target's final error, for the record.
    headroom
        The least f16 headroom among the compared nodes (`bisect_ov.analysis.headroom`).
    """
    target = engine.runner.comparison.target
    if target.with_activation_scale(2.0) is None:
        return None
    model = engine.runner.comparison.target_graph.model
    tried: dict[float, float] = {}

    def error_at(factor: float) -> float:
        if factor not in tried:
            device = target.with_activation_scale(factor)
            assert device is not None
            tried[factor] = final_error(engine, compile_variant(engine, device, model), error_of, scales)
            log.info("Activation scale factor %g: final error %.3e (limit %.3e)", factor, tried[factor], limit)
        return tried[factor]

    def solves(factor: float) -> bool:
        return error_at(factor) <= limit

    device_name = target.with_activation_scale(2.0).name.split(" (")[0]  # type: ignore[union-attr]
    # Beyond this every tensor the scaling reaches has four times the room it lacked, even where it is not squared:
    # a larger factor cannot help what it does not reach (massive values from an embedding table, a Gather).
    max_factor = min(max_factor, float(2 ** (math.ceil(-headroom) + 2)) if math.isfinite(headroom) else max_factor)
    try:
        factor = min(first_factor(headroom), max_factor)
        while not solves(factor) and factor < max_factor:
            factor *= 2
        found: float | None = factor if solves(factor) else None
        if found is not None:
            while found > 2 and solves(found / 2):
                found /= 2
    except (BisectError, RuntimeError) as err:
        log.info("The activation scale factor search stopped: %s", err)
        found = None
    return ScaleFactor(factor=found, error_before=error_before, error_after=tried.get(found) if found else None,
                       tolerance=limit, tried=tuple(tried.items()), device=device_name,
                       emulated=bool(getattr(target, "emulated", False)))


def least_headroom(stats) -> float:
    """The least f16 headroom among `stats` (floating tensors only); inf when there are none."""
    values = [s.ref_absmax for s in stats if not s.integer]
    return headroom_of(values) if values else math.inf

