"""Emulate a low-precision (f16 or bf16) device on the f32 CPU, with custom ops that run numpy.

What is modelled
----------------
A device that *stores* every floating activation in f16 (or bf16): each op reads low-precision inputs,
computes in f32, and its result is rounded to the low precision (round to nearest, ties to even) before
anyone reads it. `emulate_precision` rewrites a model so that, compiled on the OpenVINO CPU with
``{"INFERENCE_PRECISION_HINT": "f32"}``, it computes exactly that:

* Parameters and every op whose value depends on a Parameter (the "data path") get one rounding op after
  each floating output; all consumers, model outputs included, read the rounded value.
* Floating constants, and constant or shape-derived float subgraphs (e.g. decompressed weights, positional
  encodings built from ``ShapeOf``), are computed in f32 and rounded once where they enter the data path,
  as a device would store its weights. A constant saturates as OpenVINO's precision conversion makes it: a
  finite value past the precision's range becomes its largest value (+-65,504 in f16, +-3.39e38 in bf16: an
  attention mask's ``finfo(float32).min`` stays a large negative number, not -inf), inf and NaN stay. Pure
  shape arithmetic (``ShapeOf -> Convert -> Multiply -> ...`` feeding shapes) and the ``scales``/``sizes``
  inputs of ``Interpolate`` are not rounded: real plugins compute them on the host.
* Rounding is `round_array`: f16 follows IEEE binary16 (subnormals kept, ``|x| >= 65520`` overflows to
  +-inf, signed zeros kept); bf16 keeps float32's exponent range; NaN stays NaN.
* Ops marked to stay in f32 (runtime info ``disable_fp16_compression`` / ``precise``, read back from IR as
  ``DisablePrecisionConversion``: what the GPU and NPU plugins honour, and what a fix's patched model carries)
  are computed as on the reference: their outputs reach the other marked ops, and the model's outputs,
  unrounded (an unmarked consumer still reads them rounded), their constant inputs are not rounded, and no
  low-precision accumulation is emulated in them.
* Optionally (``reductions=...``) Softmax, ReduceSum, ReduceMean, MVN, MatMul and ScaledDotProductAttention
  are replaced by ops that also *accumulate* in the low precision over ``lanes`` partial sums, every
  intermediate rounded: the kernels and the lane model are in `bisect_ov.run.lowp`.

What is NOT modelled
--------------------
Real GPU/NPU kernels differ: they fuse ops (keeping intermediates in registers, often in f32), use their
own ``exp``/``sqrt``/``tanh`` approximations, tile reductions and matrix products in other orders, may
accumulate in f32 (tensor cores), flush subnormals, or keep some tensors in f32. Ops not listed above
(Convolution, pooling, ReduceMax/L2, LogSoftmax, ...) accumulate in f32 here even with ``reductions``.
The bodies of If, Loop and TensorIterator ops are emulated alike (each body's values rounded, every
iteration's); inside them nothing is tapped. Reduction emulation needs
constant ``axes`` inputs, f32 tensors and (MatMul) inputs of static rank >= 2; other instances of those ops
are left alone (per-op rounding still applies), as are MVN-1 ops (no ``axes`` input) and
ScaledDotProductAttention with a ``sink`` input. Emulated models must be compiled with
``INFERENCE_PRECISION_HINT`` f32: a bf16 CPU pipeline would round the f32 values the ops exchange.

How
---
The CPU plugin removes ``Convert(f32->f16) -> Convert(f16->f32)`` pairs (they come out bit-identical to f32), so the
rounding is an `openvino.Op` implemented in Python (`EmulatedRound`, and `EmulatedAccumulation` for the reductions):
the CPU plugin runs such an op as a ``Reference`` layer that calls its ``evaluate`` on the tensor (f16 rounding
through OpenVINO's Convert kernels, which are vectorised; bf16 rounding and the reductions in numpy). One op per
rounded tensor keeps the emulated model about twice the size of the original and its compile about as fast.
(Rounding written as OpenVINO arithmetic, the only form the plugin does not optimise away, took ~16 ops per tensor
and minutes to compile at BERT's size.)

Consequences of ops written in Python:

* An emulated model cannot be saved to IR or read back without these classes: keep the original and emulate
  again (`EmulatedDevice` emulates inside its compile). OpenVINO never frees a Python op, nor the graph above
  it: the device frees them with its compile (`bisect_ov.run.pyops`); a model emulated here directly stays.
* ``evaluate`` runs with the GIL held (numpy releases it inside large array operations): parallel infer
  requests of one emulated model, or two emulated compiles running at once, interleave their Python parts.

Naming: original ops keep their friendly names; new ops are named ``<friendly>/emulated_<precision>/...``.
Tensor names move to the rounded tensors (so a tensor name always denotes the stored value; model inputs
and outputs keep theirs), while an op found by friendly name still yields its value *before* rounding,
except for emulated reductions, whose op takes over the original's friendly name.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Callable

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from bisect_ov.analysis.bodies import WITH_BODIES
from bisect_ov.core.errors import InputError
from bisect_ov.run import lowp, pyops
from bisect_ov.run.lowp import PRECISIONS, round_array

__all__ = ["PRECISIONS", "REDUCTION_OPS", "EmulatedAccumulation", "EmulatedRound", "emulate_precision", "keeps_precision",
           "round_array",
           "round_output"]

#: Op types whose accumulation `emulate_precision` can emulate (``reductions=``).
REDUCTION_OPS = frozenset({"Softmax", "ReduceSum", "ReduceMean", "MVN", "MatMul", "ScaledDotProductAttention"})

_FLOAT_TYPES = (ov.Type.f32, ov.Type.f16, ov.Type.bf16)
# Ops whose value is data even without inputs (sources of the data path).
_DATA_SOURCES = {"Parameter", "ReadValue"}
# Ops whose output depends only on the *shape* of their input, never on its values.
_SHAPE_OPS = {"ShapeOf"}
# Float inputs that are parameters of an op rather than values a device stores (input indices).
_NON_VALUE_INPUTS = {"Interpolate": {1, 2, 3}}


# ------------------------------------------------------------------------------------ custom ops
class _F16Rounding:
    """f32 -> f16 -> f32 through OpenVINO's own Convert kernels, called from Python.

    numpy's float16 cast is scalar code (about 5 ns per value here); OpenVINO's Convert is vectorised and
    about 12x faster, with the same bits as `round_array` (subnormals, overflow to inf, signed zeros, NaN:
    tested). Its f32 -> bf16 Convert does not round to nearest even, so bf16 rounding stays numpy.
    """

    def __init__(self) -> None:
        anything = ov.PartialShape.dynamic()
        self._down = ops.convert(ops.parameter(anything, ov.Type.f32), ov.Type.f16)
        self._up = ops.convert(ops.parameter(anything, ov.Type.f16), ov.Type.f32)

    def into(self, out: ov.Tensor, x: ov.Tensor) -> None:
        """Write the rounded `x` (f32) into `out` (f32, same shape)."""
        mid = ov.Tensor(ov.Type.f16, x.get_shape())
        if not (self._down.evaluate([mid], [x]) and self._up.evaluate([out], [mid])):
            out.data[...] = round_array(x.data, "f16")  # not expected: the CPU build has these kernels

    def __call__(self, a: np.ndarray) -> np.ndarray:
        a = np.asarray(a, np.float32, order="C")
        if not a.flags.writeable:  # ov.Tensor shares only writeable memory (a Constant's data is not)
            a = a.copy()
        out = np.empty_like(a)
        self.into(ov.Tensor(out, shared_memory=True), ov.Tensor(a, shared_memory=True))
        return out


_fast_f16: _F16Rounding | None = None


def _rounder(precision: str) -> lowp.Rounder:
    global _fast_f16
    if precision != "f16":
        return lowp.rounder(precision)
    if _fast_f16 is None:
        _fast_f16 = _F16Rounding()
    return _fast_f16


class EmulatedRound(ov.Op):
    """One f32 tensor rounded to f16 or bf16 (`round_array`), computed by numpy inside the model.

    Parameters
    ----------
    inputs : list of openvino.Output
        One float32 tensor.
    precision : {'f16', 'bf16'}
    """

    class_type_info = ov.DiscreteTypeInfo("EmulatedRound", "bisect_ov")

    def __init__(self, inputs: list[ov.Output] | None = None, precision: str = "f16") -> None:
        self.precision = lowp.check_precision(precision, allow_f32=False)
        self._round = _rounder(self.precision)
        super().__init__(self, inputs)
        pyops.made(self)

    def validate_and_infer_types(self) -> None:
        self.set_output_type(0, self.get_input_element_type(0), self.get_input_partial_shape(0))

    def clone_with_new_inputs(self, new_inputs: list[ov.Output]) -> ov.Node:
        return EmulatedRound(list(new_inputs), self.precision)

    def visit_attributes(self, visitor: Any) -> bool:
        visitor.on_attributes({"precision": self.precision})
        return True

    def has_evaluate(self, *args: Any) -> bool:
        return True

    def evaluate(self, outputs: Any, inputs: Any) -> bool:
        outputs[0].shape = inputs[0].shape
        if isinstance(self._round, _F16Rounding):  # straight from tensor to tensor
            self._round.into(outputs[0], inputs[0])
        else:
            outputs[0].data[...] = self._round(inputs[0].data)
        return True


class EmulatedAccumulation(ov.Op):
    """An op whose reduction accumulates in f16 or bf16 over `lanes` partial sums (`bisect_ov.run.lowp`).

    Parameters
    ----------
    inputs : list of openvino.Output
        The original op's value inputs (``axes`` inputs become `params`).
    kind : str
        The original op type, one of `REDUCTION_OPS`.
    precision : {'f16', 'bf16'}
    lanes : int
    params : dict
        The original op's attributes the kernel needs (``axis``, ``axes``, ``keep_dims``, ``transpose_a``,
        ``eps``, ``causal``, ...).
    """

    class_type_info = ov.DiscreteTypeInfo("EmulatedAccumulation", "bisect_ov")

    def __init__(self, inputs: list[ov.Output] | None = None, kind: str = "ReduceSum", precision: str = "f16",
                 lanes: int = 16, params: dict[str, Any] | None = None) -> None:
        self.kind, self.lanes, self.params = kind, int(lanes), dict(params or {})
        self.precision = lowp.check_precision(precision, allow_f32=False)
        self._round = _rounder(self.precision)
        super().__init__(self, inputs)
        pyops.made(self)

    def validate_and_infer_types(self) -> None:
        # The original op type infers the output shape, on Parameters of the inputs' shapes. Types: the CPU
        # plugin's precision passes hand this op a boolean mask as u8, which ScaledDotProductAttention rejects.
        inputs = [ops.parameter(self.get_input_partial_shape(i), self.get_input_element_type(i)
                                if self.get_input_element_type(i).is_real() else ov.Type.boolean)
                  for i in range(self.get_input_size())]
        proto = _PROTOTYPES[self.kind](inputs, self.params)
        self.set_output_type(0, ov.Type.f32, proto.get_output_partial_shape(0))  # only f32 ops are emulated

    def clone_with_new_inputs(self, new_inputs: list[ov.Output]) -> ov.Node:
        return EmulatedAccumulation(list(new_inputs), self.kind, self.precision, self.lanes, self.params)

    def visit_attributes(self, visitor: Any) -> bool:
        visitor.on_attributes({"kind": self.kind, "precision": self.precision, "lanes": self.lanes})
        return True

    def has_evaluate(self, *args: Any) -> bool:
        return True

    def evaluate(self, outputs: Any, inputs: Any) -> bool:
        arrays = [np.asarray(t.data) for t in inputs]
        result = _KERNELS[self.kind](arrays, self.params, self.lanes, self._round)
        outputs[0].shape = list(result.shape)
        outputs[0].data[...] = result
        return True


_KERNELS = {
    "Softmax": lambda x, p, lanes, r: lowp.softmax(x[0], p["axis"], lanes, r),
    "ReduceSum": lambda x, p, lanes, r: lowp.reduce(x[0], p["axes"], p["keep_dims"], False, lanes, r),
    "ReduceMean": lambda x, p, lanes, r: lowp.reduce(x[0], p["axes"], p["keep_dims"], True, lanes, r),
    "MVN": lambda x, p, lanes, r: lowp.mvn(x[0], p["axes"], p["normalize_variance"], p["eps"], p["eps_mode"],
                                           lanes, r),
    "MatMul": lambda x, p, lanes, r: lowp.matmul(x[0], x[1], p["transpose_a"], p["transpose_b"], lanes, r),
    "ScaledDotProductAttention": lambda x, p, lanes, r: lowp.attention(
        x[0], x[1], x[2], _mask(x, p), x[4] if len(x) > 4 else None, p["causal"], lanes, r),
}

def _mask(arrays: list[np.ndarray], params: dict[str, Any]) -> np.ndarray | None:
    if len(arrays) < 4:
        return None
    # A boolean mask may arrive as u8 (the CPU plugin converts boolean tensors): restore its meaning.
    return arrays[3].astype(bool) if params["boolean_mask"] else arrays[3]


_PROTOTYPES = {
    "Softmax": lambda i, p: ops.softmax(i[0], p["axis"]),
    "ReduceSum": lambda i, p: ops.reduce_sum(i[0], np.array(p["axes"], np.int64), p["keep_dims"]),
    "ReduceMean": lambda i, p: ops.reduce_mean(i[0], np.array(p["axes"], np.int64), p["keep_dims"]),
    "MVN": lambda i, p: ops.relu(i[0]),  # same shape and type as the input
    "MatMul": lambda i, p: ops.matmul(i[0], i[1], p["transpose_a"], p["transpose_b"]),
    "ScaledDotProductAttention": lambda i, p: ops.scaled_dot_product_attention(*i, causal=p["causal"]),
}


# ------------------------------------------------------------------------------------- rounding
def _round(x: ov.Output, precision: str, prefix: str) -> ov.Output:
    element_type = x.get_element_type()
    if element_type not in _FLOAT_TYPES:
        source = x.get_node().get_friendly_name()
        raise InputError(f"can only round floating tensors, got {element_type} from '{source}'")
    if element_type != ov.Type.f32:  # the CPU runs f16/bf16 models in f32 anyway; round there
        x = ops.convert(x, ov.Type.f32, name=f"{prefix}/to_f32").output(0)
    op = EmulatedRound([x], precision)
    op.set_friendly_name(f"{prefix}/round")
    r = op.output(0)
    if element_type != ov.Type.f32:
        r = ops.convert(r, element_type, name=f"{prefix}/to_{element_type.get_type_name()}").output(0)
    return r


def round_output(output: ov.Output, precision: str, *, name: str | None = None) -> ov.Output:
    """Round a floating tensor to a low precision with one `EmulatedRound` op.

    Compiled on the CPU with ``INFERENCE_PRECISION_HINT`` f32 the result is `round_array` of the tensor,
    bit for bit (a ``Convert`` pair would be optimised away by the CPU plugin).

    Parameters
    ----------
    output : openvino.Output
        A float32 tensor (f16/bf16 tensors are converted to f32, rounded and converted back).
    precision : {'f16', 'bf16', 'f32'}
        Target precision; 'f32' returns `output` itself.
    name : str, optional
        Prefix of the new ops' friendly names; default ``<producer friendly name>/emulated_<precision>``.

    Returns
    -------
    openvino.Output
        The rounded tensor, same element type and shape as `output`. Nothing is rewired: connect it.

    Raises
    ------
    InputError
        If `precision` is unknown or `output` is not a floating tensor.
    """
    precision = lowp.check_precision(precision, allow_f32=True)
    if precision == "f32":
        return output
    return _round(output, precision, name or f"{output.get_node().get_friendly_name()}/emulated_{precision}")


# --------------------------------------------------------------------------- reduction emulators
# Each returns (value inputs, params) for an EmulatedAccumulation, or None when the op cannot be emulated
# (it then keeps per-op rounding).
def _reduced_axes(x: ov.Output, axes: object) -> list[int] | None:
    """Sorted non-negative axes if the rank is static and `axes` constant; None if not or if the reduced
    axes are statically a single element (nothing to accumulate: the op is an identity up to rounding)."""
    shape = x.get_partial_shape()
    if not shape.rank.is_static:
        return None
    if isinstance(axes, ov.Output):
        if axes.get_node().get_type_name() != "Constant":
            return None
        axes = axes.get_node().get_data()
    rank = shape.rank.get_length()
    result = sorted({int(a) % rank for a in np.ravel(np.asarray(axes))})
    if all(shape[a].is_static for a in result) and np.prod([shape[a].get_length() for a in result]) < 2:
        return None
    return result


def _softmax_params(node: ov.Node) -> tuple[list[ov.Output], dict[str, Any]] | None:
    x = node.input_value(0)
    axes = _reduced_axes(x, node.get_attributes()["axis"])
    return None if axes is None else ([x], {"axis": axes[0]})


def _reduce_params(node: ov.Node) -> tuple[list[ov.Output], dict[str, Any]] | None:
    x = node.input_value(0)
    axes = _reduced_axes(x, node.input_value(1))
    return None if axes is None else ([x], {"axes": axes, "keep_dims": bool(node.get_attributes()["keep_dims"])})


def _mvn_params(node: ov.Node) -> tuple[list[ov.Output], dict[str, Any]] | None:
    if node.get_input_size() != 2:  # MVN-1 has no axes input
        return None
    x = node.input_value(0)
    axes = _reduced_axes(x, node.input_value(1))
    if axes is None:
        return None
    attrs = node.get_attributes()
    return [x], {"axes": axes, "normalize_variance": bool(attrs["normalize_variance"]),
                 "eps": float(attrs["eps"]), "eps_mode": str(attrs["eps_mode"])}


def _matmul_params(node: ov.Node) -> tuple[list[ov.Output], dict[str, Any]] | None:
    inputs = node.input_values()
    if not all(v.get_partial_shape().rank.is_static and v.get_partial_shape().rank.get_length() >= 2
               for v in inputs):
        return None
    attrs = node.get_attributes()
    return inputs, {"transpose_a": bool(attrs["transpose_a"]), "transpose_b": bool(attrs["transpose_b"])}


def _attention_params(node: ov.Node) -> tuple[list[ov.Output], dict[str, Any]] | None:
    inputs = node.input_values()
    if len(inputs) > 5 or not all(v.get_partial_shape().rank.is_static for v in inputs[:3]):
        return None  # a sink input (opset 15) is not modelled
    boolean_mask = len(inputs) > 3 and inputs[3].get_element_type() == ov.Type.boolean
    return inputs, {"causal": bool(node.get_attributes()["causal"]), "boolean_mask": boolean_mask}


_EMULATORS = {"Softmax": _softmax_params, "ReduceSum": _reduce_params, "ReduceMean": _reduce_params,
              "MVN": _mvn_params, "MatMul": _matmul_params, "ScaledDotProductAttention": _attention_params}

# ------------------------------------------------------------------------------- model rewriting
def _bodies(node: ov.Node) -> list[tuple[Callable[[], ov.Model], Callable[[ov.Model], None]]]:
    """(get, set) of each body (sub-model) `node` runs: If's two branches, Loop's and TensorIterator's body."""
    kind = node.get_type_name()
    if kind == "If" and hasattr(node, "get_then_body"):
        return [(node.get_then_body, node.set_then_body), (node.get_else_body, node.set_else_body)]
    if kind in WITH_BODIES and hasattr(node, "get_function"):  # Loop, TensorIterator
        return [(node.get_function, node.set_function)]
    return []


