"""The stages of a `bisect()` run, each a function from small frozen records to the next one.

    open_comparison(model, ref, target, inputs, target_model, options)  -> Opened
    plain_run(opened)                                                    -> Plain     (tolerance in play)
    measure(opened, plain)                                               -> Measurement
    score(opened, plain, measurement)                                    -> Scored
    experiments(opened, measurement, scored)                             -> Findings  (`bisect_ov.experiments.partitioned`)
    assemble(opened, plain, measurement, scored, findings)               -> Report    (`bisect_ov.pipeline.assemble`)

Each stage reads what the earlier ones handed on and the `Session` (which owns the devices, the inputs and
the compile counts); none assigns to another object's fields. The options arrive resolved (`BisectOptions
.resolve`): a stage never re-decides what can run.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable, cast

import numpy as np

from bisect_ov.analysis.diagnosis import Cause, diagnose
from bisect_ov.analysis.metrics import TensorStats, metric_value
from bisect_ov.analysis.names import pattern
from bisect_ov.analysis.scoring import Scores, score_graph
from bisect_ov.analysis.spread import Distribution
from bisect_ov.analysis.tolerance import Tolerance, unit_roundoff
from bisect_ov.capture.device import plan_recorded
from bisect_ov.core.errors import InputError
from bisect_ov.core.records import Fidelity, Noise
from bisect_ov.engine.session import Clock, Session
from bisect_ov.experiments.partitioned import (
    Findings,
    MixedRuns,
    contribution_curve,
    find_fix,
    local_errors,
    smallest_range,
    suspects_for_fix,
)
from bisect_ov.experiments.partitioned import impact as impact_of
from bisect_ov.experiments.steps import Generation, run_steps
from bisect_ov.experiments.twin import layer_sensitivity, quantized_units, twin_tolerance
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.load import load_model
from bisect_ov.model.match import identity_match, match_nodes
from bisect_ov.model.state import Stateless, initial_states, is_stateful, make_stateless
from bisect_ov.model.taps import Tap
from bisect_ov.pipeline.options import BisectOptions, auto_tap_bytes
from bisect_ov.report.report import OutputResult
from bisect_ov.run.devices import DeviceInfo, make_device
from bisect_ov.run.inputs import align_inputs, prepare_inputs
from bisect_ov.samples.executors import SampleRun, node_spread, prepare_pair, run_samples
from bisect_ov.samples.sources import Samples, SampleSummary, as_samples
from bisect_ov.search.strategies import fusion_taps, run_bisection, run_full, run_fusion

__all__ = ["Opened", "Plain", "Measurement", "Scored", "open_comparison", "plain_run", "generate", "measure", "score",
           "experiments", "absorb", "FIDELITY_RANGE", "LOCAL_SHARE", "fidelity", "local_units", "owned_units"]

FIDELITY_RANGE = (0.5, 2.0)
LOCAL_SHARE = 0.5  # local errors are measured for nodes whose error reaches this share of their tolerance


@dataclass(frozen=True)
class Opened:
    """A comparison ready to run: the session, the resolved options, the samples and why options changed."""

    session: Session
    options: BisectOptions
    model: Any  # ov.Model
    target_model: Any  # ov.Model | None
    samples: SampleRun | None  # many samples: where they come from and run (closed by `run` at the end)
    summary: SampleSummary | None
    notes: tuple[str, ...]
    clock: Clock
    # A stateful model's variables as inputs and outputs (`bisect_ov.model.state`); `model` is then its
    # stateless form, and `state_of_target` the target model's when it is stateful too.
    state: Stateless | None = None
    state_of_target: Stateless | None = None

    def error_of(self, stats: TensorStats) -> float:
        """The options' metric on one tensor pair's statistics."""
        return metric_value(stats, self.options.metric)


@dataclass(frozen=True)
class Plain:
    """After the untouched model ran on both sides: the tolerance for the precision really in play."""

    tolerance: Tolerance


@dataclass(frozen=True)
class Measurement:
    """Statistics of every measured tap, the fusion group each stands for, and how they were measured."""

    stats: dict[Tap, TensorStats]
    groups: dict[str, tuple[str, ...]]
    strategy: str
    fell_back: bool = False
    spread: dict[str, Distribution] = field(default_factory=dict)  # each node's error over the samples
    # Local errors measured while capturing (to decide which fusion groups to refine), by unit key: the
    # unit's members and its outputs' statistics; `experiments` reuses those whose unit did not change.
    local: dict[str, tuple[tuple[str, ...], dict[Tap, TensorStats]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Scored:
    """Per-node errors and tolerances, the error-growth scores, final outputs, noise and fidelity."""

    errors: dict[tuple[str, int], float]
    tolerances: dict[str, float]
    scores: Scores
    outputs: tuple[OutputResult, ...]
    noise: Noise | None
    fidelity: Fidelity | None
    absorbed: tuple[str, ...] = ()  # over their tolerance, but absorbed by the network (`absorb`)
    absorbed_why: str = ""

    @property
    def floor(self) -> float:
        """Errors below twice the target's own noise are not counted."""
        return 2 * self.noise.floor if self.noise is not None else 0.0


