"""The measuring stage: a strategy's search driven through the engine, local errors where they decide
refinement, the fidelity check, integer nodes checked exactly, and the per-node spread over many samples.

The driver loop is the one place that both measures and runs local errors: a strategy proposes a `Step`,
the driver answers it (taps through `Engine.measure_parts`, local errors through `experiments.local`) and
hands back the results. Values flow down: a streamed measurement yields its segments, and the driver runs the
local errors of each while the reference's values are held.

When no strategy keeps the fidelity in `FIDELITY_RANGE` (the taps changed what the target computes), the
per-node errors are not evidence: `localize` then finds where error starts with partitioned runs that expose
nothing but their cuts (a prefix of the graph on the target, the rest on the reference, bisected over its
length; `experiments.partitioned.first_prefix`), checked by running the whole graph on the target cut in two
at the answer, or says why no node can be named. The outcome rides in the `Fidelity` record;
`faithful_nodes` makes the report's first divergences and culprits say only that.
"""

from __future__ import annotations

import math
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from bisect_ov.analysis.judge import EXCESS
from bisect_ov.analysis.metrics import TensorStats, metric_value
from bisect_ov.core.errors import BisectError, first_line
from bisect_ov.core.numeric import F32_AGREEMENT
from bisect_ov.core.records import Cause, Fidelity
from bisect_ov.engine.measured import Measured, TappedRun
from bisect_ov.engine.runner import FinalOutput
from bisect_ov.experiments.local import LocalErrors, local_units, measure_local, worth_isolating
from bisect_ov.experiments.partitioned import MixedRuns, PrefixCuts, first_prefix, target_in_pieces
from bisect_ov.model.graph import weight_bytes
from bisect_ov.model.taps import Tap
from bisect_ov.pipeline.options import ResolvedOptions
from bisect_ov.pipeline.records import Examined, Measurement, Setup
from bisect_ov.report.report import NodeResult
from bisect_ov.samples.runs import NodeSpread, node_spread
from bisect_ov.search.strategies import Results, Strategy, make_strategy

__all__ = ["measure", "fidelity", "localize", "faithful_nodes", "FIDELITY_RANGE", "PREFIX_SHARE"]

FIDELITY_RANGE = (0.5, 2.0)
# Final-output errors at f32-level agreement: their ratio says nothing about whether taps changed what ran.
FIDELITY_FLOOR = F32_AGREEMENT
PREFIX_SHARE = 0.5  # error starts at the end of the shortest prefix reaching this share of the full error


@dataclass
class _Driven:
    """One strategy's search: the strategy, its summed measurements and the local errors it ran."""

    strategy: Strategy
    measured: Measured = field(default_factory=Measured)
    local_runs: LocalErrors = field(default_factory=dict)
    recompile: Future | None = None  # the noise check's compile, started beside the search (`_may_recompile`)
    reproduced: bool = False  # a compile measured before a fresh start reproduced the untouched outputs


