"""The measuring stage: a strategy's search driven through the engine, local errors where they decide
refinement, the fidelity check, integer nodes checked exactly, and the per-node spread over many samples.

The driver loop is the one place that both measures and runs local errors: a strategy proposes a `Step`,
the driver answers it (taps through `Engine.measure_parts`, local errors through `experiments.local`) and
hands back the results. Values flow down: a streamed measurement yields its segments, and the driver runs the
local errors of each while the reference's values are held.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Sequence, cast

import numpy as np

from bisect_ov.analysis.metrics import TensorStats, metric_value
from bisect_ov.core.records import Fidelity
from bisect_ov.engine.engine import Engine
from bisect_ov.engine.measured import Measured, TappedRun
from bisect_ov.engine.runner import FinalOutput
from bisect_ov.experiments.local import LOCAL_SHARE, LocalErrors, local_units, measure_local, owned_units
from bisect_ov.model.taps import Tap
from bisect_ov.pipeline.options import ResolvedOptions
from bisect_ov.pipeline.records import Examined, Measurement, Setup
from bisect_ov.samples.runs import node_spread
from bisect_ov.search.strategies import Results, Strategy, fusion_taps, make_strategy

__all__ = ["measure", "fidelity", "FIDELITY_RANGE"]

FIDELITY_RANGE = (0.5, 2.0)


@dataclass
class _Search:
    """What one strategy's search measured: summed measurements and the local errors it ran."""

    measured: Measured = field(default_factory=Measured)
    local_runs: LocalErrors = field(default_factory=dict)


def measure(setup: Setup, examined: Examined) -> Measurement:
    """Run the chosen strategy; ``auto`` is ``fusion``, falling back to ``bisection`` when unfaithful."""
    engine, options = examined.engine, setup.options
    graph, tol = engine.graph, examined.tolerance
    max_bytes = options.tap_bytes

    def diverged(tap: Tap, stats: TensorStats) -> bool:
        return setup.error_of(stats) > tol.for_node(graph[tap.key], tap.port)

    name = "fusion" if options.strategy == "auto" else options.strategy
    fusion = name == "fusion"
    search = _run(setup, examined, _strategy(name, engine, diverged, options), max_bytes, local=fusion)
    faithful = fidelity(engine.untouched.outputs, search.measured.runs, options.metric)
    fell_back = False
    reproduced = any(r.reproduced for r in search.measured.runs)
    groups = search.strategy.groups()
    if options.strategy == "auto" and faithful is not None and faithful.warning:
        # The fusion taps changed what the target computes: their runs do not speak for the bisection's.
        search = _run(setup, examined, _strategy("bisection", engine, diverged, options), max_bytes, local=False)
        faithful = fidelity(engine.untouched.outputs, search.measured.runs, options.metric)
        reproduced = reproduced or any(r.reproduced for r in search.measured.runs)
        groups, fell_back, name = {}, True, "bisection"
    measured = search.measured
    pending = [k for k in engine.exact_candidates() if k not in measured.exact]
    if pending:
        # Integer Conv/MatMul nodes are measured with their inputs, so each is checked against its exact result;
        # that compile is instrumented like the others, so it votes in the fidelity check too.
        taps = {Tap(k, 0) for k in pending} | {Tap(i, p) for k in pending for i, p in graph.data_inputs(k)}
        measured = measured.plus(engine.measure(sorted(taps, key=lambda t: graph[t.key].index)))
        faithful = fidelity(engine.untouched.outputs, measured.runs, options.metric)
        reproduced = reproduced or any(r.reproduced for r in measured.runs)
    # The metric travels to workers as a partial of a module-level function: picklable. Each node over every
    # sample runs each sample again with the measured tensors exposed: several plain inferences per sample,
    # which the fast budget leaves out (the outputs' pass still ranks the samples).
    spread = (node_spread(engine.runner, list(measured.stats), setup.samples, partial(metric_value, metric=options.metric),
                          seed=options.seed)
              if setup.samples is not None and setup.summary is not None and options.node_spread else {})
    return Measurement(dict(measured.stats), groups, name, fell_back, spread, search.local_runs if fusion and not fell_back
                       else {}, faithful, reproduced, dict(measured.exact))