def _check_reductions(reductions: bool | Iterable[str]) -> frozenset[str]:
    if reductions is True:
        return REDUCTION_OPS
    if reductions is False or reductions is None:
        return frozenset()
    names = (reductions,) if isinstance(reductions, str) else tuple(reductions)
    unknown = [n for n in names if n not in REDUCTION_OPS]
    if unknown:
        raise InputError(f"cannot emulate low-precision accumulation of {unknown}; "
                         f"supported op types are {sorted(REDUCTION_OPS)}")
    return frozenset(names)


def _data_path(nodes: list[ov.Node]) -> set[int]:
    """Instance ids of ops whose values depend on a model input (in topological order)."""
    data: set[int] = set()
    for node in nodes:
        kind = node.get_type_name()
        if kind in _DATA_SOURCES or (kind not in _SHAPE_OPS and kind != "Constant" and any(
                v.get_node().get_instance_id() in data for v in node.input_values())):
            data.add(node.get_instance_id())
    return data


# The runtime info that keeps an op out of the low-precision conversion (the GPU and NPU plugins honour it): as set
# in memory (`disable_fp16_compression_<n>`, `precise_<n>`) and as read back from IR (`DisablePrecisionConversion`).
_KEEP_PRECISION = ("disable_fp16_compression", "precise_", "DisablePrecisionConversion")