# ----- stages -----------------------------------------------------------------------------------------------
def open_comparison(model: Any, ref: Any, target: Any, inputs: Any, target_model: Any, options: BisectOptions,
                    clock: Clock | None = None) -> Opened:
    """Load the model(s), walk and match them, build both devices and inputs; run many samples when given."""
    clock = clock or Clock()
    with clock("load"):
        ov_model = load_model(model)
        ov_target = load_model(target_model) if target_model is not None else None
    for which, m in (("model", ov_model), ("target_model", ov_target)):
        if m is not None and not m.outputs:
            raise InputError(f"The {which} '{m.get_friendly_name()}' has no outputs: there is nothing to compare. "
                             "Give a model with at least one Result.")
    state = make_stateless(ov_model) if is_stateful(ov_model) else None
    target_state = make_stateless(ov_target) if ov_target is not None and is_stateful(ov_target) else None
    user_model = ov_model
    if state is not None:
        ov_model = state.model
    if target_state is not None:
        ov_target = target_state.model
    with clock("graph"):
        graph = ModelGraph(ov_model)
        target_graph = ModelGraph(ov_target) if ov_target is not None else graph
        match = match_nodes(graph, target_graph) if ov_target is not None else identity_match(graph)
    # Recorded runs (captures) replay what another machine ran: they supply inputs, and cannot run pieces.
    plan = plan_recorded(make_device(ref, dict(options.ref_config), role="ref"),
                         make_device(target, dict(options.target_config), role="target"), inputs,
                         twin=ov_target is not None)
    resolved, why = options.resolve(local_possible=plan.local, pieces_possible=plan.pieces, twin=ov_target is not None)
    if resolved.max_tap_bytes == "auto":
        weights = sum(op.get_byte_size() for op in ov_model.get_ops() if op.get_type_name() == "Constant")
        resolved = replace(resolved, max_tap_bytes=auto_tap_bytes(weights))
    many = as_samples(plan.inputs)
    show = sys.stderr.isatty() if options.progress is None else options.progress
    run = None
    if many is not None:
        # Samples are read as they run and only summaries kept: memory does not grow with their number.
        run = SampleRun(many, options.executor, samples_per_unit=options.samples_per_unit,
                        unit_retries=options.unit_retries, progress=show, owned=not isinstance(plan.inputs, Samples))
    if many is None:
        ref_arrays = prepare_inputs(user_model, plan.inputs, seed=options.seed, prompt_length=options.prompt_length)
        if state is not None:  # the variables as `reset_state()` leaves them
            ref_arrays = ref_arrays + initial_states(state, ref_arrays)
        first = (ref_arrays, align_inputs(ov_model, ov_target, ref_arrays) if ov_target is not None else ref_arrays)
    elif state is not None:
        raise InputError("Many samples with a stateful model (KV-cache variables) are not supported: pass one "
                         "sample (inputs=dict), or compare the samples one by one.")
    else:
        try:
            sample = many.load(0)
            first = prepare_pair(0, sample, ov_model, ov_target, options.seed, many.names_file(0, sample))
        except BaseException:
            assert run is not None
            run.close()
            raise
    session = Session(graph, target_graph, match, plan.ref, plan.target, *first, clock=clock, progress=show,
                      exact_checks=plan.exact)
    summary = None
    if run is not None:
        try:
            # Every sample on both sides; the detailed search then runs on the worst one.
            summary = run_samples(session, run, partial(metric_value, metric=options.metric),
                                  class_names=options.classifier_outputs, seed=options.seed)
            worst = summary.ranking[0]
            sample = run.samples.load(worst)
            session.select_sample(*prepare_pair(worst, sample, ov_model, ov_target, options.seed,
                                                run.samples.names_file(worst, sample)))
        except BaseException:
            run.close()
            raise
        why = why + tuple(run.notes)
    notes = tuple(plan.notes) + why
    for param, array in zip(graph.parameters(), first[0]):
        if np.issubdtype(np.asarray(array).dtype, np.floating) and not np.isfinite(array).all():
            nan, inf = int(np.isnan(array).sum()), int(np.isinf(array).sum())
            notes += (f"Input '{param.name}' holds {nan:,} NaN and {inf:,} Inf value(s) of {np.asarray(array).size:,}: "
                      "non-finite values in the inputs propagate on both sides, and positions where both sides "
                      "agree on them are compared as equal.",)
    if options.steps and state is None:
        notes += (f"steps={options.steps} was asked for, but the model has no variables (KV cache): generation "
                  "steps need a stateful LLM, so only one run was compared.",)
    if state is not None:
        notes += (f"Stateful model: its {len(state.variables)} variables (ReadValue/Assign, e.g. a KV cache) are "
                  "compared with the states reset before each run; each is an input holding its initial value and "
                  f"an output '{state.model.outputs[state.n_outputs].get_any_name()}', ... compared like any "
                  "output.",)
    return Opened(session, resolved, ov_model, ov_target, run, summary, notes, clock, state, target_state)


