"""Ops that only move values, and where the values such an op moves come from (used by the judge's rule 6, by
`whole_unit`, and by the benchmarks' and tests' rule that a fault at a movement op is found at its producer)."""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["MOVEMENT", "RESCALING", "SELECTING", "moved_inputs", "carried_from", "only_selects"]

# Ops that only move, select or copy values: they add no rounding error of their own.
MOVEMENT = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Concat", "Split", "VariadicSplit", "Slice",
                      "StridedSlice", "Gather", "GatherElements", "GatherND", "Broadcast", "Tile", "Identity",
                      "DepthToSpace", "SpaceToDepth", "ShuffleChannels", "Pad", "Reverse", "Roll"})
# Movement ops whose output may hold a part of their input's values, or others too: its rms is not their input's.
RESCALING = frozenset({"Concat", "Pad", "Slice", "StridedSlice", "Split", "VariadicSplit", "Gather", "GatherElements",
                       "GatherND"})

# Movement ops whose output is a part of one input's values: no element of it can be further off than that input's.
SELECTING = frozenset({"Slice", "StridedSlice", "Split", "VariadicSplit", "Gather", "GatherElements", "GatherND"})


def only_selects(op_type: str, largest: float | None, producer_largest: float | None) -> bool:
    """Whether a selecting op's largest element error (`largest`) is within its producer's: the part it took may be
    further off than the whole relative to its own size, but no element changed (an EfficientViM split of 9 of its
    input's values read 2.25x growth in bf16). False when either is unknown."""
    return (op_type in SELECTING and largest is not None and producer_largest is not None
            and largest <= producer_largest * (1 + 1e-6))


def moved_inputs(graph: Any, key: str) -> list[tuple[str, int]]:
    """The inputs whose values movement op `key` moves: every input of a Concat, the first of any other (the
    rest choose which values or where: a Gather's indices, a Slice's bounds, a Reshape's shape, a Pad's pads)."""
    inputs = list(graph[key].inputs)
    return inputs if graph[key].op_type == "Concat" else inputs[:1]


def carried_from(graph: Any, key: str, *, moves: Callable[[str], bool] | None = None,
                 pick: Callable[[tuple[str, int]], float] | None = None) -> list[str]:
    """The nodes whose values `key` carries when it only moves values (`moves(key)`; default: its op type is in
    `MOVEMENT`): walking up through other such ops to the arithmetic node that produced them (last), along the
    computed input `pick` ranks highest (default: the first). Empty when `key` computes; the last is a movement
    op when only model inputs lie beyond it."""
    moves = moves or (lambda k: graph[k].op_type in MOVEMENT)
    chain: list[str] = []
    while moves(key):
        computed = [(k, p) for k, p in moved_inputs(graph, key) if graph[k].kind == "compute"]
        if not computed:
            break
        key = (max(computed, key=pick) if pick is not None else computed[0])[0]
        chain.append(key)
    return chain
