"""Framework sides in a comparison: resolved before the model is loaded, bound once the inputs are known.

`resolve_sides` turns the ``ref=``, ``target=`` and ``truth=`` of `bisect()` into framework sides where they
name one (`bisect_ov.frameworks.resolve`) and converts the module when ``model=None``; `bind_sides` binds them
to the walked model with the examined inputs, keeps only the tensors every side has a value for in the node
match (the others are listed, with the match coverage, in `FrameworkMatch` records), and says in notes what a
framework side cannot do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from bisect_ov.core.errors import InputError
from bisect_ov.core.records import FrameworkMatch
from bisect_ov.frameworks.resolve import convert_model, framework_side, plain_inputs, truth_side
from bisect_ov.frameworks.side import BoundSide, FrameworkSide
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.match import Match
from bisect_ov.run.device_base import Device

__all__ = ["Sides", "Bound", "resolve_sides", "bind_sides"]


@dataclass(frozen=True)
class Sides:
    """What `bisect()` was given, with framework sides made: the model (converted when it was None), both sides,
    the float64 side, and the inputs (torch tensors as numpy arrays)."""

    model: Any
    ref: Any
    target: Any
    truth: FrameworkSide | None
    inputs: Any


@dataclass(frozen=True)
class Bound:
    """The devices the comparison runs, the node match kept to the tensors every side has, and the records."""

    ref: Device
    target: Device
    truth: BoundSide | None
    match: Match
    frameworks: tuple[FrameworkMatch, ...]
    notes: tuple[str, ...]


def resolve_sides(model: Any, ref: Any, target: Any, truth: Any, inputs: Any) -> Sides:
    """Framework sides for `ref`, `target` and `truth` where they name one; the model converted when None."""
    ref_side, target_side = framework_side(ref, model), framework_side(target, model)
    if model is None:
        model = convert_model(ref_side or target_side, inputs)
    truth_of = truth_side(truth, ref_side, target_side, model)
    return Sides(model, ref_side or ref, target_side or target, truth_of, plain_inputs(inputs))


def bind_sides(graph: ModelGraph, arrays: Sequence[np.ndarray], ref: Device, target: Device,
               truth: FrameworkSide | None, match: Match, *, twin: bool, asked_pieces: bool) -> Bound:
    """Bind the framework sides to `graph` on `arrays` and keep the match to what they provide.

    Raises
    ------
    InputError
        A framework side with a second model (``target_model``), or whose outputs are not the model's.
    """
    roles = {"ref": ref, "target": target}
    if twin and any(isinstance(d, FrameworkSide) for d in roles.values()):
        raise InputError("A framework side (PyTorch, ONNX Runtime) runs the model it was converted from: it cannot be "
                         "compared with a target_model. Compare the framework with the model, then the model with "
                         "its twin.")
    bound = {k: d.bind(graph, arrays) if isinstance(d, FrameworkSide) else d for k, d in roles.items()}
    truth_bound = truth.bind(graph, arrays) if truth is not None else None
    records = tuple(d.record(k) for k, d in bound.items() if isinstance(d, BoundSide))
    if truth_bound is not None:
        records += (truth_bound.record("truth"),)
    provided = [p for p in (bound["ref"].provides(graph), bound["target"].provides(graph)) if p is not None]
    notes: list[str] = []
    if provided:
        keep = frozenset.intersection(*provided)
        pairs = tuple((r, t) for r, t in match.pairs if r in keep)
        kept = {r.key for r, _ in pairs}
        dropped = tuple(n.name for n in graph.candidates() if n.key not in kept)
        match = Match(pairs, dropped, match.unmatched_target, match.ops, match.quantized, match.quantizers)
    for record in records:
        side = {"ref": "reference", "target": "target", "truth": "float64 side"}[record.role]
        notes.append(f"The {side} is {record.framework} ({record.dtype}): {record.matched:,} of the model's "
                     f"{record.compute_nodes:,} compute nodes matched a value of its run, {record.covered:,} "
                     f"({record.coverage:.0%}) with the ops inside matched calls"
                     + (f"; {len(record.unmatched):,} unmatched (Report.frameworks lists them)" if record.unmatched
                        else "") + ".")
    framework = [d for d in bound.values() if isinstance(d, BoundSide)]
    if framework and asked_pieces:
        notes.append(f"Partitioned runs (fix, delegation, curve) need OpenVINO on both sides; the {framework[0].framework} "
                     "side runs the whole model only, so they were skipped. Local errors still run: the target's "
                     "nodes fed with the framework's tensors.")
    return Bound(bound["ref"], bound["target"], truth_bound, match, records, tuple(notes))
