"""The verdict stage: the evidence the earlier stages measured, handed to the one judge
(`bisect_ov.analysis.judge`), and the notes that say what it set aside and why.

    decide(setup, examined, measurement, scored, findings) -> Scored   (with the `Verdict`)

Nothing here decides a role or a first divergence: it gathers records into an `Evidence` and words the
`Verdict`'s reasons for the reader.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Collection, Mapping

from bisect_ov.analysis.diagnosis import is_cancelling, is_concentrated, own_peak_error, peak_error
from bisect_ov.analysis.judge import NOTABLE, STEPS, Evidence, Verdict, judge, whole_unit
from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.analysis.movement import carried_from
from bisect_ov.analysis.tolerance import CALIBRATED_METRICS, unit_roundoff
from bisect_ov.experiments.partitioned import Findings
from bisect_ov.model.fusion import KernelTensors
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.taps import Tap
from bisect_ov.pipeline.records import Examined, Measurement, Scored, Setup

__all__ = ["decide", "evidence", "expected", "verdict_notes"]


def decide(setup: Setup, examined: Examined, measurement: Measurement, scored: Scored, findings: Findings) -> Scored:
    """`scored` with the judge's verdict: its scores (roles, first divergences, ranks), the nodes it set aside and
    the notes saying why."""
    engine = examined.engine
    kernels = examined.plan.fusion.kernels
    ev = evidence(setup, examined, measurement, scored, findings, kernels)
    verdict = judge(engine.runner.graph, ev)
    notes = verdict_notes(engine.runner.graph, verdict, scored, findings, kernels, ev.peaks, ev.own_peaks)
    return replace(scored, scores=verdict.scores, absorbed=(*verdict.absorbed, *verdict.bystanders),
                   absorbed_why=" ".join(notes), verdict=verdict)


def evidence(setup: Setup, examined: Examined, measurement: Measurement, scored: Scored, findings: Findings,
             kernels: KernelTensors) -> Evidence:
    """The records the judge reads, gathered from the stages' records."""
    graph = examined.engine.runner.graph
    nonfinite = frozenset(t.key for t, s in measurement.stats.items() if s.new_nonfinite > 0)
    measured = scored.scores.nodes
    inside = {k: layer for k in measured if (layer := kernels.kernel_of(k)) is not None}
    fidelity = scored.fidelity
    localized = None
    if fidelity is not None and fidelity.rejected and fidelity.outcome == "localized_by_partitions" and fidelity.node:
        localized = graph.find(fidelity.node).key
    concentrating = setup.options.metric == "rel_l2" and not examined.plan.tolerance.quantization
    cancels = cancelling(graph, measurement) if concentrating else frozenset()
    return Evidence(
        errors=scored.errors, tolerances=scored.tolerances, min_growth=examined.plan.tolerance.min_growth,
        outputs=tuple((o.error, o.tolerance) for o in scored.outputs),
        flips=len(setup.summary.flips_top1) if setup.summary is not None else 0,
        local=dict(findings.local_errors), expected=expected(examined, measurement, findings, setup.options.metric),
        impacts=dict(findings.impacts), nonfinite=nonfinite, movement=examined.plan.movement,
        inside_kernel=inside, kernel_outputs={k: tuple(v) for k, v in kernels.outputs.items()},
        rejected=bool(fidelity is not None and fidelity.rejected), localized=localized,
        # A few elements far off is a fault under rounding; a quantized twin clips and steps by design.
        peaks=peaks(measurement, skip=cancels) if concentrating else {},
        own_peaks=peaks(measurement, own_peak_error, skip=cancels) if concentrating else {},
        max_abs=largest_errors(measurement) if concentrating else {},
        steps=frozenset(k for k in measured if k in graph and graph[k].op_type in STEPS),
        impacts_possible=setup.comparison.ref.can_run_pieces and setup.comparison.target.can_run_pieces,
        whole_units=whole_units(graph, findings, measurement, kernels))


def whole_units(graph: ModelGraph, findings: Findings, measurement: Measurement, kernels: KernelTensors
                ) -> frozenset[str]:
    """The keys whose local error ran everything that made their measured value (`judge.whole_unit`); a node's
    unit is itself and the unmeasured members its measurement stands for, as the experiments ran it."""
    return frozenset(k for k in findings.local_errors if k in graph and whole_unit(
        graph, k, (k, *measurement.groups.get(k, ())), kernels.computed_by, kernels.only_inside))


