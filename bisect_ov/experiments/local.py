"""Local errors: each measured node (or the fusion group it stands for) run alone on the target, fed the
*reference's* inputs, so its output error is its own rather than what it inherited.

All the units of one memory chunk are packed side by side into one model (`model.partition.extract`): the
whole graph costs one reference compile (for the values, none when the untouched run exposed them) and one
target compile per chunk. `LocalErrors` is what was measured, by unit: the unit's members and its outputs'
statistics. It is read by the fusion strategy (which groups make error of their own) and by the experiments
alike, and a unit is never measured twice with the same members (`measure_local` skips what is known).
"""

from __future__ import annotations

import logging
from typing import Mapping, Sequence

import numpy as np

from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.core.errors import DeviceError
from bisect_ov.core.numeric import F32_AGREEMENT
from bisect_ov.engine.comparison import Comparison
from bisect_ov.engine.engine import Engine
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.partition import extract
from bisect_ov.model.taps import Tap

log = logging.getLogger(__name__)

__all__ = ["LOCAL_SHARE", "worth_isolating", "LocalErrors", "local_errors", "measure_local", "local_units", "owned_units", "split_known"]

LOCAL_SHARE = 0.5  # local errors are measured for nodes whose error reaches this share of their tolerance


def worth_isolating(error: float, tolerance: float) -> bool:
    """Whether a node's local error is worth measuring: its error is over its tolerance, or reaches `LOCAL_SHARE`
    of it beyond f32-level agreement (an f32 target's nodes at 5e-7 of a 1e-6 tolerance decide nothing)."""
    return error > tolerance or (error >= LOCAL_SHARE * tolerance and error >= F32_AGREEMENT)

# Unit key (its output node) -> (the unit's members, its outputs' statistics run alone).
LocalErrors = dict[str, tuple[tuple[str, ...], dict[Tap, TensorStats]]]


def measure_local(engine: Engine, units: Mapping[str, tuple[str, ...]], known: LocalErrors, *,
                  max_bytes: int | None, values: Mapping[Tap, np.ndarray] | None = None) -> LocalErrors:
    """The local errors of `units` not in `known` (same members), measured; `known` is not changed."""
    _, todo = split_known(units, known)
    if not todo:
        return {}
    found = local_errors(engine, todo, max_bytes=max_bytes, values=values)
    return {key: (members, {t: st for t, st in found.items() if t.key == key}) for key, members in todo.items()}


def split_known(units: Mapping[str, tuple[str, ...]], known: LocalErrors
                ) -> tuple[dict[Tap, TensorStats], dict[str, tuple[str, ...]]]:
    """The statistics already measured for `units` (same members), and the units still to run."""
    found: dict[Tap, TensorStats] = {}
    todo: dict[str, tuple[str, ...]] = {}
    for key, members in units.items():
        if key in known and known[key][0] == members:
            found.update(known[key][1])
        else:
            todo[key] = members
    return found, todo


def local_units(comparison: Comparison, stats: Mapping[Tap, TensorStats], groups: Mapping[str, tuple[str, ...]],
                errors: Mapping[tuple[str, int], float], tolerances: Mapping[str, float], *,
                every_twin_layer: bool = True) -> dict[str, tuple[str, ...]]:
    """The units whose local error is measured: each measured node with its group's members, by node key.

    A node whose error stays under `LOCAL_SHARE` of its tolerance, fed with the target's own inputs, makes no
    error of its own worth isolating (its local error would have to cancel what it inherits), nor does one within
    its tolerance at f32-level agreement: only the others run alone (`worth_isolating`). With
    `every_twin_layer`, a twin's layers all run, as layer sensitivity and the fix rank them by local error.
    """
    worst: dict[str, float] = {}
    for (key, _), error in errors.items():
        worst[key] = max(worst.get(key, 0.0), error)
    units = owned_units(comparison.graph, list(dict.fromkeys(t.key for t in stats)), groups)
    return {k: u for k, u in units.items()
            if (comparison.twin and every_twin_layer) or worth_isolating(worst.get(k, 0.0), tolerances.get(k, 0.0))}


