"""The per-node and per-output records of a report: `NodeResult` (one compared node: its errors, its role, what
ran it) and `OutputResult` (one final output's error). Frozen statistics, no tensors; nothing here imports
OpenVINO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from bisect_ov.analysis.headroom import LIMIT, headroom
from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.core.records import Cause
from bisect_ov.report.numbers import fmt as _fmt

__all__ = ["NodeResult", "OutputResult"]


@dataclass(frozen=True)
class NodeResult:
    """One compared node: its errors, its role in the error's story, and what ran it.

    ``error`` is the node's output error under the report's metric (the worst of its outputs),
    ``input_error`` the largest error among the tensors it reads, ``growth`` their ratio (see
    `bisect_ov.analysis.scoring`), ``role`` one of source / amplifier / inherits / absorbed / internal / ok
    (absorbed: over its tolerance, but the network takes the error out again before the final outputs;
    internal: over its tolerance as tapped, but its tensor exists only inside a kernel of the untouched target
    whose output is within tolerance). ``diagnosis`` holds why, as `Cause` records (test their ``kind``);
    ``causes`` gives their sentences. ``inside_kernel`` names the target's fused kernel (its runtime layer)
    inside which the node's tensor exists only: the untouched target never stored it, so the tapped value is
    what a compile exposing it computed; None when the target stored it or its runtime graph says nothing.
    """

    JSON_PROPERTIES = ("causes",)  # the sentences, for readers of the JSON; ignored when reading

    name: str
    key: str
    op_type: str
    index: int
    error: float
    input_error: float
    tolerance: float
    growth: float
    role: str
    first: bool = False
    rank: int | None = None
    outputs: tuple[TensorStats, ...] = ()
    tensor_names: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    diagnosis: tuple[Cause, ...] = ()
    runtime: dict[str, dict[str, Any]] = field(default_factory=dict)
    group: tuple[str, ...] = ()  # nodes measured only through this one (fused with it, or folded in)
    local_error: float | None = None  # run alone on the target, fed the reference's inputs
    amplification: float | None = None  # error / input_error: how much it magnifies what it inherited
    impact: float | None = None  # final-output error when only this node runs on the target
    over_samples: dict[str, float] = field(default_factory=dict)  # error over many samples: mean, p50, p90, max
    # With many samples: the largest |x| of its floating outputs on the reference over all of them.
    ref_absmax_samples: float | None = None
    # Its local error with rounding alone (the emulated device of the target's precision): what it should make.
    expected_error: float | None = None
    inside_kernel: str | None = None  # the untouched target's fused kernel its tensor exists only inside
    # With truth="f64": the (reference, target) errors against the float64 run.
    truth_errors: tuple[float, float] | None = None

    @property
    def diverged(self) -> bool:
        return self.role not in ("ok", "absorbed", "internal")

    @property
    def causes(self) -> tuple[str, ...]:
        """The sentences of `diagnosis`, as a person reads them."""
        return tuple(c.text for c in self.diagnosis)

    @property
    def label(self) -> str:
        """The name as the user knows it: module path and operation for PyTorch-frontend names, else the name;
        an op whose name an earlier op has too carries its key's ``#2``, ``#3`` (what `Report.node` takes)."""
        from bisect_ov.analysis.names import module_label

        repeat = self.key[len(self.name):] if self.key != self.name and self.key.startswith(self.name + "#") else ""
        return module_label(self.name, self.op_type) + repeat

    @property
    def absorbed(self) -> bool:
        return self.role == "absorbed"

    @property
    def set_aside(self) -> bool:
        """Over its tolerance as tapped, but not blamed: the untouched target never computed that value (its
        kernel's output is within tolerance)."""
        return self.role == "internal"

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        return tuple(s.shape for s in self.outputs)

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(s.dtype for s in self.outputs)

    @property
    def nan_inf(self) -> dict[str, int]:
        """NaN and Inf counts on each side, summed over the node's outputs."""
        return {
            "ref_nan": sum(s.ref_nan for s in self.outputs), "ref_inf": sum(s.ref_inf for s in self.outputs),
            "target_nan": sum(s.target_nan for s in self.outputs), "target_inf": sum(s.target_inf for s in self.outputs),
        }

    @property
    def ref_absmax(self) -> float | None:
        """The largest magnitude of the node's floating outputs on the reference (over every sample when many ran:
        `ref_absmax_samples`); None for a node without floating outputs."""
        values = [s.ref_absmax for s in self.outputs if not s.integer]
        if not values:
            return None
        if self.ref_absmax_samples is not None:
            values.append(self.ref_absmax_samples)
        return max(values, key=lambda v: math.inf if math.isnan(v) else v)

    @property
    def f16_headroom(self) -> float:
        """Powers of two between `ref_absmax` and the largest finite f16 value (`bisect_ov.analysis.headroom`):
        below 1 the values are within 2x of overflowing f16, below 0 they do not fit it; NaN for a node without
        floating outputs, and for one whose largest magnitude is exactly the f16 limit: a value put there (an
        attention mask's -65,504, a clamp), not one computed close to it."""
        absmax = self.ref_absmax
        return math.nan if absmax is None or absmax == LIMIT else headroom(absmax)

    @property
    def stats(self) -> TensorStats | None:
        """Statistics of the node's first output."""
        return self.outputs[0] if self.outputs else None

    def __repr__(self) -> str:
        return (
            f"NodeResult({self.name!r}, {self.op_type}, #{self.index}, {self.role}, "
            f"error={_fmt(self.error)}, input_error={_fmt(self.input_error)}, growth={_fmt(self.growth)})"
        )


@dataclass(frozen=True)
class OutputResult:
    """Error of one final output of the model."""

    name: str
    stats: TensorStats
    error: float
    tolerance: float
    expected: float | None = None  # its error with rounding alone (the emulated device of the target's precision)

    @property
    def diverged(self) -> bool:
        return self.error > self.tolerance

    @property
    def over_expected(self) -> float | None:
        """How many times what rounding alone gives this output's error is (None without a baseline)."""
        if self.expected is None:
            return None
        return self.error / self.expected if self.expected > 0 else (math.inf if self.error > 0 else 1.0)
