"""Match the nodes of a model with those of its twin (an int8 or f16 version, or the model after a change).

Nodes match by friendly name first, then by output tensor name (ONNX names survive conversion, so a twin
converted separately still matches). Only compute nodes are matched; those left over on either side are
returned so the report can list them: nothing is dropped silently.
"""

from __future__ import annotations

from dataclasses import dataclass

from bisect_ov.model.graph import LAYOUT_OPS, ModelGraph
from bisect_ov.model.taps import Tap

__all__ = ["Match", "match_nodes", "identity_match", "foreign_inputs"]



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
    unmatched_target = [n.name for n in target.candidates() if n.key not in used]
    # Ops on constants only (FakeQuantize or Convert of weights) change values too: list those the model lacks.
    unmatched_target += [n.name for n in target if n.kind == "static" and n.key not in ref
                         and n.op_type not in LAYOUT_OPS and any(t.is_float for t in n.outputs)]
    return Match(tuple(pairs), tuple(unmatched_ref), tuple(unmatched_target))


def foreign_inputs(match: Match, target: ModelGraph, target_key: str) -> list[str]:
    """Ops the target model runs between a matched node and its matched producers (e.g. FakeQuantize)."""
    matched = {t.key for _, t in match.pairs}
    between = target.upstream(target_key, data_only=False, include_self=False,
                              stop=lambda k: k in matched or target[k].kind in ("parameter", "constant"))
    # Nearest first: the op right in front of the node is what a reader looks for.
    return [f"'{target[k].name}' ({target[k].op_type})" for k in sorted(between, key=lambda k: -target[k].index)
            if target[k].kind in ("compute", "static") and target[k].op_type not in LAYOUT_OPS]