def plain_run(opened: Opened) -> Plain:
    """Run the untouched model on both sides; set the tolerance from the precision really used."""
    session, options = opened.session, opened.options
    # An f32 reference's plain run can expose the tensors later stages measure, so it need not compile again:
    # with `full`, the first chunk (both sides then tap the same tensors); against a lower-precision target,
    # the fusion-group boundaries (or every tensor, for bisection) and the integer nodes' operands, when they
    # fit one compile's budget. Not against an f32 target: exposing other tensors than the target does moves
    # f32 results by ~1e-5 where ops cancel (measured on the demo's instance norm), which is noise against bf16
    # or f16 rounding but a false divergence between two f32 runs.
    target = session.target
    lower = target.emulated or target.activation_precision not in ("f32", "")
    pairs = [r for r, _ in session.match.pairs]

    compared: list[Tap] = []  # of the taps `ref_taps` names, those later stages compare (set by it)

    def ref_taps() -> list[Tap]:
        if options.strategy == "full":
            return session.chunks(pairs, _tap_bytes(options))[0] if pairs else []
        if not lower:
            return []
        exact = session.exact_candidates()
        exact_taps = [*(Tap(k, 0) for k in exact), *(Tap(i, p) for k in exact for i, p in session.graph.data_inputs(k))]
        if options.strategy == "bisection":
            wanted = list(dict.fromkeys([*pairs, *exact_taps]))
            return wanted if len(session.chunks(wanted, _tap_bytes(options))) == 1 else []
        # The boundaries, and every tensor a group reads from outside what it computes (`owned_units`): the
        # values the local-error runs feed in, which only the reference needs.
        boundaries, groups = fusion_taps(session)
        graph = session.graph
        fed = [Tap(i, p) for unit in owned_units(graph, [t.key for t in boundaries], groups).values()
               for m in unit for i, p in graph.data_inputs(m) if i not in unit and graph[i].kind != "parameter"]
        compared[:] = dict.fromkeys([*boundaries, *exact_taps])
        return list(dict.fromkeys([*boundaries, *fed, *exact_taps]))

    # With fusion taps beyond the budget, the plain run's reference is the streamed measurement itself.
    stream = _tap_bytes(options) if lower and options.strategy in ("auto", "fusion") else None
    session.plain(ref_taps=ref_taps, repeat=options.noise and options.budget != "fast", stream_bytes=stream,
                  streamed_taps=lambda: compared)
    precision = comparison_precision(session.ref_info, session.target_info,
                                     session.target_graph if opened.target_model is not None else None)
    tolerance = options.tolerance_model().with_precision(precision)
    if opened.target_model is not None and session.match.quantized:
        tolerance = twin_tolerance(tolerance, session.graph, session.target_graph, session.match)
    return Plain(tolerance)


