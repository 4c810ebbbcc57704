"""What rounding alone does: the model on the emulated device of the target's precision, as the expected error.

A lower-precision target (bf16, f16) is compared with the f32 reference; a formula tolerance says how much error
its rounding may make, but not how much it does make on this model. The emulated device of the same precision
(`EMU:bf16`, `EMU:f16`: every tensor rounded at op boundaries, the arithmetic in f32) runs the *reference's* model:

* its untouched run gives the final outputs' rounding-only error (``outputs``): the real target's output error
  over it says how far the target is from what its precision explains;
* each measured unit run alone on it, fed the reference's values (`experiments.local`), gives the unit's
  rounding-only local error (``local``): a node whose local error on the target is several times this is
  worse than its precision, whatever the final outputs do.

Measured only where it decides something (`pipeline.stages`): when the final outputs are within their
tolerance and diverged nodes make local error over their own tolerance, for those nodes; so the cost follows
the suspects, and a job with none pays nothing. Not measured when the target is itself that emulated device
comparing one model (its error *is* the rounding), for a quantized twin (quantization has its own model,
`experiments.twin`), or when the emulation cannot run the model (then the formula alone is used, and the
notes say so).

Assumes the reference runs in f32.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Mapping

from bisect_ov.analysis.judge import EXCESS, excess
from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.core.errors import BisectError
from bisect_ov.engine.comparison import Comparison, Sample
from bisect_ov.engine.engine import Engine
from bisect_ov.engine.untouched import Untouched, run_target
from bisect_ov.experiments.local import local_errors
from bisect_ov.model.match import identity_match
from bisect_ov.run.devices import make_device

log = logging.getLogger(__name__)

__all__ = ["Baseline", "BASELINE_PRECISIONS", "baseline_device", "rounding_baseline", "excess", "EXCESS"]

BASELINE_PRECISIONS = ("bf16", "f16")


@dataclass(frozen=True)
class Baseline:
    """Rounding-only errors: per final output (model order) and per measured node (its local error)."""

    device: str
    outputs: tuple[float, ...] = ()
    local: dict[str, float] = field(default_factory=dict)
    note: str = ""


def baseline_device(comparison: Comparison, precision: str | None) -> str | None:
    """The emulated device whose rounding is the target's, or None when no baseline applies (see the module
    docstring)."""
    if precision not in BASELINE_PRECISIONS:
        return None
    if comparison.ref.activation_precision not in ("f32", ""):
        return None
    if comparison.match.quantized:
        return None
    if comparison.target.emulated and not comparison.twin:
        return None
    return f"EMU:{precision}"


def rounding_baseline(engine: Engine, units: Mapping[str, tuple[str, ...]], device: str,
                      error_of: Callable[[TensorStats], float], *, max_bytes: int | None,
                      counts: Callable[[str, int], bool] = lambda key, port: True) -> Baseline:
    """Run the reference's model on `device` (untouched, and `units` alone fed the reference's values); a unit's
    local error is the largest of its outputs' for which `counts(key, port)` (`Plan.counts`)."""
    graph = engine.runner.graph
    try:
        emulated = make_device(device)
        comparison = Comparison(graph, graph, identity_match(graph), engine.runner.ref, emulated,
                                exact_checks=False)
        runner = engine.runner.sharing(comparison)
        sample = Sample.of(engine.sample.ref, engine.sample.ref)
        target = run_target(runner, sample)
        n = len(graph.model.outputs)
        outputs = tuple(runner.final_outputs(list(engine.untouched.ref_final), list(target.outputs), n))
        untouched = Untouched(outputs, engine.untouched.ref_final, tuple(target.outputs[:n]), target,
                              ready=engine.untouched.ready)
        baseline = Engine(runner, sample, untouched)
        found = local_errors(baseline, dict(units), max_bytes=max_bytes) if units else {}
    except (BisectError, RuntimeError) as err:
        log.info("Rounding-only baseline on %s failed: %s", device, err)
        return Baseline(device, note=f"The rounding-only baseline ({device}) could not run this model "
                                     f"({str(err).splitlines()[0][:200]}): tolerances come from the formula alone.")
    local: dict[str, float] = {}
    for tap, stats in found.items():
        if counts(tap.key, tap.port):
            local[tap.key] = max(local.get(tap.key, 0.0), error_of(stats))
    return Baseline(device, tuple(error_of(s) for _, _, s in outputs), local)


