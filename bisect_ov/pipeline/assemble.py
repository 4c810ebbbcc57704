"""The last stage of a `bisect()` run: from the stages' records to a `Report`.

Builds one `NodeResult` per measured node (error, inherited error, role, local error, impact, diagnosis as
`Cause` records, what each side ran it with), ranks culprits with measured impact first, records the run's
settings and costs as typed records (`ToleranceInfo`, `RunOptions`, `InputInfo`, `StageCost`), writes the run's
notes, keeps the tensors the user asked for and saves the patched model of a fix. Reads the examined sample's
`Engine`; changes nothing in it.

Roles, first divergences and the ranking are the judge's (`bisect_ov.pipeline.decide`); this stage only
words them. Each node whose tensor exists only inside a kernel the target fused (from its runtime graph,
`bisect_ov.model.fusion.kernel_tensors`) carries that kernel's name (`NodeResult.inside_kernel`).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from dataclasses import replace
from typing import Any, Sequence

import numpy as np
import openvino as ov

from bisect_ov.analysis.diagnosis import diagnose, kernel_difference, observations
from bisect_ov.analysis.judge import EXCESS
from bisect_ov.analysis.spread import Distribution
from bisect_ov.analysis.tolerance import unit_roundoff
from bisect_ov.core import codec
from bisect_ov.core.fileio import atomic_paths
from bisect_ov.core.numeric import F16_MAX
from bisect_ov.core.records import Cause, InputInfo, RunOptions, StageCost, ToleranceInfo, Truth
from bisect_ov.engine.engine import Engine
from bisect_ov.experiments.local import LOCAL_SHARE
from bisect_ov.experiments.partitioned import Findings, patch_model
from bisect_ov.model.fusion import KernelTensors
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.load import model_label
from bisect_ov.model.match import foreign_inputs
from bisect_ov.model.quantized import find_quantization
from bisect_ov.model.taps import Tap
from bisect_ov.pipeline.measure import faithful_nodes
from bisect_ov.pipeline.records import Examined, Measurement, Scored, Setup
from bisect_ov.report.report import NodeResult, Report
from bisect_ov.repro import ReproSource
from bisect_ov.run.compressed import DYNAMIC_QUANTIZATION, compressed_products

__all__ = ["assemble", "run_notes", "record_of", "save_marked", "save_patched"]


def assemble(setup: Setup, examined: Examined, measurement: Measurement, scored: Scored, findings: Findings,
             *, model_source: Any, target_source: Any = None, generation: Any = None, truth: Any = None) -> Report:
    """The `Report` of a finished run. `model_source`/`target_source`: what the user passed, for labels."""
    session, options = examined.engine, setup.options
    ref_info, target_info = session.untouched.ref_info, session.untouched.target.info
    assert ref_info is not None and target_info is not None  # both sides ran in the plain run
    precision = examined.tolerance.precision
    assert precision is not None  # `run_untouched` set it (`Tolerance.with_precision`)
    with setup.clock("score"):
        kernels = examined.plan.fusion.kernels  # read once, into the plan
        ranking = scored.scores.ranking  # the judge's (`bisect_ov.pipeline.decide`)
        nodes = node_results(session, measurement, scored, precision, findings, ranking,
                             frozenset(examined.tolerance.quantization), kernels, examined.plan.two_implementations,
                             given_tolerance=examined.tolerance.value is not None)
        # Taps the fidelity check rejected name nothing (`pipeline.measure.faithful_nodes`).
        nodes, first_keys, ranking = faithful_nodes(nodes, scored.scores.first, ranking, scored.fidelity,
                                                    session.runner.graph, min((o.tolerance for o in scored.outputs), default=0.0))
        if truth is not None:
            nodes = tuple(replace(n, truth_errors=truth.nodes.get(n.key)) for n in nodes)
    kept = keep_tensors(session, options.keep, ranking)
    fix = findings.fix
    if fix is not None and options.patched_model is not None and fix.solved:  # an unsolved fix is no model to use
        fix = dataclasses.replace(
            # a stateful model's marks go on it as given (its stateless form, with the variables as inputs, is
            # no model a generate() loop runs)
            fix, patched_model=str(save_patched(setup.state.source if setup.state is not None and setup.state.source
                                                is not None else setup.model, session.runner.graph, fix.on_reference,
                                                options.patched_model)))
    match = session.runner.match
    twin = setup.target_model is not None
    report = Report(
        model=model_label(model_source), ref=ref_info, target=target_info, nodes=nodes,
        outputs=_with_expected(scored.outputs, findings), metric=options.metric_name,
        tolerance=record_of(ToleranceInfo, examined.tolerance.to_dict()),
        first_keys=first_keys, ranking=ranking, model_hash=session.runner.graph.structure_hash(),
        target_model=model_label(target_source) if twin else None,
        unmatched=({"model": list(match.unmatched_ref), "target_model": list(match.unmatched_target)} if twin
                   else {f"{r.role} ({r.framework})": list(r.unmatched) for r in setup.frameworks if r.unmatched}),
        timings=dict(setup.clock.stages), compiles=session.runner.compiles,
        costs={stage: record_of(StageCost, cost) for stage, cost in setup.clock.snapshot().items()},
        options=record_of(RunOptions, options.to_dict()), strategy=measurement.strategy,
        inputs=tuple(InputInfo(p.get_friendly_name(), tuple(int(d) for d in a.shape), str(a.dtype))
                     for p, a in zip(setup.model.get_parameters(), session.sample.ref)),
        samples=(replace(setup.summary.to_record(measurement.spread_log), worst_file=setup.samples.samples.file_of(
            setup.summary.ranking[0]) if setup.samples is not None and setup.summary.ranking else None)
                 if setup.summary is not None else None),
        openvino_version=ov.get_version(),
        notes=tuple(run_notes(setup, examined, measurement, scored))
        + _local_note(setup, examined, measurement, findings) + _baseline_note(findings) + _generation_note(generation)
        + _misshapen_note(measurement, session.runner.graph)
        + truth_notes(truth.record if truth is not None else None, truth.nodes if truth is not None else {},
                      session.runner.graph),
        fidelity=scored.fidelity, noise=scored.noise, fix=fix, scale_factor=findings.scale_factor, clamp=findings.clamp,
        kernel_setting=findings.kernel_setting,
        delegation=findings.delegation,
        curve=tuple(findings.curve), kept_tensors=kept, coverage=coverage(session.runner.graph, nodes,
                                                                      session.runner.match if setup.comparison.twin else None),
        repro_source=ReproSource(session.runner.comparison, session.sample, session.untouched.target_runtime),
        sensitivity=tuple(findings.sensitivity),
        steps=generation.steps if generation is not None else (),
        examined_step=generation.examined_step if generation is not None else None,
        frameworks=setup.frameworks, truth=truth.record if truth is not None else None,
    )
    return report


def _fmt_error(x: float) -> str:
    return f"{x:.1e}" if math.isfinite(x) else str(x)


def record_of(cls: type[Any], values: dict[str, Any]) -> Any:
    """Record `cls` of the JSON values another tier keeps as a dict (a tolerance, the options, a stage's cost).

    Decoded by the codec, so every value is checked against the record's field; a key the record lacks is a
    defect of this module (a setting added without its field), not something to drop silently.
    """
    unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise TypeError(f"{cls.__name__} has no field for {sorted(unknown)}")
    return codec.from_dict(cls, codec.encode(values))


def _with_expected(outputs, findings: Findings) -> tuple:
    """The final outputs with their rounding-only errors, when the baseline measured them."""
    baseline = findings.baseline
    if baseline is None or len(baseline.outputs) != len(outputs):
        return tuple(outputs)
    return tuple(dataclasses.replace(o, expected=e) for o, e in zip(outputs, baseline.outputs))


def _baseline_note(findings: Findings) -> tuple[str, ...]:
    """What the rounding-only baseline measured, or why it could not."""
    baseline = findings.baseline
    if baseline is None:
        return ()
    if baseline.note:
        return (baseline.note,)
    return (f"Rounding alone ({baseline.device}: the reference's model with every tensor rounded to the target's "
            f"precision) gives the final outputs {', '.join(f'{e:.1e}' for e in baseline.outputs[:3])} and the "
            f"{len(baseline.local)} suspect node(s) run alone their expected local error; a node whose local error is "
            f"{EXCESS:g}x its expected one is worse than its precision explains.",)


def truth_notes(truth: Truth | None, nodes: dict[str, tuple[float, float]], graph: ModelGraph) -> tuple[str, ...]:
    """What the float64 side says: who is closer at the outputs, where the reference is the imprecise side,
    where the target is off."""
    if truth is None:
        return ()
    notes = []
    if truth.outputs:
        name, (ref_error, target_error) = max(truth.outputs.items(), key=lambda kv: max(kv[1]))
        who = {"ref": "the reference is closer", "target": "the target is closer", "tie": "neither is clearly closer"}
        notes.append(f"Against float64 ({truth.side}), output '{name}': the reference is off by {ref_error:.1e}, the "
                     f"target by {target_error:.1e}: {who[truth.closer]}.")
    if truth.imprecise_ref:
        key = truth.imprecise_ref[0]
        ref_error, target_error = nodes[key]
        more = f" (and {len(truth.imprecise_ref) - 1} more)" if len(truth.imprecise_ref) > 1 else ""
        notes.append(f"At '{graph[key].name}'{more} the f32 reference is itself the imprecise side: it is off float64 "
                     f"by {ref_error:.1e}, over the node's tolerance, while the target is off by {target_error:.1e} "
                     f"(within {truth.multiplier:g}x of it): the disagreement there is the reference's own rounding "
                     "(a cancellation in f32), not a fault of the target.")
    if truth.target_off:
        key = truth.target_off[0]
        ref_error, target_error = nodes[key]
        more = f" (and {len(truth.target_off) - 1} more)" if len(truth.target_off) > 1 else ""
        notes.append(f"At '{graph[key].name}'{more} the target is off float64 by {target_error:.1e}, more than "
                     f"{truth.multiplier:g}x the reference's {ref_error:.1e}: the error is the target's.")
    return tuple(notes)


def _generation_note(generation: Any) -> tuple[str, ...]:
    if generation is None:
        return ()
    examined = f"; the nodes below are measured on step {generation.examined_step}." if generation.examined_step else "."
    return (f"Generation: {generation.why}{examined}", *generation.notes)


def _misshapen_note(measurement: Measurement, graph: Any) -> tuple[str, ...]:
    """The taps not compared because the two sides handed back tensors of different shapes."""
    if not measurement.misshapen:
        return ()
    (tap, shapes), more = next(iter(measurement.misshapen.items())), len(measurement.misshapen) - 1
    return (f"Not compared: '{graph[tap.key].name}'" + (f" and {more} more tensor(s)" if more else "")
            + f" came back with different shapes ({shapes}; the model gives "
            f"{graph[tap.key].outputs[tap.port].partial_shape}): a plugin can hand back the tensor it fused one into (the CPU's "
            "in-place Concat) when it is exposed. Those nodes carry their inputs' error on.",)


def _local_note(setup: Setup, examined: Examined, measurement: Measurement, findings: Findings) -> tuple[str, ...]:
    """Which nodes' local errors were measured, when the options asked for them and some were not."""
    if not examined.plan.experiments.local or setup.comparison.twin:
        return ()
    measured = list(dict.fromkeys(t.key for t in measurement.stats))
    left = [k for k in measured if k not in findings.local_errors]
    if not left:
        return ()
    done = len(measured) - len(left)
    if not done:
        return (f"No local error (a node alone on the target, fed with the reference's inputs) was measured: no "
                f"compared node's error reached {LOCAL_SHARE:g} of its tolerance, so no node's own error was isolated.",)
    return (f"Local errors (each node alone on the target, fed with the reference's inputs) were measured for the "
            f"{done:,} node(s) whose error reached {LOCAL_SHARE:g} of their tolerance; the other "
            f"{len(left):,} stay under it, so their own error was not isolated.",)


def run_notes(setup: Setup, examined: Examined, measurement: Measurement, scored: Scored) -> list[str]:
    """What the reader must know about how the run went: noise, integer results, fidelity, fallbacks."""
    session = examined.engine
    notes = list(setup.notes)
    ref_version = session.untouched.ref_info.openvino_version if session.untouched.ref_info is not None else ""
    target_version = session.untouched.target.info.openvino_version if session.untouched.target.info is not None else ""
    if ref_version and target_version and ref_version != target_version:
        notes.append(f"The sides ran different OpenVINO releases: the reference {ref_version}, the target "
                     f"{target_version}. A divergence may come from the release (its kernels, fusions or "
                     "precision defaults), not only from the device.")
    for role, info in (("Reference", session.untouched.ref_info), ("Target", session.untouched.target.info)):
        if info is not None and info.execution_devices:  # AUTO/HETERO/MULTI: what really ran
            notes.append(f"{role}: {info.note}.")
    if examined.plan.output_floor:
        notes.append("Two implementations of f32 are compared (another framework on one side): their summation orders "
                     "leave about 1e-6 between correct results after dozens of layers, so the final outputs are judged "
                     f"against f32-level agreement ({examined.plan.output_floor:.0e}); every node keeps its tolerance, "
                     "and one whose own error is several times it is named where it enters. Give a tolerance (tolerance=, "
                     "--tolerance) to judge the outputs by it.")
    left_out = examined.plan.experiments.note()
    if left_out:
        notes.append(left_out)
    if scored.absorbed_why:
        notes.append(scored.absorbed_why)
    blank = [o for o in scored.outputs if o.stats.numel and o.stats.ref_nan + o.stats.ref_inf == o.stats.numel]
    if blank:  # NaN and Inf in the inputs can leave nothing finite to compare: an agreement on NaN is no verdict
        notes.append(f"{len(blank)} of {len(scored.outputs)} final output(s) (e.g. '{blank[0].name}', "
                     f"{blank[0].stats.ref_nan:,} NaN and {blank[0].stats.ref_inf:,} Inf of {blank[0].stats.numel:,}) hold "
                     "no finite value on the reference: where both sides agree on NaN or Inf they count as equal, so "
                     "nothing of them was compared. Check the inputs.")
    saturated = [(t, s.saturated) for t, s in measurement.stats.items() if s.saturated]
    if saturated:
        notes.append(f"{sum(n for _, n in saturated):,} values in {len(saturated)} tensor(s) (e.g. "
                     f"'{session.runner.graph[saturated[0][0].key].name}') are at float32's extremes on the reference (masks "
                     "of float32's lowest value) and infinite or at the limit of its range on the target: they mean the "
                     "same (a masked position) and are compared as equal, saturated by design.")
    if scored.floor:
        notes.append(f"The target is not deterministic: its outputs differ by up to {scored.floor / 2:.2e} between "
                     "runs or compiles; errors below twice that are not counted.")
    for key, check in measurement.exact.items():
        if not (check.ref_exact and check.target_exact):
            notes.append(f"'{session.runner.graph[key].name}' computes on integers: {check.describe()}.")
    if scored.noise_note:
        notes.append(scored.noise_note)
    if scored.fidelity is not None and scored.fidelity.outcome:
        notes.append(scored.fidelity.reason[:1].upper() + scored.fidelity.reason[1:] + ". The per-node errors below "
                     "were measured with those taps: they are kept, marked unfaithful, and no culprit is named from them.")
    elif scored.fidelity is not None and scored.fidelity.warning:
        notes.append(scored.fidelity.warning)
    if setup.options.prompt_lengths and measurement.first_over:
        graph = setup.comparison.graph
        by_length = []
        for i, n in enumerate(setup.options.prompt_lengths):
            first = measurement.first_over.get(i)
            by_length.append(f"{n} tokens: " + (f"'{graph[first].name}'" if first else
                                                "none" if first == "" else "not measured"))
        notes.append("First node over its tolerance (in graph order) by prompt length: " + "; ".join(by_length) + ".")
    if measurement.fell_back:
        notes.append("The fusion-boundary taps did not reproduce the plain run faithfully; the bisection strategy was used.")
    return notes


def keep_tensors(session: Engine, keep: Sequence[str], ranking: Sequence[str]) -> dict[str, tuple]:
    """Both sides' values of the nodes the user asked to keep (names, tensor names, or "culprits")."""
    keys: list[str] = []
    for name in keep:
        keys += list(ranking[:5]) if name == "culprits" else [session.runner.graph.find(name).key]
    if not keys:
        return {}
    values = session.both_values([Tap(k, t.port) for k in dict.fromkeys(keys) for t in session.runner.graph[k].outputs])
    kept: dict[str, tuple] = {}
    for tap, pair in values.items():
        kept.setdefault(tap.key, pair)  # first output of each node
    return kept


def coverage(graph, nodes, match=None) -> float:
    """Share of the model's compute nodes compared directly or as members of a compared fused group; with a twin's
    `match`, only nodes with a counterpart count (a fused group's unmatched members were compared with nothing).
    Against a framework side the model is one on both sides: a fused group's members are covered by its output,
    whether or not the framework has a value for each of them."""
    compute = {n.key for n in graph.candidates()}
    counted = {r.key for r, _ in match.pairs} if match is not None else compute
    covered = ({n.key for n in nodes} | {graph.find(m).key for n in nodes for m in n.group}) & counted
    return len(covered & compute) / max(1, len(compute))


def save_patched(model: ov.Model, graph: ModelGraph, keep: Sequence[str], path) -> pathlib.Path:
    """Save `model` with the fix's nodes marked for GPU/NPU plugins to keep them in f32.

    The IR (`path` and its ``.bin``) is written under temporary names beside it and moved into place once
    both are complete (`atomic_paths`): a failed write (a full disk) leaves no partial model and raises a
    `WriteError`.
    """
    return save_marked(model, [graph[k].name for k in keep], path)


def save_marked(model: ov.Model, names: Sequence[str], path) -> pathlib.Path:
    """`model` with the ops `names` marked to stay in f32 (`patch_model`), saved atomically to `path`."""
    path = pathlib.Path(path)
    with atomic_paths(path, (".xml", ".bin"), what="the patched model ") as tmp:
        # The model's weights as they are (save's default halves f32 ones).
        ov.save_model(patch_model(model, names), str(tmp), compress_to_fp16=False)
    return path


def node_results(session: Engine, measurement: Measurement, scored: Scored, precision: str, findings: Findings,
                 ranking: tuple[str, ...], tolerance_quantized: Any = frozenset(),
                 kernels: KernelTensors | None = None, two_implementations: bool = False,
                 given_tolerance: bool = False) -> tuple[NodeResult, ...]:
    """One `NodeResult` per measured node, in topological order (`tolerance_quantized`: names of the nodes a
    twin's quantization model judges; `kernels`: which tensors exist only inside a kernel of the target;
    `two_implementations`: the plan's, `bisect_ov.pipeline.plan.two_implementations`; `given_tolerance`: one
    threshold the user gave, which the causes name as such)."""
    stats, scores, groups = measurement.stats, scored.scores, measurement.groups
    rank_of = {k: i for i, k in enumerate(ranking, start=1)}
    graph = session.runner.graph
    exact = measurement.exact
    runtime_ref, runtime_target = session.runner.runtime("ref"), session.runner.runtime("target")
    assert session.untouched.ref_info is not None and session.untouched.target.info is not None  # both sides ran in the plain run
    same_precision = session.untouched.ref_info.precision == session.untouched.target.info.precision
    by_key: dict[str, list[Tap]] = {}
    for tap in stats:
        by_key.setdefault(tap.key, []).append(tap)
    # A node the verdict names in place of a movement op that carries its values (`analysis.judge`, rule 6) is
    # shown with the movement op's measurement when it has none of its own.
    moved = scored.verdict.moved if scored.verdict is not None else {}
    stand_in = {at: key for key, at in moved.items() if at not in by_key and key in by_key}
    for at, key in stand_in.items():
        by_key[at] = by_key[key]
    # Against another framework in f32, weights the model stores in f16 (`ov.save_model`'s default) make every op
    # that reads them differ from the framework's, which computes with the original ones.
    compressed = ({k: q.weight_type for k, q in find_quantization(graph).items() if q.weight_type in ("f16", "bf16")}
                  if two_implementations else {})
    # A side that quantizes compressed-weight products' activations to int8 where the other does not
    # (`bisect_ov.run.compressed`): the target, or a reference given the setting.
    target_dq, ref_dq = session.untouched.target.info.activation_groups, session.untouched.ref_info.activation_groups
    quantizing = "target" if target_dq and target_dq != ref_dq else "reference" if ref_dq and ref_dq != target_dq else None
    quantized = (set(compressed_products(graph.model)) if quantizing is not None and not session.runner.comparison.twin
                 else set())
    results = []
    for key in graph.order:
        if key not in by_key or key not in scores.nodes:
            continue
        node, s = graph[key], scores.nodes[key]
        node_stats = tuple(stats[t] for t in sorted(by_key[key], key=lambda t: t.port))
        runtime = {}
        if node.name in runtime_ref:
            runtime["ref"] = runtime_ref[node.name]
        target_key = session.runner.target_of[by_key[key][0]].key
        if target_key in runtime_target:
            runtime["target"] = runtime_target[target_key]
        causes = observations(node_stats)
        if key in stand_in:
            carrier = graph[stand_in[key]]
            kernel = kernels.kernel_of(key) if kernels is not None else None
            causes.append(Cause("note", f"measured at '{carrier.name}' ({carrier.op_type}), which only moves its values: "
                                + (f"the fused kernel '{kernel}' that computed them stored none of its own"
                                   if kernel else "it stored none of its own")))
        differs = kernel_difference(runtime, same_precision)
        if differs and s.role != "ok":
            causes.append(Cause("kernel_difference", differs))
        if session.runner.comparison.twin:
            extra = foreign_inputs(session.runner.match, session.runner.target_graph, target_key)
            if extra:
                causes.append(Cause("foreign_inputs", f"in the target model its inputs pass through "
                                    f"{', '.join(extra[:4])}" + (f" and {len(extra) - 4} more" if len(extra) > 4 else "")
                                    + ", which the model lacks", {"count": len(extra)}))
        if key in exact:
            check = exact[key]
            causes.append(Cause("exact", check.describe(), {
                "exact_max": float(check.exact_max), "exact_sample": float(check.exact_sample),
                "ref_off": float(check.ref_off), "target_off": float(check.target_off)}))
        elif key in compressed and s.role in ("source", "amplifier"):
            stored = compressed[key]
            causes.append(Cause("compressed_weights", f"compressed weights: the model stores its weights in {stored} "
                                f"(ov.save_model compresses them unless compress_to_fp16=False) while the reference "
                                f"computes with the original f32 ones, each rounded by up to {unit_roundoff(stored):.1e} "
                                "here; save the model with compress_to_fp16=False to compare the conversion itself",
                                {"weight_roundoff": unit_roundoff(stored)}))
        elif key in quantized and s.role != "ok":  # its own error, whatever it inherits
            size, other = (target_dq, "reference") if quantizing == "target" else (ref_dq, "target")
            causes.append(Cause("quantized_activations", f"activations quantized: its weights are compressed, so the "
                                f"{quantizing}'s plugin quantizes its input to int8 in groups of {size} "
                                f"({DYNAMIC_QUANTIZATION}) where the {other} computes from the values as they are; "
                                f"{DYNAMIC_QUANTIZATION}=0 turns it off", {"group": size}))
        else:
            inputs = [stats[Tap(k, p)] for k, p in graph.data_inputs(key) if Tap(k, p) in stats]
            # A twin's node judged by the quantization model: its tolerance is the quantization's, not rounding's.
            judged = "quantization" if node.name in tolerance_quantized else precision
            causes += [*_constants_beyond(graph, key, precision, s.role),
                       *diagnose(s.role, s.error, s.tolerance, node.reduction_length, node_stats[0], inputs, judged,
                                 node.op_type, given=given_tolerance)]
        # A stand-in's numbers are its carrier's: the movement op's local error, impact and group.
        measured_as = stand_in.get(key, key)
        group = groups.get(measured_as, ())
        if key in stand_in:
            group = (measured_as, *group)
        results.append(NodeResult(
            name=node.name, key=key, op_type=node.op_type, index=node.index, error=s.error,
            input_error=s.inherited, tolerance=s.tolerance, growth=s.growth, role=s.role, first=s.first,
            rank=rank_of.get(key), local_error=findings.local_errors.get(measured_as),
            impact=findings.impacts.get(measured_as),
            expected_error=findings.baseline.local.get(measured_as) if findings.baseline is not None else None,
            # Only meaningful where a node was handed real error: inputs over its tolerance.
            amplification=s.error / s.inherited if s.inherited > s.tolerance and math.isfinite(s.inherited) else None,
            outputs=node_stats, tensor_names=tuple(n for t in node.outputs for n in t.names),
            inputs=tuple(k for k, _ in graph.data_inputs(key)), diagnosis=tuple(causes), runtime=runtime,
            group=tuple(dict.fromkeys(m for m in group if m != key)),
            over_samples=_over_samples(measurement.spread.get(measured_as), s.tolerance),
            ref_absmax_samples=measurement.ref_absmax.get(key, measurement.ref_absmax.get(measured_as)),
            # A stand-in was measured where its kernel stored the values, not inside it.
            inside_kernel=kernels.kernel_of(key) if kernels is not None and key not in stand_in else None,
        ))
    return tuple(results)


def _over_samples(spread: Distribution | None, tolerance: float) -> dict[str, float]:
    """A node's error over the samples (`Distribution.summary`) and on how many it is over its tolerance."""
    if spread is None or not spread.count:
        return {}
    return {**spread.summary(), "over_tolerance": spread.count_above(tolerance)}


def _constants_beyond(graph: ModelGraph, key: str, precision: str, role: str) -> list[Cause]:
    """A source's or amplifier's floating constant input past the range of the target's `precision`: a device that
    stores it there holds its largest value instead (the values saturate), which no rounding of the data explains."""
    limit = {"f16": F16_MAX}.get(precision)
    if limit is None or role not in ("source", "amplifier"):
        return []
    for k, port in graph[key].inputs:
        if graph[k].kind == "constant" and graph[k].outputs[port].is_float:
            values = graph.constant_value(k)
            largest = float(np.max(np.abs(values[np.isfinite(values)]), initial=0.0))
            if largest > limit:
                return [Cause("constant_range", f"its constant input '{graph[k].name}' reaches {largest:.3g}, beyond "
                              f"{precision}'s largest value {limit:,.0f}: a device that stores it in {precision} holds "
                              f"{limit:,.0f} there instead; keep that constant in f32 or rescale it",
                              {"constant_max": largest, "limit": limit})]
    return []