def measure(setup: Setup, examined: Examined) -> Measurement:
    """Run the chosen strategy; ``auto`` is ``fusion``, falling back to ``bisection`` when unfaithful."""
    engine, options = examined.engine, setup.options
    graph, plan = engine.runner.graph, examined.plan
    max_bytes = options.tap_bytes

    def diverged(tap: Tap, stats: TensorStats) -> bool:
        return setup.error_of(stats) > plan.node(tap.key, tap.port)

    strategy = _strategy(options.strategy, examined, diverged, options)
    search = _run(setup, examined, strategy, max_bytes, local=strategy.streams,
                  recompile=_may_recompile(setup, examined))
    recompile = search.recompile
    faithful = fidelity(engine.untouched.outputs, search.measured.runs, options.metric, _negligible(examined))
    # A composite that started over (``auto``'s bisection after unfaithful fusion taps) dropped what its first
    # part measured; a compile of it that reproduced the untouched outputs still says the target is deterministic.
    reproduced = search.reproduced or any(r.reproduced for r in search.measured.runs)
    # The noise check's compile started beside the measurement: its outputs, waited for here, unless a tapped
    # compile reproduced the untouched outputs (then the check compiles nothing, and it is dropped unused).
    beside = tuple(recompile.result()) if recompile is not None and not reproduced else None
    groups, fell_back, name = strategy.groups(), strategy.fell_back, strategy.ran
    fusion = name == "fusion"
    measured = search.measured
    pending = [k for k in engine.exact_candidates() if k not in measured.exact]
    if pending:
        # Integer Conv/MatMul nodes are measured with their inputs, so each is checked against its exact result;
        # that compile is instrumented like the others, so it votes in the fidelity check too.
        taps = {Tap(k, 0) for k in pending} | {Tap(i, p) for k in pending for i, p in graph.data_inputs(k)}
        measured = measured.plus(engine.measure(sorted(taps, key=lambda t: graph[t.key].index)))
        faithful = fidelity(engine.untouched.outputs, measured.runs, options.metric, _negligible(examined))
        reproduced = reproduced or any(r.reproduced for r in measured.runs)
    if faithful is not None and faithful.rejected:
        # No strategy kept the taps faithful: where error starts comes from runs that expose nothing, or nowhere.
        faithful = localize(setup, examined, faithful)
    # The metric travels to workers as a partial of a module-level function: picklable. Each node over every
    # sample runs each sample again with the measured tensors exposed: several plain inferences per sample,
    # which the fast budget leaves out (the outputs' pass still ranks the samples).
    # A prompt-length sweep also keeps each length's first node over its tolerance.
    limits: dict[str, float] | None = None
    if options.prompt_lengths:
        limits = {}
        for t in measured.stats:
            limits[t.key] = max(limits.get(t.key, 0.0), plan.node(t.key, t.port))
    spread = (node_spread(engine.runner, list(measured.stats), setup.samples, partial(metric_value, metric=options.metric),
                          seed=options.seed, limits=limits, skip=setup.summary.missing)
              if setup.samples is not None and setup.summary is not None and options.node_spread else NodeSpread())
    return Measurement(dict(measured.stats), groups, name, fell_back, dict(spread.errors), dict(spread.ref_absmax),
                       search.local_runs if fusion and not fell_back else {}, faithful, reproduced, dict(measured.exact),
                       beside, dict(spread.first_over), spread.log, dict(measured.misshapen))


# A model whose weights and tensors are this small is compiled a second time beside the measurement (the noise
# check's compile): two compiles at once cost it little memory, and on 2 cores a compile beside another took
# two thirds of the time of the two in turn (ShuffleNetV2).
RECOMPILE_BESIDE_BYTES = 128 * 2**20
# The search's first target compile, started beside the reference's untouched run (`stages._ahead`), is one the
# search makes anyway: only the overlap costs memory. Measured on the zoo's full sizes (the default job, four
# fresh processes each, bound 128 MB against 1 GiB): BERT-base, ViT-B/16, GPT-2 and the 12-layer Llama (330 to
# 480 MB of weights) took 4% to 14% less time with it, peak RSS up 1 to 30 MB; BERT-large (1.3 GB) gained no
# time and 55 MB. A bound on the weights and
# (twice it) on the tensors, not a memory model: a 7B LLM's two compiles at once would be tens of GB.
AHEAD_BYTES = 2**30


def over_tolerance(setup: Setup, examined: Examined, stats: Mapping[Tap, TensorStats],
                   exact: Mapping[str, Any]) -> bool:
    """Whether a final output or a measured node (not an integer one checked exactly: it must agree whatever
    the noise) is over its tolerance: only then can the noise check's second compile change the verdict."""
    nodes = ((t.key, t.port, setup.error_of(s)) for t, s in stats.items() if t.key not in exact)
    return examined.plan.any_over(nodes, ((key, setup.error_of(s)) for _, key, s in examined.engine.untouched.outputs))


def _may_recompile(setup: Setup, examined: Examined) -> bool:
    """Whether the noise check's compile of the untouched target may start beside the measurement: the check
    will compile (noise runs asked for, a real device, no other compile of it made) and the model is small."""
    engine, options = examined.engine, setup.options
    info = engine.untouched.target.info
    if not (options.noise and options.noise_runs) or examined.recompiled is not None or info is None or info.emulated:
        return False
    return (weight_bytes(engine.runner.target_graph.model) <= RECOMPILE_BESIDE_BYTES
            and sum(engine.tensor_sizes.values()) <= 2 * RECOMPILE_BESIDE_BYTES)