def owned_units(graph: ModelGraph, keys: list[str], groups: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Each measured node with the members of its group it computes when run alone.

    Groups can share members: a residual that another group reads as a post-op operand is not a boundary, so
    the unmeasured ops feeding it belong to both groups. A shared member is computed by the later group (in
    topological order); the earlier one is fed its reference value. Which group owns a member depends only on
    the measured nodes, so the tensors every unit is fed are known as soon as the fusion groups are.
    """
    keys = sorted(dict.fromkeys(keys), key=lambda k: graph[k].index)
    owner: dict[str, str] = {}
    for key in keys:
        for member in groups.get(key, ()):
            owner[member] = key
    for key in keys:
        owner[key] = key
    return {k: tuple(m for m in dict.fromkeys([k, *groups.get(k, ())]) if owner[m] == k) for k in keys}


def local_errors(engine: Engine, units: Mapping[str, Sequence[str]], *, max_bytes: int | None = 512 << 20,
                 values: Mapping[Tap, np.ndarray] | None = None) -> dict[Tap, TensorStats]:
    """Each unit (key of its output node -> member keys) on the target, fed with reference inputs.

    `values`: reference values already at hand (a streamed measurement's); the others are computed.

    Units are given in the reference model's keys. With a twin target model, each unit runs the twin's
    matched ops, plus the twin's own ops feeding them that the reference lacks (a FakeQuantize, an injected
    fault), fed with the reference's values of the matched tensors around it. Returns statistics of every
    unit's output tensors, target (isolated) against reference.
    """
    target = engine.runner.target_graph
    builder = _UnitBuilder(engine, units)
    ref_of = builder.ref_of
    stats: dict[Tap, TensorStats] = {}
    chunks = builder.chunks(max_bytes)
    while chunks:
        chunk = chunks.pop(0)
        uids = list(dict.fromkeys(t.key for t in chunk))
        piece, outputs = builder.piece(uids)
        foreign = [t for t in piece.fed if target[t.key].kind != "parameter" and t not in ref_of]
        if foreign:
            # A twin-only tensor read across units: run these units one by one; a unit that still reads one
            # cannot be isolated against the reference and is left out.
            if len(uids) > 1:
                chunks[:0] = [[t for t in chunk if t.key == uid] for uid in uids]
            else:
                log.info("Local error of '%s' not measured: it reads the twin's tensor %s, which the model "
                         "lacks.", uids[0], foreign[0])
            continue
        fed_ref = [ref_of[t] for t in piece.fed if t in ref_of]
        given = {t: values[t] for t in fed_ref + outputs if values is not None and t in values}
        missing = [t for t in fed_ref + outputs if t not in given]
        got_ref = {**given, **(engine.ref_values(missing) if missing else {})}
        feed = {}
        for t in piece.fed:
            if target[t.key].kind == "parameter":
                feed[t] = engine.sample.target[target.parameter_position[t.key]]
            else:
                feed[t] = got_ref[ref_of[t]]
        misfit = _misfit(piece, feed)
        if misfit is not None:
            # A twin's tensor paired with a reference tensor of another shape (a fault or a rewrite between two
            # outputs of one op): these units one by one; a unit that still reads one is left out.
            if len(uids) > 1:
                chunks[:0] = [[t for t in chunk if t.key == uid] for uid in uids]
            else:
                log.info("Local error of '%s' not measured: the twin's tensor %s has shape %s where the model's "
                         "counterpart has %s.", uids[0], *misfit)
            continue
        try:
            got = engine.run_piece("target", piece, feed)
        except DeviceError as err:
            # The target cannot compile or run this piece (the CPU plugin refuses some pieces of ONNX exports
            # that it runs whole: "contains empty child edge"): these units one by one; one that still fails is
            # left out, its local error unknown.
            if len(uids) > 1:
                chunks[:0] = [[t for t in chunk if t.key == uid] for uid in uids]
            else:
                log.info("Local error of '%s' not measured: the target could not run it alone: %s", uids[0], err)
            continue
        for t, arr in zip(outputs, got):
            stats[t] = compare(got_ref[t], arr)
    return stats


def _misfit(piece, feed: Mapping[Tap, np.ndarray]) -> tuple[Tap, str, tuple[int, ...]] | None:
    """The first fed tensor whose value's shape the piece's input cannot take: (tensor, its shape, the value's)."""
    for t, param in zip(piece.fed, piece.model.get_parameters()):
        shape = param.get_partial_shape()
        value = np.shape(feed[t])
        if shape.rank.is_static and (len(value) != shape.rank.get_length() or any(
                d.is_static and d.get_length() != v for d, v in zip(shape, value))):
            return t, str(shape), tuple(value)
    return None


class _UnitBuilder:
    """Builds the isolated-units models of `local_errors`: which twin ops each unit runs, in memory chunks."""

    def __init__(self, engine: Engine, units: Mapping[str, Sequence[str]]):
        self.engine, self.units = engine, units
        graph, target = engine.runner.graph, engine.runner.target_graph
        self.ref_of = {t: r for r, t in engine.runner.match.pairs}
        self.op_of = engine.runner.match.target_op()
        for r, t in self.op_of.items():  # a twin's op read before its quantizer stands for the model's op too
            for port in range(len(target[t].outputs)):
                self.ref_of.setdefault(Tap(t, port), Tap(r, port))
        self.matched_t = {t.key for t in self.ref_of}
        target_of = engine.runner.target_of
        self.outputs_of = {uid: [Tap(uid, t.port) for t in graph[uid].outputs if Tap(uid, t.port) in target_of]
                           for uid in units}

    def chunks(self, max_bytes: int | None) -> list[list[Tap]]:
        flat = [t for uid in self.units for t in self.outputs_of[uid]]
        return self.engine.chunks(flat, max_bytes)

    def _target_unit(self, members: set[str]) -> set[str]:
        target, target_of = self.engine.runner.target_graph, self.engine.runner.target_of
        keys = {target_of[Tap(m, 0)].key for m in members if Tap(m, 0) in target_of}
        keys |= {self.op_of[m] for m in members if m in self.op_of}
        own = set(keys)
        for key in keys:  # absorb the twin's own ops upstream of the unit
            own |= target.upstream(key, stop=lambda k: k in self.matched_t or not target[k].is_candidate)
        return own

    def piece(self, uids: Sequence[str]):
        """The model running units `uids` side by side, and the reference taps of their outputs."""
        unit_of = {m: uid for uid in uids for m in self._target_unit(set(self.units[uid]) | {uid})}
        outputs = [t for uid in uids for t in self.outputs_of[uid]]
        target_of = self.engine.runner.target_of
        return extract(self.engine.runner.target_graph, list(unit_of), [target_of[t] for t in outputs], unit_of), outputs


