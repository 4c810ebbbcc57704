"""Taps: a copy of the model whose chosen intermediate tensors are extra outputs.

The user's model is never modified: taps are added to `model.clone()`. A tap names a tensor by the key of the
op that produces it and the output port, as in `ModelGraph`. `plan_chunks` splits many taps into groups whose
tensors fit a byte budget, so one compile never has to hold every intermediate tensor at once.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Mapping, Sequence

import openvino as ov

from bisect_ov.core.errors import raise_if_interrupted
from bisect_ov.model.graph import ModelGraph

__all__ = ["Tap", "TappedModel", "default_taps", "tap_model", "plan_chunks", "tensor_sizes"]


@dataclass(frozen=True, order=True)
class Tap:
    """One tensor: output `port` of the op with key `key`."""

    key: str
    port: int = 0

    def __str__(self) -> str:
        return self.key if self.port == 0 else f"{self.key}:{self.port}"


@dataclass(frozen=True)
class TappedModel:
    """A rewritten copy and where each tap and each original output ended up among its outputs."""

    model: ov.Model
    taps: tuple[Tap, ...]
    tap_outputs: tuple[int, ...]  # model output index of each tap
    n_original_outputs: int

    @property
    def added_outputs(self) -> tuple[int, ...]:
        """Indices of the outputs that exist only to observe taps (not the model's own outputs)."""
        return tuple(sorted({i for i in self.tap_outputs if i >= self.n_original_outputs}))


def default_taps(graph: ModelGraph, keys: Sequence[str] | None = None) -> list[Tap]:
    """Every output of every candidate op (or of `keys`), in topological order."""
    nodes = graph.candidates() if keys is None else [graph[k] for k in keys]
    return [Tap(n.key, t.port) for n in nodes for t in n.outputs]


def tap_model(graph: ModelGraph, taps: Sequence[Tap], model: ov.Model | None = None) -> TappedModel:
    """Return a copy of `model` (default: the graph's model) with `taps` exposed as outputs.

    Parameters
    ----------
    graph
        The walked model; `model`, when given, must have the same structure (a clone, or a twin whose
        ops sit at the same positions), since ops are found by topological position.
    taps
        Tensors to expose. A tensor that is already a model output is not duplicated.
    """
    source = graph.model if model is None else model
    clone = source.clone()
    n_original = len(clone.outputs)
    ops = graph.ops_of(clone, [t.key for t in taps])
    added = clone.add_outputs([op.output(t.port) for op, t in zip(ops, taps)]) if taps else []
    # add_outputs returns the Result of an already exposed tensor instead of adding a second one.
    indices = tuple(int(clone.get_result_index(out)) for out in added)
    return TappedModel(clone, tuple(taps), indices, n_original)


def plan_chunks(graph: ModelGraph, taps: Sequence[Tap], max_bytes: int | None,
                sizes: Mapping[Tap, int] | None = None) -> list[list[Tap]]:
    """Split `taps` (kept in order) into chunks whose tensors add up to at most `max_bytes`.

    `sizes` gives each tensor's bytes for the inputs in use (`tensor_sizes`); without it, the model's static
    shapes do, and taps of unknown size (dynamic shapes) count as zero. A single tap larger than the budget
    gets a chunk of its own. `max_bytes=None` means one chunk.
    """
    if max_bytes is None or not taps:
        return [list(taps)]
    chunks: list[list[Tap]] = [[]]
    used = 0
    for tap in taps:
        size = sizes.get(tap, 0) if sizes is not None else graph[tap.key].outputs[tap.port].nbytes or 0
        if chunks[-1] and used + size > max_bytes:
            chunks.append([])
            used = 0
        chunks[-1].append(tap)
        used += size
    return chunks


def tensor_sizes(graph: ModelGraph, arrays: Sequence) -> dict[Tap, int]:
    """Bytes of every tensor of the model when its inputs are `arrays` (shapes propagated on a clone).

    A model with dynamic dimensions (a sequence length, a batch) has no sizes until its inputs are known; a
    clone reshaped to the inputs' shapes shares the weights and infers every shape in milliseconds. Returns
    {} when the model cannot be reshaped to them (the caller then falls back to the static shapes). Kept per
    graph and input shapes: the stages of one run ask for the same sizes (a copy is returned).
    """
    shapes = tuple(tuple(int(d) for d in getattr(a, "shape", ())) for a in arrays)
    known = _SIZES.setdefault(graph, {})
    if shapes not in known:
        known[shapes] = _tensor_sizes(graph, arrays)
    return dict(known[shapes])


_SIZES: "weakref.WeakKeyDictionary[ModelGraph, dict[tuple, dict[Tap, int]]]" = weakref.WeakKeyDictionary()


def _tensor_sizes(graph: ModelGraph, arrays: Sequence) -> dict[Tap, int]:
    clone = graph.model.clone()
    params = clone.get_parameters()
    try:
        clone.reshape({p.output(0): ov.PartialShape([int(d) for d in getattr(a, "shape", ())])
                       for p, a in zip(params, arrays)})
    except Exception as err:  # a model whose shapes do not follow its inputs' alone
        raise_if_interrupted(err)
        return {}
    sizes: dict[Tap, int] = {}
    for key, op in zip(graph.order, clone.get_ordered_ops()):
        for port, out in enumerate(op.outputs()):
            shape = out.get_partial_shape()
            if shape.is_static:
                n = 1
                for d in shape.to_shape():
                    n *= int(d)
                sizes[Tap(key, port)] = n * out.get_element_type().size
    return sizes
