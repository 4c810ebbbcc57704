"""What one measurement returns: statistics per tap, integer nodes checked exactly, and the instrumented
runs' final outputs (for the fidelity check), as frozen records.

A measurement made in several compiles (chunks) or segment by segment (streamed) hands out one `Part` per
compile or segment as it goes; `Measured.of(parts)` is their sum. Nothing is kept anywhere else: whoever
measures holds the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from bisect_ov.analysis.exactness import EXACT_OPS, ExactCheck, check_node
from bisect_ov.analysis.metrics import SHAPES_DIFFER, TensorStats
from bisect_ov.engine.comparison import Comparison, Sample
from bisect_ov.engine.runner import FinalOutput
from bisect_ov.model.taps import Tap

__all__ = ["TappedRun", "Part", "Measured", "exact_checks"]


@dataclass(frozen=True)
class TappedRun:
    """The final outputs of one instrumented run of both sides, and whether the target's final outputs equal
    the untouched target's bit for bit (then compiling with taps did not change what it computes)."""

    outputs: tuple[FinalOutput, ...]
    reproduced: bool


@dataclass(frozen=True, eq=False)
class Part:
    """One compile's (or one streamed segment's) share of a measurement.

    `values`: the reference's values of the segment's taps and of what it reads, while a streamed measurement
    holds them (None otherwise): local errors can run on them before they are dropped. `run`: the tapped run
    this part completes (a chunk's compile, or a streamed measurement's last segment). `finals`: with a
    streamed measurement's last segment, both sides' final outputs.
    """

    stats: dict[Tap, TensorStats]
    exact: dict[str, ExactCheck] = field(default_factory=dict)
    run: TappedRun | None = None
    values: Mapping[Tap, np.ndarray] | None = None
    finals: tuple[list[np.ndarray], list[np.ndarray]] | None = None
    # With a streamed measurement's last segment: what the reference ran with over all its segments.
    ref_info: Any = None


@dataclass(frozen=True, eq=False)
class Measured:
    """A whole measurement: statistics per tap, exact checks by node key, the tapped runs it made."""

    stats: dict[Tap, TensorStats] = field(default_factory=dict)
    exact: dict[str, ExactCheck] = field(default_factory=dict)
    runs: tuple[TappedRun, ...] = ()
    # Taps a side handed back with another shape than the other's (a plugin exposing the tensor it fused the tap
    # into: the CPU's in-place Concat): not compared, their shapes kept ("reference [..], target [..]").
    misshapen: dict[Tap, str] = field(default_factory=dict)

    @classmethod
    def of(cls, parts: Iterable[Part]) -> "Measured":
        stats: dict[Tap, TensorStats] = {}
        exact: dict[str, ExactCheck] = {}
        runs: list[TappedRun] = []
        for part in parts:
            stats.update(part.stats)
            for key, check in part.exact.items():
                exact.setdefault(key, check)
            if part.run is not None:
                runs.append(part.run)
        compared, misshapen = _compared(stats)
        return cls(compared, exact, tuple(runs), misshapen)

    def plus(self, other: "Measured") -> "Measured":
        """Both measurements: `other`'s statistics where both measured a tap, the first exact check of a node."""
        exact = dict(self.exact)
        for key, check in other.exact.items():
            exact.setdefault(key, check)
        stats, misshapen = _compared({**self.stats, **other.stats})
        misshapen = {t: s for t, s in {**self.misshapen, **other.misshapen, **misshapen}.items() if t not in stats}
        return Measured(stats, exact, self.runs + other.runs, misshapen)


def _compared(stats: dict[Tap, TensorStats]) -> tuple[dict[Tap, TensorStats], dict[Tap, str]]:
    """`stats` without the taps whose two sides differ in shape, and those taps with their shapes."""
    misshapen = {t: s.note.removeprefix(SHAPES_DIFFER) for t, s in stats.items() if s.note.startswith(SHAPES_DIFFER)}
    return {t: s for t, s in stats.items() if t not in misshapen}, misshapen


def exact_checks(comparison: Comparison, sample: Sample, pairs: Iterable[tuple[Tap, np.ndarray, np.ndarray]],
                 ref_value: Callable[[Tap], np.ndarray | None]) -> dict[str, ExactCheck]:
    """For Conv/MatMul over integer-valued inputs, both sides against the exact int64 result.

    `pairs`: (tap, reference value, target value) of the measured tensors; `ref_value(tap)`: the reference's
    value of a tensor of the same run (None when the run did not expose it), read for a node's inputs (model
    inputs come from the sample).
    """
    if not comparison.exact_checks:  # sampled outputs (a stats capture) are not whole tensors
        return {}
    graph = comparison.graph
    found: dict[str, ExactCheck] = {}

    def value(key: str, port: int):
        if graph[key].kind == "parameter":
            return sample.ref[graph.parameter_position[key]]
        return ref_value(Tap(key, port))

    for tap, ref, target in pairs:
        node = graph[tap.key]
        if node.op_type not in EXACT_OPS or tap.port != 0 or node.key in found:
            continue
        check = check_node(graph, tap.key, value, ref, target)
        if check is not None:
            found[node.key] = check
    return found
