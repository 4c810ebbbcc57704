"""Who is right: both sides against a float64 run (``truth="f64"``), after the scores are known.

For every compared node the float64 side has a value for, the reference's and the target's tensors are each
compared with the float64 one (one more compile per side, in chunks of the tap budget, and one float64 run).
A diverged node where the reference is itself off float64 by more than the node's tolerance while the target
stays within `MULTIPLIER` times the reference's own error is one where the f32 reference is the imprecise side
(a cancellation in f32, say): the disagreement there is no fault of the target. A diverged node whose target
error against float64 is more than that is the target's. This is the rule of PyTorch's accuracy checker
(a result passes when its error against float64 stays within a multiple of the reference's), per node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from bisect_ov.analysis.metrics import compare
from bisect_ov.core.records import Truth
from bisect_ov.model.taps import Tap, tap_model
from bisect_ov.pipeline.records import Examined, Measurement, Scored, Setup

__all__ = ["MULTIPLIER", "TruthFindings", "judge_truth", "closer_side"]

MULTIPLIER = 2.0  # the target is as good as the reference when its float64 error is within this many times


@dataclass(frozen=True)
class TruthFindings:
    """The record for the report and each node's (reference, target) error against float64, by key."""

    record: Truth
    nodes: dict[str, tuple[float, float]] = field(default_factory=dict)


def closer_side(ref_error: float, target_error: float) -> str:
    """``"ref"`` or ``"target"`` when one is at least 1.25x closer to float64, else ``"tie"``."""
    if ref_error * 1.25 <= target_error:
        return "ref"
    if target_error * 1.25 <= ref_error:
        return "target"
    return "tie"


def judge_truth(setup: Setup, examined: Examined, measurement: Measurement, scored: Scored) -> TruthFindings | None:
    """Both sides' errors against the float64 side, per compared node and final output; None without one."""
    truth = setup.truth
    if truth is None:
        return None
    engine = examined.engine
    graph = engine.runner.graph
    provided = truth.provides(graph) or frozenset()
    taps = [t for t in dict.fromkeys(measurement.stats) if t in provided and t in engine.runner.target_of]
    errors: dict[Tap, tuple[float, float]] = {}
    with setup.clock("truth"):
        for chunk in engine.chunks(taps, setup.options.tap_bytes) if taps else []:
            pairs = engine.both_values(chunk)
            tapped = tap_model(graph, chunk)
            exact = truth.compile(tapped.model, taps=tapped.added_outputs).infer(engine.sample.ref)
            for tap, index in zip(chunk, tapped.tap_outputs):
                ref, target = pairs[tap]
                errors[tap] = (setup.error_of(compare(exact[index], ref)), setup.error_of(compare(exact[index], target)))
        plain = truth.compile(graph.model).infer(engine.sample.ref)
        target_final = engine.untouched.target_final
        outputs = {}
        for (name, _, _), exact_out, ref_out, target_out in zip(engine.untouched.outputs, plain, engine.untouched.ref_final, target_final):
            outputs[name] = (setup.error_of(compare(np.asarray(exact_out), ref_out)),
                             setup.error_of(compare(np.asarray(exact_out), target_out)))
    nodes: dict[str, tuple[float, float]] = {}
    for tap, pair in errors.items():
        old = nodes.get(tap.key)
        nodes[tap.key] = pair if old is None else (max(old[0], pair[0]), max(old[1], pair[1]))
    imprecise, off = [], []
    for key in scored.scores.ranking:
        if key not in nodes:
            continue
        ref_error, target_error = nodes[key]
        tol = scored.tolerances.get(key, 0.0)
        within = target_error <= MULTIPLIER * ref_error + tol / 10
        if ref_error > tol and within:
            imprecise.append(key)
        elif not within:
            off.append(key)
    worst = max(outputs.values(), key=lambda p: max(p), default=(0.0, 0.0))
    record = Truth(side=truth.info().label, multiplier=MULTIPLIER, outputs=outputs,
                   closer=closer_side(*worst) if all(map(math.isfinite, worst)) else "tie",
                   imprecise_ref=tuple(imprecise), target_off=tuple(off), compared=len(nodes))
    return TruthFindings(record, nodes)
