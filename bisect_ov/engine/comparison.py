"""The frozen description of one comparison: both sides' walked graphs, how their nodes match, the two
devices, and the inputs of the sample being examined.

A `Comparison` is made once by the pipeline's first stage and never changes; examining another sample (the
worst of many, a generation step) is another `Sample`, not a change to it. Everything the engine computes is
a function of a comparison, a sample and what was measured before, passed in explicitly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from bisect_ov.core.errors import InputError
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.match import Match
from bisect_ov.model.taps import Tap
from bisect_ov.run.devices import Device

__all__ = ["Comparison", "Sample"]


@dataclass(frozen=True)
class Sample:
    """The inputs of one examined sample: the reference's, and the target's (the twin's input order)."""

    ref: tuple[np.ndarray, ...]
    target: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, ref: Sequence[np.ndarray], target: Sequence[np.ndarray]) -> "Sample":
        return cls(tuple(ref), tuple(target))


@dataclass(frozen=True, eq=False)
class Comparison:
    """Both sides of a comparison: graphs, node match, devices, and whether the target runs its own model.

    `twin` is True when the target runs another model (`target_model=`: a quantized twin, an injected fault)
    matched node by node to the reference's; then `target_graph` is that model's graph. `exact_checks`: the
    sides give whole tensors, so integer nodes can be checked against their exact result (a statistics-only
    recording cannot).
    """

    graph: ModelGraph
    target_graph: ModelGraph
    match: Match
    ref: Device
    target: Device
    exact_checks: bool = True
    target_of: dict[Tap, Tap] = field(init=False)
    target_output_positions: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        target_of = dict(self.match.pairs)
        object.__setattr__(self, "target_of", target_of)
        object.__setattr__(self, "target_output_positions",
                           tuple(_target_output_positions(self.graph, self.target_graph, target_of)))

    @property
    def twin(self) -> bool:
        """The target runs its own model (matched to the reference's node by node)."""
        return self.target_graph is not self.graph


def _target_output_positions(graph: ModelGraph, target_graph: ModelGraph, target_of: dict[Tap, Tap]) -> list[int]:
    """For each reference output (in model order), the position of the same output among the target's.

    One model on both sides: the same positions. A twin: the target's Result that reads the matched tensor, else
    the one with the same name, else, when both models have as many outputs, the same position if no other output
    took it. An output with none of these has nothing to be compared with: `InputError` (comparing it with
    another output of the twin would be a wrong answer).
    """
    ref_results, target_results = graph.results(), target_graph.results()
    if target_graph is graph:
        return list(range(len(ref_results)))
    by_source = {target_results[i].inputs[0]: i for i in range(len(target_results))}
    by_name = {r.name: i for i, r in enumerate(target_results) if not r.auto_named}
    positions: list[int | None] = []
    for result in ref_results:
        matched = target_of.get(Tap(*result.inputs[0]))
        if matched is not None and (matched.key, matched.port) in by_source:
            positions.append(by_source[(matched.key, matched.port)])
        elif result.name in by_name and not result.auto_named:
            positions.append(by_name[result.name])
        else:
            positions.append(None)
    taken = {p for p in positions if p is not None}
    for i in range(len(ref_results)):
        if positions[i] is None and len(ref_results) == len(target_results) and i not in taken:
            positions[i] = i
            taken.add(i)
    missing = [graph.output_name(r.key) for r, p in zip(ref_results, positions) if p is None]
    if missing:
        raise InputError(
            f"The model's output(s) {missing} have no counterpart in target_model: none of its {len(target_results)} "
            "output(s) reads the matched tensor or has the same name. Give target_model the same outputs (or remove "
            "these from the model)."
        )
    return [p for p in positions if p is not None]
