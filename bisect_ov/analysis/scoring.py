"""Error-growth scoring: which nodes create error, which amplify it, which only pass it on.

Inputs: the walked graph, the error measured for some tensors (``errors[(key, port)]``, under one metric),
and a tolerance per measured node. Assumes nodes come in topological order (as `ModelGraph` gives them).
Tensors that were not measured (not tapped, or unmatched in a twin model) carry the largest error of their
own inputs, so scoring works with any subset of taps.

For a measured node with output error ``e``, tolerance ``tol`` and inherited error ``i`` (the largest error
among the tensors it reads):

* ``growth = e / max(i, tol / 10)``: how many times the node multiplied what it was given. The floor keeps
  the ratio finite when the inputs are exact, and makes a clean input count as "a tenth of the tolerance".
* ``diverged``: ``e > tol``.
* ``clean inputs``: every tensor it reads is within its producer's tolerance.
* role ``source``: diverged, ``growth >= min_growth``, clean inputs (the contract's "first divergence":
  its own output exceeds the tolerance while every input it reads is within tolerance);
  ``amplifier``: diverged and ``growth >= min_growth`` but its inputs had diverged already;
  ``inherits``: diverged with ``growth < min_growth``: it passes on what it was given (this also covers
  rounding that slowly drifts over the tolerance through depth: no single node is to blame);
  ``ok``: within tolerance; ``absorbed``: over its tolerance, but its consumers come back within tolerance
  and its measured impact on the final outputs is below theirs (decided by the caller, passed as
  `absorbed`): the network takes its error out again, so it is neither blamed nor ranked, and its consumers
  count as reading clean inputs, their growth measured against the error it really hands on (a consumer that
  only carries that error on, a bias Add after an absorbed convolution, grows nothing and is no source);
  ``internal``: over its tolerance as tapped, but its tensor exists only inside
  a kernel of the untouched target whose output is within tolerance (decided by the caller, passed as
  `internal`): the tap showed what a compile exposing it computed, not what the target computed, so it is
  treated like an absorbed node (neither blamed nor ranked, its readers reading clean inputs within its
  tolerance: the tapped value was never handed on).
* first divergence: the sources and amplifiers with no source or amplifier upstream (several when
  independent branches start diverging).
* ranking of the diverged nodes: first divergences, then the other sources and amplifiers by growth, then
  the nodes that only inherit, by error. A node whose target output gained NaN/Inf from finite inputs has
  infinite growth; its consumers, fed NaN/Inf, have growth 1.

Pure Python over networkx-free dicts: O(nodes + edges), fine for graphs of tens of thousands of ops.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Mapping

from bisect_ov.model.graph import ModelGraph

__all__ = ["NodeScore", "Scores", "score_graph", "ROLES", "NOT_DIVERGED"]

ROLES = ("source", "amplifier", "inherits", "absorbed", "internal", "ok")
NOT_DIVERGED = ("ok", "absorbed", "internal")
_GROWTH_FLOOR = 0.1


@dataclass(frozen=True)
class NodeScore:
    key: str
    error: float
    inherited: float
    tolerance: float
    growth: float
    role: str
    first: bool
    rank: int | None

    @property
    def diverged(self) -> bool:
        return self.role not in NOT_DIVERGED


@dataclass(frozen=True)
class Scores:
    nodes: dict[str, NodeScore]
    first: tuple[str, ...]
    ranking: tuple[str, ...]


def score_graph(
    graph: ModelGraph,
    errors: Mapping[tuple[str, int], float],
    tolerances: Mapping[str, float],
    *,
    min_growth: float = 2.0,
    absorbed: Collection[str] = (),
    internal: Collection[str] = (),
) -> Scores:
    """Score every measured node of `graph`.

    Parameters
    ----------
    graph
        The walked model.
    errors
        Error of each measured tensor, keyed by (node key, output port); NaN counts as infinite.
    tolerances
        Threshold of each measured node (by key).
    min_growth
        Growth a diverged node needs to be a source or an amplifier.
    absorbed
        Keys of nodes over their tolerance whose error the network absorbs (see the module docstring).
    internal
        Keys of nodes whose tapped value the untouched target never computed, inside a kernel whose output is
        within tolerance (see the module docstring); scored like absorbed nodes, with the role ``internal``.
    """
    effective: dict[tuple[str, int], float] = {}
    over: dict[tuple[str, int], bool] = {}
    blamed_upstream: dict[str, bool] = {}
    results: dict[str, NodeScore] = {}
    for node in graph:
        if node.kind == "parameter":
            for t in node.outputs:
                effective[(node.key, t.port)], over[(node.key, t.port)] = 0.0, False
            continue
        if node.kind not in ("compute", "result"):
            continue
        reads = graph.data_inputs(node.key)
        inherited = max((effective.get(r, 0.0) for r in reads), default=0.0)
        dirty_inputs = any(over.get(r, False) for r in reads)
        upstream = any(blamed_upstream.get(k, False) for k, _ in reads)
        measured = [t.port for t in node.outputs if (node.key, t.port) in errors] if node.kind == "compute" else []
        if not measured:
            for t in node.outputs:
                effective[(node.key, t.port)], over[(node.key, t.port)] = inherited, dirty_inputs
            blamed_upstream[node.key] = upstream
            continue
        tol = float(tolerances.get(node.key, 0.0))
        for t in node.outputs:
            e = _clean(errors.get((node.key, t.port), inherited))
            effective[(node.key, t.port)] = e
            over[(node.key, t.port)] = e > tol
        error = max(effective[(node.key, p)] for p in measured)
        growth = _growth(error, inherited, tol)
        set_aside = "internal" if node.key in internal else "absorbed" if node.key in absorbed else None
        if error > tol and set_aside:
            for t in node.outputs:  # its readers read clean inputs: none of them is an amplifier for it
                over[(node.key, t.port)] = False
                if set_aside == "internal":  # a value the target never computed: nothing real is handed on
                    effective[(node.key, t.port)] = min(effective[(node.key, t.port)], tol)
            blamed_upstream[node.key] = upstream
            results[node.key] = NodeScore(node.key, error, inherited, tol, growth, set_aside, False, None)
            continue
        if error <= tol:
            role = "ok"
        elif growth >= min_growth:
            role = "amplifier" if dirty_inputs else "source"
        else:
            role = "inherits"
        blamer = role in ("source", "amplifier")
        first = blamer and not upstream
        blamed_upstream[node.key] = upstream or blamer
        results[node.key] = NodeScore(node.key, error, inherited, tol, growth, role, first, None)

    first_keys = tuple(k for k, s in results.items() if s.first)
    ranked = sorted((s for s in results.values() if s.diverged), key=_rank_key)
    ranking = tuple(s.key for s in ranked)
    for rank, key in enumerate(ranking, start=1):
        s = results[key]
        results[key] = NodeScore(s.key, s.error, s.inherited, s.tolerance, s.growth, s.role, s.first, rank)
    return Scores(results, first_keys, ranking)


def _clean(value: float) -> float:
    return math.inf if math.isnan(value) else float(value)


def _growth(error: float, inherited: float, tol: float) -> float:
    base = max(inherited, tol * _GROWTH_FLOOR)
    if math.isinf(error):
        return 1.0 if math.isinf(base) else math.inf
    if base == 0.0:
        return 0.0 if error == 0.0 else math.inf
    return error / base


def _rank_key(s: NodeScore):
    group = 0 if s.first else (1 if s.role in ("source", "amplifier") else 2)
    strength = -s.growth if group < 2 else -s.error
    return (group, strength, s.key)
