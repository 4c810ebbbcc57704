"""The stages of a `bisect()` run, each a function from the frozen records of the stages before it to the
next one (`bisect_ov.pipeline.records`):

    open_comparison(model, ref, target, inputs, target_model, options)  -> Setup
    run_untouched(setup)                                  -> Examined     (engine, tolerance; `pipeline.untouched`)
    generate(setup, examined)                           -> (Generation | None, Examined)  (`pipeline.generate`)
    measure(setup, examined)                                               -> Measurement (`pipeline.measure`)
    score(setup, examined, measurement)                                    -> Scored
    experiments(setup, examined, measurement, scored)                      -> Findings  (`experiments.partitioned`)
    decide(setup, examined, measurement, scored, findings)                 -> Scored    (`pipeline.decide`)
    assemble(setup, examined, measurement, scored, findings)               -> Report    (`pipeline.assemble`)

No stage assigns to another object's fields. The options arrive resolved (`BisectOptions.resolve`): a
stage never re-decides what can run.
"""

from __future__ import annotations

import logging
import sys
from contextlib import ExitStack
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Mapping, Sequence

import numpy as np

from bisect_ov.analysis.bodies import bodies_note
from bisect_ov.analysis.diagnosis import Cause, diagnose
from bisect_ov.analysis.judge import NOTABLE, OWN_SHARE
from bisect_ov.analysis.metrics import TensorStats, metric_value
from bisect_ov.analysis.names import pattern
from bisect_ov.analysis.scoring import Scores, score_graph
from bisect_ov.capture.device import plan_recorded
from bisect_ov.core.errors import DeviceError, InputError
from bisect_ov.core.records import DeviceInfo, Noise
from bisect_ov.engine.comparison import Comparison, Sample
from bisect_ov.engine.ledger import Clock, Ledger
from bisect_ov.engine.runner import Runner
from bisect_ov.experiments.baseline import rounding_baseline
from bisect_ov.experiments.clamping import find_clamp, overflow_origins
from bisect_ov.experiments.generated import better_setting, without_activation_quantization, without_generated_kernels
from bisect_ov.experiments.local import local_errors, local_units, split_known
from bisect_ov.experiments.partitioned import (
    Findings,
    MixedRuns,
    contribution_curve,
    find_fix,
    smallest_range,
    suspects_for_fix,
)
from bisect_ov.experiments.partitioned import impact as impact_of
from bisect_ov.experiments.remedies import remedy_costs
from bisect_ov.experiments.scaling import find_scale_factor, least_headroom
from bisect_ov.experiments.twin import foreign_weights_note, layer_sensitivity, twin_fix_candidates
from bisect_ov.experiments.whole import output_scales, worst
from bisect_ov.frameworks.side import FrameworkSide
from bisect_ov.model.graph import ModelGraph, weight_bytes
from bisect_ov.model.load import load_model, model_label
from bisect_ov.model.match import identity_match, match_nodes
from bisect_ov.model.state import Stateless, is_stateful, make_stateless
from bisect_ov.model.taps import Tap
from bisect_ov.pipeline.measure import over_tolerance
from bisect_ov.pipeline.options import BisectOptions
from bisect_ov.pipeline.plan import make_plan, two_implementations
from bisect_ov.pipeline.records import Examined, Measurement, Scored, Setup
from bisect_ov.pipeline.sides import bind_sides
from bisect_ov.pipeline.untouched import comparison_precision, comparison_tolerance, examine, run_untouched
from bisect_ov.report.report import OutputResult
from bisect_ov.run.devices import make_device
from bisect_ov.run.inputs import parameter_specs, prepare_inputs_noted
from bisect_ov.samples.batches import prepare_pair
from bisect_ov.samples.prompts import PromptInputs, is_prompt, sweep_prompts
from bisect_ov.samples.runs import SampleRun, run_samples
from bisect_ov.samples.sources import Samples, SampleSummary, as_samples

log = logging.getLogger(__name__)

