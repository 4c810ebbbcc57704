"""A model against its quantized twin (NNCF): the tolerance it is judged at, partitioned runs, layer sensitivity.

With ``target_model`` a twin runs on the target side. What its quantizers are, and which node of the model
each belongs to, comes from the matching (`bisect_ov.model.match`, `bisect_ov.model.quantized`). This module
builds on it:

* `twin_tolerance`: every node's expected quantization error (`analysis.tolerance.expected_quantization_errors`)
  from the twin's weight and activation quantizers, so a twin is never judged at the f32 tolerance;
* `twin_mixed_run`: a partitioned run whose segments come from the model (reference side) and from the twin
  (target side), values handed across at matched tensors. A twin segment holds the twin's ops of its nodes
  and the quantizers in front of them (activation FakeQuantize, weight decompression), which is what NNCF
  leaves out for a node in its ignored scope: keeping a node on the reference is keeping it in higher
  precision;
* `quantized_units`, `layer_sensitivity`: each quantized node's local error and its impact on the final
  outputs when it alone runs quantized, ranked (which layers int4 hurts most);
* `ignored_scope_names`: the names `nncf.IgnoredScope(names=...)` takes for a fix's nodes.

Assumes the twin keeps the model's op names for the ops it quantizes (NNCF does), and that both sides run
the same precision apart from the twin's quantization (the usual ``CPU:f32`` on both sides).
"""

from __future__ import annotations

import logging
import math
from typing import Callable, Mapping, Sequence

import numpy as np

from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.analysis.tolerance import Tolerance, expected_quantization_errors, quantization_error
from bisect_ov.core.errors import CaptureError
from bisect_ov.core.records import LayerSensitivity
from bisect_ov.engine.engine import Engine
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.match import Match
from bisect_ov.model.partition import extract, segments
from bisect_ov.model.taps import Tap

log = logging.getLogger(__name__)

__all__ = ["own_quantization_errors", "twin_tolerance", "twin_mixed_run", "twin_segment", "quantized_units",
           "twin_fix_candidates", "layer_sensitivity",
           "ignored_scope_names"]


def _levels_bits(target: ModelGraph, key: str) -> int:
    levels = int(target.attributes(key).get("levels", 256))
    return max(1, math.ceil(math.log2(max(2, levels))))


def own_quantization_errors(graph: ModelGraph, target: ModelGraph, match: Match) -> dict[str, float]:
    """Each reference node's own expected quantization error (by key): weights, output quantizer, model inputs."""
    own: dict[str, float] = {}
    for ref_tap, target_tap in match.pairs:
        if ref_tap.port != 0:
            continue
        key = ref_tap.key
        q = match.quantized.get(key)
        terms = []
        if q is not None:
            terms.append(quantization_error(q.weight_bits, q.group_size, symmetric=q.symmetric,
                                            weight_type=q.weight_type if q.weight_bits is None else None))
            # Quantizers on model inputs belong to nobody else.
            for producer, _ in target[match.target_op().get(key, target_tap.key)].inputs:
                node = target[producer]
                if node.op_type == "FakeQuantize" and target[node.inputs[0][0]].kind == "parameter":
                    terms.append(quantization_error(_levels_bits(target, producer), activation=True))
        if target[target_tap.key].op_type == "FakeQuantize" and graph[key].op_type != "FakeQuantize":
            terms.append(quantization_error(_levels_bits(target, target_tap.key), activation=True))
        value = math.sqrt(sum(t * t for t in terms))
        if value > 0:
            own[key] = value
    return own


def twin_tolerance(tolerance: Tolerance, graph: ModelGraph, target: ModelGraph, match: Match) -> Tolerance:
    """`tolerance` judging a twin: the expected quantization error at every node it reaches."""
    if tolerance.value is not None:
        return tolerance  # the user chose one threshold
    return tolerance.with_quantization(expected_quantization_errors(graph, own_quantization_errors(graph, target,
                                                                                                   match)))