def _strategy(name: str, examined: Examined, diverged: Callable[[Tap, TensorStats], bool],
              options: ResolvedOptions) -> Strategy:
    """A fresh search of strategy `name`, given the plan's fusion groups (read once, `Plan.fusion`)."""
    engine, fusion = examined.engine, examined.plan.fusion
    return make_strategy(name, engine.runner.comparison, diverged, runtime=engine.untouched.target_runtime,
                         untappable=engine.untouched.untappable, fusion=(fusion.boundaries, fusion.groups),
                         refine=options.refine, local=examined.plan.experiments.local,
                         cut_diverged=lambda tap, stats: (metric_value(stats, options.metric)
                                                         > examined.plan.search_limit(tap.key, tap.port)))


def _run(setup: Setup, examined: Examined, strategy: Strategy, max_bytes: int | None, *, local: bool,
         recompile: bool = False) -> _Driven:
    """Drive one strategy's search to its end; with `local`, local errors run where the strategy asks for them
    and on each streamed segment (see the module docstring). `recompile`: the noise check's compile may start
    beside it (`_may_recompile`)."""
    engine, options, plan = examined.engine, setup.options, examined.plan
    can_local = local and plan.experiments.local
    done = _Driven(strategy=strategy)
    planned: dict[str, tuple[str, ...]] = {}
    if can_local and not engine.runner.comparison.twin:  # the units streamed segments can run alone
        planned = dict(plan.fusion.units)
    results = Results()
    while (step := strategy.next_step(results)) is not None:
        if step.fresh:  # a composite's next part: nothing measured so far speaks for it
            done.reproduced = done.reproduced or any(r.reproduced for r in done.measured.runs)
            done.measured, done.local_runs, results, planned = Measured(), {}, Results(), {}
        if step.local:
            results = results.plus(creates=_creates(setup, examined, done, results, strategy))
            continue
        parts = (engine.measure_parts(step.taps, max_bytes, desc=step.desc) if step.chunked
                 else iter([engine.measure_part(step.taps)]))
        got = []
        for part in parts:
            got.append(replace(part, values=None))  # the values are used here, and dropped with the segment
            if part.values is not None and planned:
                # Streamed: each unit's local error runs while the reference's values it reads are held, so no
                # reference compile is needed for them later.
                worst: dict[str, float] = {}
                for t, st in part.stats.items():
                    if plan.counts(t.key, t.port):
                        worst[t.key] = max(worst.get(t.key, 0.0), setup.error_of(st))
                units = {k: planned[k] for k, e in worst.items()
                         if k in planned and worth_isolating(e, plan.node(k))}
                if units:
                    done.local_runs.update(measure_local(engine, units, done.local_runs, max_bytes=max_bytes,
                                                    values=part.values))
        measured = Measured.of(got)
        if (recompile and done.recompile is None and measured.runs and not any(r.reproduced for r in measured.runs)
                and over_tolerance(setup, examined, {**done.measured.stats, **measured.stats},
                                   {**done.measured.exact, **measured.exact})):
            # No tapped compile reproduced the untouched outputs so far, and something is over its tolerance:
            # the noise check will likely compile the untouched target again, so it starts now, beside the local
            # errors and later steps.
            done.recompile = engine.start_recompile()
        done.measured = done.measured.plus(measured)
        faithful = fidelity(engine.untouched.outputs, done.measured.runs, options.metric, _negligible(examined))
        results = results.plus(measured.stats, unfaithful=faithful is not None and bool(faithful.warning))
    return done


def _creates(setup: Setup, examined: Examined, done: _Driven, results: Results, strategy: Strategy) -> dict[str, bool]:
    """For the groups whose local error is measured (now, for those the experiments need anyway), whether each
    makes error of its own; nothing when local errors cannot run or the taps so far are unfaithful."""
    engine, options, plan = examined.engine, setup.options, examined.plan
    faithful = fidelity(engine.untouched.outputs, done.measured.runs, options.metric, _negligible(examined))
    if not plan.experiments.local or (faithful is not None and faithful.warning):
        return {}
    stats = results.stats
    errors = {(t.key, t.port): setup.error_of(st) for t, st in stats.items() if plan.counts(t.key, t.port)}
    limits = {t.key: plan.node(t.key) for t in stats}
    units = local_units(engine.runner.comparison, stats, strategy.groups(), errors, limits)
    done.local_runs.update(measure_local(engine, units, done.local_runs, max_bytes=options.tap_bytes))

    def over(tap: Tap, st: TensorStats) -> bool:
        return setup.error_of(st) > plan.node(tap.key, tap.port)

    return {key: any(over(t, st) for t, st in got.items()) for key, (_, got) in done.local_runs.items() if got}