__all__ = ["open_comparison", "run_untouched", "examine", "score", "experiments", "impact_suspects",
           "diagnosis_of", "comparison_precision"]


# ----- stages -----------------------------------------------------------------------------------------------
def open_comparison(model: Any, ref: Any, target: Any, inputs: Any, target_model: Any, options: BisectOptions,
                    clock: Clock | None = None, truth: FrameworkSide | None = None) -> Setup:
    """Load the model(s), walk and match them, build both devices and inputs; run many samples when given.

    Framework sides (`bisect_ov.pipeline.sides.resolve_sides` made them) are bound to the walked model with the
    examined inputs, and the match keeps the tensors they have values for; `truth` is the float64 side. The
    samples' run is the caller's to close (`Setup.samples`) once this returns; if it raises, it is closed here."""
    clock = clock or Clock()
    loaded = _load(model, target_model, clock)
    ov_model, ov_target = loaded.model, loaded.target
    with clock("graph"):
        graph = ModelGraph(ov_model)
        target_graph = ModelGraph(ov_target) if ov_target is not None else graph
        match = match_nodes(graph, target_graph) if ov_target is not None else identity_match(graph)
    if ov_target is not None and graph.candidates() and not match.pairs:
        raise InputError(f"Nothing to compare: none of the model's {len(graph.candidates())} compute nodes has a "
                         f"counterpart in target_model '{ov_target.get_friendly_name()}' (matched by friendly name, "
                         "then by tensor name). A twin comes from the same model: quantized with NNCF, compressed, "
                         "or converted again, which keep the names.")
    options.tolerance_model().check_names(graph)
    # Recorded runs (captures) replay what another machine ran: they supply inputs, and cannot run pieces.
    plan = plan_recorded(make_device(ref, dict(options.ref_config), role="ref"),
                         make_device(target, dict(options.target_config), role="target"), inputs,
                         twin=ov_target is not None, models=(graph.model, ov_target),
                         labels=(model_label(model), model_label(target_model) if target_model is not None else None))
    # What can run is decided here, once (local errors: the target runs pieces fed with the reference's values;
    # the tap budget in bytes from the weights); later stages read the resolved values.
    resolved = options.resolve(local_possible=plan.local and plan.target.can_run_pieces,
                               pieces_possible=plan.pieces and plan.ref.can_run_pieces and plan.target.can_run_pieces,
                               twin=ov_target is not None, weight_bytes=weight_bytes(ov_model))
    show = sys.stderr.isatty() if options.progress is None else options.progress
    many, prompts, sweep_notes = _many(loaded, plan.inputs, options)
    # Samples are read as they run and only summaries kept: memory does not grow with their number.
    run = (SampleRun(many, options.executor, samples_per_batch=options.samples_per_batch,
                     batch_retries=options.batch_retries, progress=show,
                     owned=not isinstance(plan.inputs, Samples) or bool(options.prompt_lengths), prompts=prompts)
           if many is not None else None)
    with ExitStack() as on_error:
        if run is not None:
            on_error.callback(run.close)
        if run is None:
            first, cast = _one_sample(loaded, plan.inputs, options, prompts)
        else:
            first, cast = _sample_pair(loaded, run.samples, 0, options, prompts)
        bound = bind_sides(graph, first[0], plan.ref, plan.target, truth, match, twin=ov_target is not None,
                           asked_pieces=bool(options.fix or options.delegation or options.curve))
        comparison = Comparison(graph, target_graph, bound.match, bound.ref, bound.target, exact_checks=plan.exact)
        runner = Runner(comparison, Ledger(clock), progress=show)
        examined = Sample.of(*first)
        summary = None
        untouched = None  # the untouched pair the samples ran on, handed to the examined sample's untouched run
        if run is not None:
            # Every sample on both sides; the detailed search then runs on the worst one.
            summary, untouched = run_samples(runner, run, partial(metric_value, metric=options.metric),
                                             class_names=options.classifier_outputs, seed=options.seed)
            worst = summary.ranking[0]
            if options.prompt_lengths:
                infos = (untouched[0].info, untouched[1].info) if untouched is not None else None
                worst, sweep_note = _sweep_examined(summary, runner, options, graph, infos)
                summary = replace(summary, examined=worst, notes=summary.notes + (sweep_note,))
            pair, cast = _sample_pair(loaded, run.samples, worst, options, prompts)
            examined = Sample.of(*pair)
        on_error.pop_all()  # it ran: the caller closes the samples' run
    # the cast notes are the examined sample's
    notes = (tuple(plan.notes) + bound.notes + (_one_sample_classes(graph, options) if run is None else ())
             + (summary.notes if summary is not None else ()) + sweep_notes + cast
             + _input_notes(graph, examined.ref) + _state_notes(loaded, options) + bodies_note(graph)
             + (foreign_weights_note(graph, target_graph, runner.match) if ov_target is not None else ()))
    return Setup(comparison, runner, examined, resolved, ov_model, ov_target, run, summary, notes, clock,
                 loaded.state, loaded.target_state, frameworks=bound.frameworks, truth=bound.truth,
                 untouched=untouched)


