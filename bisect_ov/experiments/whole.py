"""The whole target model, changed, compiled and run on the examined sample: how a remedy is verified and what
it costs.

A remedy that is a compile property (an activation scale factor) or a patched model (clamps) is checked the way
the user would apply it: the whole model compiled on the target with it, run on the sample the search ran on,
its final outputs against the reference's untouched ones (`final_error`). What it costs is the same compiled
model's latency against the untouched one's (`latency`: the median of repeated inferences after a warm-up, the
same inputs), each compile and run counted in the engine's ledger.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable, Sequence

import numpy as np

from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.core.records import RemedyCost
from bisect_ov.engine.engine import Engine

__all__ = ["compile_variant", "final_error", "latency", "remedy_cost", "output_scales", "worst", "REPEATS"]

REPEATS = 7
"""Timed inferences per model for a remedy's cost (after one warm-up): the median of these is its latency."""


def output_scales(tolerances: Sequence[float], limit: float | None) -> tuple[float, ...]:
    """Each final output's factor for a remedy's error (`worst`): the tightest tolerance over its own, so that each
    output is held to its own tolerance on one scale; none when one `limit` holds for every output, or the
    tolerances are alike."""
    if limit is not None or len(set(tolerances)) < 2 or min(tolerances) <= 0:
        return ()
    return tuple(min(tolerances) / t for t in tolerances)


def worst(errors: Sequence[float], scales: Sequence[float] = ()) -> float:
    """The largest of the final outputs' `errors`, each times its factor in `scales` when given (`output_scales`)."""
    return max((e * (scales[i] if scales else 1.0) for i, e in enumerate(errors)), default=0.0)


def compile_variant(engine: Engine, device: Any, model: Any) -> Any:
    """`model` compiled on `device` (the target, or the target with a setting), counted as a target compile."""
    compiled = device.compile(model)
    engine.runner.count_compile("target")
    return compiled


def final_error(engine: Engine, compiled: Any, error_of: Callable[[TensorStats], float],
                scales: Sequence[float] = ()) -> float:
    """The worst final-output error of `compiled` (a variant of the target model) on the examined sample, against
    the reference's untouched outputs (each output's scaled by `scales` when given: `worst`)."""
    out = compiled.infer(list(engine.sample.target))
    engine.runner.ran("target")
    n = len(engine.runner.graph.model.outputs)
    finals = engine.runner.final_outputs(list(engine.untouched.ref_final), [np.array(a) for a in out], n)
    return worst([error_of(s) for _, _, s in finals], scales)


def latency(engine: Engine, compiled: Any, repeats: int = REPEATS) -> float:
    """Seconds per inference of `compiled` on the examined sample: the median of `repeats` after one warm-up."""
    inputs = list(engine.sample.target)
    compiled.infer(inputs)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        compiled.infer(inputs)
        times.append(time.perf_counter() - start)
    for _ in range(repeats + 1):
        engine.runner.ran("target")
    return statistics.median(times)


def remedy_cost(engine: Engine, compiled: Any, baseline: Callable[[], float], peak: float | None = None,
                untouched_peak: float | None = None) -> RemedyCost:
    """The latency of `compiled` (a remedy applied) against the untouched target's (`baseline`, measured once per
    run and shared by the remedies), with the peak memories measured for both (`bisect_ov.experiments.peak`)."""
    seconds = latency(engine, compiled)
    untouched = baseline()
    target = engine.runner.comparison.target
    return RemedyCost(seconds=seconds, untouched_seconds=untouched, repeats=REPEATS,
                      device=target.name.split(" (")[0], emulated=bool(getattr(target, "emulated", False)),
                      peak_mb=peak, untouched_peak_mb=untouched_peak)