def keeps_precision(node: ov.Node) -> bool:
    """Whether `node` is marked to run in f32 on a low-precision device (as `patch_model` marks a fix's nodes)."""
    return any(str(key).startswith(_KEEP_PRECISION) for key in node.get_rt_info().keys())


def _is_float(out: ov.Output) -> bool:
    return out.get_element_type() in _FLOAT_TYPES


def _redirect(consumers: list[ov.Input], source: ov.Output, rounded: ov.Output, move_names: bool) -> None:
    for inp in consumers:
        inp.replace_source_output(rounded)
    if move_names:  # tensor names now denote the stored (rounded) value; model outputs keep their names
        rounded.get_tensor().set_names(source.get_names())
        source.get_tensor().set_names(set())


def _round_constant(node: ov.Node, out: ov.Output, precision: str, prefix: str) -> ov.Output | None:
    """A rounded copy of a Constant's value, or None when its type already is the emulated precision."""
    element_type = out.get_element_type()
    if element_type.get_type_name() == precision:
        return None  # e.g. f16 weights in an f16 emulation: keep the decompression pattern intact
    if element_type != ov.Type.f32:  # f16 in a bf16 emulation or the reverse (numpy has no bf16): with an op
        return _round(out, precision, prefix)
    # Weights can hold hundreds of millions of values: round them tensor to tensor, without copies.
    rounded = np.empty(list(out.get_shape()), np.float32)
    rounder = _rounder(precision)
    # OpenVINO's f32 -> f16 and f32 -> bf16 weight conversions saturate finite values past the range, as here.
    saturated = lowp.saturated(node.get_data(), precision)
    if isinstance(rounder, _F16Rounding):
        source = node.get_tensor_view() if saturated is None else ov.Tensor(saturated)
        rounder.into(ov.Tensor(rounded, shared_memory=True), source)
    else:
        rounded[...] = rounder(node.get_data() if saturated is None else saturated)
    return ops.constant(rounded, ov.Type.f32, name=f"{prefix}/constant").output(0)


