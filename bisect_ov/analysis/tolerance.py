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

**Quantized twins** (NNCF's ``quantize`` and ``compress_weights``) differ from their model by quantization,
not rounding, and are judged by their own model (`quantization_error`, `expected_quantization_errors`).
Rounding a value to a grid of step ``d`` costs ``d / sqrt(12)`` (rms); relative to the values' rms ``s``:

* weights, ``b`` bits, symmetric, one scale per ``n`` values (a group, or a whole reduction of length ``K``
  per channel): the scale is the group's largest magnitude, about ``s * sqrt(2 ln n)`` for normal weights,
  over ``2**(b-1) - 1`` steps: ``e_w = sqrt(2 ln n) / (2**(b-1) - 1) / sqrt(12)`` (int8 per channel, K=64:
  6.6e-3; int4, group 64: 0.12); asymmetric spends all ``2**b - 1`` steps on the range, twice as wide;
* activations, ``b`` bits over a calibrated range of about ``+-4 s``: ``e_a = 8 / (2**b - 1) / sqrt(12)``
  (8 bits: 9.1e-3);
* f16-stored weights: ``2**-11 / sqrt(3)``.

A weight error of relative size ``e_w`` reaches a MatMul's output at about the same relative size (the
errors of the ``K`` products are independent), so a node's own error is the root sum of squares of its
weight quantization, of the quantizer on its output (nodes are compared at their quantized output) and of
quantizers on the model inputs it reads. Errors inherited along the graph add the same way: the expected
error at a node is ``sqrt(max over inputs of expected**2 + own**2)``. A twin's node is then allowed
``quant_factor`` (4 by default) times that, at most `QUANTIZATION_CAP` (0.5: an error of half the output's size
says nothing of what the model computes) and never less than the float threshold; nodes that nothing
quantized reaches keep the float model (both sides compute them alike). The model ignores how layers amplify
or dilute error (residual sums dilute it, ReLU stacks amplify it): on NNCF twins of the zoo, the measured
error over this expectation was 0.36 at the logits of an int4 Llama and up to 3.2 inside an int8 ResNet-50,
hence the factor.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Mapping

from bisect_ov.core.errors import InputError
from bisect_ov.core.numeric import UNIT_ROUNDOFF
from bisect_ov.core.records import ToleranceFields
from bisect_ov.model.graph import ModelGraph, NodeInfo

__all__ = ["UNIT_ROUNDOFF", "CALIBRATED_METRICS", "QUANTIZATION_CAP", "Tolerance", "unit_roundoff", "quantization_error",
           "expected_quantization_errors"]

# The metrics the default model's thresholds are measured for (docs/tolerance.md, "Metrics"): rel_l2, and max_rel,
# which on benign f16 and bf16 runs of the zoo's small models is 1.0-1.4x rel_l2 (median per node) with no node
# over tolerance, and names the demo's inorm/sub as rel_l2 does. cosine_distance is about rel_l2**2 / 2 (3e-4 of
# rel_l2 at f16 rounding): against these thresholds it would hide everything.
CALIBRATED_METRICS = ("rel_l2", "max_rel")


def unit_roundoff(precision: str | None) -> float:
    """Unit roundoff of a precision name; f32's when the name is unknown."""
    return UNIT_ROUNDOFF.get((precision or "f32").lower(), UNIT_ROUNDOFF["f32"])


