"""The pieces a reproducer ships: the culprit's fused group cut out of the model, and larger pieces grown
upstream from it, each with the tensors that feed it and the reference's values for them.

`unit_keys` gives the culprit and the members of its fused group (what the target ran as one kernel, from
`NodeResult.group`); `growth` gives the pieces tried, smallest first: the unit, then the unit with every compute
node up to 1, 2, ... data edges upstream, while it stays within a node bound. Growth goes upstream only: the
culprit is where a kernel's output leaves it, so what its value depends on (the kernels that produce its inputs,
in the precision they stored them) lies upstream; a consumer fused with it would be its kernel, hence its group.

`build_piece` cuts one piece out of both sides' models (`bisect_ov.model.partition.extract`): for a twin target
(`target_model=`), the twin's matched ops and its own ops upstream of them (a FakeQuantize, an injected fault),
as local errors run them. Its parameters get plain names (``in0``, ``in1`` ... for activations, ``model_input<i>``
for the model's own inputs a shape subgraph reads), its outputs ``out0`` ...; `Piece` records which tensor of the
model each stands for and which ones the target stores in its activation precision.

Assumptions: the comparison's graphs are those of the run the report came from; keys are the reference's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import openvino as ov

from bisect_ov.core.errors import InputError
from bisect_ov.engine.comparison import Comparison, Sample
from bisect_ov.engine.pieces import stored_low
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.partition import Extracted, extract
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap

__all__ = ["MAX_NODES", "MAX_STEPS", "Piece", "Side", "build_piece", "feed_values", "growth", "unit_keys"]

MAX_NODES = 48  # the largest piece growth tries (compute nodes of the reference)
MAX_STEPS = 6  # growth steps upstream past the fused group


@dataclass(frozen=True, eq=False)
class Side:
    """One side's piece: its model (renamed), and for each parameter what it is fed."""

    model: ov.Model
    feeds: tuple[tuple[str, Tap | None, int | None], ...]  # (parameter name, reference tap, model input position)
    typed_inputs: tuple[str, ...] = ()  # parameters the target stored in its activation precision
    typed_outputs: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class Piece:
    """A piece of the model on both sides; `twin`: the target runs a piece of its own model (else the same)."""

    keys: tuple[str, ...]  # reference keys, topological
    outputs: tuple[Tap, ...]  # reference taps compared, one per `out<i>`
    ref: Side
    target: Side
    twin: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f"out{i}" for i in range(len(self.outputs)))

    def fed_taps(self) -> list[Tap]:
        """Reference tensors whose values the piece needs (activations, not the model's inputs)."""
        return list(dict.fromkeys(t for s in (self.ref, self.target) for _, t, _ in s.feeds if t is not None))


def unit_keys(graph: ModelGraph, key: str, group: Sequence[str]) -> tuple[str, ...]:
    """The node `key` and the members of its fused group (names or keys), in topological order."""
    members = {key}
    for name in group:
        try:
            members.add(graph.find(name).key)
        except InputError:
            continue  # a member the graph does not know by that name: folded away
    return tuple(sorted((m for m in members if graph[m].is_candidate), key=lambda k: graph[k].index))


def growth(graph: ModelGraph, unit: Sequence[str], *, max_nodes: int = MAX_NODES,
           max_steps: int = MAX_STEPS) -> list[tuple[str, ...]]:
    """The pieces to try, smallest first: `unit`, then it with the compute nodes up to 1, 2, ... data edges
    upstream, each step adding something, none larger than `max_nodes` (the unit itself always comes first)."""
    pieces = [tuple(unit)]
    current = set(unit)
    for _ in range(max_steps):
        added = {p for k in current for p, _ in graph.data_inputs(k) if graph[p].is_candidate} - current
        if not added or len(current) + len(added) > max_nodes:
            break
        current |= added
        pieces.append(tuple(sorted(current, key=lambda k: graph[k].index)))
    return pieces