def generate(opened: Opened, plain: Plain) -> Generation | None:
    """With ``steps``: the prefill and decode steps on both sides (`bisect_ov.experiments.steps`); None without them.

    When a decode step is where divergence starts, the session examines that step's inputs from now on (its
    plain run is repeated), so the node results explain that step.
    """
    session, options, state = opened.session, opened.options, opened.state
    if not options.steps or state is None:
        return None
    if opened.target_model is not None and (opened.state_of_target is None
                                            or opened.state_of_target.variables != state.variables):
        return None
    graph = session.graph
    result = graph.results()[0]
    producer, port = result.inputs[0]
    tolerance = plain.tolerance.for_node(graph[producer], port)
    names = []
    for param in state.model.get_parameters()[: state.n_inputs]:
        found = set(param.output(0).get_names()) | {param.get_friendly_name()}
        names.append(next((n for n in ("input_ids", "attention_mask", "position_ids", "beam_idx") if n in found),
                          param.get_friendly_name()))
    arrays = session.ref_arrays
    with opened.clock("steps"):
        generation = run_steps(state, names, session.ref, session.target, arrays[: state.n_inputs],
                               arrays[state.n_inputs:], options.steps, opened.error_of, tolerance,
                               target_stateless=opened.state_of_target)
    if generation.examine is not None:
        session.select_sample(*generation.examine)
        session.plain()
    return generation


