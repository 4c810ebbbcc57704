"""The untouched run: both sides' plain run of the examined sample, the target first, and the engine that measures
it (`run_untouched`, the second stage of `bisect_ov.pipeline.stages`).

An emulated target's untouched run exposes the search's first tensors at once (`_emulated_first`): the emulation
rounds every op's output whether it is exposed or not, so that one compile gives both the plain outputs and the
first measurement (the compile and the run the search would make again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from bisect_ov.analysis.exactness import exact_candidates
from bisect_ov.analysis.tolerance import unit_roundoff
from bisect_ov.core.errors import InputError
from bisect_ov.core.records import DeviceInfo
from bisect_ov.engine.comparison import Comparison, Sample
from bisect_ov.engine.engine import Ahead, Engine, one_compile, ran_ahead, start_ahead
from bisect_ov.engine.runner import Runner
from bisect_ov.engine.untouched import TargetRun, exposable, ready_taps, run_reference, run_target
from bisect_ov.experiments.twin import twin_tolerance
from bisect_ov.model.graph import ModelGraph, weight_bytes
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap, tap_model, tensor_sizes
from bisect_ov.pipeline.measure import AHEAD_BYTES
from bisect_ov.pipeline.options import BisectOptions, ResolvedOptions
from bisect_ov.pipeline.plan import Fusion, make_plan, plan_experiments, plan_fusion, two_implementations
from bisect_ov.pipeline.records import Examined, Setup
from bisect_ov.run.stateful import runs_stateful
from bisect_ov.search.strategies import Prefetch, Strategy, strategy_class

__all__ = ["run_untouched", "examine", "comparison_precision", "comparison_tolerance", "plan_prefetch", "Prefetched"]


def run_untouched(setup: Setup) -> Examined:
    """Run the untouched model on both sides (the target first); set the tolerance from the precision really used.

    An f32 reference's plain run can expose the tensors later stages measure, so it need not compile again:
    with `full`, the first chunk (both sides then tap the same tensors); against a lower-precision target,
    the fusion-group boundaries (or every tensor, for bisection) and the integer nodes' operands, when they
    fit one compile's budget. Not against an f32 target: exposing other tensors than the target does moves
    f32 results by ~1e-5 where ops cancel (measured on the demo's instance norm), which is noise against bf16
    or f16 rounding but a false divergence between two f32 runs. With fusion taps beyond the budget, the
    reference's plain run is the streamed measurement itself (`bisect_ov.engine.untouched`).
    """
    runner, options, comparison = setup.runner, setup.options, setup.comparison
    first = _emulated_first(setup)
    if first is None:
        target_run = run_target(runner, setup.sample, compiled=setup.untouched)
        fusion = plan_fusion(comparison, target_run.runtime, target_run.untappable)
        prefetched, ran = None, None
    else:
        target_run, fusion, prefetched, ran = first
    kept: list[Any] = []  # the steps run the same form: the reference's compile is kept for them
    keep = setup.runs_steps and not runs_stateful(runner.device("ref"))  # else they run the stateful model
    engine = examine(runner, setup.sample, options, target_run=target_run, fusion=fusion,
                     keep=kept.append if keep else None, prefetched=prefetched, ran=ran)
    tolerance = comparison_tolerance(options, comparison, engine.untouched.ref_info, engine.untouched.target.info)
    groups = engine.untouched.target.info.activation_groups if engine.untouched.target.info is not None else 0
    return Examined(engine, make_plan(tolerance, comparison.graph, fusion,
                                      plan_experiments(options, comparison, tolerance.precision, groups),
                                      two_implementations=two_implementations(comparison, tolerance.precision or ""),
                                      default_model=options.tolerance is None),
                    kept_ref=kept[0] if kept else None)


def comparison_tolerance(options: BisectOptions, comparison: Comparison, ref: DeviceInfo | None, target: DeviceInfo | None):
    """The tolerance model for the precision the two sides really ran; a quantized twin's includes its
    quantization (`twin_tolerance`)."""
    precision = comparison_precision(ref, target, comparison.target_graph if comparison.twin else None)
    tolerance = options.tolerance_model().with_precision(precision)
    if comparison.twin and comparison.match.quantized:
        tolerance = twin_tolerance(tolerance, comparison.graph, comparison.target_graph, comparison.match)
    return tolerance


def examine(runner: Runner, sample: Sample, options: ResolvedOptions | None = None, *,
            target_run: TargetRun | None = None, fusion: Fusion | None = None,
            keep: Callable[[Any], None] | None = None, prefetched: "Prefetched | None" = None,
            ran: Ahead | None = None) -> Engine:
    """The untouched run of `sample` on both sides, as the engine that measures it. Without `options` the
    reference exposes nothing and the target runs once (a generation step examined afresh). `target_run`: the
    untouched target's run already made; `fusion`: its fused kernels already read (`plan_fusion`); `keep`:
    receives the reference's untouched compile (`engine.untouched.run_reference`); `prefetched` and `ran`: what
    the reference exposes and the first measurement, when the untouched target's run made it (`_emulated_first`)."""
    if target_run is None:
        target_run = run_target(runner, sample)
    if options is None or target_run.compiled is not None:
        return Engine(runner, sample, run_reference(runner, sample, target_run, keep=keep))
    if fusion is None:
        fusion = plan_fusion(runner.comparison, target_run.runtime, target_run.untappable)
    pre = prefetched or plan_prefetch(runner.comparison, sample, options, fusion)
    ahead = ran or _ahead(runner, pre, target_run)
    return Engine(runner, sample, run_reference(runner, sample, target_run, taps=pre.wanted,
                                                stream_bytes=pre.stream_bytes, streamed_taps=pre.compared,
                                                keep=keep), ahead)


@dataclass(frozen=True)
class Prefetched:
    """What the reference's plain run exposes for the search (`Strategy.prefetch`): `wanted`, of which later
    stages compare `compared` (None: all), streamed within `stream_bytes` (None: not streamed)."""

    strategy: type[Strategy]
    prefetch: Prefetch
    wanted: list[Tap]
    compared: list[Tap] | None
    stream_bytes: int | None

    @property
    def sizes(self) -> Mapping[Tap, int] | None:
        return self.prefetch.sizes

    @property
    def max_bytes(self) -> int | None:
        return self.prefetch.max_bytes


def plan_prefetch(comparison: Comparison, sample: Sample, options: ResolvedOptions, fusion: Fusion) -> Prefetched:
    """The strategy's `Prefetched` for `sample`: the fusion boundaries and units, the integer nodes' operands
    against a lower precision, within the options' tap budget."""
    target = comparison.target
    lower = target.emulated or target.activation_precision not in ("f32", "")
    graph = comparison.graph
    exact = exact_candidates(graph) if lower and comparison.exact_checks else []
    exact_taps = (*(Tap(k, 0) for k in exact), *(Tap(i, p) for k in exact for i, p in graph.data_inputs(k)))
    strategy = strategy_class(options.strategy)
    sizes = tensor_sizes(graph, list(sample.ref)) or None
    prefetch = Prefetch(fusion.boundaries, fusion.units, sizes, options.tap_bytes, exact_taps, lower)
    wanted, compared = strategy.prefetch(comparison, prefetch)
    return Prefetched(strategy, prefetch, wanted, compared, options.tap_bytes if lower and strategy.streams else None)


def _first_taps(runner: Runner, pre: Prefetched, untappable: frozenset[Tap]) -> list[Tap] | None:
    """The search's first measurement when it is known (`Strategy.first_taps`), one compile, and its reference
    values are exposed by the reference's plain run (`run_reference`'s `taps`, one compile of an f32 reference);
    else None."""
    comparison = runner.comparison
    first = pre.strategy.first_taps(comparison, pre.prefetch)
    exposed = ready_taps(comparison, *exposable(comparison, pre.wanted, untappable, pre.stream_bytes, pre.sizes))
    if not first or not exposed:
        return None
    taps = one_compile(runner, first, pre.max_bytes, pre.sizes, untappable)
    return taps if taps is not None and set(taps) <= set(exposed) else None


def _emulated_first(setup: Setup) -> tuple[TargetRun, Fusion, Prefetched, Ahead] | None:
    """An emulated target's untouched run, made with the search's first measurement exposed (see the module
    docstring): the untouched run (its outputs the tapped run's first ones), the fusion read from it, what the
    reference exposes, and the first measurement made; None where the first measurement is not known beforehand
    (several compiles, a strategy that decides as it goes), for a twin, for a device that runs no pieces, or when
    the samples pass compiled the untouched pair."""
    runner, comparison = setup.runner, setup.comparison
    target = comparison.target
    if not (target.emulated and target.can_run_pieces) or comparison.twin or setup.untouched is not None:
        return None  # (a recorded emulation's sampled values are not the run's own)
    runtime, untappable = RuntimeGraph(), frozenset[Tap]()  # an emulated compile's runtime graph says nothing
    fusion = plan_fusion(comparison, runtime, untappable)
    pre = plan_prefetch(comparison, setup.sample, setup.options, fusion)
    taps = _first_taps(runner, pre, untappable)
    if taps is None:
        return None
    tapped = tap_model(runner.target_graph, [runner.target_of[t] for t in taps])
    with runner.clock("plain run"):
        compiled = runner.compile("target", tapped.model, taps=tapped.added_outputs)
        outputs = [np.array(a) for a in compiled.infer(list(setup.sample.target))]  # copies: outlive the compile
        runner.ran("target")
        runner.note("target", compiled)
    info = compiled.info
    del compiled  # its values are copied: the reference compiles without it
    run = TargetRun(tuple(outputs[:tapped.n_original_outputs]), runtime, untappable, info)
    return run, fusion, pre, ran_ahead(tapped, taps, outputs)


def _ahead(runner: Runner, pre: Prefetched, target_run: TargetRun) -> Ahead | None:
    """The target's compile for the search's first measurement, started beside the reference's untouched run (a
    compile leaves part of the cores idle), when that measurement is known (`Strategy.first_taps`), is one
    compile whose reference values the untouched run exposes (`run_reference`'s `taps`, fitting one compile of
    an f32 reference), on a device that compiles pieces, and the model is small enough that both compiles at
    once cost little memory (`AHEAD_BYTES` of weights, twice that of tensors)."""
    if (not runner.target.can_run_pieces or weight_bytes(runner.target_graph.model) > AHEAD_BYTES
            or sum((pre.sizes or {}).values()) > 2 * AHEAD_BYTES):
        return None
    taps = _first_taps(runner, pre, target_run.untappable)
    return start_ahead(runner, taps) if taps is not None else None


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