def build_piece(comparison: Comparison, target_runtime: RuntimeGraph, keys: Sequence[str], outputs: Sequence[Tap],
                *, target_precision: str = "", ref_precision: str = "") -> Piece:
    """Cut `keys` out of both sides' models, producing `outputs` (reference taps); see the module docstring.

    `target_precision`/`ref_precision`: the activation precision each side stores tensors in (``bf16``,
    ``f16``); inputs and outputs are typed in it as local errors type them (the target's only where its
    untouched run stored them so, `bisect_ov.engine.pieces.stored_low`).

    Raises
    ------
    InputError
        A twin's piece reads a tensor of the twin that the model lacks, so it cannot be fed the reference's
        values.
    """
    graph = comparison.graph
    ref_cut = extract(graph, list(keys), list(outputs))
    names: dict[Tap, str] = {}
    ref_low, target_low = ref_precision in ("bf16", "f16"), target_precision in ("bf16", "f16")
    ref_side = _side(ref_cut, graph, names, lambda t: t, "model_input", outputs, typed=lambda t: ref_low)
    if not comparison.twin:
        typed_in = tuple(n for n, t, _ in ref_side.feeds if t is not None and target_low and stored_low(target_runtime, t))
        typed_out = tuple(f"out{i}" for i, t in enumerate(outputs) if target_low and stored_low(target_runtime, t))
        return Piece(tuple(keys), tuple(outputs), ref_side, Side(ref_side.model, ref_side.feeds, typed_in, typed_out),
                     twin=False)
    target = comparison.target_graph
    ref_of = {t: r for r, t in comparison.match.pairs}
    op_of = comparison.match.target_op()
    matched = {t.key for t in ref_of}
    for r, t in op_of.items():  # a twin's op read before its quantizer stands for the model's op too
        for port in range(len(target[t].outputs)):
            ref_of.setdefault(Tap(t, port), Tap(r, port))
    own: set[str] = set()
    for k in keys:
        found = {comparison.target_of[Tap(k, 0)].key} if Tap(k, 0) in comparison.target_of else set()
        found |= {op_of[k]} if k in op_of else set()
        for key in found:
            own |= target.upstream(key, stop=lambda x: x in matched or not target[x].is_candidate)
    target_outputs = [comparison.target_of[t] for t in outputs]
    target_cut = extract(target, sorted(own, key=lambda k: target[k].index), target_outputs)
    foreign = [t for t in target_cut.fed if target[t.key].kind != "parameter" and t not in ref_of]
    if foreign:
        raise InputError(f"The twin's piece around '{graph[keys[-1]].name}' reads the twin's tensor '{foreign[0]}', "
                         "which the model lacks: it cannot be fed the reference's values.")
    target_side = _side(target_cut, target, names, lambda t: ref_of.get(t), "target_input", target_outputs,
                        typed=lambda t: target_low and stored_low(target_runtime, t))
    return Piece(tuple(keys), tuple(outputs), ref_side, target_side, twin=True)


def _side(cut: Extracted, graph: ModelGraph, names: dict[Tap, str], to_ref, input_prefix: str,
          outputs: Sequence[Tap], *, typed) -> Side:
    """Name the parameters and outputs of an extracted piece; `names` (reference tap -> name) is shared by the
    two sides, so a tensor fed to both has one name."""
    model = cut.model
    params = model.get_parameters()
    feeds: list[tuple[str, Tap | None, int | None]] = []
    typed_in: list[str] = []
    for param, tap in zip(params, cut.fed):
        if graph[tap.key].kind == "parameter":
            position = graph.parameter_position[tap.key]
            name = f"{input_prefix}{position}"
            feeds.append((name, None, position))
        else:
            ref_tap = to_ref(tap)
            name = names.setdefault(ref_tap, f"in{len(names)}")
            feeds.append((name, ref_tap, None))
            if typed(tap):
                typed_in.append(name)
        _rename_parameter(param, name)
    for param, position in zip(params[len(cut.fed):], cut.model_inputs):
        name = f"{input_prefix}{position}"
        feeds.append((name, None, position))
        _rename_parameter(param, name)
    typed_out = []
    for i, (result, tap) in enumerate(zip(model.get_results(), outputs)):
        result.input_value(0).get_tensor().set_names({f"out{i}"})
        result.set_friendly_name(f"out{i}")
        if typed(tap):
            typed_out.append(f"out{i}")
    return Side(model, tuple(feeds), tuple(typed_in), tuple(typed_out))


def _rename_parameter(param: ov.Node, name: str) -> None:
    param.set_friendly_name(name)
    param.output(0).get_tensor().set_names({name})


def feed_values(piece: Piece, sample: Sample, values: Mapping[Tap, object]) -> dict[str, object]:
    """The arrays of every parameter of both sides, by name: reference values of activations, the sample's
    inputs for the model's own inputs (the twin's for a twin's)."""
    arrays: dict[str, object] = {}
    for side, inputs in ((piece.ref, sample.ref), (piece.target, sample.target if piece.twin else sample.ref)):
        for name, tap, position in side.feeds:
            if tap is not None:
                arrays[name] = values[tap]
            elif position is not None:
                arrays[name] = inputs[position]
    return arrays