def _one_sample_classes(graph: ModelGraph, options: BisectOptions) -> tuple[str, ...]:
    """With one sample, `classifier_outputs` checked against the outputs (the samples pass checks them when
    many run) and said unused."""
    if not options.classifier_outputs:
        return ()
    outputs = [graph.output_name(r.key) for r in graph.results()]
    unknown = [n for n in options.classifier_outputs if n not in outputs]
    if unknown:
        raise InputError(f"classifier_outputs {unknown} are not outputs of the model. Outputs: {outputs}.")
    return ("classifier_outputs compare top-1/top-5 answers over many samples: with one sample they are not used.",)


@dataclass(frozen=True, eq=False)
class _Loaded:
    """The models as loaded: the user's, and the ones compared (a stateful model's stateless form)."""

    user_model: Any  # ov.Model
    model: Any  # ov.Model
    target: Any  # ov.Model | None
    state: Stateless | None
    target_state: Stateless | None


def _load(model: Any, target_model: Any, clock: Clock) -> _Loaded:
    """Read the model and the target's (a twin), refuse one without outputs, make stateful ones stateless."""
    with clock("load"):
        ov_model = load_model(model)
        ov_target = load_model(target_model) if target_model is not None else None
    for which, m in (("model", ov_model), ("target_model", ov_target)):
        if m is not None and not m.outputs:
            raise InputError(f"The {which} '{m.get_friendly_name()}' has no outputs: there is nothing to compare. "
                             "Give a model with at least one Result.")
    state = make_stateless(ov_model) if is_stateful(ov_model) else None
    target_state = make_stateless(ov_target) if ov_target is not None and is_stateful(ov_target) else None
    return _Loaded(ov_model, state.model if state is not None else ov_model,
                   target_state.model if target_state is not None else ov_target, state, target_state)


def _many(loaded: _Loaded, inputs: Any, options: BisectOptions) -> tuple[Samples | None, Any, tuple[str, ...]]:
    """The samples when there are many (a prompt-length sweep's prompts cut from one), the LLM prompt inputs every
    sample goes through (`_prompts`), and the notes of cutting them."""
    many = as_samples(inputs)
    notes: tuple[str, ...] = ()
    sweep = options.prompt_lengths
    if sweep:
        if many is not None:
            raise InputError("A prompt-length sweep cuts one prompt to each length: give one prompt (token ids or "
                             "{'input_ids': ...}) or none (a random one), not many samples.")
        prompts_cut, sweep_notes = sweep_prompts(loaded.user_model, sweep, inputs, options.seed)
        many, notes = Samples(prompts_cut), tuple(sweep_notes)
    return many, _prompts(loaded), notes