def fidelity(untouched: Sequence[FinalOutput], runs: Sequence[TappedRun],
             metric: str | Callable[[TensorStats], float], negligible: float = 0.0) -> Fidelity | None:
    """Did exposing taps change the final-output error? The worst ratio of instrumented to plain error.

    `negligible`: errors at most this (f32-level agreement within the outputs' tolerance) are not judged: the
    ratio of two such errors says nothing about what the taps changed.
    """
    if not runs or not untouched:
        return None
    plain = max(metric_value(s, metric) for _, _, s in untouched)
    worst: tuple[float, float] | None = None
    for run in runs:
        tapped = max(metric_value(s, metric) for _, _, s in run.outputs)
        ratio = _ratio(tapped, plain)
        if worst is None or abs(np.log(max(ratio, 1e-300))) > abs(np.log(max(worst[1], 1e-300))):
            worst = (tapped, ratio)
    assert worst is not None
    tapped, ratio = worst
    low, high = FIDELITY_RANGE
    warning = ""
    if not low <= ratio <= high and max(plain, tapped) > negligible:
        warning = (
            f"Exposing intermediate tensors changed the final-output error from {plain:.2e} to {tapped:.2e} "
            f"(ratio {ratio:.2f}, outside [{low}, {high}]): the target compiled differently with taps, so the "
            "per-node errors may not explain the plain run. Try strategy='bisection' (few taps per compile)."
        )
    return Fidelity(plain_error=plain, tapped_error=tapped, ratio=ratio, warning=warning)


def _negligible(examined: Examined) -> float:
    """Final-output errors below both `FIDELITY_FLOOR` and every output's tolerance: f32-level agreement."""
    return min(FIDELITY_FLOOR, examined.plan.limit)


def _ratio(tapped: float, plain: float) -> float:
    if tapped == plain:
        return 1.0
    if plain == 0 or not math.isfinite(plain):
        return float("inf") if tapped > plain else 0.0
    return tapped / plain


