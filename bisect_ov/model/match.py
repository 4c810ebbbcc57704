"""Match the nodes of a model with those of its twin (an int8 or f16 version, or the model after a change).

Nodes match by friendly name first, then by output tensor name (ONNX names survive conversion, so a twin
converted separately still matches). Only compute nodes are matched; those left over on either side are
returned so the report can list them: nothing is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass

from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.taps import Tap

__all__ = ["Match", "match_nodes", "identity_match"]


@dataclass(frozen=True)
class Match:
    """Pairs of tensors (reference tap, target tap) and the nodes left unmatched on each side."""

    pairs: tuple[tuple[Tap, Tap], ...]
    unmatched_ref: tuple[str, ...]
    unmatched_target: tuple[str, ...]


def identity_match(graph: ModelGraph) -> Match:
    """Every candidate tensor matched with itself (both sides run the same model)."""
    pairs = tuple((Tap(n.key, t.port), Tap(n.key, t.port)) for n in graph.candidates() for t in n.outputs)
    return Match(pairs, (), ())


def match_nodes(ref: ModelGraph, target: ModelGraph) -> Match:
    """Match candidates of `ref` with candidates of `target` by friendly name, then by tensor name."""
    pairs: list[tuple[Tap, Tap]] = []
    used: set[str] = set()
    unmatched_ref: list[str] = []
    for node in ref.candidates():
        other = target[node.key] if node.key in target and target[node.key].is_candidate else None
        if other is not None and other.key not in used:
            used.add(other.key)
            for port in range(min(len(node.outputs), len(other.outputs))):
                pairs.append((Tap(node.key, port), Tap(other.key, port)))
            continue
        found = False
        for t in node.outputs:
            for name in t.names:
                hit = target.lookup_tensor(name)
                if hit is not None and target[hit[0]].is_candidate:
                    pairs.append((Tap(node.key, t.port), Tap(hit[0], hit[1])))
                    used.add(hit[0])
                    found = True
                    break
        if not found:
            unmatched_ref.append(node.name)
    unmatched_target = tuple(n.name for n in target.candidates() if n.key not in used)
    return Match(tuple(pairs), tuple(unmatched_ref), unmatched_target)