def _prompts(loaded: _Loaded) -> PromptInputs | None:
    """What makes a prompt the compared model's inputs (token ids into an LLM's inputs, a stateful model's
    variables reset), for one sample and for many alike; None for a model that takes no ``input_ids`` and has no
    variables."""
    takes_ids = any("input_ids" in spec.names for spec in parameter_specs(loaded.user_model))
    return PromptInputs.of(loaded.user_model, loaded.state) if takes_ids or loaded.state is not None else None


def _one_sample(loaded: _Loaded, inputs: Any, options: BisectOptions,
                prompts: PromptInputs | None) -> tuple[tuple[list, list], tuple[str, ...]]:
    """One sample's arrays for both sides, and a note per input whose values were cast: through `prepare_pair`,
    as each of many samples. A stateful model's variables start from its own inputs, so random inputs, a file or
    arrays in input order are made the user's model's inputs first."""
    notes: tuple[str, ...] = ()
    if loaded.state is not None and not is_prompt(inputs):
        arrays, notes = prepare_inputs_noted(loaded.user_model, inputs, seed=options.seed,
                                             prompt_length=options.prompt_length)
        inputs = {spec.name: a for spec, a in zip(parameter_specs(loaded.user_model), arrays)}
    ref, target, cast = prepare_pair(None, inputs, loaded.model, loaded.target, options.seed, False, prompts,
                                     prompt_length=options.prompt_length)
    return (ref, target), notes + cast


def _sample_pair(loaded: _Loaded, samples: Samples, index: int, options: BisectOptions,
                 prompts: Any) -> tuple[tuple[list, list], tuple[str, ...]]:
    """Sample `index` of many, as arrays for both sides (a bad one named), and its cast notes."""
    sample = samples.load(index)
    ref, target, notes = prepare_pair(index, sample, loaded.model, loaded.target, options.seed,
                                      samples.names_file(index, sample), prompts)
    return (ref, target), notes


def _input_notes(graph: ModelGraph, arrays: Sequence[Any]) -> tuple[str, ...]:
    """A note per floating input that holds NaN or Inf values."""
    notes: tuple[str, ...] = ()
    for param, array in zip(graph.parameters(), arrays):
        if np.issubdtype(np.asarray(array).dtype, np.floating) and not np.isfinite(array).all():
            nan, inf = int(np.isnan(array).sum()), int(np.isinf(array).sum())
            notes += (f"Input '{param.name}' holds {nan:,} NaN and {inf:,} Inf value(s) of {np.asarray(array).size:,}: "
                      "non-finite values in the inputs propagate on both sides, and positions where both sides "
                      "agree on them are compared as equal.",)
    return notes


def _state_notes(loaded: _Loaded, options: BisectOptions) -> tuple[str, ...]:
    """What a stateful model's variables become, and generation steps asked for on a model without them."""
    state = loaded.state
    if state is None:
        return ((f"steps={options.steps} was asked for, but the model has no variables (KV cache): generation "
                 "steps need a stateful LLM, so only one run was compared.",) if options.steps else ())
    return (f"Stateful model: its {len(state.variables)} variables (ReadValue/Assign, e.g. a KV cache) are "
            "compared with the states reset before each run; each is an input holding its initial value and "
            f"an output '{state.model.outputs[state.n_outputs].get_any_name()}', ... compared like any output.",)