def expected(examined: Examined, measurement: Measurement, findings: Findings, metric: object) -> dict[str, float]:
    """Rounding-only local errors: the baseline's, and, where it measured none (the plugin refused the piece), a
    unit of ops that only move values gets its bound: they add no rounding, so run alone, fed the reference's
    values, their error is at most the rounding of those values to the target's precision, its unit roundoff
    (for the metrics the tolerance model is calibrated for). Two implementations of f32 compared
    (the plan's `two_implementations`): each measured node's tolerance."""
    plan = examined.plan
    if findings.baseline is None:
        if metric not in CALIBRATED_METRICS or not plan.two_implementations:
            return {}
        # Two implementations of f32: what rounding alone leaves between them at a node is bounded by its tolerance
        # (the 1e-6 floor is what two f32 kernels disagree by), so that is its rounding-only local error.
        return {key: plan.node(key) for key in findings.local_errors if key in examined.engine.runner.graph}
    found = dict(findings.baseline.local)
    if metric in CALIBRATED_METRICS:
        u = unit_roundoff(plan.tolerance.precision)
        for key in findings.local_errors:
            if (key not in found and key in plan.movement
                    and all(m in plan.movement for m in measurement.groups.get(key, ()))):
                found[key] = u
    return found


def cancelling(graph: ModelGraph, measurement: Measurement) -> frozenset[str]:
    """Keys of measured nodes that cancel (`is_cancelling`: they subtract or sum values 10 times larger than their
    output), as measured on the reference: rounding of the inputs is magnified most in the output's smallest
    elements, so a few elements far off is cancellation's mark there, not a fault's (the diagnosis says so)."""
    found = set()
    for tap, s in measurement.stats.items():
        if tap.key not in graph or s.integer:
            continue
        scale_in = max((i.ref_absmax for k, port in graph.data_inputs(tap.key)
                        if (i := measurement.stats.get(Tap(k, port))) is not None), default=0.0)
        if graph[tap.key].op_type and is_cancelling(graph[tap.key].op_type, scale_in, s.ref_absmax):
            found.add(tap.key)
    # A movement op carries the values of the node that computed them (`carried_from`): where that node cancels, so
    # do they (a Squeeze after a cancelling batched MatMul in a state-space scan, a Transpose after x - mean, read
    # "concentrated" with the outputs equal).
    moved = {tap.key for tap in measurement.stats if tap.key in graph and tap.key not in found
             and (chain := carried_from(graph, tap.key)) and chain[-1] in found}
    return frozenset(found | moved)


def largest_errors(measurement: Measurement) -> dict[str, float]:
    """By node key: the largest absolute element error among its floating outputs (finite ones)."""
    found: dict[str, float] = {}
    for tap, s in measurement.stats.items():
        if not s.integer and math.isfinite(s.max_abs):
            found[tap.key] = max(found.get(tap.key, 0.0), s.max_abs)
    return found


def peaks(measurement: Measurement, measure: Callable[[TensorStats], float | None] = peak_error,
          skip: Collection[str] = ()) -> dict[str, tuple[float, float]]:
    """By node key: (largest element error / the reference's largest magnitude, or another `measure` of the worst
    element, relative L2 error) of its floating output whose worst element is worst (the judge's
    concentrated-error rule); none for the nodes in `skip`."""
    found: dict[str, tuple[float, float]] = {}
    for tap, s in measurement.stats.items():
        if tap.key in skip:
            continue
        peak = measure(s)
        if peak is not None and peak > found.get(tap.key, (-1.0, 0.0))[0]:
            found[tap.key] = (peak, s.rel_l2)
    return found