def measure(opened: Opened, plain: Plain) -> Measurement:
    """Run the chosen strategy; ``auto`` is ``fusion``, falling back to ``bisection`` when unfaithful."""
    session, options = opened.session, opened.options
    graph, tol = session.graph, plain.tolerance

    def diverged(tap: Tap, stats: TensorStats) -> bool:
        return opened.error_of(stats) > tol.for_node(graph[tap.key], tap.port)

    strategy, fell_back = options.strategy, False
    groups: dict[str, tuple[str, ...]] = {}
    local: dict[str, tuple[tuple[str, ...], dict[Tap, TensorStats]]] = {}
    if strategy == "full":
        stats = run_full(session, _tap_bytes(options))
    elif strategy == "bisection":
        stats = run_bisection(session, diverged)
    else:
        can_local = options.local and session.target.can_run_pieces
        planned, planned_groups = fusion_taps(session)
        planned_units = owned_units(graph, [t.key for t in planned], planned_groups)

        def keep_local(units: dict[str, tuple[str, ...]], found: dict[Tap, TensorStats]) -> None:
            for key, members in units.items():
                local[key] = (members, {t: st for t, st in found.items() if t.key == key})

        def on_segment(values: dict[Tap, np.ndarray], found: dict[Tap, TensorStats]) -> None:
            # The model measured segment by segment: each unit's local error runs while the reference's values
            # it reads are held, so no reference compile is needed for them later.
            if not can_local or session.target_graph is not graph:
                return
            worst: dict[str, float] = {}
            for t, st in found.items():
                worst[t.key] = max(worst.get(t.key, 0.0), opened.error_of(st))
            units = {k: planned_units[k] for k, e in worst.items()
                     if k in planned_units and e >= LOCAL_SHARE * tol.for_node(graph[k])}
            if units:
                keep_local(units, local_errors(session, units, max_bytes=_tap_bytes(options), values=values))

        def own_error(stats: dict[Tap, TensorStats], groups: dict[str, tuple[str, ...]]) -> dict[str, bool]:
            # The local errors the experiments need anyway, measured now: they tell which groups make error.
            faithful = fidelity(session, options.metric)
            if not can_local or (faithful is not None and faithful.warning):
                return {}
            errors = {(t.key, t.port): opened.error_of(st) for t, st in stats.items()}
            limits = {t.key: tol.for_node(graph[t.key]) for t in stats}
            _, todo = _known_local(local_units(session, stats, groups, errors, limits), local)
            if todo:
                keep_local(todo, local_errors(session, todo, max_bytes=_tap_bytes(options)))
            return {key: any(diverged(t, st) for t, st in got.items()) for key, (_, got) in local.items() if got}

        stats, groups = run_fusion(session, _tap_bytes(options), diverged, refine=options.refine,
                                   own_error=own_error, on_segment=on_segment)
        faithful = fidelity(session, options.metric)
        if strategy == "auto" and faithful is not None and faithful.warning:
            session.forget_tapped_runs()
            stats, groups, fell_back = run_bisection(session, diverged), {}, True
            local = {}
        strategy = "bisection" if fell_back else "fusion"
    stats = dict(stats)
    pending = [k for k in session.exact_candidates() if k not in session.exact]
    if pending:
        # Integer Conv/MatMul nodes are measured with their inputs, so each is checked against its exact result.
        taps = {Tap(k, 0) for k in pending} | {Tap(i, p) for k in pending for i, p in graph.data_inputs(k)}
        stats.update(session.measure(sorted(taps, key=lambda t: graph[t.key].index)))
    # The metric travels to workers as a partial of a module-level function: picklable.
    # Each node over every sample runs each sample again with the measured tensors exposed: several plain
    # inferences per sample, which the fast budget leaves out (the outputs' pass still ranks the samples).
    spread = (node_spread(session, list(stats), opened.samples, partial(metric_value, metric=options.metric),
                          seed=options.seed)
              if opened.samples is not None and opened.summary is not None and options.budget != "fast" else {})
    return Measurement(stats, groups, strategy, fell_back, spread, local if strategy == "fusion" else {})


def score(opened: Opened, plain: Plain, measurement: Measurement) -> Scored:
    """The target's noise floor, every node's tolerance, error-growth scores and final-output results."""
    session, options, tol = opened.session, opened.options, plain.tolerance
    graph = session.graph
    measured_noise = session.noise(extra_work=options.budget != "fast") if options.noise else {}
    noise = Noise(**measured_noise) if measured_noise else None
    floor = 2 * noise.floor if noise is not None else 0.0
    faithful = fidelity(session, options.metric)
    with opened.clock("score"):
        errors = {(tap.key, tap.port): opened.error_of(s) for tap, s in measurement.stats.items()}
        exact = session.exact
        # An integer computation has one right answer: the two sides must agree exactly.
        tolerances = {tap.key: 0.0 if tap.key in exact else max(floor, tol.for_node(graph[tap.key]))
                      for tap in measurement.stats}
        scores = score_graph(graph, errors, tolerances, min_growth=tol.min_growth)
        outputs = tuple(
            OutputResult(name, s, opened.error_of(s), max(floor, tol.for_node(graph[graph[key].inputs[0][0]],
                                                                              graph[key].inputs[0][1])))
            for name, key, s in session.outputs
        )
    return Scored(errors, tolerances, scores, outputs, noise, faithful)