def _sweep_examined(summary: SampleSummary, runner: Runner, options: BisectOptions, graph: ModelGraph,
                    infos: tuple[DeviceInfo, DeviceInfo] | None) -> tuple[int, str]:
    """The prompt of a sweep to examine node by node, and the note that says why: the shortest length whose
    final error is over the outputs' tolerance (the smallest of the final outputs' tolerances, for the precision
    the untouched compiles ran, `infos`: None when the samples ran on an executor), else the worst length."""
    lengths = options.prompt_lengths
    worst = summary.ranking[0]
    errors = ", ".join(f"{n} tokens {e:.1e}" for n, e in zip(lengths, summary.errors))
    if infos is None:
        return worst, (f"Prompt-length sweep, final-output error by length: {errors}. The samples ran on an executor, "
                       f"so the worst length ({lengths[worst]} tokens) is examined node by node.")
    # As `run_untouched` will judge the examined sample.
    tolerance = comparison_tolerance(options, runner.comparison, *infos)
    limit = make_plan(tolerance, graph, two_implementations=two_implementations(runner.comparison, tolerance.precision or ""),
                      default_model=options.tolerance is None).limit
    over = [i for i, e in enumerate(summary.errors) if not e <= limit]
    text = f"Prompt-length sweep, final-output error by length: {errors} (the outputs' tolerance {limit:.1e}). "
    if not over:
        return worst, text + (f"No length diverges at the outputs; the worst ({lengths[worst]} tokens) is examined "
                              "node by node.")
    start = over[0]
    since = "" if len(over) == len(lengths) - start else " (not at every longer length)"
    return start, text + (f"The outputs diverge from {lengths[start]} tokens on{since}; that length is examined node by "
                          "node.")


def score(setup: Setup, examined: Examined, measurement: Measurement) -> Scored:
    """The target's noise floor, every node's tolerance, error-growth scores and final-output results."""
    engine, options, plan = examined.engine, setup.options, examined.plan
    # A noise floor only raises tolerances: with nothing over its tolerance it cannot change the verdict, so the
    # untouched target is not compiled or run again for it (what the runs made show is still reported).
    needed = (measurement.beside is not None or examined.recompiled is not None  # made already: free to use
              or over_tolerance(setup, examined, measurement.stats, measurement.exact))
    measured_noise = (engine.noise(reproduced=measurement.reproduced, extra_work=options.noise_runs and needed,
                                   recompiled=examined.recompiled, beside=measurement.beside)
                      if options.noise else {})
    noise_note = ""
    emulated = engine.untouched.target.info is not None and engine.untouched.target.info.emulated
    if options.noise and options.noise_runs and not needed and not emulated and "compile_to_compile" not in measured_noise:
        noise_note = ("The untouched target was not compiled or run a second time for the noise check: no node's "
                      "error and no output is over its tolerance, which is all a noise floor raises.")
    noise = Noise(**measured_noise) if measured_noise else None
    floor = 2 * noise.floor if noise is not None else 0.0
    with setup.clock("score"):
        errors = {(tap.key, tap.port): setup.error_of(s) for tap, s in measurement.stats.items()
                  if plan.counts(tap.key, tap.port)}
        exact = measurement.exact
        # An integer computation has one right answer: the two sides must agree exactly.
        tolerances = {tap.key: 0.0 if tap.key in exact else max(floor, plan.node(tap.key))
                      for tap in measurement.stats}
        scores = score_graph(engine.runner.graph, errors, tolerances, min_growth=plan.tolerance.min_growth)
        outputs = tuple(OutputResult(name, s, setup.error_of(s), max(floor, plan.output(key)))
                        for name, key, s in engine.untouched.outputs)
    return Scored(errors, tolerances, scores, outputs, noise, measurement.fidelity, noise_note=noise_note)


