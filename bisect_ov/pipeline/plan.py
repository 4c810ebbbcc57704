"""The plan of a run, made once right after the untouched run (the first point where the precision each side
really ran and the target's runtime graph are known), and read by every later stage.

It holds the tolerance model for that precision and, from it, every node's and every final output's tolerance
(`analysis.tolerance.node_thresholds`: ops that only move values carry their producer's). No stage computes a
tolerance of its own: the measurement's search, the scoring, the experiments, the judge and the sweep read
these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from bisect_ov.analysis.judge import MOVEMENT
from bisect_ov.analysis.tolerance import Tolerance, node_thresholds
from bisect_ov.model.graph import ModelGraph

__all__ = ["Plan", "make_plan"]


@dataclass(frozen=True)
class Plan:
    """The tolerance model and every node's and output's tolerance, by key."""

    tolerance: Tolerance
    thresholds: Mapping[tuple[str, int], float] = field(default_factory=dict)
    outputs: Mapping[str, float] = field(default_factory=dict)  # Result key -> tolerance
    movement: frozenset[str] = frozenset()  # keys of the nodes that only move values

    def node(self, key: str, port: int = 0) -> float:
        """The tolerance of node `key`'s output `port` (its first output's when the port has none)."""
        found = self.thresholds.get((key, port))
        return found if found is not None else self.thresholds.get((key, 0), 0.0)

    def output(self, key: str) -> float:
        """The tolerance of final output `key` (a Result)."""
        return self.outputs[key]

    @property
    def limit(self) -> float:
        """The smallest of the final outputs' tolerances: what a fix must reach, what "diverges" means."""
        return min(self.outputs.values(), default=0.0)


def make_plan(tolerance: Tolerance, graph: ModelGraph) -> Plan:
    """The plan for `graph` under `tolerance` (its precision filled in from what the sides ran)."""
    thresholds = node_thresholds(tolerance, graph, MOVEMENT)
    outputs = {}
    for result in graph.results():
        producer, port = result.inputs[0]
        node = graph[producer]
        outputs[result.key] = (thresholds[(producer, port)] if (producer, port) in thresholds
                               else tolerance.for_node(node, port))
    movement = frozenset(n.key for n in graph.candidates() if n.op_type in MOVEMENT)
    return Plan(tolerance, thresholds, outputs, movement)