def experiments(opened: Opened, measurement: Measurement, scored: Scored) -> Findings:
    """Local errors, impacts, the delegation range, the contribution curve and the fix, as the options ask."""
    session, options = opened.session, opened.options
    if not (options.local or options.partitioned):
        return Findings()
    with opened.clock("experiments"):
        stats, scores = measurement.stats, scored.scores
        measured = list(dict.fromkeys(t.key for t in stats))
        units = {k: tuple(dict.fromkeys([k, *measurement.groups.get(k, ())])) for k in measured}
        local: dict[str, float] = {}
        twin = session.target_graph is not session.graph
        if options.local and measured:
            found, todo = _known_local(local_units(session, stats, measurement.groups, scored.errors,
                                                   scored.tolerances), measurement.local)
            if todo:
                found.update(local_errors(session, todo, max_bytes=_tap_bytes(options)))
            for tap, st in found.items():
                local[tap.key] = max(local.get(tap.key, 0.0), opened.error_of(st))
        runs = MixedRuns(session, opened.error_of)
        try:
            curve = contribution_curve(runs, options.curve) if options.curve else []
            delegation = smallest_range(runs) if options.delegation else None
            impact: dict[str, float] = {}
            if options.impact:
                suspects = [*scores.first, *[k for k in scores.ranking if scores.nodes[k].role in ("source", "amplifier")]]
                by_local = sorted((k for k in local if local[k] > scored.tolerances.get(k, 0.0)), key=lambda k: -local[k])
                chosen = list(dict.fromkeys(suspects + by_local))[:options.impact]
                impact = impact_of(runs, {k: units.get(k, (k,)) for k in chosen})
            sensitivity = layer_sensitivity(session, runs.error, local) if twin and options.sensitivity else ()
            fix = None
            if options.fix:
                limit = (options.fix_tolerance if options.fix_tolerance is not None
                         else min(o.tolerance for o in scored.outputs))
                if twin and session.match.quantized:
                    candidates = twin_fix_candidates(session, sensitivity, local)
                    fix = find_fix(runs, candidates, limit)
                else:
                    causes = {k: tuple(first_causes(session.graph, stats, scores, k)) for k in scores.first}
                    candidates = suspects_for_fix(session.graph, scores.ranking, scores.first, units, local,
                                                  scored.tolerances, causes, delegation)
                    pattern_of = {n.key: pattern(n.name) for n in session.graph.candidates()}
                    fix = find_fix(runs, candidates, limit, pattern_of=pattern_of)
        finally:
            runs.close()
    return Findings(local=local, impact=impact, fix=fix, curve=curve, delegation=delegation, runs=runs.runs,
                    sensitivity=sensitivity)


def local_units(session: Session, stats: dict[Tap, TensorStats], groups: dict[str, tuple[str, ...]],
                errors: dict[tuple[str, int], float], tolerances: dict[str, float]) -> dict[str, tuple[str, ...]]:
    """The units whose local error is measured: each measured node with its group's members, by node key.

    A node whose error stays under `LOCAL_SHARE` of its tolerance, fed with the target's own inputs, makes no
    error of its own worth isolating (its local error would have to cancel what it inherits): only the others
    run alone. A twin's layers all run, as layer sensitivity ranks them by local error.
    """
    twin = session.target_graph is not session.graph
    worst: dict[str, float] = {}
    for (key, _), error in errors.items():
        worst[key] = max(worst.get(key, 0.0), error)
    units = owned_units(session.graph, list(dict.fromkeys(t.key for t in stats)), groups)
    return {k: u for k, u in units.items() if twin or worst.get(k, 0.0) >= LOCAL_SHARE * tolerances.get(k, 0.0)}


