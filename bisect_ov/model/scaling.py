"""Activation scaling, the rewrite behind OpenVINO's ``ACTIVATIONS_SCALE_FACTOR`` hint, written here from its
documented behaviour so that an emulated f16 target can apply it too.

What the GPU plugin's transformation is documented to do with a factor ``s``: divide the activation input of
every Convolution and MatMul by ``s`` (``Conv(x / s) = Conv(x) / s``), multiply the result back, and move that
multiply down the graph through additions (the residual stream is divided too), the ops that only move values
and multiplications, dropping it at a normalization (``Norm(x / s) = Norm(x)``, its epsilon divided by ``s**2``):
the values between a linear layer and the next normalization are ``s`` times smaller, and every other op sees
its usual values.

`scale_activations` reaches the same values by tracking, for every floating tensor, the power ``k`` such that
the rewritten model holds ``value / s**k``:

* Convolution, MatMul (and their group and transposed forms): the first activation input is brought to
  ``k = 1`` (times ``1/s`` from ``k = 0``), any other activation input to ``k = 0``; the output has ``k = 1``;
* additions, subtractions, Concat, Select, Maximum and Minimum: every input is brought to the largest ``k``
  among them (a constant operand, such as a bias or a norm's epsilon, is divided by ``s**k`` instead);
* products and quotients add and subtract ``k``; a power by a constant ``p`` multiplies it by ``p``, a square
  root halves it: a normalization written out in ops (RMSNorm's ``x * rsqrt(mean(x*x) + eps)``, LayerNorm's)
  therefore comes back to ``k = 0`` by itself, its epsilon divided by ``s**2``;
* MVN returns ``k = 0`` with its epsilon divided by ``s**(2k)``;
* ops that only move or select values, reductions by sum, mean, max or min, pooling, Relu, Abs and Negative
  keep ``k``; ShapeOf reads shapes only;
* every other op (Softmax, Exp, Gelu, Sigmoid, ...) and every Result gets its inputs back at ``k = 0``.

The rescaling multiplies are by powers of ``s``: with ``s`` a power of two they are exact in f16 unless a value
leaves its range, which is what the factor is for. The plugin's own pass may place some multiplies differently
(it folds them into neighbouring layers); the values between a linear layer and the next norm are what decides
an overflow, and those are the same.
"""

from __future__ import annotations

import math

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from bisect_ov.core.errors import InputError

__all__ = ["scale_activations", "SCALE_FACTOR_PROPERTY", "SCALED_OPS"]

SCALE_FACTOR_PROPERTY = "ACTIVATIONS_SCALE_FACTOR"
"""The compile property (``ov::hint::activations_scale_factor``) the GPU plugin reads."""

SCALED_OPS = frozenset({"MatMul", "Convolution", "GroupConvolution", "ConvolutionBackpropData",
                        "GroupConvolutionBackpropData"})
"""The ops whose activation input the scaling divides: a model without any is not helped by a factor."""

_ALIGN = frozenset({"Add", "Subtract", "Concat", "Maximum", "Minimum"})
_KEEP = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Slice", "StridedSlice", "Gather", "GatherND",
                   "GatherElements", "Split", "VariadicSplit", "Broadcast", "Tile", "Pad", "DepthToSpace",
                   "SpaceToDepth", "Reverse", "Roll", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                   "ReduceL2", "MaxPool", "AvgPool", "Relu", "Abs", "Negative", "Interpolate"})
_SHAPE_ONLY = frozenset({"ShapeOf"})


def _is_float(out: ov.Output) -> bool:
    return out.get_element_type().is_real()


class _Rewrite:
    def __init__(self, factor: float):
        self.s = float(factor)
        self.k: dict[tuple[str, int], float] = {}  # (node's unique name, port) -> power of s the tensor is divided by
        self.cache: dict[tuple[str, int, float], ov.Output] = {}
        self.inserted = 0

    def power(self, out: ov.Output) -> float:
        return self.k.get((out.get_node().get_name(), out.get_index()), 0.0) if _is_float(out) else 0.0

    def at(self, out: ov.Output, k: float) -> ov.Output:
        """`out` (at its own power) brought to power `k`."""
        have = self.power(out)
        if not _is_float(out) or math.isclose(have, k, abs_tol=1e-9):
            return out
        key = (out.get_node().get_name(), out.get_index(), round(k, 9))
        if key not in self.cache:
            dtype = out.get_element_type().to_dtype()
            factor = ops.constant(np.array(self.s ** (have - k), dtype=dtype))
            scaled = ops.multiply(out, factor)
            scaled.set_friendly_name(f"{out.get_node().get_friendly_name()}/activation_scale")
            self.cache[key] = scaled.output(0)
            self.k[(scaled.get_name(), 0)] = k
            self.inserted += 1
        return self.cache[key]

    def set(self, node: ov.Node, k: float) -> None:
        for out in node.outputs():
            if _is_float(out):
                self.k[(node.get_name(), out.get_index())] = k

    def feed(self, node: ov.Node, index: int, k: float) -> None:
        source = node.input_value(index)
        moved = self.at(source, k)
        if moved is not source:
            node.input(index).replace_source_output(moved)