def twin_mixed_run(engine: Engine, on_target: frozenset[str] | set[str], order: Sequence[str] | None = None
                   ) -> list[TensorStats]:
    """`mixed.mixed_run` for a twin: target segments are cut from the twin (see the module docstring)."""
    graph = engine.runner.graph
    op_of = engine.runner.match.target_op()
    order = list(order or [n.key for n in graph.candidates()])
    on_target = {k for k in on_target if k in op_of}
    if not on_target:
        return [compare(r, r) for r in engine.untouched.ref_final]
    results = graph.results()
    final = frozenset(Tap(*r.inputs[0]) for r in results)
    values: dict[Tap, np.ndarray] = {Tap(p.key, 0): engine.sample.ref[graph.parameter_position[p.key]]
                                     for p in graph.parameters()}
    for side, segment, outputs in segments(graph, order, on_target):
        if side == "ref":
            got = engine.run_piece("ref", extract(graph, segment, outputs), values, final)
        else:
            got = twin_segment(engine, segment, outputs, values, final)
        values.update(zip(outputs, got))
    return [compare(ref, values[Tap(*r.inputs[0])]) for r, ref in zip(results, engine.untouched.ref_final)]


def twin_segment(engine: Engine, segment: Sequence[str], outputs: Sequence[Tap], values: Mapping[Tap, np.ndarray],
                 final: frozenset[Tap]) -> list[np.ndarray]:
    """The twin's ops of the model's nodes `segment` (with the quantizers in front of them) run on the target,
    fed the model's tensors `values` at matched tensors: the values of `outputs` (the model's taps)."""
    target = engine.runner.target_graph
    op_of = engine.runner.match.target_op()
    ref_of_op = {t: r for r, t in op_of.items()}
    matched_t = set(ref_of_op)
    keys = {op_of[k] for k in segment if k in op_of}
    own = set(keys)
    for key in keys:  # the twin's quantizers in front of these nodes come with them
        own |= target.upstream(key, stop=lambda k: k in matched_t or not target[k].is_candidate)
    unmatched = [t for t in outputs if t.key not in op_of]
    if unmatched:
        raise CaptureError(f"The model's tensor {unmatched[0]} handed on by a partitioned run has no counterpart in "
                           "the twin; run without fix, impact, delegation and curve for this twin.")
    outs = [_target_tap(engine, op_of, t) for t in outputs]
    piece = extract(target, sorted(own, key=lambda k: target[k].index), outs)
    feed: dict[Tap, np.ndarray] = {}
    for t in piece.fed:
        if target[t.key].kind == "parameter":
            feed[t] = engine.sample.target[target.parameter_position[t.key]]
        elif t.key in ref_of_op and Tap(ref_of_op[t.key], t.port) in values:
            feed[t] = values[Tap(ref_of_op[t.key], t.port)]
        else:
            raise CaptureError(f"The twin's tensor {t} read by a partitioned run has no counterpart in the "
                               "model; run without fix, impact, delegation and curve for this twin.")
    final_t = frozenset(_target_tap(engine, op_of, t) for t in final if t.key in op_of)
    return engine.run_piece("target", piece, feed, final_t)


def _target_tap(engine: Engine, op_of: dict[str, str], tap: Tap) -> Tap:
    """The twin's tensor for the reference's `tap`: the same output of the matched op. When the matched op lacks
    that output (an op put in front of one output of a multi-output node, as a fault injected there, took the
    node's name): the twin's tensor of the same name, else that output of the op the matched one reads."""
    key, target = op_of[tap.key], engine.runner.target_graph
    if tap.port < len(target[key].outputs):
        return Tap(key, tap.port)
    for name in engine.runner.graph[tap.key].outputs[tap.port].names:
        found = target.lookup_tensor(name)
        if found is not None:
            return Tap(*found)
    for producer, _ in target.data_inputs(key):
        if len(target[producer].outputs) > tap.port:
            return Tap(producer, tap.port)
    return Tap(key, tap.port)


def quantized_units(engine: Engine) -> list[str]:
    """Reference keys of the nodes the twin quantizes (weights below 16 bits or quantized inputs), in order."""
    quantized = engine.runner.match.quantized
    return [n.key for n in engine.runner.graph.candidates() if n.key in quantized and quantized[n.key].lowers_precision]


def layer_sensitivity(engine: Engine, error: Callable[[set[str]], float], local: Mapping[str, float],
                      limit: int | None = None, units: Mapping[str, Sequence[str]] | None = None
                      ) -> tuple[LayerSensitivity, ...]:
    """Each quantized node's local error and the final-output error when it alone runs quantized, worst first.

    `error(keys)` is the final-output error of a partitioned run with `keys` on the twin (`mixed.MixedRuns.error`).
    A layer measured only inside a fused group of `units` (unit key -> members) gets that group's local error,
    named (`LayerSensitivity.local_unit`).
    """
    graph, quantized = engine.runner.graph, engine.runner.match.quantized
    group_of = {m: u for u, members in (units or {}).items() if u in local for m in members}
    rows = []
    for key in quantized_units(engine)[:limit]:
        unit = group_of.get(key) if key not in local else None
        rows.append(LayerSensitivity(name=graph[key].name, op_type=graph[key].op_type,
                                     quantization=quantized[key].describe(),
                                     local_error=local.get(key, local.get(unit) if unit else None), impact=error({key}),
                                     local_unit=graph[unit].name if unit else None))
    return tuple(sorted(rows, key=lambda r: -r.impact))