def _known_local(units: dict[str, tuple[str, ...]], known: dict[str, tuple[tuple[str, ...], dict[Tap, TensorStats]]]
                 ) -> tuple[dict[Tap, TensorStats], dict[str, tuple[str, ...]]]:
    """The local-error statistics already measured for `units` (same members), and the units still to run."""
    found: dict[Tap, TensorStats] = {}
    todo: dict[str, tuple[str, ...]] = {}
    for key, members in units.items():
        if key in known and known[key][0] == members:
            found.update(known[key][1])
        else:
            todo[key] = members
    return found, todo


def owned_units(graph: ModelGraph, keys: list[str], groups: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Each measured node with the members of its group it computes when run alone.

    Groups can share members: a residual that another group reads as a post-op operand is not a boundary, so
    the unmeasured ops feeding it belong to both groups. A shared member is computed by the later group (in
    topological order); the earlier one is fed its reference value. Which group owns a member depends only on
    the measured nodes, so the tensors every unit is fed are known as soon as the fusion groups are.
    """
    keys = sorted(dict.fromkeys(keys), key=lambda k: graph[k].index)
    owner: dict[str, str] = {}
    for key in keys:
        for member in groups.get(key, ()):
            owner[member] = key
    for key in keys:
        owner[key] = key
    return {k: tuple(m for m in dict.fromkeys([k, *groups.get(k, ())]) if owner[m] == k) for k in keys}


def twin_fix_candidates(session: Session, sensitivity, local: dict[str, float]) -> list[tuple[str, ...]]:
    """A twin's quantized layers, one unit each, the most harmful first (by impact, else by local error)."""
    keys = quantized_units(session)
    if sensitivity:
        by_name = {session.graph.find(s.name).key: s.impact for s in sensitivity}
        keys.sort(key=lambda k: -by_name.get(k, 0.0))
    else:
        keys.sort(key=lambda k: -local.get(k, 0.0))
    return [(k,) for k in keys]


def absorb(opened: Opened, plain: Plain, scored: Scored, findings: Findings) -> Scored:
    """Nodes over their tolerance whose error the network absorbs: not first divergences, not culprits.

    A diverged node is absorbed when its measured consumers (the next measured nodes downstream) come back
    within their tolerance and its impact on the final outputs (the final error when only it runs on the
    target, `Findings.impact`) is below the outputs' tolerance. When every final output is within its
    tolerance (and, over many samples, no top-1 answer flips), the plain run (every node on the target) is that
    measurement for all of them at once: a verdict
    must not contradict the final outputs, so every diverged node is then absorbed, and the report says why.
    """
    scores, graph = scored.scores, opened.session.graph
    diverged = [k for k in scores.ranking if scores.nodes[k].diverged]
    if not diverged or not scored.outputs:
        return scored
    limit = min(o.tolerance for o in scored.outputs)
    flips = len(opened.summary.flips_top1) if opened.summary is not None else 0
    # Class answers that flip over many samples are outputs disagreeing, whatever the examined sample's error.
    outputs_ok = not any(o.diverged for o in scored.outputs) and not flips
    if outputs_ok:
        absorbed = set(diverged)
        worst = max(scored.outputs, key=lambda o: o.error / o.tolerance if o.tolerance else math.inf)
        why = (f"{len(absorbed)} node(s) exceed their tolerance but the network absorbs their error: every final "
               f"output is within its tolerance (worst '{worst.name}' {worst.error:.1e} <= {worst.tolerance:.1e}) "
               "with all of them on the target")
        measured = {k: v for k, v in findings.impact.items() if k in absorbed}
        if measured:
            why += "; alone on the target, " + ", ".join(f"'{graph[k].name}' moves them by {v:.1e}"
                                                         for k, v in list(measured.items())[:3])
        why += "."
    else:
        measured_keys = {k for k, s in scores.nodes.items()}
        absorbed = set()
        for key in diverged:
            impact = findings.impact.get(key)
            if impact is None or impact >= limit:
                continue
            consumers = [c for c in graph.downstream(key, include_self=False, stop=lambda c: c in measured_keys)
                         if c in measured_keys]
            if consumers and all(scores.nodes[c].error <= scores.nodes[c].tolerance for c in consumers):
                absorbed.add(key)
        if not absorbed:
            return scored
        why = (f"{len(absorbed)} node(s) exceed their tolerance, but their consumers come back within tolerance and "
               f"each alone on the target moves the final outputs by less than their tolerance ({limit:.1e}): "
               + ", ".join(f"'{graph[k].name}' {findings.impact[k]:.1e}" for k in sorted(absorbed)[:3])
               + "; they are absorbed, not first divergences.")
    tol = plain.tolerance
    rescored = score_graph(graph, scored.errors, scored.tolerances, min_growth=tol.min_growth, absorbed=absorbed)
    return replace(scored, scores=rescored, absorbed=tuple(sorted(absorbed, key=lambda k: graph[k].index)),
                   absorbed_why=why)


# ----- helpers shared by the stages -------------------------------------------------------------------------
def first_causes(graph: ModelGraph, stats: dict[Tap, TensorStats], scores: Scores, key: str) -> list[Cause]:
    """The diagnosis of one scored node from its own and its inputs' statistics (precision-agnostic)."""
    node, s = graph[key], scores.nodes[key]
    taps = [t for t in stats if t.key == key]
    inputs = [stats[Tap(k, p)] for k, p in graph.data_inputs(key) if Tap(k, p) in stats]
    return diagnose(s.role, s.error, s.tolerance, node.reduction_length, stats[taps[0]] if taps else None, inputs, "",
                    node.op_type)


def fidelity(session: Session, metric: str | Callable[[TensorStats], float]) -> Fidelity | None:
    """Did exposing taps change the final-output error? The worst ratio of instrumented to plain error."""
    runs = session.tapped_runs
    if not runs or not session.outputs:
        return None
    plain = max(metric_value(s, metric) for _, _, s in session.outputs)
    worst: tuple[float, float] | None = None
    for outputs in runs:
        tapped = max(metric_value(s, metric) for _, _, s in outputs)
        ratio = _ratio(tapped, plain)
        if worst is None or abs(np.log(max(ratio, 1e-300))) > abs(np.log(max(worst[1], 1e-300))):
            worst = (tapped, ratio)
    assert worst is not None
    tapped, ratio = worst
    low, high = FIDELITY_RANGE
    warning = ""
    if not low <= ratio <= high:
        warning = (
            f"Exposing intermediate tensors changed the final-output error from {plain:.2e} to {tapped:.2e} "
            f"(ratio {ratio:.2f}, outside [{low}, {high}]): the target compiled differently with taps, so the "
            "per-node errors may not explain the plain run. Try strategy='bisection' (few taps per compile)."
        )
    return Fidelity(plain_error=plain, tapped_error=tapped, ratio=ratio, warning=warning)


def _tap_bytes(options: BisectOptions) -> int | None:
    """The resolved options' `max_tap_bytes`: bytes or None (`open_comparison` has replaced "auto")."""
    return cast("int | None", options.max_tap_bytes)


def _ratio(tapped: float, plain: float) -> float:
    if tapped == plain:
        return 1.0
    if plain == 0 or not math.isfinite(plain):
        return float("inf") if tapped > plain else 0.0
    return tapped / plain


def comparison_precision(ref: DeviceInfo | None, target: DeviceInfo | None, target_graph: ModelGraph | None) -> str:
    """The coarsest precision in play: it sets the expected rounding error."""
    if ref is None or target is None:
        raise InputError("Both sides must have run before the precision in play is known.")
    candidates = [ref.precision, target.precision]
    if target_graph is not None:
        # Quantizers (FakeQuantize, compressed weights) have their own model (`twin.twin_tolerance`); only
        # activations stored in a lower float precision change the rounding of every node.
        candidates += [t.dtype for n in target_graph.candidates() for t in n.outputs if t.dtype in ("f16", "bf16")]
    return max(candidates, key=unit_roundoff)