def _constant(out: ov.Output) -> bool:
    return out.get_node().get_type_name() == "Constant"


def _float_inputs(node: ov.Node) -> list[int]:
    return [i for i in range(node.get_input_size()) if _is_float(node.input_value(i))]


def _constant_exponent(node: ov.Node) -> float | None:
    exponent = node.input_value(1).get_node()
    if exponent.get_type_name() != "Constant":
        return None
    values = np.asarray(exponent.get_data(), dtype=np.float64).reshape(-1)
    return float(values[0]) if values.size and np.all(values == values[0]) else None


def _visit(rw: _Rewrite, node: ov.Node) -> None:
    kind = node.get_type_name()
    floats = _float_inputs(node)
    if kind in ("Parameter", "Constant", "ReadValue") or not floats:
        rw.set(node, 0.0)
        return
    if kind == "Result":
        rw.feed(node, 0, 0.0)
        return
    if kind in _SHAPE_ONLY:
        return
    if kind in SCALED_OPS:
        activations = [i for i in floats if not _constant(node.input_value(i))]
        for n, i in enumerate(activations):
            rw.feed(node, i, 1.0 if n == 0 else 0.0)
        rw.set(node, 1.0 if activations else 0.0)
        return
    if kind in _ALIGN or kind == "Select":
        data = [i for i in floats if not (kind == "Select" and i == 0)]
        target = max((rw.power(node.input_value(i)) for i in data if not _constant(node.input_value(i))), default=0.0)
        for i in data:
            rw.feed(node, i, target)
        rw.set(node, target)
        return
    if kind in ("Multiply", "Divide"):
        a, b = (rw.power(node.input_value(i)) if i in floats else 0.0 for i in (0, 1))
        rw.set(node, a + b if kind == "Multiply" else a - b)
        return
    if kind == "Power":
        p = _constant_exponent(node)
        if p is None:
            rw.feed(node, 0, 0.0)
            rw.set(node, 0.0)
        else:
            rw.set(node, p * rw.power(node.input_value(0)))
        return
    if kind == "Sqrt":
        rw.set(node, rw.power(node.input_value(0)) / 2)
        return
    if kind == "MVN":
        k = rw.power(node.input_value(0))
        if k:
            _rescale_mvn_eps(node, rw.s ** (2 * k))
        rw.set(node, 0.0)
        return
    if kind in _KEEP:
        k = rw.power(node.input_value(0))
        for i in floats[1:]:  # a Pad's value, a Gather's float indices: at the data's power
            rw.feed(node, i, k)
        rw.set(node, k)
        return
    for i in floats:  # an op that is not homogeneous: its usual values
        rw.feed(node, i, 0.0)
    rw.set(node, 0.0)


def _rescale_mvn_eps(node: ov.Node, by: float) -> None:
    """An MVN's epsilon divided by `by` (the square of the scale its input holds), in place."""
    attrs = node.get_attributes()
    eps = float(attrs.get("eps", 0.0)) / by
    node.set_attribute("eps", eps)


def scale_activations(model: ov.Model, factor: float) -> ov.Model:
    """A copy of `model` whose activations between each Convolution/MatMul and the next normalization are
    `factor` times smaller (see the module docstring); the model's outputs are unchanged in exact arithmetic.

    Raises
    ------
    InputError
        `factor` is not a number above 1.
    """
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor <= 1:
        raise InputError(f"An activation scale factor must be a number above 1; got {factor!r}.")
    clone = model.clone()
    rw = _Rewrite(factor)
    for node in clone.get_ordered_ops():
        _visit(rw, node)
    clone.validate_nodes_and_infer_types()
    return clone