def experiments(setup: Setup, examined: Examined, measurement: Measurement, scored: Scored) -> Findings:
    """Local errors, impacts, the delegation range, the contribution curve and the fix, as the plan's
    `Experiments` say."""
    engine, options, plan = examined.engine, setup.options, examined.plan
    planned = plan.experiments
    if not planned.any:
        return Findings()
    with setup.clock("experiments"):
        stats, scores = measurement.stats, scored.scores
        measured = list(dict.fromkeys(t.key for t in stats))
        units = {k: tuple(dict.fromkeys([k, *measurement.groups.get(k, ())])) for k in measured}
        local: dict[str, float] = {}
        twin = setup.comparison.twin
        units_run: dict[str, tuple[str, ...]] = {}
        if planned.local and measured:
            # A twin whose outputs agree needs every layer's own error only for its sensitivity or a fix.
            every = bool(planned.sensitivity or planned.fix or any(o.diverged for o in scored.outputs))
            units_run = local_units(setup.comparison, stats, measurement.groups, scored.errors, scored.tolerances,
                                    every_twin_layer=every)
            found, todo = split_known(units_run, measurement.local_runs)
            if todo:
                found.update(local_errors(engine, todo, max_bytes=options.tap_bytes))
            for tap, st in found.items():
                if plan.counts(tap.key, tap.port):
                    local[tap.key] = max(local.get(tap.key, 0.0), setup.error_of(st))
        baseline = None
        suspects = _origin_candidates(setup, scored, local)
        device = planned.baseline
        if device is not None and suspects:
            # Rounding alone for the units that could be origins: it decides whether they are.
            baseline = rounding_baseline(engine, {k: u for k, u in units_run.items() if k in suspects}, device,
                                         setup.error_of, max_bytes=options.tap_bytes, counts=plan.counts)
        runs = MixedRuns(engine, setup.error_of,
                         scales=output_scales([o.tolerance for o in scored.outputs], planned.fix_limit))
        try:
            curve = contribution_curve(runs, planned.curve) if planned.curve else []
            delegation = smallest_range(runs) if planned.delegation else None
            impact: dict[str, float] = {}
            if planned.impact:
                impact = _impacts(runs, impact_suspects(scores, local, scored.tolerances), units, planned.impact,
                                  scored)
            sensitivity = layer_sensitivity(engine, runs.error, local, units=units_run) if planned.sensitivity else ()
            fix, scale_factor, clamp, kernel_setting = None, None, None, None
            limit = (planned.fix_limit if planned.fix_limit is not None
                     else min((o.tolerance for o in scored.outputs), default=0.0))
            final = worst([o.error for o in scored.outputs], runs.scales)
            if planned.kernel_setting and not final <= limit:
                kernel_setting = without_generated_kernels(engine, setup.error_of, limit, final, runs.scales)
            if planned.activation_setting and not final <= limit and not (kernel_setting and kernel_setting.solved):
                kernel_setting = better_setting(kernel_setting, without_activation_quantization(
                    engine, setup.error_of, limit, final, runs.scales))
            if planned.fix:
                least = least_headroom(stats.values())
                if planned.scale_factor and not final <= limit and least < 0:
                    # The cheapest remedy first: an f16 overflow the plugin's activation scaling may cure.
                    scale_factor = find_scale_factor(engine, setup.error_of, limit, final, least, scales=runs.scales)
                if planned.clamp and not final <= limit:
                    # Next, a patched model: clamps where the values leave f16's range.
                    origins = overflow_origins(engine.runner.graph, [(t.key, t.port, st) for t, st in stats.items()])
                    clamp = find_clamp(engine, setup.error_of, limit, final, origins, runs.scales)
                if twin and engine.runner.match.quantized:
                    candidates = twin_fix_candidates(engine, sensitivity, local, scores.first)
                    fix = find_fix(runs, candidates, limit)
                else:
                    causes = {k: tuple(diagnosis_of(engine.runner.graph, stats, scores, k)) for k in scores.first}
                    candidates = suspects_for_fix(engine.runner.graph, scores.ranking, scores.first, units, local,
                                                  scored.tolerances, causes, delegation)
                    pattern_of = {n.key: pattern(n.name) for n in engine.runner.graph.candidates()}
                    fix = find_fix(runs, candidates, limit, pattern_of=pattern_of)
                # What each remedy that solves costs is measured when remedies are asked for (fix=True).
                scale_factor, clamp, fix, kernel_setting = remedy_costs(
                    engine, setup.error_of, scale_factor, clamp, fix, kernel_setting,
                    patched=options.patched_model is not None, scales=runs.scales)
        finally:
            runs.close()
    return Findings(local_errors=local, impacts=impact, fix=fix, curve=curve, delegation=delegation, runs=runs.runs,
                    sensitivity=sensitivity, baseline=baseline, scale_factor=scale_factor, clamp=clamp,
                    kernel_setting=kernel_setting)