def _strategy(name: str, engine: Engine, diverged: Callable[[Tap, TensorStats], bool],
              options: ResolvedOptions) -> Strategy:
    return make_strategy(name, engine.comparison, diverged, runtime=engine.target_runtime,
                         untappable=engine.untappable, refine=options.refine, local=options.local)


@dataclass
class _Driven(_Search):
    strategy: Strategy = cast(Strategy, None)


def _run(setup: Setup, examined: Examined, strategy: Strategy, max_bytes: int | None, *, local: bool) -> _Driven:
    """Drive one strategy's search to its end; with `local`, local errors run where the strategy asks for them
    and on each streamed segment (see the module docstring)."""
    engine, options, tol = examined.engine, setup.options, examined.tolerance
    graph = engine.graph
    can_local = local and options.local
    done = _Driven(strategy=strategy)
    planned: dict[str, tuple[str, ...]] = {}
    if can_local and not engine.comparison.twin:  # the units streamed segments can run alone
        boundaries, groups = fusion_taps(engine.comparison, engine.target_runtime, engine.untappable)
        planned = owned_units(graph, [t.key for t in boundaries], groups)
    results = Results()
    while (step := strategy.next_step(results)) is not None:
        if step.local:
            results = results.plus(creates=_creates(setup, examined, done, results, strategy))
            continue
        parts = (engine.measure_parts(step.taps, max_bytes, desc=step.desc) if step.chunked
                 else iter([engine.measure_part(step.taps)]))
        got = []
        for part in parts:
            got.append(part)
            if part.values is not None and planned:
                # Streamed: each unit's local error runs while the reference's values it reads are held, so no
                # reference compile is needed for them later.
                worst: dict[str, float] = {}
                for t, st in part.stats.items():
                    worst[t.key] = max(worst.get(t.key, 0.0), setup.error_of(st))
                units = {k: planned[k] for k, e in worst.items()
                         if k in planned and e >= LOCAL_SHARE * tol.for_node(graph[k])}
                if units:
                    done.local_runs.update(measure_local(engine, units, done.local_runs, max_bytes=max_bytes,
                                                    values=part.values))
        measured = Measured.of(got)
        done.measured = done.measured.plus(measured)
        results = results.plus(measured.stats)
    return done


def _creates(setup: Setup, examined: Examined, done: _Driven, results: Results, strategy: Strategy) -> dict[str, bool]:
    """For the groups whose local error is measured (now, for those the experiments need anyway), whether each
    makes error of its own; nothing when local errors cannot run or the taps so far are unfaithful."""
    engine, options, tol = examined.engine, setup.options, examined.tolerance
    graph = engine.graph
    faithful = fidelity(engine.untouched.outputs, done.measured.runs, options.metric)
    if not options.local or (faithful is not None and faithful.warning):
        return {}
    stats = results.stats
    errors = {(t.key, t.port): setup.error_of(st) for t, st in stats.items()}
    limits = {t.key: tol.for_node(graph[t.key]) for t in stats}
    units = local_units(engine.comparison, stats, strategy.groups(), errors, limits)
    done.local_runs.update(measure_local(engine, units, done.local_runs, max_bytes=options.tap_bytes))

    def over(tap: Tap, st: TensorStats) -> bool:
        return setup.error_of(st) > tol.for_node(graph[tap.key], tap.port)

    return {key: any(over(t, st) for t, st in got.items()) for key, (_, got) in done.local_runs.items() if got}


def fidelity(untouched: Sequence[FinalOutput], runs: Sequence[TappedRun],
             metric: str | Callable[[TensorStats], float]) -> Fidelity | None:
    """Did exposing taps change the final-output error? The worst ratio of instrumented to plain error."""
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
    if not low <= ratio <= high:
        warning = (
            f"Exposing intermediate tensors changed the final-output error from {plain:.2e} to {tapped:.2e} "
            f"(ratio {ratio:.2f}, outside [{low}, {high}]): the target compiled differently with taps, so the "
            "per-node errors may not explain the plain run. Try strategy='bisection' (few taps per compile)."
        )
    return Fidelity(plain_error=plain, tapped_error=tapped, ratio=ratio, warning=warning)


def _ratio(tapped: float, plain: float) -> float:
    if tapped == plain:
        return 1.0
    if plain == 0 or not math.isfinite(plain):
        return float("inf") if tapped > plain else 0.0
    return tapped / plain
