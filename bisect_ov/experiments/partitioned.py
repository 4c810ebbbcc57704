"""Local versus inherited error, partitioned (mixed-device) runs, and a verified fix.

Accumulated error alone cannot tell a node that creates error from one that amplifies what it inherited.
This module answers with experiments on the real target:

(Local errors, each node run alone on the target fed with the reference's inputs, are
`bisect_ov.experiments.local`.)
* `mixed_run`: the graph in topological order is split into segments, each run on the side it is assigned
  to, values handed across the cuts; the final-output error then says what delegating those nodes costs.
  This is the delegate node-range experiment done automatically, and it works for any pair of devices.
* `contribution_curve`: the final-output error when the first f of the graph runs on the target.
* `smallest_range`: the shortest node range whose delegation alone reproduces a share (default half) of the
  full final-output error, found by two binary searches: O(log N) partitioned runs.
* `first_prefix`: the shortest prefix of the graph whose run on the target (the rest on the reference) reaches
  a final-output error, by binary search: where error starts, found by runs that expose nothing but their cuts
  (when the tapped runs are unfaithful). `target_in_pieces`: the whole graph on the target, cut in two, to check
  that cutting it does not change what the target computes. `PrefixCuts`: against a reference that runs only
  whole models, the shortest prefix run alone on the target whose cut is over its tolerance.
* `impact`: the final-output error when only one node (or group) runs on the target.
* `find_fix`: the smallest set of nodes which, kept on the reference, brings the final error under a
  tolerance: greedy over the ranked suspects, then minimised by dropping members one at a time, each step
  verified end to end by a partitioned run.

With a twin (`target_model`), partitioned runs cut the target's segments from the twin (`bisect_ov.experiments.twin`).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Mapping, Sequence

import numpy as np
from tqdm import tqdm

from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.analysis.movement import carried_from
from bisect_ov.core.errors import DeviceError, first_line
from bisect_ov.core.records import Cause, Clamp, CurvePoint, Delegation, Fix, KernelSetting, LayerSensitivity, ScaleFactor
from bisect_ov.engine.engine import Engine
from bisect_ov.experiments.baseline import Baseline
from bisect_ov.experiments.whole import worst
from bisect_ov.model.partition import cut_after, extract, segments
from bisect_ov.model.taps import Tap

log = logging.getLogger(__name__)


def _twin_mixed_run(engine, on_target, order):
    from bisect_ov.experiments.twin import twin_mixed_run  # the twin's partitioned runs (imports this module's neighbours)

    return twin_mixed_run(engine, on_target, order)


def _twin_segment(engine, segment, outputs, values, final):
    from bisect_ov.experiments.twin import twin_segment

    return twin_segment(engine, segment, outputs, values, final)

__all__ = ["mixed_run", "contribution_curve", "smallest_range", "first_prefix", "PrefixCuts", "target_in_pieces",
           "impact", "find_fix", "Fix",
           "patch_model"]

ErrorOf = Callable[[TensorStats], float]


@dataclass
class MixedRuns:
    """Partitioned runs of one examined sample, with a cache: the same assignment is never run twice."""

    engine: Engine
    error_of: ErrorOf
    order: list[str] = field(default_factory=list)
    cache: dict[frozenset, float] = field(default_factory=dict)
    runs: int = 0
    failures: list[str] = field(default_factory=list)  # what the plugin said where an assignment could not run
    # Each final output's factor for the fix's error (`bisect_ov.experiments.whole.output_scales`): an output of a
    # looser tolerance was held to the tightest one's.
    scales: tuple[float, ...] = ()
    outputs: dict[frozenset, tuple[float, ...]] = field(default_factory=dict)  # each output's error, by assignment

    def __post_init__(self) -> None:
        self.order = [n.key for n in self.engine.runner.graph.candidates()]
        # How many runs a search takes is not known ahead: the bar counts them.
        self.bar = tqdm(desc="partitioned runs", unit="run", disable=not self.engine.runner.progress, leave=False)

    def close(self) -> None:
        self.bar.close()

    def error_or_inf(self, on_target: set[str] | frozenset) -> float:
        """The fix's error: `error` with each output scaled by `scales`, or inf where a piece of that assignment
        does not compile or run on its side (the plugin refuses some pieces it would run inside the whole model):
        such an assignment is no fix. The failure is kept (`failures`) and the assignment not tried again."""
        try:
            if not self.scales:
                return self.error(on_target)
            self.error(on_target)
            return worst(self.outputs[frozenset(on_target)], self.scales)
        except DeviceError as err:
            log.info("A partitioned run could not run on its side, and counts as no fix: %s", first_line(err))
            self.failures.append(first_line(err))
            self.cache[frozenset(on_target)] = math.inf
            self.outputs[frozenset(on_target)] = (math.inf,) * max(1, len(self.scales))
            return math.inf

    def error(self, on_target: set[str] | frozenset) -> float:
        """Final-output error (worst output) when exactly `on_target` runs on the target (each output's in
        `outputs`)."""
        key = frozenset(on_target)
        if key not in self.cache:
            run = _twin_mixed_run if self.engine.runner.comparison.twin else mixed_run
            self.outputs[key] = tuple(self.error_of(s) for s in run(self.engine, key, self.order))
            self.cache[key] = max(self.outputs[key], default=0.0)
            self.runs += 1
            self.bar.update(1)
        return self.cache[key]


def mixed_run(engine: Engine, on_target: frozenset[str] | set[str], order: Sequence[str] | None = None
              ) -> list[TensorStats]:
    """Run the nodes `on_target` on the target and the rest on the reference; final outputs vs the reference.

    Consecutive nodes (in topological order) on the same side form one segment, compiled once.
    """
    graph = engine.runner.graph
    order = list(order or [n.key for n in graph.candidates()])
    if not on_target:
        return [compare(r, r) for r in engine.untouched.ref_final]
    results = graph.results()
    final = frozenset(Tap(*r.inputs[0]) for r in results)
    values: dict[Tap, np.ndarray] = {}
    for p in graph.parameters():
        values[Tap(p.key, 0)] = engine.sample.ref[graph.parameter_position[p.key]]
    for side, segment, outputs in segments(graph, order, on_target):
        got = engine.run_segment(side, segment, outputs, partial(extract, graph, segment, outputs),
                                  values, final)
        values.update(zip(outputs, got))
    return [compare(ref, values[Tap(*r.inputs[0])]) for r, ref in zip(results, engine.untouched.ref_final)]


def contribution_curve(runs: MixedRuns, points: int = 8) -> list[CurvePoint]:
    """(fraction, nodes on target, final error) with the first fraction of the graph on the target.

    `points` intervals from none to all of the graph; a graph of ``n`` compute nodes has ``n + 1`` distinct
    prefixes, so it gives at most ``n + 1`` points, each once.
    """
    n = len(runs.order)
    counts = sorted({round(n * i / points) for i in range(points + 1)}) if points > 0 else []
    return [CurvePoint(count / n if n else 0.0, count, runs.error(set(runs.order[:count]))) for count in counts]


def smallest_range(runs: MixedRuns, share: float = 0.5) -> Delegation:
    """The shortest range [a, b] (topological positions) whose delegation reproduces `share` of the error.

    First the smallest b such that the prefix [0, b] does, then the largest a such that [a, b] still does;
    both by binary search, assuming error grows with what runs on the target.
    """
    order = runs.order
    full = runs.error(set(order))
    goal = share * full
    if not order or full == 0:
        return Delegation(full_error=full, goal=goal, start=None, end=None, error=0.0, runs=runs.runs)
    found = first_prefix(runs, goal)
    end = found if found is not None else len(order) - 1
    lo, hi = 0, end
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if runs.error(set(order[mid:end + 1])) >= goal:
            lo = mid
        else:
            hi = mid - 1
    start = lo
    error = runs.error(set(order[start:end + 1]))
    return Delegation(full_error=full, goal=goal, start=start, end=end, error=error, runs=runs.runs,
                      first=order[start], last=order[end], nodes=end - start + 1)


def first_prefix(runs: MixedRuns, goal: float) -> int | None:
    """The smallest position i such that the prefix ``order[:i + 1]`` on the target (the rest on the reference)
    gives a final-output error of at least `goal`: O(log N) partitioned runs, assuming error grows with what
    runs on the target. None when even the whole graph on the target stays under `goal`."""
    order = runs.order
    return first_holding(range(len(order)), lambda i: runs.error(set(order[: i + 1])) >= goal)


def first_holding(items: Sequence[int], holds: Callable[[int], bool]) -> int | None:
    """The first of `items` for which `holds`, by binary search, assuming that once it holds it holds for every
    later item; None when it does not hold for the last (asked first)."""
    if not items or not holds(items[-1]):
        return None
    lo, hi = 0, len(items) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(items[mid]):
            hi = mid
        else:
            lo = mid + 1
    return items[lo]


@dataclass
class PrefixCuts:
    """Runs of a prefix of the graph alone on the target, its cut compared with the reference's values of the
    same tensors: where error starts against a reference that runs only whole models (a framework or a recorded
    run). Each run exposes nothing but what the prefix hands on, so the target compiles the prefix as it compiles
    that part of the plain model as long as no kernel spans the cut. `worst(i)`: the largest error, over
    `tolerance(tap)`, of the compared tensors in the cut after ``order[i]`` (cached)."""

    engine: Engine
    error_of: ErrorOf
    tolerance: Callable[[Tap], float]
    compared: frozenset[Tap]  # the tensors the reference has values for
    order: list[str] = field(default_factory=list)
    cache: dict[int, tuple[float, float]] = field(default_factory=dict)  # position -> (error / tolerance, error)
    runs: int = 0

    def __post_init__(self) -> None:
        self.order = [n.key for n in self.engine.runner.graph.candidates()]

    def positions(self) -> list[int]:
        """The positions whose cut holds a compared tensor the node there produced."""
        graph = self.engine.runner.graph
        return [i for i, k in enumerate(self.order) if any(Tap(k, t.port) in self.compared for t in graph[k].outputs)]

    def worst(self, i: int) -> tuple[float, float]:
        """(error / tolerance, error) of the worst compared tensor in the cut after position `i`."""
        if i not in self.cache:
            graph, sample = self.engine.runner.graph, self.engine.sample
            prefix = self.order[:i + 1]
            produced = {Tap(k, t.port) for k in prefix for t in graph[k].outputs}
            outputs = [t for t in cut_after(graph, self.order, i) if t in produced]
            values = {Tap(p.key, 0): sample.target[graph.parameter_position[p.key]] for p in graph.parameters()}
            final = frozenset(Tap(*r.inputs[0]) for r in graph.results())
            got = dict(zip(outputs, self.engine.run_segment("target", prefix, outputs,
                                                            partial(extract, graph, prefix, outputs), values,
                                                            final, keep=False)))
            compared = [t for t in outputs if t in self.compared]
            ref = self.engine.ref_values(compared)
            worst = (0.0, 0.0)
            for t in compared:
                error = self.error_of(compare(ref[t], got[t]))
                tol = self.tolerance(t)
                worst = max(worst, (error / tol if tol > 0 else (math.inf if error > 0 else 0.0), error))
            self.cache[i] = worst
            self.runs += 1
        return self.cache[i]

    def first_over(self, excess: float) -> int | None:
        """The first position (of `positions`) whose cut is `excess` times over its tolerance, by binary search
        (assuming that, once over, later cuts stay over); None when the last is not."""
        return first_holding(self.positions(), lambda i: self.worst(i)[0] >= excess)


def target_in_pieces(engine: Engine, cut: int, order: Sequence[str] | None = None) -> list[TensorStats]:
    """Every node on the target, as two pieces: ``order[:cut + 1]`` and the rest, values handed across the cut;
    final outputs against the reference's. When this differs from the plain run, cutting the graph changes what
    the target computes, and partitioned runs cut there are not evidence either. With a twin, the pieces are the
    twin's ops of those nodes (`bisect_ov.experiments.twin.twin_segment`)."""
    graph = engine.runner.graph
    twin = engine.runner.comparison.twin
    order = list(order or [n.key for n in graph.candidates()])
    results = graph.results()
    final = frozenset(Tap(*r.inputs[0]) for r in results)
    values: dict[Tap, np.ndarray] = {Tap(p.key, 0): engine.sample.ref[graph.parameter_position[p.key]]
                                     for p in graph.parameters()}
    for start, end in ((0, cut), (cut + 1, len(order) - 1)):
        if start > end:
            continue
        segment = list(order[start:end + 1])
        produced = {Tap(k, t.port) for k in segment for t in graph[k].outputs}
        outputs = [t for t in cut_after(graph, order, end) if t in produced]
        got = (_twin_segment(engine, segment, outputs, values, final) if twin else
               engine.run_segment("target", segment, outputs, partial(extract, graph, segment, outputs), values, final))
        values.update(zip(outputs, got))
    return [compare(ref, values[Tap(*r.inputs[0])]) for r, ref in zip(results, engine.untouched.ref_final)]


