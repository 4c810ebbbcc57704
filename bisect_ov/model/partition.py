"""Cut a model into pieces that run on their own: isolated nodes, fusion groups, and segments.

`extract(graph, keys, outputs, unit_of=None)` returns a new model holding only the ops `keys` (plus the
constant and shape subgraphs they need). Every tensor they read from a data-carrying op outside their unit
becomes a new Parameter, so a caller can feed it any value: the reference's value to measure a node's local
error, or the previous segment's output in a partitioned (mixed-device) run.

* One unit (``unit_of=None``): a segment of the graph, e.g. the nodes that run on the target in a
  delegation experiment.
* Many units (``unit_of`` maps each key to a unit id): disconnected pieces packed side by side into one model,
  each fed by its own parameters even when another unit of the same model produces that tensor, so every
  node (or fusion group) is measured in isolation and all of them cost a single compile.

Shape subgraphs (ShapeOf of a data tensor) are kept as they are: they may pull in an original Parameter,
which the caller feeds with the model's own input (`Extracted.model_inputs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Iterator, Mapping, Sequence

import openvino as ov
from openvino import opset13 as ops

from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.taps import Tap

__all__ = ["Extracted", "extract", "cut_after", "last_uses", "plan_segments"]


@dataclass(frozen=True)
class Extracted:
    """A piece of the model; its parameters are `fed` tensors (in order) then `model_inputs` positions."""

    model: ov.Model
    fed: tuple[Tap, ...]  # tensors of the full model fed into this piece, one Parameter each
    model_inputs: tuple[int, ...]  # positions (in the full model's parameters) of original inputs still needed
    outputs: tuple[Tap, ...]  # tensors of the full model this piece produces, one output each


def extract(graph: ModelGraph, keys: Sequence[str], outputs: Sequence[Tap],
            unit_of: Mapping[str, object] | None = None) -> Extracted:
    """Build the piece of `graph.model` made of `keys`, producing `outputs` (taps of nodes in `keys`)."""
    members = set(keys)
    clone = graph.model.clone()
    order = graph.order
    ops_of = dict(zip(order, clone.get_ordered_ops()))
    params: dict[Tap, ov.Node] = {}
    fed: list[Tap] = []
    for key in sorted(members, key=lambda k: graph[k].index):
        node = graph[key]
        op = ops_of[key]
        for slot, (producer, port) in enumerate(node.inputs):
            source = graph[producer]
            if source.kind not in ("compute", "parameter"):
                continue  # constants and shape computations stay as they are
            inside = producer in members and (unit_of is None or unit_of.get(producer) == unit_of.get(key))
            if inside:
                continue
            tap = Tap(producer, port)
            if tap not in params:
                out = ops_of[producer].output(port)
                params[tap] = ops.parameter(out.get_partial_shape(), out.get_element_type(), name=f"fed:{tap}")
                fed.append(tap)
            op.input(slot).replace_source_output(params[tap].output(0))
    results = [ops.result(ops_of[t.key].output(t.port)) for t in outputs]
    original = clone.get_parameters()
    needed = _reachable_parameters(results, {p.get_name() for p in original})
    model_inputs = tuple(i for i, p in enumerate(original) if p.get_name() in needed)
    piece = ov.Model(results, [params[t] for t in fed] + [original[i] for i in model_inputs], "piece")
    return Extracted(piece, tuple(fed), model_inputs, tuple(outputs))


def segments(graph: ModelGraph, order: Sequence[str], on_target) -> Iterator[tuple[str, list[str], list[Tap]]]:
    """The runs of consecutive nodes of `order` on one side: (side, segment keys, tensors it hands on).

    A segment's outputs are what it produces and later nodes (or the model's outputs) read: the cut after it.
    """
    start = 0
    while start < len(order):
        side = "target" if order[start] in on_target else "ref"
        end = start
        while end + 1 < len(order) and (order[end + 1] in on_target) == (side == "target"):
            end += 1
        segment = list(order[start:end + 1])
        produced = {Tap(k, t.port) for k in segment for t in graph[k].outputs}
        yield side, segment, [t for t in cut_after(graph, order, end) if t in produced]
        start = end + 1


def cut_after(graph: ModelGraph, order: Sequence[str], i: int) -> list[Tap]:
    """Tensors produced by `order[:i+1]` (or by the model's parameters) and read after position i."""
    done = set(order[: i + 1])
    cut = []
    for key in [p.key for p in graph.parameters()] + list(order[: i + 1]):
        for t in graph[key].outputs:
            readers = [c for c in graph.consumers(key) if any(pp == t.port for pp, _ in graph.graph.edges[key, c]["ports"])]
            if any(c not in done for c in readers if graph[c].kind in ("compute", "result")):
                cut.append(Tap(key, t.port))
    return cut


def _reachable_parameters(results: list, names: set[str]) -> set[str]:
    seen: set[str] = set()
    found: set[str] = set()
    stack = [r for r in results]
    while stack:
        node = stack.pop()
        name = node.get_name()
        if name in seen:
            continue
        seen.add(name)
        if name in names:
            found.add(name)
        stack.extend(v.get_node() for v in node.input_values())
    return found


def last_uses(graph: ModelGraph, order: Sequence[str]) -> dict[Tap, int]:
    """For each output of the nodes of `order`, the last position in `order` that reads it: ``len(order)``
    when a model output reads it, its producer's own position when no node of `order` does."""
    n = len(order)
    position = {k: i for i, k in enumerate(order)}
    last: dict[Tap, int] = {}
    for key in order:
        for t in graph[key].outputs:
            last[Tap(key, t.port)] = position[key]
        for reader in graph.consumers(key):
            at = n if graph[reader].kind == "result" else position.get(reader)
            if at is None:
                continue
            for port, _ in graph.graph.edges[key, reader]["ports"]:
                last[Tap(key, port)] = max(last.get(Tap(key, port), at), at)
    return last


def plan_segments(graph: ModelGraph, order: Sequence[str], taps: Collection[Tap], sizes: Mapping[Tap, int],
                  max_bytes: int) -> list[list[str]]:
    """Cut `order` (candidate keys, topological) into consecutive segments whose `taps` fit `max_bytes` each.

    A segment ends only where every floating-point tensor crossing the cut (produced up to it, read after it)
    is one of `taps`: those are exposed anyway, so running the model segment by segment, each fed the
    previous ones' outputs, computes what one compile exposing `taps` computes (integer tensors, exact, may
    cross). Where no such cut lies within the budget, a segment grows past it until the next one does.
    """
    n = len(order)
    position = {k: i for i, k in enumerate(order)}
    tapped = set(taps)
    uses = last_uses(graph, order)
    # dirty[j]: floating-point tensors not in `taps` that cross the cut after position j.
    dirty = [0] * (n + 1)
    for key in order:
        start = position[key]
        for t in graph[key].outputs:
            if not t.is_float or Tap(key, t.port) in tapped:
                continue
            last = uses[Tap(key, t.port)]
            if last > start:
                dirty[start] += 1
                dirty[last] -= 1
    clean, running = [], 0
    for j in range(n):
        running += dirty[j]
        clean.append(running == 0)
    weight = [sum(sizes.get(Tap(k, t.port), 0) for t in graph[k].outputs if Tap(k, t.port) in tapped) for k in order]
    segments: list[list[str]] = []
    start, used, last_clean = 0, 0, None
    for i in range(n):
        if used + weight[i] > max_bytes and last_clean is not None:
            segments.append(list(order[start:last_clean + 1]))
            start, last_clean = last_clean + 1, None
            used = sum(weight[start:i])
        used += weight[i]
        if clean[i] and i < n - 1:
            last_clean = i
    segments.append(list(order[start:]))
    return [s for s in segments if s]
