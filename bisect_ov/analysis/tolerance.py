"""Tolerances that know the precision: how much relative error a node may show before it counts.

The default model, for the relative metrics (``rel_l2``, ``max_rel``), is

    tol(node) = max(floor, factor * u * (1 + log2(K) / 4))   for floating outputs,
    tol(node) = 0                                               for integer and boolean outputs (exact),

where ``u`` is the unit roundoff of the precision the comparison runs at (the coarser of the two sides:
2**-24 for f32, 2**-11 for f16, 2**-8 for bf16, 2**-7 for int8-quantised computation) and ``K`` the node's
reduction length (inner dimension of a MatMul, Cin*kh*kw of a convolution, the axis of a Softmax or a
reduction; 1 for elementwise ops). One rounding of a value costs about ``u/2`` relative error; ``factor``
(8 by default) leaves room for the rounding of the inputs, the weights, and the few roundings inside an op.
Reductions round more: with blocked or pairwise summation, the error grows with ``log2(K)``, which is what the
second term allows. An op that accumulates ``K`` terms sequentially in the low precision exceeds this
(its error grows like ``sqrt(K) * u`` or worse), and that is what the tool should report.

Everything can be overridden: one value for every node (`Tolerance(value=1e-3)`), per node
(`per_node={"conv1": 0.05}`), or the factor and floor.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Mapping

from bisect_ov.errors import InputError
from bisect_ov.model.graph import NodeInfo
from bisect_ov.numeric import UNIT_ROUNDOFF

__all__ = ["UNIT_ROUNDOFF", "Tolerance", "unit_roundoff"]

_RELATIVE_METRICS = ("rel_l2", "max_rel", "cosine_distance")


def unit_roundoff(precision: str | None) -> float:
    """Unit roundoff of a precision name; f32's when the name is unknown."""
    return UNIT_ROUNDOFF.get((precision or "f32").lower(), UNIT_ROUNDOFF["f32"])


@dataclass(frozen=True)
class Tolerance:
    """Per-node error thresholds.

    Parameters
    ----------
    precision
        Precision name whose unit roundoff scales the thresholds; None to take it from the devices.
    factor
        Multiple of the unit roundoff allowed for one elementwise op.
    floor
        Smallest threshold for floating outputs (different f32 kernels disagree by about 1e-7..1e-6).
    value
        One fixed threshold for every floating node, replacing the model.
    per_node
        Thresholds for named nodes (friendly names), over everything else.
    min_growth
        How many times a node must multiply the error it inherited to be called a source or an amplifier.

    Examples
    --------
    >>> t = Tolerance(precision="f16")
    >>> round(t.threshold(1, "f32"), 6)
    0.003906
    >>> t.threshold(1, "i32")
    0.0
    """

    precision: str | None = None
    factor: float = 8.0
    floor: float = 1e-6
    value: float | None = None
    per_node: Mapping[str, float] = field(default_factory=dict)
    min_growth: float = 2.0

    def __post_init__(self) -> None:
        for name in ("factor", "floor", "min_growth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise InputError(f"Tolerance({name}=...) must be a finite number >= 0; got {value!r}.")
        if self.value is not None and (isinstance(self.value, bool) or not isinstance(self.value, (int, float))
                                       or not 0 <= self.value < math.inf):
            raise InputError(f"Tolerance(value=...) must be None or a finite number >= 0; got {self.value!r}.")
        if not isinstance(self.per_node, Mapping) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < math.inf
                for v in self.per_node.values()):
            raise InputError(f"Tolerance(per_node=...) must map node names to finite numbers >= 0; got {self.per_node!r}.")

    def with_precision(self, precision: str) -> "Tolerance":
        """This tolerance with `precision` filled in when the user left it open."""
        if self.precision is not None:
            return self
        return Tolerance(precision, self.factor, self.floor, self.value, dict(self.per_node), self.min_growth)

    def threshold(self, reduction_length: int, dtype: str, name: str | None = None) -> float:
        """Threshold for one tensor of element type `dtype` produced by a node reducing over `reduction_length`."""
        if name is not None and name in self.per_node:
            return float(self.per_node[name])
        if not _is_float(dtype):
            return 0.0
        if self.value is not None:
            return float(self.value)
        u = unit_roundoff(self.precision)
        k = max(1, int(reduction_length))
        return max(self.floor, self.factor * u * (1.0 + math.log2(k) / 4.0))

    def for_node(self, node: NodeInfo, port: int = 0) -> float:
        dtype = node.outputs[port].dtype if node.outputs else "f32"
        return self.threshold(node.reduction_length, dtype, node.name)

    def check_metric(self, metric) -> None:
        """The model is calibrated for relative metrics; absolute ones need an explicit value."""
        if self.value is None and (callable(metric) or metric not in _RELATIVE_METRICS) and not self.per_node:
            raise InputError(
                f"The default tolerance model is relative; metric {metric!r} needs an explicit threshold: "
                "pass tolerance=<float> (or Tolerance(value=...))."
            )

    def to_dict(self) -> dict:
        d = asdict(self)
        d["per_node"] = dict(self.per_node)
        return d

    @classmethod
    def from_dict(cls, data: Mapping) -> "Tolerance":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def _is_float(dtype: str) -> bool:
    return dtype in ("f64", "f32", "f16", "bf16", "f8e4m3", "f8e5m2") or dtype.startswith("float")
