"""The plan of a run, made once right after the untouched run (the first point where the precision each side
really ran and the target's runtime graph are known), and read by every later stage.

It holds the tolerance model for that precision and, from it, every node's and every final output's tolerance
(`analysis.tolerance.node_thresholds`: ops that only move values carry their producer's), and the untouched
target's fusion (`Fusion`: the group boundaries, each boundary's group and local-error unit, which tensors exist
only inside a kernel). No stage computes a tolerance or a boundary of its own: the reference's plain run, the
measurement's search, the scoring, the experiments, the judge and the sweep read these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from bisect_ov.analysis.judge import MOVEMENT
from bisect_ov.analysis.tolerance import Tolerance, node_thresholds
from bisect_ov.engine.comparison import Comparison
from bisect_ov.experiments.local import owned_units
from bisect_ov.model.fusion import KernelTensors, kernel_tensors
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap
from bisect_ov.search.strategies import fusion_taps

__all__ = ["Plan", "Fusion", "make_plan", "plan_fusion"]


@dataclass(frozen=True)
class Fusion:
    """The untouched target's fused kernels, read once from its runtime graph.

    boundaries
        The tensors each fusion group ends in (what the fusion strategy measures first), reference taps.
    groups
        Boundary node key -> the members of its group (the ops the kernel computes before it).
    units
        Boundary node key -> the members it computes when run alone for its local error (`owned_units`).
    kernels
        Which tensors exist only inside a kernel, and what each kernel stores (`model.fusion.kernel_tensors`).
    """

    boundaries: tuple[Tap, ...] = ()
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    units: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    kernels: KernelTensors = field(default_factory=KernelTensors)


def plan_fusion(comparison: Comparison, runtime: RuntimeGraph, untappable: frozenset[Tap]) -> Fusion:
    """The `Fusion` of the untouched target whose runtime graph is `runtime` (`untappable`: a twin's taps inside
    its int8 kernels, never exposed)."""
    boundaries, groups = fusion_taps(comparison, runtime, untappable)
    units = owned_units(comparison.graph, [t.key for t in boundaries], groups)
    kernels = kernel_tensors(comparison.target_graph, runtime, comparison.match)
    return Fusion(tuple(boundaries), groups, units, kernels)


@dataclass(frozen=True)
class Plan:
    """The tolerance model and every node's and output's tolerance, by key, and the target's fusion."""

    tolerance: Tolerance
    thresholds: Mapping[tuple[str, int], float] = field(default_factory=dict)
    outputs: Mapping[str, float] = field(default_factory=dict)  # Result key -> tolerance
    movement: frozenset[str] = frozenset()  # keys of the nodes that only move values
    fusion: Fusion = field(default_factory=Fusion)

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


def make_plan(tolerance: Tolerance, graph: ModelGraph, fusion: Fusion | None = None) -> Plan:
    """The plan for `graph` under `tolerance` (its precision filled in from what the sides ran), with the target's
    `fusion` (`plan_fusion`; none known when not given)."""
    thresholds = node_thresholds(tolerance, graph, MOVEMENT)
    outputs = {}
    for result in graph.results():
        producer, port = result.inputs[0]
        node = graph[producer]
        outputs[result.key] = (thresholds[(producer, port)] if (producer, port) in thresholds
                               else tolerance.for_node(node, port))
    movement = frozenset(n.key for n in graph.candidates() if n.op_type in MOVEMENT)
    return Plan(tolerance, thresholds, outputs, movement, fusion or Fusion())