def _round_static(node: ov.Node, out: ov.Output, targets: list[ov.Input], data: set[int], precision: str,
                  prefix: str) -> None:
    """Round a constant or shape-derived value where it enters the data path (or is a model output)."""
    def is_value_use(inp: ov.Input) -> bool:
        user = inp.get_node()
        if user.get_type_name() == "Result":
            return True
        non_value = _NON_VALUE_INPUTS.get(user.get_type_name(), ())
        return user.get_instance_id() in data and inp.get_index() not in non_value

    # An op kept in f32 reads the weight as it is (the plugins leave its constants out of the conversion too).
    consumers = [inp for inp in targets if is_value_use(inp) and not keeps_precision(inp.get_node())]
    if not consumers:  # pure shape arithmetic: computed on the host in f32 by real plugins
        return
    if node.get_type_name() == "Constant":
        r = _round_constant(node, out, precision, prefix)
    else:  # e.g. decompressed weights, positional encodings computed from ShapeOf
        r = _round(out, precision, prefix)
    if r is None:
        return
    everyone = len(consumers) == len(targets)
    _redirect(consumers, out, r, move_names=everyone)
    if everyone and r.get_node().get_type_name() == "Constant":  # the rounded copy takes over the name
        original_name = node.get_friendly_name()
        node.set_friendly_name(f"{prefix}/original")
        r.get_node().set_friendly_name(original_name)


