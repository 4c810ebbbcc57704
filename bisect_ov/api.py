"""`bisect()`: from a model and two devices to a ranked culprit report.

The steps, each in its own module: load the model(s) (`model.load`), walk the graph (`model.graph`), pair the
nodes of the two sides (`model.match`), expose them as outputs in chunks under a memory budget
(`model.taps`), compile and run both sides (`run.devices`), compare each tensor pair as it arrives
(`analysis.metrics`), set each node's tolerance from the precision really used (`analysis.tolerance`),
score error growth over the graph (`analysis.scoring`), and build the `Report` (`report`).
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import openvino as ov
from tqdm.auto import tqdm

from bisect_ov.analysis.metrics import TensorStats, compare, metric_value
from bisect_ov.analysis.scoring import score_graph
from bisect_ov.analysis.tolerance import Tolerance, unit_roundoff
from bisect_ov.errors import InputError
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.load import load_model, model_label
from bisect_ov.model.match import Match, identity_match, match_nodes
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap, plan_chunks, tap_model
from bisect_ov.report.report import NodeResult, OutputResult, Report
from bisect_ov.run.devices import Device, DeviceInfo, make_device
from bisect_ov.run.inputs import align_inputs, prepare_inputs

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
        None (seeded random values), a dict name -> array, a list in input order, or a ``.npz``/``.npy`` path.
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
    clock = _Clock()
    show = sys.stderr.isatty() if progress is None else bool(progress)
    tol = _tolerance(tolerance)
    tol.check_metric(metric)
    with clock("load"):
        ov_model = load_model(model)
        ov_target = load_model(target_model) if target_model is not None else None
    with clock("graph"):
        graph = ModelGraph(ov_model)
        target_graph = ModelGraph(ov_target) if ov_target is not None else graph
        match = match_nodes(graph, target_graph) if ov_target is not None else identity_match(graph)
    ref_arrays = prepare_inputs(ov_model, inputs, seed=seed)
    target_arrays = align_inputs(ov_model, ov_target, ref_arrays) if ov_target is not None else ref_arrays
    ref_dev = make_device(ref, dict(ref_config or {}), role="ref")
    target_dev = make_device(target, dict(target_config or {}), role="target")

    run = _run_pairs(graph, target_graph, match, ref_dev, target_dev, ref_arrays, target_arrays,
                     max_tap_bytes=max_tap_bytes, clock=clock, show=show)

    with clock("score"):
        precision = _comparison_precision(run.ref_info, run.target_info, target_graph if ov_target is not None else None)
        tol = tol.with_precision(precision)
        errors = {(tap.key, tap.port): metric_value(stats, metric) for tap, stats in run.stats.items()}
        tolerances = {k: tol.for_node(graph[k]) for k in {tap.key for tap in run.stats}}
        scores = score_graph(graph, errors, tolerances, min_growth=tol.min_growth)
        nodes = _node_results(graph, run, scores, match)
        outputs = tuple(
            OutputResult(name, stats, metric_value(stats, metric), tol.for_node(graph[graph[key].inputs[0][0]]))
            for name, key, stats in run.outputs
        )
        fidelity = _fidelity(run, metric)
        notes = list(run.notes)
        if fidelity.get("warning"):
            notes.append(fidelity["warning"])
    return Report(
        model=model_label(model), ref=run.ref_info, target=run.target_info, nodes=nodes, outputs=outputs,
        metric=metric if isinstance(metric, str) else getattr(metric, "__name__", "custom"),
        tolerance=tol.to_dict(), first_keys=scores.first, ranking=scores.ranking,
        model_hash=graph.structure_hash(),
        target_model=model_label(target_model) if target_model is not None else None,
        unmatched={"model": list(match.unmatched_ref), "target_model": list(match.unmatched_target)}
        if ov_target is not None else {},
        timings=clock.stages, compiles=run.compiles,
        inputs=tuple({"name": p.get_friendly_name(), "shape": list(a.shape), "dtype": str(a.dtype)}
                     for p, a in zip(ov_model.get_parameters(), ref_arrays)),
        openvino_version=ov.get_version(), notes=tuple(notes), fidelity=fidelity,
    )


class _RunResult:
    """What running both sides produced: statistics per tap, final outputs, device facts."""

    def __init__(self) -> None:
        self.stats: dict[Tap, TensorStats] = {}
        self.outputs: list[tuple[str, str, TensorStats]] = []  # from the untouched model
        self.tapped_outputs: list[tuple[str, str, TensorStats]] = []  # from the instrumented one
        self.runtime_ref: dict[str, dict] = {}
        self.runtime_target: dict[str, dict] = {}
        self.ref_info: DeviceInfo | None = None
        self.target_info: DeviceInfo | None = None
        self.compiles = {"ref": 0, "target": 0}
        self.notes: list[str] = []


def _run_pairs(graph, target_graph, match: Match, ref_dev, target_dev, ref_arrays, target_arrays, *,
               max_tap_bytes, clock, show) -> _RunResult:
    """Compile and run both sides chunk by chunk, comparing each tapped pair as it arrives."""
    result = _RunResult()
    target_of = dict(match.pairs)
    chunks = plan_chunks(graph, [r for r, _ in match.pairs], max_tap_bytes)
    bar = tqdm(total=len(match.pairs), desc="compare", unit="tensor", disable=not show, leave=False)
    try:
        # The untouched model on both sides: the divergence the taps are meant to explain.
        bar.set_description("plain run")
        with clock("plain run"):
            plain_ref = ref_dev.compile(graph.model).infer(ref_arrays)
            plain_target = target_dev.compile(target_graph.model).infer(target_arrays)
            result.outputs = _final_outputs(graph, plain_ref, plain_target, len(graph.model.outputs))
            result.compiles["ref"] += 1
            result.compiles["target"] += 1
            del plain_ref, plain_target
        for i, chunk in enumerate(chunks):
            ref_tapped = tap_model(graph, chunk)
            target_tapped = tap_model(target_graph, [target_of[t] for t in chunk])
            bar.set_description(f"compile {i + 1}/{len(chunks)}")
            with clock("compile ref"):
                ref_c = ref_dev.compile(ref_tapped.model, taps=ref_tapped.added_outputs)
            with clock("compile target"):
                target_c = target_dev.compile(target_tapped.model, taps=target_tapped.added_outputs)
            result.compiles["ref"] += 1
            result.compiles["target"] += 1
            result.ref_info = result.ref_info or ref_c.info
            result.target_info = result.target_info or target_c.info
            _collect_runtime(result.runtime_ref, ref_c.runtime)
            _collect_runtime(result.runtime_target, target_c.runtime)
            bar.set_description(f"run {i + 1}/{len(chunks)}")
            with clock("infer ref"):
                ref_out = ref_c.infer(ref_arrays)
            with clock("infer target"):
                target_out = target_c.infer(target_arrays)
            bar.set_description("compare")
            with clock("compare"):
                if i == 0:
                    result.tapped_outputs = _final_outputs(graph, ref_out, target_out, ref_tapped.n_original_outputs)
                for tap, ri, ti in zip(chunk, ref_tapped.tap_outputs, target_tapped.tap_outputs):
                    result.stats[tap] = compare(ref_out[ri], target_out[ti])
                    bar.update(1)
            del ref_c, target_c, ref_out, target_out
    finally:
        bar.close()
    if not match.pairs:
        result.notes.append("The model has no compute node to compare.")
    return result


FIDELITY_RANGE = (0.5, 2.0)


def _fidelity(run: _RunResult, metric) -> dict[str, Any]:
    """Did exposing the taps change the final-output error? Ratio of instrumented to plain error."""
    if not run.tapped_outputs or not run.outputs:
        return {}
    plain = max(metric_value(s, metric) for _, _, s in run.outputs)
    tapped = max(metric_value(s, metric) for _, _, s in run.tapped_outputs)
    if plain == tapped:
        ratio = 1.0
    elif plain == 0 or not np.isfinite(plain):
        ratio = float("inf") if tapped > plain else 0.0
    else:
        ratio = tapped / plain
    fidelity: dict[str, Any] = {"plain_error": plain, "tapped_error": tapped, "ratio": ratio}
    low, high = FIDELITY_RANGE
    if not low <= ratio <= high:
        fidelity["warning"] = (
            f"Exposing intermediate tensors changed the final-output error from {plain:.2e} to {tapped:.2e} "
            f"(ratio {ratio:.2f}, outside [{low}, {high}]): the target compiled differently with taps, so the "
            "per-node errors may not explain the plain run. Try fewer taps (max_tap_bytes) or another strategy."
        )
    return fidelity


def _final_outputs(graph: ModelGraph, ref_out, target_out, n: int) -> list[tuple[str, str, TensorStats]]:
    outputs = []
    for result_node, r, t in zip(graph.results(), ref_out[:n], target_out[:n]):
        producer = graph[result_node.inputs[0][0]]
        names = producer.outputs[result_node.inputs[0][1]].names
        outputs.append((names[0] if names else producer.name, result_node.key, compare(r, t)))
    return outputs


def _collect_runtime(into: dict[str, dict], runtime: RuntimeGraph) -> None:
    for name, layer in runtime.by_original.items():
        if layer.is_compute:
            into.setdefault(name, {"layer": layer.name, "layer_type": layer.layer_type, "precision": layer.runtime_precision,
                                   "kernel": layer.primitive_type, "fused": list(layer.original_names)})


def _node_results(graph: ModelGraph, run: _RunResult, scores, match: Match) -> tuple[NodeResult, ...]:
    by_key: dict[str, list[Tap]] = {}
    for tap in run.stats:
        by_key.setdefault(tap.key, []).append(tap)
    target_of = dict(match.pairs)
    results = []
    for key in graph.order:
        if key not in by_key or key not in scores.nodes:
            continue
        node, s = graph[key], scores.nodes[key]
        stats = tuple(run.stats[t] for t in sorted(by_key[key], key=lambda t: t.port))
        runtime = {}
        if node.name in run.runtime_ref:
            runtime["ref"] = run.runtime_ref[node.name]
        target_name = target_of[by_key[key][0]].key
        if target_name in run.runtime_target:
            runtime["target"] = run.runtime_target[target_name]
        results.append(NodeResult(
            name=node.name, key=key, op_type=node.op_type, index=node.index, error=s.error,
            input_error=s.inherited, tolerance=s.tolerance, growth=s.growth, role=s.role, first=s.first,
            rank=s.rank, outputs=stats, tensor_names=tuple(n for t in node.outputs for n in t.names),
            inputs=tuple(k for k, _ in graph.data_inputs(key)), causes=_causes(stats), runtime=runtime,
        ))
    return tuple(results)


def _causes(stats: tuple[TensorStats, ...]) -> tuple[str, ...]:
    causes = []
    if any(s.new_nonfinite for s in stats):
        causes.append(f"NaN/Inf appeared in {sum(s.new_nonfinite for s in stats)} value(s)")
    if any(s.at_f16_limit for s in stats):
        causes.append(f"{sum(s.at_f16_limit for s in stats)} value(s) at or beyond the f16 limit 65504 (saturation/overflow)")
    if any(s.at_int_limit for s in stats):
        causes.append(f"{sum(s.at_int_limit for s in stats)} value(s) at the integer type's limits (saturation)")
    causes += [s.note for s in stats if s.note]
    return tuple(causes)


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


class _Clock:
    """Accumulates wall time per named stage."""

    def __init__(self) -> None:
        self.stages: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stages[stage] = round(self.stages.get(stage, 0.0) + time.perf_counter() - start, 4)