# ----- when the taps are unfaithful -------------------------------------------------------------------------
def localize(setup: Setup, examined: Examined, rejected: Fidelity) -> Fidelity:
    """`rejected` (a fidelity out of range) with what the verdict rests on instead (see the module docstring).

    Only runs when the fidelity check failed: a whole-graph run in one piece (it must give the plain run's
    error), O(log N) prefix runs, and two runs of the whole graph on the target cut in two at the answer (they
    must give it too, or cutting changes what the target computes). Outcome ``localized_by_partitions`` with the
    node, or ``unfaithful`` with the reason.
    """
    engine = examined.engine
    graph, plain = engine.runner.graph, rejected.plain_error
    taps = (f"exposing intermediate tensors changed the final-output error from {plain:.2e} to "
            f"{rejected.tapped_error:.2e} (fidelity {rejected.ratio:.2f}, outside [{FIDELITY_RANGE[0]}, "
            f"{FIDELITY_RANGE[1]}]), so the per-node errors do not explain the plain run")
    limit = examined.plan.experiments.fix_limit
    if limit is None:
        limit = min((examined.plan.output(key) for _, key, _ in engine.untouched.outputs), default=0.0)

    def refuse(why: str, runs: int = 0, full_error: float | None = None) -> Fidelity:
        return replace(rejected, outcome="unfaithful", partitioned_runs=runs, reason=f"{taps}; {why}",
                       full_error=full_error)

    if plain <= limit:
        return refuse(f"the final outputs are within their tolerance ({plain:.2e} <= {limit:.2e}), so there is no "
                      "divergence to localize")
    if not engine.runner.target.can_run_pieces:
        return refuse(f"{engine.runner.target.name} cannot run pieces of the model, so no run that exposes nothing can "
                      "tell where error starts: the node cannot be localized on this device")
    if not engine.runner.ref.can_run_pieces:
        if engine.runner.comparison.twin:
            return refuse(f"{engine.runner.ref.name} runs only whole models, and cut pieces of a twin (target_model) "
                          "cannot be compared with it: the node cannot be localized here")
        return _localize_by_cuts(setup, examined, rejected, taps, refuse)
    runs = MixedRuns(engine, setup.error_of)
    order, checks = runs.order, 0
    try:
        full = runs.error(set(order))
        if not _in_range(full, plain):
            return refuse(f"the whole model compiled as one piece on {engine.runner.target.name} gives {full:.2e}, not the "
                          f"plain {plain:.2e}: pieces do not run what the plain run ran either, so the node cannot be "
                          "localized on this device", runs.runs, full_error=full)
        end = first_prefix(runs, PREFIX_SHARE * full)
        if end is None:
            return refuse("no prefix of the graph on the target reaches the error", runs.runs, full_error=full)
        at = runs.error(set(order[:end + 1]))
        before = runs.error(set(order[:end]))
        name = graph[order[end]].name
        group = _fused_with(examined, order[end])
        # Cut around the kernel the untouched target fused the node into, never inside it: a kernel cut in two is
        # not the kernel that ran (a fused attention whose error appears only whole loses it when split).
        first, last = _kernel_span(graph, order, end, group)
        for cut in (first - 1, last):
            if not 0 <= cut < len(order) - 1:
                continue
            checks += 1
            whole = max((setup.error_of(st) for st in target_in_pieces(engine, cut, order)), default=0.0)
            if not _in_range(whole, plain):
                return refuse(f"the whole model on {engine.runner.target.name} in two pieces cut after "
                              f"'{graph[order[cut]].name}' gives {whole:.2e}, not the plain "
                              f"{plain:.2e}: cutting the graph changes what the target computes, so the node cannot "
                              "be localized on this device", runs.runs + checks, full_error=full)
    except BisectError as err:
        return refuse(f"the partitioned runs that would localize it failed: {first_line(err)}", runs.runs + checks)
    finally:
        runs.close()
    count = runs.runs + checks
    where = ("there" if first == last else
             f"before and after the kernel that holds it ({last - first + 1} of its ops, fused by the target), "
             "never inside it,")
    return replace(rejected, outcome="localized_by_partitions", node=name, group=group, prefix_error=at,
                   before_error=before, full_error=full, partitioned_runs=count, reason=(
                       f"{taps}. Found instead by {count} partitioned runs that expose nothing but their cuts: with the "
                       f"graph up to '{name}' on the target and the rest on the reference the final-output error is "
                       f"{at:.2e}, up to the node before {before:.2e} (all of it on the target: {full:.2e}); the "
                       f"target cut in two {where} reproduces the plain run"))


def _localize_by_cuts(setup: Setup, examined: Examined, rejected: Fidelity, taps: str,
                      refuse: Callable[..., Fidelity]) -> Fidelity:
    """`localize` against a reference that runs only whole models (a framework, a recorded run): prefixes of the
    graph run alone on the target, each cut compared with the reference's values of the same tensors
    (`PrefixCuts`); the node named is where the cut first gets `EXCESS` times over its tolerance, more than
    rounding in two implementations leaves. The whole graph in one piece must give the plain run's error."""
    engine = examined.engine
    graph, plain, target = engine.runner.graph, rejected.plain_error, engine.runner.target.name
    comparison = engine.runner.comparison
    compared = frozenset(r for r, _ in comparison.match.pairs) - engine.untouched.untappable
    cuts = PrefixCuts(engine, setup.error_of, lambda t: examined.plan.node(t.key, t.port), compared)
    order, checks = cuts.order, 1
    try:
        full = max((setup.error_of(st) for st in target_in_pieces(engine, len(order) - 1, order)), default=0.0)
        if not _in_range(full, plain):
            return refuse(f"the whole model compiled as one piece on {target} gives {full:.2e}, not the plain "
                          f"{plain:.2e}: pieces do not run what the plain run ran either, so the node cannot be "
                          "localized on this device", checks, full_error=full)
        end = cuts.first_over(EXCESS)
        if end is None:
            return refuse(f"no prefix of the graph, alone on {target}, hands on tensors {EXCESS:g}x over their "
                          "tolerance", cuts.runs + checks, full_error=full)
        at = cuts.worst(end)[1]
        earlier = [i for i in cuts.positions() if i < end]
        before = cuts.worst(earlier[-1])[1] if earlier else 0.0
    except BisectError as err:
        return refuse(f"the partitioned runs that would localize it failed: {first_line(err)}", cuts.runs + checks)
    name, count = graph[order[end]].name, cuts.runs + checks
    found = replace(rejected, outcome="localized_by_partitions", node=name, group=_fused_with(examined, order[end]),
                    prefix_error=at, before_error=before, full_error=full, partitioned_runs=count, cut_compared=True)
    return replace(found, reason=(
        f"{taps}. Found instead by {count} runs of prefixes of the graph on the target that expose nothing but "
        f"their cuts, compared with the reference's values of those tensors: "
        f"{found.partition_finding(node=repr(name))} (the whole model in one piece gives the plain run's {full:.2e})"))