def ignored_scope_names(graph: ModelGraph, keys: Sequence[str]) -> list[str]:
    """Friendly names of `keys`, as ``nncf.IgnoredScope(names=...)`` takes them (the model's op names)."""
    return [graph[k].name for k in keys if k in graph]


def twin_fix_candidates(engine: Engine, sensitivity, local: dict[str, float], first: Sequence[str] = ()
                        ) -> list[tuple[str, ...]]:
    """A twin's fix candidates, one unit each: its first divergences that are not quantized layers (a change of
    the twin's own beyond quantization), then its quantized layers, the most harmful first (by impact, else by
    local error)."""
    keys = quantized_units(engine)
    if sensitivity:
        by_name = {engine.runner.graph.find(s.name).key: s.impact for s in sensitivity}
        keys.sort(key=lambda k: -by_name.get(k, 0.0))
    else:
        keys.sort(key=lambda k: -local.get(k, 0.0))
    units: list[tuple[str, ...]] = [(k,) for k in first if k not in keys]
    return units + [(k,) for k in keys]


WEIGHTED = frozenset({"Convolution", "GroupConvolution", "MatMul", "ConvolutionBackpropData"})
FOREIGN_WEIGHTS = 0.5  # a twin's weights this far from the model's (relative L2) are no quantization of them


def foreign_weights_note(graph: ModelGraph, target: ModelGraph, match: Match, *, layers: int = 6) -> tuple[str, ...]:
    """A note when the twin's weights, as its ops read them (dequantized, decompressed), are not the model's
    quantized: at most of the `layers` smallest weighted layers they differ by `FOREIGN_WEIGHTS` or more (relative
    L2; int4 changes them by a few percent, int8 by less). A twin of another checkpoint or seed was reported as a
    badly quantized first layer."""
    import openvino as ov
    import openvino.opset13 as ops

    from bisect_ov.run.openvino_device import shared_core

    def weight(g: ModelGraph, key: str) -> str | None:
        node = g[key]
        if node.op_type not in WEIGHTED or len(node.inputs) < 2 or g[node.inputs[1][0]].kind not in ("constant", "static"):
            return None
        return node.inputs[1][0]

    pairs = [(r, t) for r, t in match.target_op().items() if r in graph and t in target
             and weight(graph, r) is not None and weight(target, t) is not None]
    size = lambda k: math.prod(graph[k].outputs[0].shape or (0,))  # noqa: E731
    pairs = sorted(pairs, key=lambda p: size(p[0]))[:layers]
    if len(pairs) < 2:
        return ()
    try:
        values = []
        for g, keys in ((graph, [r for r, _ in pairs]), (target, [t for _, t in pairs])):
            # (the Results leave the weights' readers as they were once this model is dropped: no clone needed)
            inputs = [op.input_value(1) for op in g.ops_of(g.model, keys)]
            compiled = shared_core().compile_model(ov.Model([ops.result(v) for v in inputs], []), "CPU",
                                                   {"INFERENCE_PRECISION_HINT": "f32"})
            values.append([np.asarray(a, np.float64) for a in compiled.create_infer_request().infer({}).values()])
    except Exception as err:  # a weight the CPU cannot evaluate alone: no claim either way
        log.info("The twin's weights were not compared: %s", err)
        return ()
    apart = [float(np.linalg.norm(t - m) / max(np.linalg.norm(m), 1e-30)) for m, t in zip(*values) if m.shape == t.shape]
    if len(apart) < 2 or sorted(apart)[len(apart) // 2] < FOREIGN_WEIGHTS:
        return ()
    return (f"The target model's weights are not the model's quantized: {sum(a >= FOREIGN_WEIGHTS for a in apart)} of "
            f"the {len(apart)} layers compared differ by {min(apart):.2g} to {max(apart):.2g} (relative L2, as the "
            "ops read them; int8 or int4 quantization changes them by a few percent at most). Is it the twin of this "
            "model, and not of another checkpoint or seed? Its error is then no quantization error.",)