@dataclass(frozen=True)
class Tolerance(ToleranceFields):
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
    quantization
        Expected relative error of a quantized twin at named nodes (`expected_quantization_errors`); empty
        when both sides run one model.
    quant_factor
        Multiple of the expected quantization error allowed at those nodes.

    Examples
    --------
    >>> t = Tolerance(precision="f16")
    >>> round(t.threshold(1, "f32"), 6)
    0.003906
    >>> t.threshold(1, "i32")
    0.0
    """

    def __post_init__(self) -> None:
        for name in ("factor", "floor", "min_growth", "quant_factor"):
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
        return replace(self, precision=precision, per_node=dict(self.per_node))

    def with_quantization(self, expected: Mapping[str, float]) -> "Tolerance":
        """This tolerance judging a quantized twin: `expected` relative errors by node name."""
        return replace(self, quantization=dict(expected))

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
        base = max(self.floor, self.factor * u * (1.0 + math.log2(k) / 4.0))
        if name is not None and name in self.quantization:
            return max(base, min(QUANTIZATION_CAP, self.quant_factor * float(self.quantization[name])))
        return base

    def for_node(self, node: NodeInfo, port: int = 0) -> float:
        dtype = node.outputs[port].dtype if node.outputs else "f32"
        return self.threshold(node.reduction_length, dtype, node.name)

    def check_metric(self, metric) -> None:
        """The model's thresholds are measured for `CALIBRATED_METRICS`; any other metric needs one value."""
        if self.value is not None or (isinstance(metric, str) and metric in CALIBRATED_METRICS):
            return
        name = getattr(metric, "__name__", "a callable") if callable(metric) else repr(metric)
        hint = (" A rel_l2 threshold t is a cosine distance of about t**2 / 2 (f16 rounding: rel_l2 ~ 4e-3, so "
                "cosine_distance ~ 8e-6)." if metric == "cosine_distance" else "")
        raise InputError(
            f"The default tolerance model is calibrated for {list(CALIBRATED_METRICS)}; metric {name} needs an "
            f"explicit threshold: pass tolerance=<float> (or Tolerance(value=...)).{hint}"
        )

    def check_names(self, graph: ModelGraph) -> None:
        """`InputError` naming the `per_node` keys that are no node of `graph` (a typo would be ignored)."""
        names = {node.name for node in graph}
        unknown = [k for k in self.per_node if k not in names]
        if not unknown:
            return
        similar = sorted({n for k in unknown for n in names if str(k).lower() in n.lower()})[:8]
        raise InputError(
            f"Tolerance(per_node=...) names {len(unknown)} node(s) the model does not have: {unknown[:8]}. Keys are "
            "the model's friendly node names" + (f"; similar: {similar}." if similar else
                                                  " (Report.nodes lists the compared ones).")
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        d["per_node"] = dict(self.per_node)
        d["quantization"] = dict(self.quantization)
        return d

    @classmethod
    def from_dict(cls, data: Mapping) -> "Tolerance":
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


def _is_float(dtype: str) -> bool:
    return dtype in ("f64", "f32", "f16", "bf16", "f8e4m3", "f8e5m2") or dtype.startswith("float")


# Calibrated activation ranges span about +-4 rms: 8 rms over the grid.
_ACTIVATION_SPAN = 8.0
# The largest threshold the quantization model gives: errors added in quadrature along a deep int4 chain, times
# `quant_factor`, pass 1 (a tiny int4 Llama's logits got 1.3), where an output of zeros (relative L2 error 1) or
# a weight scaled by 0.1 passes as "within tolerance". An output off by half its size (6 dB SQNR) no longer says
# what the model computes, whatever the quantization.
QUANTIZATION_CAP = 0.5


def quantization_error(bits: int | None, group_size: int | None = None, *, symmetric: bool = True,
                       activation: bool = False, weight_type: str | None = None) -> float:
    """Expected relative (rms) error of values quantized to `bits` (see the module docstring).

    Examples
    --------
    >>> round(quantization_error(4, 64), 3)
    0.119
    >>> round(quantization_error(8, activation=True), 4)
    0.0091
    >>> quantization_error(None)
    0.0
    """
    if weight_type in ("f16", "bf16"):
        return unit_roundoff(weight_type) / math.sqrt(3)
    if bits is None:
        return 0.0
    if activation:
        return _ACTIVATION_SPAN / (2 ** bits - 1) / math.sqrt(12)
    n = max(2, int(group_size or 2))
    peak = math.sqrt(2 * math.log(n))
    steps = (2 ** (bits - 1) - 1) if symmetric else (2 ** bits - 1) / 2
    return peak / max(steps, 0.5) / math.sqrt(12)


def expected_quantization_errors(graph: ModelGraph, own: Mapping[str, float]) -> dict[str, float]:
    """Expected relative error at every node of `graph` (by name) given each node's own quantization error.

    `own` maps node keys to their own error (weights, output quantizer, quantized model inputs; see the
    module docstring); errors add in quadrature along the worst path. Nodes no quantized node reaches are
    left out (they keep the float model).
    """
    expected: dict[str, float] = {}
    by_key: dict[str, float] = {}
    for node in graph:
        if not node.is_candidate:
            continue
        inherited = max((by_key.get(k, 0.0) for k, _ in graph.data_inputs(node.key)), default=0.0)
        value = math.sqrt(inherited ** 2 + own.get(node.key, 0.0) ** 2)
        if value > 0:
            by_key[node.key] = value
            expected[node.name] = value
    return expected


def node_thresholds(tolerance: Tolerance, graph: ModelGraph, movement: frozenset[str] = frozenset()
                    ) -> dict[tuple[str, int], float]:
    """Every compute node's output threshold, by (key, port), in one pass over the graph.

    An op in `movement` (one that only moves or selects values: a Reshape, a Transpose, a Slice) adds no error,
    so it carries the largest threshold of the floating tensors it reads (walking through other such ops): a
    Transpose after a long reduction is judged by that reduction's allowance, not by an elementwise op's, and
    cannot look like a source merely because its allowance is smaller. A threshold the user set for the node by
    name still wins, and an integer output stays exact.
    """
    found: dict[tuple[str, int], float] = {}
    for node in graph.candidates():
        for t in node.outputs:
            own = tolerance.threshold(node.reduction_length, t.dtype, node.name)
            if node.op_type in movement and node.name not in tolerance.per_node and own > 0:
                carried = [found.get((k, p), 0.0) for k, p in graph.data_inputs(node.key)]
                own = max([own, *carried])
            found[(node.key, t.port)] = own
    return found