def emulate_precision(model: ov.Model, precision: str = "f16", *, reductions: bool | Iterable[str] = False,
                      lanes: int = 16) -> ov.Model:
    """Rewrite a model so the f32 CPU computes what a low-precision device would.

    See the module docstring for exactly what is (and is not) modelled.

    Parameters
    ----------
    model : openvino.Model
        The model; it is not modified (a clone is rewritten).
    precision : {'f16', 'bf16'}
        The precision the emulated device stores activations in.
    reductions : bool or iterable of str, default False
        Also emulate low-precision accumulation inside these op types: True for all of
        `REDUCTION_OPS` ('Softmax', 'ReduceSum', 'ReduceMean', 'MVN', 'MatMul', 'ScaledDotProductAttention').
    lanes : int, default 16
        Number of partial sums a reduction kernel keeps (see the module docstring).

    Returns
    -------
    openvino.Model
        A new model with the same inputs, and the same outputs (count, order, tensor names). Original ops
        keep their friendly names; rounding ops are named ``<friendly>/emulated_<precision>/...``; an
        emulated reduction's op takes over the original's friendly name. Tensor names move to the
        rounded tensors (except on Parameters). Compile it with ``INFERENCE_PRECISION_HINT`` f32.

    Raises
    ------
    InputError
        On an unknown precision, reduction op type, a bad `lanes`, or a non-model.
    """
    precision = lowp.check_precision(precision, allow_f32=False)
    selected = _check_reductions(reductions)
    if isinstance(lanes, bool) or not isinstance(lanes, (int, np.integer)) or lanes < 1:
        raise InputError(f"lanes must be a positive integer, got {lanes!r}")
    if not isinstance(model, ov.Model):
        raise InputError(f"expected an openvino.Model, got {type(model).__name__}")
    clone = model.clone()
    nodes = list(clone.get_ordered_ops())
    data = _data_path(nodes)
    for node in nodes:  # the bodies of If, Loop and TensorIterator, as a device runs them: each one emulated alike
        for get, put in _bodies(node):
            put(emulate_precision(get(), precision, reductions=selected, lanes=lanes))
    tag = f"emulated_{precision}"
    rounded: dict[tuple[int, int], ov.Output] = {}  # (op id, port) -> rounded data-path output
    for node in nodes:
        if node.get_type_name() == "Result":
            continue
        keeps = keeps_precision(node)
        for out in node.outputs():
            targets = list(out.get_target_inputs())  # taken before the rounding ops become consumers
            if not _is_float(out) or not targets:
                continue
            suffix = f"/out{out.get_index()}" if node.get_output_size() > 1 else ""
            prefix = f"{node.get_friendly_name()}/{tag}{suffix}"
            if node.get_instance_id() in data:
                # A node kept in f32 hands its value unrounded to others kept and to outputs; a shape op reads no value
                values = [t for t in targets if t.get_node().get_type_name() not in _SHAPE_OPS]
                readers = [t for t in values if not (keeps and (keeps_precision(t.get_node()) or t.get_node().get_type_name() == "Result"))]
                if not readers:
                    continue
                r = _round(out, precision, prefix)
                _redirect(readers, out, r, move_names=node.get_type_name() != "Parameter" and len(readers) == len(values))
                rounded[(node.get_instance_id(), out.get_index())] = r
            else:
                _round_static(node, out, targets, data, precision, prefix)

    # Low-precision accumulation: rebuild selected ops from their (already rounded) inputs and hand the
    # original's consumers, friendly name and tensor names to the emulated result.
    for node in nodes:
        kind = node.get_type_name()
        r = rounded.get((node.get_instance_id(), 0))
        if (kind not in selected or r is None or node.get_output_element_type(0) != ov.Type.f32
                or keeps_precision(node)):
            continue
        found = _EMULATORS[kind](node)
        if found is None:  # non-constant axes, dynamic rank, ...: keep per-op rounding only
            continue
        name = node.get_friendly_name()
        emulated = EmulatedAccumulation(found[0], kind, precision, lanes, found[1])
        _redirect(list(r.get_target_inputs()), r, emulated.output(0), move_names=True)
        node.set_friendly_name(f"{name}/{tag}/replaced")
        emulated.set_friendly_name(name)

    clone.validate_nodes_and_infer_types()
    return clone