def impact(runs: MixedRuns, units: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Final-output error when only each unit (its output node and members) runs on the target."""
    return {uid: runs.error(set(members) | {uid}) for uid, members in units.items()}


def find_fix(runs: MixedRuns, suspects: Sequence[Sequence[str]], tolerance: float, *,
             pattern_of: Mapping[str, str] | None = None, max_single: int = 48) -> Fix:
    """Greedy over ranked suspect units (and their patterns), then drop what is not needed.

    With `pattern_of` (node key -> its role in the model's repeated blocks, `bisect_ov.analysis.names.pattern`),
    each suspect is first tried as its whole pattern ("this op in every layer") when the pattern holds several
    nodes, then alone: a problem that repeats in every block is then one candidate, whatever the depth. The
    greedy pass goes through every candidate until the error is within `tolerance` (no cap on units). The
    result is minimised by dropping kept candidates, then whole patterns, then single nodes, pass after pass
    until a whole pass drops none: the fix is then **1-minimal** (no kept node can go back to the target without
    the final error going over `tolerance`, each checked; `Fix.minimal`). The single-node passes take at most
    `max_single` runs; when they run out first, the fix is verified but not known to be 1-minimal. Every step
    is a real partitioned run.
    """
    everything = set(runs.order)
    before = runs.error_or_inf(everything)
    pattern_of = dict(pattern_of or {})
    members: dict[str, list[str]] = {}
    for key in runs.order:
        if key in pattern_of:
            members.setdefault(pattern_of[key], []).append(key)
    candidates: list[tuple[str, ...]] = []
    for unit in suspects:
        group = members.get(pattern_of.get(unit[0], ""), [])
        if len(group) > 1:
            expanded = tuple(dict.fromkeys([*group, *unit]))
            if expanded not in candidates:
                candidates.append(expanded)
        if tuple(unit) not in candidates:
            candidates.append(tuple(unit))
    kept: list[Sequence[str]] = []
    error = before
    for unit in candidates:
        if error <= tolerance:
            break
        if set(unit) <= _union(kept):
            continue
        kept.append(unit)
        error = runs.error_or_inf(everything - _union(kept))
    keep = _union(kept)
    minimal = False
    if error <= tolerance:
        # Delta debugging: drop whole candidates that are not needed, then whole patterns, then single nodes
        # (a candidate can be a large fusion group of which one op matters).
        for unit in list(kept):
            trial = [u for u in kept if u is not unit]
            if trial and runs.error_or_inf(everything - _union(trial)) <= tolerance:
                kept = trial
        keep = _union(kept)
        by_pattern: dict[str, set[str]] = {}
        for key in keep:
            by_pattern.setdefault(pattern_of.get(key, key), set()).add(key)
        for nodes in sorted(by_pattern.values(), key=len):
            if len(nodes) > 1 and len(keep) > len(nodes) and runs.error_or_inf(everything - (keep - nodes)) <= tolerance:
                keep = keep - nodes
        minimal, budget = False, max_single
        while budget > 0 and not minimal:
            # One pass over every kept node; 1-minimal once a whole pass drops none. A run already made (the
            # cache) costs nothing, so a later pass pays only for the sets an earlier drop changed.
            dropped = False
            for key in [k for k in runs.order if k in keep]:
                if len(keep) == 1:  # with nothing kept the error is `before`, over the tolerance
                    continue
                back = everything - (keep - {key})  # `key` back on the target
                if frozenset(back) not in runs.cache:
                    if budget == 0:
                        break
                    budget -= 1
                if runs.error_or_inf(back) <= tolerance:
                    keep, dropped = keep - {key}, True
            else:
                minimal = not dropped
                continue
            break
        error = runs.error_or_inf(everything - keep)
    ordered = tuple(k for k in runs.order if k in keep)
    counts: dict[str, int] = {}
    for key in ordered:
        if key in pattern_of and len(members.get(pattern_of[key], ())) > 1:
            counts[pattern_of[key]] = counts.get(pattern_of[key], 0) + 1
    patterns = tuple(f"{p} ({n} of {len(members[p])})" for p, n in counts.items() if n > 1)
    return Fix(ordered, before, error, tolerance, True, runs.runs, tuple(u[0] for u in candidates[:16]),
               patterns=patterns, minimal=error <= tolerance and minimal,
               failed=(len(runs.failures), runs.failures[0]) if runs.failures else None)


def _union(units: Sequence[Sequence[str]]) -> set[str]:
    return {k for u in units for k in u}


def patch_model(model, names: Sequence[str]):
    """A copy of `model` whose named ops carry the runtime info GPU and NPU plugins honour to keep them in f32.

    ``disable_fp16_compression_0`` (and ``precise_0``, another spelling) keep an op out of the f16
    conversion in the GPU and NPU plugins; OpenVINO 2026 serialises the mark as ``DisablePrecisionConversion``.
    The CPU plugin keeps some marked ops in f32 and fuses others with unmarked ones (OpenVINO 2026.4): a patched
    model runs there as a mix the partitioned runs did not measure.
    """
    clone = model.clone()
    wanted = set(names)
    for op in clone.get_ordered_ops():
        if op.get_friendly_name() in wanted:
            rt = op.get_rt_info()
            rt["disable_fp16_compression_0"] = ""
            rt["precise_0"] = ""
    return clone



@dataclass(frozen=True)
class Findings:
    """What the experiments found, keyed by reference node keys: each node's local error (run alone on the
    target, fed the reference's inputs), its impact (the final-output error with only it on the target), the
    verified fix, the contribution curve, the delegation range, the partitioned runs made, layer sensitivity."""

    local_errors: dict[str, float] = field(default_factory=dict)
    impacts: dict[str, float] = field(default_factory=dict)
    fix: Fix | None = None
    curve: list[CurvePoint] = field(default_factory=list)
    delegation: Delegation | None = None
    runs: int = 0
    sensitivity: tuple[LayerSensitivity, ...] = ()
    baseline: Baseline | None = None  # what rounding alone does, when measured
    scale_factor: ScaleFactor | None = None  # the activation scale factor that solves an f16 overflow, when searched
    clamp: Clamp | None = None  # clamps after the overflow's origins, when tried
    kernel_setting: KernelSetting | None = None  # the target without its generated kernels, when tried


def suspects_for_fix(graph, ranking: Sequence[str], first: Sequence[str], units: Mapping[str, Sequence[str]],
                     local: Mapping[str, float], tolerance_of: Mapping[str, float], causes: Mapping[str, Sequence[Cause]],
                     delegation: Delegation | None) -> list[tuple[str, ...]]:
    """Units to try keeping on the reference, most promising first.

    The first divergences; for a cancellation, the producers of its inputs (the damage is done when they are
    stored in low precision); the node range whose delegation alone reproduces the error; then every node
    whose local error exceeds its tolerance, largest first; then the rest of the ranking; then the producers of every
    first divergence (a node that amplifies its inputs' rounding needs them kept too).
    """
    ordered: list[tuple[str, ...]] = []

    def add(key: str) -> None:
        unit = tuple(dict.fromkeys([key, *units.get(key, ())]))
        if key in graph and graph[key].is_candidate and unit not in ordered:
            ordered.append(unit)

    for key in first:
        add(key)
        if any(c.kind == "cancellation" for c in causes.get(key, ())):
            for producer, _ in graph.data_inputs(key):
                add(producer)
    if delegation is not None and delegation.end is not None:
        order = [n.key for n in graph.candidates()]
        for key in order[delegation.start:delegation.end + 1]:
            add(key)
    for key in sorted(local, key=lambda k: -local[k]):
        if local[key] > tolerance_of.get(key, 0.0):
            add(key)
    for key in ranking:
        add(key)
    # A node may amplify the rounding of what it reads, as a Softmax of logits offset by a large constant does
    # (shift-invariant, yet its f16 input loses the small differences): kept alone it still reads them rounded.
    for key in first:
        for producer, _ in graph.data_inputs(key):
            add(producer)
            for carried in carried_from(graph, producer):  # through ops that only move values, to what computed them
                add(carried)
    return ordered