def verdict_notes(graph: ModelGraph, verdict: Verdict, scored: Scored, findings: Findings,
                  kernels: KernelTensors, peaks: Mapping[str, tuple[float, float]] | None = None,
                  own_peaks: Mapping[str, tuple[float, float]] | None = None) -> tuple[str, ...]:
    """What the reader must know about the nodes the verdict set aside or moved."""
    nodes, notes = verdict.scores.nodes, []
    limit = min((o.tolerance for o in scored.outputs), default=0.0)
    impacts = findings.impacts

    def listed(keys) -> str:
        return ", ".join(f"'{graph[k].name}' {impacts[k]:.1e}" for k in keys[:3] if k in impacts)

    if verdict.absorbed and verdict.outputs_ok:
        worst = max(scored.outputs, key=lambda o: o.error / o.tolerance if o.tolerance else math.inf)
        text = (f"{len(verdict.absorbed)} node(s) exceed their tolerance but the network absorbs their error: every "
                f"final output is within its tolerance (worst '{worst.name}' {worst.error:.1e} <= {worst.tolerance:.1e}) "
                "with all of them on the target")
        notes.append(text + _moved_by(graph, verdict.absorbed, impacts) + ".")
    elif verdict.absorbed:
        notes.append(f"{len(verdict.absorbed)} node(s) exceed their tolerance, but their consumers come back within "
                     f"tolerance and each alone on the target moves the final outputs by less than their tolerance "
                     f"({limit:.1e}): {listed(list(verdict.absorbed))}; they are absorbed, not first divergences.")
    if verdict.bystanders:
        final = max((o.error for o in scored.outputs), default=0.0)
        notes.append(f"{len(verdict.bystanders)} node(s) exceed their tolerance with inputs within theirs, but alone on "
                     f"the target each moves the final outputs by less than {NOTABLE:g} of their error ({final:.1e}) "
                     f"and less than their tolerance: {listed(list(verdict.bystanders))}; they are absorbed, not where "
                     "the divergence starts.")
    if verdict.internal:
        shown = []
        for key in verdict.internal[:3]:
            layer = kernels.kernel_of(key)
            outs = [k for k in kernels.outputs.get(layer or "", ()) if k in nodes and k != key]
            if not outs:
                continue
            out = nodes[outs[0]]
            shown.append(f"'{graph[key].name}' ({_fmt(nodes[key].error)} as tapped) exists only inside the fused "
                         f"kernel '{layer}', whose output '{graph[out.key].name}' is within its tolerance "
                         f"({_fmt(out.error)} <= {_fmt(out.tolerance)})")
        more = f", and {len(verdict.internal) - 3} more" if len(verdict.internal) > 3 else ""
        notes.append(f"{len(verdict.internal)} value(s) set aside: " + "; ".join(shown) + more + ". The untouched "
                     "target never stored these tensors: a tapped value there is what a compile exposing it computed, "
                     "not what the target computed, so it is not blamed on the target (neither a first divergence "
                     "nor a culprit).")
    for moved, at in verdict.moved.items():
        notes.append(f"'{graph[moved].name}' ({graph[moved].op_type}) only moves values and adds no error of its own: "
                     f"the divergence seen there is named at '{graph[at].name}' ({graph[at].op_type}), which produced "
                     "them" + (f", inside the fused kernel '{kernels.kernel_of(at)}'" if kernels.kernel_of(at) else "")
                     + ".")
    for key in verdict.overflow:
        if key in verdict.first:
            notes.append(f"'{graph[key].name}' is where the overflow starts: its output on the target gains NaN/Inf "
                         "from inputs that hold none, so it is named whatever its impact or growth.")
    for key in verdict.spikes:
        if key not in verdict.first:
            continue
        tol = nodes[key].tolerance
        if peaks and key in peaks and is_concentrated(*peaks[key], tol):
            (peak, rel), of = peaks[key], "the tensor's largest value"
        elif own_peaks and key in own_peaks:
            (peak, rel), of = own_peaks[key], "its own magnitude plus the tensor's rms"
        else:
            continue
        notes.append(f"'{graph[key].name}' makes an error concentrated in a few elements: its worst element is off "
                     f"by {peak:.1e} of {of} ({peak / tol:.0f}x its tolerance {tol:.1e}), "
                     f"{peak / max(rel, 1e-30):.0f}x its relative L2 error {rel:.1e}, while its inputs "
                     "carried less. Rounding spreads error over every element in "
                     "proportion to the values; a few wrong elements are a fault, so it is named whatever its "
                     "overall error.")
    for key in verdict.dominant:
        if key in verdict.first and key in findings.local_errors and key in impacts:
            final = max((o.error for o in scored.outputs), default=0.0)
            notes.append(f"'{graph[key].name}' makes error of its own (alone on the target, fed the reference's inputs: "
                         f"{_fmt(findings.local_errors[key])} > its tolerance {_fmt(nodes[key].tolerance)}) that alone "
                         f"takes the final outputs over their tolerance ({_fmt(impacts[key])} of their error "
                         f"{_fmt(final)}), so the divergence starts there whatever diverged upstream of it.")
    if verdict.demoted:
        names = ", ".join(f"'{graph[k].name}'" for k in verdict.demoted[:3])
        more = f" and {len(verdict.demoted) - 3} more" if len(verdict.demoted) > 3 else ""
        notes.append(f"Not first divergences, though over their tolerance with inputs within theirs: {names}{more}. "
                     "Alone on the target, fed the reference's inputs, each stays within its tolerance: it amplified "
                     "what it was handed, while a node's own error explains the outputs.")
    again = [k for k in verdict.overflow if k not in verdict.first and k not in verdict.internal]
    if again:
        names = ", ".join(f"'{graph[k].name}'" for k in again[:3]) + (f" and {len(again) - 3} more" if len(again) > 3 else "")
        notes.append(f"{len(again)} more node(s) overflow on their own, from finite inputs (an earlier overflow was "
                     f"taken out again, e.g. by a norm: the square root of inf divides to 0): {names}. Each is a "
                     "source whatever its impact alone; which of them a fix must keep, the fix search says (--fix).")
    return tuple(notes)


def _moved_by(graph: ModelGraph, keys, impacts) -> str:
    shown = [f"'{graph[k].name}' moves them by {impacts[k]:.1e}" for k in keys if k in impacts][:3]
    return "; alone on the target, " + ", ".join(shown) if shown else ""


def _fmt(x: float) -> str:
    return f"{x:.1e}" if math.isfinite(x) else str(x)