def impact_suspects(scores: Scores, local: Mapping[str, float], tolerances: Mapping[str, float]) -> list[str]:
    """The order the impact runs measure suspects in: the first divergences, then the nodes that make the most
    error of their own (local error over their tolerance, by how many times): the likeliest to explain the outputs
    alone (the judge's dominant origins), then the other sources and amplifiers by rank."""
    growth = [k for k in scores.ranking if scores.nodes[k].role in ("source", "amplifier")]
    by_local = sorted((k for k in local if local[k] > tolerances.get(k, 0.0)),
                      key=lambda k: -local[k] / max(tolerances.get(k, 0.0), 1e-30))
    return list(dict.fromkeys([*scores.first, *by_local, *growth]))


def _impacts(runs: MixedRuns, suspects: list[str], units: dict[str, tuple[str, ...]], count: int,
             scored: Scored) -> dict[str, float]:
    """The final error with only each suspect on the target, for the first `count` of them. When the outputs
    diverge, a suspect whose impact turns out small (below the outputs' tolerance and `NOTABLE` of the final
    error: what the judge sets aside as a bystander) does not use up a place: the next suspects are measured
    too, up to `count` more runs, so that the source the verdict names next has an impact of its own (a
    ConvNeXt's four layer scales, each underflowing f16 and each harmless, took all three places before)."""
    limit = min((o.tolerance for o in scored.outputs), default=0.0)
    final = max((o.error for o in scored.outputs), default=0.0)
    diverging = final > limit
    found: dict[str, float] = {}
    counted = 0
    for key in suspects:
        if counted >= count or len(found) >= 2 * count:
            break
        try:
            found.update(impact_of(runs, {key: units.get(key, (key,))}))
        except DeviceError as err:
            # The target cannot run a piece around this unit (the CPU plugin refuses some pieces of ONNX exports
            # it runs whole: "contains empty child edge"): its impact is unknown, the others are still measured.
            log.info("Impact of '%s' not measured: the target could not run the pieces around it: %s", key, err)
            continue
        if not diverging or found[key] >= limit or found[key] >= NOTABLE * final:
            counted += 1
    return found


def _origin_candidates(setup: Setup, scored: Scored, local: dict[str, float]) -> list[str]:
    """The nodes the rounding-only baseline is measured for: only where it decides something, the nodes whose
    local error is at least `OWN_SHARE` of their tolerance (rules 3 and 7 can name no other). When the outputs
    diverge, only those of them within their tolerance: growth and impacts judge the others, and rule 7 may name
    one where nothing else is (a node that makes 0.7 of its tolerance, amplified past theirs by what follows). None,
    most of the time, so a benign job pays nothing for it."""
    if not scored.outputs:
        return []
    flips = len(setup.summary.flips_top1) if setup.summary is not None else 0
    diverging = bool(flips) or any(o.diverged for o in scored.outputs)
    return [k for k, e in local.items() if k in scored.scores.nodes
            and OWN_SHARE * (tolerance := scored.tolerances.get(k, 0.0)) <= e and not (diverging and e > tolerance)]


# ----- helpers shared by the stages -------------------------------------------------------------------------
def diagnosis_of(graph: ModelGraph, stats: dict[Tap, TensorStats], scores: Scores, key: str) -> list[Cause]:
    """The diagnosis of one scored node from its own and its inputs' statistics (precision-agnostic)."""
    node, s = graph[key], scores.nodes[key]
    taps = [t for t in stats if t.key == key]
    inputs = [stats[Tap(k, p)] for k, p in graph.data_inputs(key) if Tap(k, p) in stats]
    return diagnose(s.role, s.error, s.tolerance, node.reduction_length, stats[taps[0]] if taps else None, inputs, "",
                    node.op_type)