def _fused_with(examined: Examined, key: str) -> tuple[str, ...]:
    """The compute nodes the untouched target fused with `key` (its runtime layer's other members), by name."""
    engine = examined.engine
    graph = engine.runner.graph
    layer = engine.untouched.target_runtime.by_original.get(engine.runner.target_of.get(Tap(key, 0), Tap(key, 0)).key)
    known = {n.name for n in graph.candidates()}
    return tuple(n for n in (layer.original_names if layer is not None else ()) if n != graph[key].name and n in known)


def _kernel_span(graph: Any, order: Sequence[str], at: int, members: Sequence[str]) -> tuple[int, int]:
    """The first and last positions in `order` of the node at `at` and the `members` (names) of its kernel."""
    where = {key: i for i, key in enumerate(order)}
    spots = [at, *(where[k] for k in (graph.find(m).key for m in members) if k in where)]
    return min(spots), max(spots)


def _in_range(error: float, plain: float) -> bool:
    low, high = FIDELITY_RANGE
    return low <= _ratio(error, plain) <= high


def faithful_nodes(nodes: Sequence[NodeResult], first: tuple[str, ...], ranking: tuple[str, ...], found: Fidelity | None,
                   graph: Any, output_tolerance: float) -> tuple[tuple[NodeResult, ...], tuple[str, ...], tuple[str, ...]]:
    """The report's (nodes, first divergence keys, ranking) once the fidelity check has spoken.

    Faithful taps: unchanged. Rejected ones: no first divergence or culprit comes from them; a node localized
    by partitioned runs is the one first divergence and culprit (a `NodeResult` made for it when no tap
    measured it, its error the final-output error with the graph up to it on the target). The measured nodes
    stay, their numbers marked unfaithful by the report's notes and verdict.
    """
    if found is None or not found.rejected:
        return tuple(nodes), first, ranking
    kept = [replace(n, first=False, rank=None) if (n.first or n.rank is not None) else n for n in nodes]
    if found.outcome != "localized_by_partitions" or found.node is None:
        return tuple(kept), (), ()
    node = graph.find(found.node)
    how = Cause("note", f"localized by {found.partitioned_runs} partitioned runs (the per-node errors measured with "
                        f"taps are unfaithful): {found.partition_finding(node='here')}",
                {"prefix_error": float(found.prefix_error or 0.0), "before_error": float(found.before_error or 0.0),
                 "runs": float(found.partitioned_runs)})
    at = next((i for i, n in enumerate(kept) if n.key == node.key), None)
    if at is not None:
        kept[at] = replace(kept[at], first=True, rank=1, role="source", diagnosis=(how, *kept[at].diagnosis))
    else:
        before = float(found.before_error or 0.0)
        made = NodeResult(name=node.name, key=node.key, op_type=node.op_type, index=node.index,
                          error=float(found.prefix_error or 0.0), input_error=before, tolerance=output_tolerance,
                          growth=(found.prefix_error or 0.0) / before if before else math.inf, role="source",
                          first=True, rank=1, diagnosis=(how,), group=found.group,
                          inputs=tuple(k for k, _ in graph.data_inputs(node.key)))
        kept.append(made)
        kept.sort(key=lambda n: n.index)
    return tuple(kept), (node.key,), (node.key,)
