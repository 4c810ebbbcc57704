"""`bisect()`: from a model and two devices to a ranked culprit report.

The steps, each in its own module: load the model(s) (`model.load`), walk the graph (`model.graph`), pair the
nodes of the two sides (`model.match`), expose them as outputs in chunks under a memory budget
(`model.taps`), compile and run both sides (`run.devices`), compare each tensor pair as it arrives
(`analysis.metrics`), set each node's tolerance from the precision really used (`analysis.tolerance`),
score error growth over the graph (`analysis.scoring`), and build the `Report` (`report`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import openvino as ov

from bisect_ov.analysis.diagnosis import diagnose, observations
from bisect_ov.analysis.metrics import TensorStats, metric_value
from bisect_ov.analysis.scoring import score_graph
from bisect_ov.analysis.tolerance import Tolerance, unit_roundoff
from bisect_ov.errors import InputError
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.load import load_model, model_label
from bisect_ov.model.match import foreign_inputs, identity_match, match_nodes
from bisect_ov.model.taps import Tap, plan_chunks
from bisect_ov.records import Fidelity, Noise
from bisect_ov.report.report import NodeResult, OutputResult, Report, kernel_difference
from bisect_ov.run.devices import Device, DeviceInfo, make_device
from bisect_ov.run.inputs import align_inputs, prepare_inputs
from bisect_ov.mixed import (Findings, MixedRuns, contribution_curve, find_fix, local_errors, patch_model,
                             smallest_range, suspects_for_fix)
from bisect_ov.mixed import impact as impact_of
from bisect_ov.capture.device import plan_recorded
from bisect_ov.samples import as_samples, node_spread, run_samples
from bisect_ov.session import Clock, Session
from bisect_ov.strategies import STRATEGIES, run_bisection, run_full, run_fusion

__all__ = ["bisect"]


def bisect(
    model: Any,
    ref: str | Device = "CPU",
    target: str | Device = "GPU",
    inputs: Any = None,
    *,
    ref_config: Mapping[str, Any] | None = None,
    target_config: Mapping[str, Any] | None = None,
    target_model: Any = None,
    metric: str | Callable[[TensorStats], float] = "rel_l2",
    tolerance: float | Tolerance | None = None,
    seed: int = 0,
    strategy: str = "auto",
    refine: bool = True,
    local: bool = True,
    impact: int = 3,
    fix: bool | float = False,
    delegation: bool = False,
    curve: int = 0,
    noise: bool = True,
    patched_model: str | os.PathLike | None = None,
    keep: Sequence[str] = (),
    max_tap_bytes: int | None = 512 << 20,
    progress: bool | None = None,
) -> Report:
    """Find where `target` starts to disagree with `ref` on `model`.

    Parameters
    ----------
    model
        An `ov.Model`, a path to an IR ``.xml`` or an ``.onnx`` file, or anything `openvino.convert_model`
        takes. It is never modified.
    ref, target
        Device names: OpenVINO devices (``CPU``, ``GPU``, ``GPU.1``, ``NPU``), precision variants
        (``CPU:f32``, ``CPU:bf16``), emulated devices (``EMU:f16``), or `Device` objects. The reference
        runs in f32 unless its name or `ref_config` chooses a precision.
    inputs
        None (seeded random values), a dict name -> array, a list in input order, or a ``.npz``/``.npy`` path;
        or many samples: a `Samples`, a list of dicts (or of lists), a generator, or a folder of ``.npz``/``.npy``
        files. With many samples every one runs on both sides (ranked by final error, top-1 flips counted),
        the search runs on the worst, and each measured node's error is summarised over all samples.
    ref_config, target_config
        Properties passed to `compile_model` on each side.
    target_model
        A second model run on the target side and compared node by node with `model` (an int8 or f16 twin,
        or the model after a change). Nodes match by friendly name, then by tensor name.
    metric
        Error measure per tensor: a name in `bisect_ov.analysis.metrics.METRICS` or a callable on
        `TensorStats`. The default tolerance model is calibrated for ``rel_l2``.
    tolerance
        None for the precision-aware default, a float for one threshold everywhere, or a `Tolerance`.
    seed
        Seed of the random inputs.
    strategy
        Which tensors to expose (see `bisect_ov.strategies`): ``fusion`` taps only the outputs of the
        target's fusion groups, so the instrumented target compiles the same kernels; ``full`` taps every
        node; ``bisection`` searches with a few taps per compile (about log2(N) compiles); ``auto`` (default)
        is ``fusion``, falling back to ``bisection`` when the fidelity check fails.
    refine
        With ``fusion``: re-measure the members of the groups where error starts, to name the member node.
    local
        Run every measured node (or fusion group) on the target fed with the reference's inputs, so its own
        (local) error is told from what it inherited; one reference and one target compile per memory chunk.
        Not available with `target_model`.
    impact
        For this many top suspects, the final-output error when only that node runs on the target
        (partitioned runs); the culprit ranking puts higher impact first.
    fix
        Search the smallest set of nodes which, kept on the reference, brings the final-output error under a
        tolerance (True: each output's tolerance; a float: that value), verified by partitioned runs.
    delegation
        Search the shortest node range whose delegation to the target alone reproduces half the final error.
    curve
        Points of the error contribution curve (final error with the first fraction of the graph on the
        target); 0 for none.
    noise
        Run the target against itself (twice, and a second compile): differences below that floor are noise.
    patched_model
        With `fix`, also save the model with the fix as runtime info that GPU/NPU plugins honour
        (``disable_fp16_compression``) to this path (IR .xml).
    keep
        Names of nodes whose reference and target tensors the report keeps in memory, for
        ``report.tensors(name)`` and ``report.plot_values(name)`` (one more compile per side). ``"culprits"``
        keeps the top five culprits' tensors.
    max_tap_bytes
        Most bytes of exposed tensors per compile; more taps are split into several compiles. None: one.
    progress
        Show progress bars; None shows them when stderr is a terminal.

    Returns
    -------
    Report
        Ranked culprits, first divergence, final-output errors, what each side ran with. "No divergence"
        is a valid answer (``report.first_divergence is None``).

    Raises
    ------
    InputError
        Bad model, inputs, device name or option.
    DeviceError
        Compiling or running failed on a device.
    """
    clock = Clock()
    show = sys.stderr.isatty() if progress is None else bool(progress)
    if strategy not in STRATEGIES:
        raise InputError(f"Unknown strategy '{strategy}'. Available: {list(STRATEGIES)}.")
    tol = _tolerance(tolerance)
    tol.check_metric(metric)
    opened = _open(model, ref, target, inputs, ref_config, target_config, target_model, metric, seed, clock, show)
    session, plan, pairs, summary = opened.session, opened.plan, opened.pairs, opened.summary
    graph, match, ov_model, ov_target = session.graph, session.match, opened.model, opened.target_model
    local = local and plan.local
    if not plan.pieces:
        impact, fix, delegation, curve = 0, False, False, 0
    # With every node tapped, the reference's plain run can already expose the first chunk of taps.
    first_chunk = plan_chunks(graph, [r for r, _ in match.pairs], max_tap_bytes)[0] if strategy == "full" else []
    session.plain(ref_taps=first_chunk)
    precision = _comparison_precision(session.ref_info, session.target_info,
                                      session.target_graph if ov_target is not None else None)
    tol = tol.with_precision(precision)

    def diverged(tap: Tap, stats: TensorStats) -> bool:
        return metric_value(stats, metric) > tol.for_node(graph[tap.key], tap.port)

    used, stats, groups = _capture(session, strategy, diverged, max_tap_bytes, refine, metric)
    if plan.exact:
        _check_integer_nodes(session, stats)
    spread = node_spread(session, list(stats), pairs, lambda s: metric_value(s, metric)) if summary else {}
    noise_floor = session.noise() if noise else {}
    floor = 2 * max(noise_floor.values(), default=0.0)
    fidelity = _fidelity(session, metric)
    notes = _notes(session, floor, fidelity, fell_back=strategy == "auto" and used == "bisection")

    with clock("score"):
        errors = {(tap.key, tap.port): metric_value(s, metric) for tap, s in stats.items()}
        # An integer computation has one right answer: the two sides must agree exactly.
        tolerances = {tap.key: 0.0 if tap.key in session.exact else max(floor, tol.for_node(graph[tap.key]))
                      for tap in stats}
        scores = score_graph(graph, errors, tolerances, min_growth=tol.min_growth)
        outputs = tuple(
            OutputResult(name, s, metric_value(s, metric), max(floor, tol.for_node(graph[graph[key].inputs[0][0]])))
            for name, key, s in session.outputs
        )
    findings = Findings()
    twin = ov_target is not None
    if local or (not twin and (impact or fix or delegation or curve)):
        with clock("experiments"):
            findings = _experiments(session, stats, scores, groups, tolerances, outputs, metric, max_tap_bytes,
                                    local=local, impact=0 if twin else impact, fix=False if twin else fix,
                                    delegation=delegation and not twin, curve=0 if twin else curve)
    if twin and (fix or delegation or curve):
        notes.append("Partitioned runs (impact, delegation range, curve, fix) need one model on both sides; "
                     "they are skipped with target_model.")
    with clock("score"):
        ranking = _rank_by_impact(scores.ranking, findings.impact)
        nodes = _node_results(session, stats, scores, groups, tol.precision, findings, ranking, spread)
    kept = _keep_tensors(session, keep, ranking)
    fix_record = findings.fix
    if fix_record is not None and patched_model is not None:
        fix_record = dataclasses.replace(
            fix_record, patched_model=str(_save_patched(ov_model, graph, fix_record.keep, patched_model)))
    report = Report(
        model=model_label(model), ref=session.ref_info, target=session.target_info, nodes=nodes, outputs=outputs,
        metric=metric if isinstance(metric, str) else getattr(metric, "__name__", "custom"),
        tolerance=tol.to_dict(), first_keys=scores.first, ranking=ranking,
        model_hash=graph.structure_hash(),
        target_model=model_label(target_model) if target_model is not None else None,
        unmatched={"model": list(match.unmatched_ref), "target_model": list(match.unmatched_target)}
        if ov_target is not None else {},
        timings=clock.stages, compiles=dict(session.compiles), strategy=used,
        inputs=tuple({"name": p.get_friendly_name(), "shape": list(a.shape), "dtype": str(a.dtype)}
                     for p, a in zip(ov_model.get_parameters(), session.ref_arrays)),
        samples=summary.to_record() if summary is not None else None,
        openvino_version=ov.get_version(), notes=tuple(notes), fidelity=fidelity,
        noise=Noise(**noise_floor) if noise_floor else None,
        fix=fix_record, delegation=findings.delegation, curve=tuple(findings.curve), kept_tensors=kept,
    )
    return report


@dataclass
class _Opened:
    """A comparison ready to run: the session, how recorded sides change it, and the samples."""

    session: Session
    plan: Any
    pairs: list[tuple[list, list]]
    summary: Any
    model: ov.Model
    target_model: ov.Model | None


def _open(model, ref, target, inputs, ref_config, target_config, target_model, metric, seed, clock, show) -> _Opened:
    """Load the model(s), walk and match them, build both devices and the inputs, and run many samples."""
    with clock("load"):
        ov_model = load_model(model)
        ov_target = load_model(target_model) if target_model is not None else None
    with clock("graph"):
        graph = ModelGraph(ov_model)
        target_graph = ModelGraph(ov_target) if ov_target is not None else graph
        match = match_nodes(graph, target_graph) if ov_target is not None else identity_match(graph)
    # Recorded runs (captures) replay what another machine ran: they supply inputs, and cannot run pieces.
    plan = plan_recorded(make_device(ref, dict(ref_config or {}), role="ref"),
                         make_device(target, dict(target_config or {}), role="target"), inputs,
                         twin=ov_target is not None)
    many = as_samples(plan.inputs)
    pairs = []
    for sample in (many if many is not None else [plan.inputs]):
        ref_arrays = prepare_inputs(ov_model, sample, seed=seed)
        pairs.append((ref_arrays, align_inputs(ov_model, ov_target, ref_arrays) if ov_target is not None else ref_arrays))
    session = Session(graph, target_graph, match, plan.ref, plan.target, *pairs[0], clock=clock, progress=show)
    session.exact_checks = plan.exact
    session.notes.extend(plan.notes)
    summary = None
    if many is not None:
        # Every sample on both sides; the detailed search then runs on the worst one.
        summary = run_samples(session, pairs, lambda s: metric_value(s, metric))
        session.ref_arrays, session.target_arrays = pairs[summary.ranking[0]]
    return _Opened(session, plan, pairs, summary, ov_model, ov_target)


def _notes(session: Session, floor: float, fidelity: Fidelity | None, *, fell_back: bool) -> list[str]:
    """What the reader must know about how the run went: noise, integer results, fidelity, fallbacks."""
    notes = list(session.notes)
    if floor:
        notes.append(f"The target is not deterministic: its outputs differ by up to {floor / 2:.2e} between runs or "
                     "compiles; errors below twice that are not counted.")
    for key, check in session.exact.items():
        if not (check.ref_exact and check.target_exact):
            notes.append(f"'{session.graph[key].name}' computes on integers: {check.describe()}.")
    if fidelity is not None and fidelity.warning:
        notes.append(fidelity.warning)
    if fell_back:
        notes.append("The fusion-boundary taps did not reproduce the plain run faithfully; the bisection strategy was used.")
    return notes


def _keep_tensors(session: Session, keep: Sequence[str] | str, ranking: Sequence[str]) -> dict[str, tuple]:
    """Both sides' values of the nodes the user asked to keep (names, tensor names, or "culprits")."""
    if isinstance(keep, str):
        keep = [keep]
    keys: list[str] = []
    for name in keep:
        keys += list(ranking[:5]) if name == "culprits" else [session.graph.find(name).key]
    if not keys:
        return {}
    values = session.fetch([Tap(k, t.port) for k in dict.fromkeys(keys) for t in session.graph[k].outputs])
    kept: dict[str, tuple] = {}
    for tap, pair in values.items():
        kept.setdefault(tap.key, pair)  # first output of each node
    return kept


def _experiments(session: Session, stats, scores, groups, tolerances, outputs, metric, max_tap_bytes, *,
                 local: bool, impact: int, fix, delegation: bool, curve: int) -> Findings:
    """Local errors, impacts, the delegation range, the contribution curve and the fix, as asked."""
    graph = session.graph
    found = Findings()
    measured = list(dict.fromkeys(t.key for t in stats))
    units = {k: tuple(dict.fromkeys([k, *groups.get(k, ())])) for k in measured}
    if local and measured:
        loc = local_errors(session, units, max_bytes=max_tap_bytes)
        for tap, s in loc.items():
            found.local[tap.key] = max(found.local.get(tap.key, 0.0), metric_value(s, metric))
    runs = MixedRuns(session, lambda s: metric_value(s, metric))
    if curve:
        found.curve = contribution_curve(runs, curve)
    if delegation:
        found.delegation = smallest_range(runs)
    if impact:
        suspects = list(dict.fromkeys([*scores.first, *[k for k in scores.ranking
                                                        if scores.nodes[k].role in ("source", "amplifier")]]))
        by_local = sorted((k for k in found.local if found.local[k] > tolerances.get(k, 0.0)),
                          key=lambda k: -found.local[k])
        chosen = list(dict.fromkeys(suspects + by_local))[:impact]
        found.impact = impact_of(runs, {k: units.get(k, (k,)) for k in chosen})
    if fix:
        limit = float(fix) if not isinstance(fix, bool) else min(o.tolerance for o in outputs)
        causes = {k: tuple(diagnose_causes(session, stats, scores, k)) for k in scores.first}
        candidates = suspects_for_fix(graph, scores.ranking, scores.first, units, found.local, tolerances, causes,
                                      found.delegation)
        found.fix = find_fix(runs, candidates, limit)
    found.runs = runs.runs
    runs.close()
    return found


def diagnose_causes(session: Session, stats, scores, key: str) -> list[str]:
    graph = session.graph
    node, s = graph[key], scores.nodes[key]
    taps = [t for t in stats if t.key == key]
    inputs = [stats[Tap(k, p)] for k, p in graph.data_inputs(key) if Tap(k, p) in stats]
    return diagnose(s.role, s.error, s.tolerance, node.reduction_length, stats[taps[0]] if taps else None, inputs, "")


def _rank_by_impact(ranking: tuple[str, ...], impact: dict[str, float]) -> tuple[str, ...]:
    """Suspects with a measured impact first, largest impact first; the rest keep their order."""
    measured = sorted((k for k in ranking if k in impact), key=lambda k: -impact[k])
    return tuple(measured + [k for k in ranking if k not in impact])


def _save_patched(model: ov.Model, graph: ModelGraph, keep: Sequence[str], path) -> pathlib.Path:
    path = pathlib.Path(path)
    if path.suffix != ".xml":
        raise InputError(f"patched_model must be an IR path ending in .xml; got '{path}'.")
    ov.save_model(patch_model(model, [graph[k].name for k in keep]), str(path))
    return path


def _check_integer_nodes(session: Session, stats: dict[Tap, TensorStats]) -> None:
    """Measure integer Conv/MatMul nodes with their inputs, so each is checked against its exact result."""
    graph = session.graph
    pending = [k for k in session.exact_candidates() if k not in session.exact]
    taps = {Tap(k, 0) for k in pending} | {Tap(i, p) for k in pending for i, p in graph.data_inputs(k)}
    if taps:
        stats.update(session.measure(sorted(taps, key=lambda t: graph[t.key].index)))


def _capture(session: Session, strategy: str, diverged, max_tap_bytes, refine: bool, metric):
    """Run the chosen strategy; ``auto`` is ``fusion``, falling back to ``bisection`` when unfaithful."""
    groups: dict[str, tuple[str, ...]] = {}
    if strategy == "full":
        return strategy, run_full(session, max_tap_bytes), groups
    if strategy == "bisection":
        return strategy, run_bisection(session, diverged), groups
    stats, groups = run_fusion(session, max_tap_bytes, diverged, refine=refine)
    fidelity = _fidelity(session, metric)
    if strategy == "auto" and fidelity is not None and fidelity.warning:
        session.tapped_outputs.clear()
        return "bisection", run_bisection(session, diverged), {}
    return "fusion" if strategy == "auto" else strategy, stats, groups


FIDELITY_RANGE = (0.5, 2.0)


def _fidelity(session: Session, metric) -> Fidelity | None:
    """Did exposing taps change the final-output error? The worst ratio of instrumented to plain error."""
    if not session.tapped_outputs or not session.outputs:
        return None
    plain = max(metric_value(s, metric) for _, _, s in session.outputs)
    worst: tuple[float, float] | None = None
    for outputs in session.tapped_outputs:
        tapped = max(metric_value(s, metric) for _, _, s in outputs)
        ratio = _ratio(tapped, plain)
        if worst is None or abs(np.log(max(ratio, 1e-300))) > abs(np.log(max(worst[1], 1e-300))):
            worst = (tapped, ratio)
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
    if plain == 0 or not np.isfinite(plain):
        return float("inf") if tapped > plain else 0.0
    return tapped / plain


def _node_results(session: Session, stats: dict[Tap, TensorStats], scores, groups, precision: str,
                  findings: Findings, ranking: tuple[str, ...], spread: dict) -> tuple[NodeResult, ...]:
    rank_of = {k: i for i, k in enumerate(ranking, start=1)}
    graph = session.graph
    by_key: dict[str, list[Tap]] = {}
    for tap in stats:
        by_key.setdefault(tap.key, []).append(tap)
    results = []
    for key in graph.order:
        if key not in by_key or key not in scores.nodes:
            continue
        node, s = graph[key], scores.nodes[key]
        node_stats = tuple(stats[t] for t in sorted(by_key[key], key=lambda t: t.port))
        runtime = {}
        if node.name in session.runtime_ref:
            runtime["ref"] = session.runtime_ref[node.name]
        target_key = session.target_of[by_key[key][0]].key
        if target_key in session.runtime_target:
            runtime["target"] = session.runtime_target[target_key]
        causes = observations(node_stats)
        differs = kernel_difference(runtime, session.ref_info.precision == session.target_info.precision)
        if differs and s.role != "ok":
            causes.append(differs)
        if session.target_graph is not graph:
            extra = foreign_inputs(session.match, session.target_graph, target_key)
            if extra:
                causes.append(f"in the target model its inputs pass through {', '.join(extra[:4])}"
                              + (f" and {len(extra) - 4} more" if len(extra) > 4 else "") + ", which the model lacks")
        if key in session.exact:
            causes.append(session.exact[key].describe())
        else:
            inputs = [stats[Tap(k, p)] for k, p in graph.data_inputs(key) if Tap(k, p) in stats]
            causes += diagnose(s.role, s.error, s.tolerance, node.reduction_length, node_stats[0], inputs, precision)
        results.append(NodeResult(
            name=node.name, key=key, op_type=node.op_type, index=node.index, error=s.error,
            input_error=s.inherited, tolerance=s.tolerance, growth=s.growth, role=s.role, first=s.first,
            rank=rank_of.get(key), local_error=findings.local.get(key), impact=findings.impact.get(key),
            # Only meaningful where a node was handed real error: inputs over its tolerance.
            amplification=s.error / s.inherited if s.inherited > s.tolerance and math.isfinite(s.inherited) else None, outputs=node_stats, tensor_names=tuple(n for t in node.outputs for n in t.names),
            inputs=tuple(k for k, _ in graph.data_inputs(key)), causes=tuple(causes), runtime=runtime,
            group=tuple(m for m in groups.get(key, ()) if m != key), over_samples=spread.get(key, {}),
        ))
    return tuple(results)


def _comparison_precision(ref: DeviceInfo, target: DeviceInfo, target_graph: ModelGraph | None) -> str:
    """The coarsest precision in play: it sets the expected rounding error."""
    candidates = [ref.precision, target.precision]
    if target_graph is not None:
        if any(n.op_type == "FakeQuantize" for n in target_graph):
            candidates.append("i8")
        if any(t.dtype in ("f16", "bf16") for n in target_graph.candidates() for t in n.outputs):
            candidates += [t.dtype for n in target_graph.candidates() for t in n.outputs if t.dtype in ("f16", "bf16")]
    return max(candidates, key=unit_roundoff)


def _tolerance(tolerance: float | Tolerance | None) -> Tolerance:
    if tolerance is None:
        return Tolerance()
    if isinstance(tolerance, Tolerance):
        return tolerance
    if isinstance(tolerance, (int, float)) and not isinstance(tolerance, bool) and tolerance >= 0:
        return Tolerance(value=float(tolerance))
    raise InputError(f"tolerance must be None, a non-negative number or a Tolerance; got {tolerance!r}.")
