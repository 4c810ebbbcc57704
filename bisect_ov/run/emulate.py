"""Emulate a low-precision (f16 or bf16) device on the f32 CPU.

What is modelled
----------------
A device that *stores* every floating activation in f16 (or bf16): each op reads low-precision inputs,
computes in f32, and its result is rounded to the low precision (round to nearest, ties to even) before
anyone reads it. `emulate_precision` rewrites a model so that, compiled on the OpenVINO CPU with
``{"INFERENCE_PRECISION_HINT": "f32"}``, it computes exactly that:

* Parameters and every op whose value depends on a Parameter (the "data path") get a rounding subgraph
  after each floating output; all consumers, model outputs included, read the rounded value.
* Floating constants, and constant or shape-derived float subgraphs (e.g. decompressed weights, positional
  encodings built from ``ShapeOf``), are computed in f32 and rounded once where they enter the data path,
  as a device would store its weights. Pure shape arithmetic (``ShapeOf -> Convert -> Multiply -> ...``
  feeding shapes) and the ``scales``/``sizes`` inputs of ``Interpolate`` are not rounded: real plugins
  compute them on the host.
* f16 rounding follows IEEE binary16: subnormals below ``2**-14`` keep multiples of ``2**-24``, and
  ``|x| >= 65520`` overflows to +-inf. bf16 keeps float32's exponent range (its subnormals keep multiples
  of ``2**-133``). NaN stays NaN. `round_output` is bit-exact to `round_array` (tested).
* Optionally (``reductions=...``) Softmax, ReduceSum, ReduceMean, MVN and MatMul are replaced by
  subgraphs that also *accumulate* in the low precision, modelling a kernel with ``lanes`` partial sums:
  element ``k`` of the reduced axis goes to lane ``k % lanes``, each lane adds its elements in order and
  rounds after every add, then the lanes are combined by a pairwise tree (lane ``j`` + lane ``j + w/2``),
  rounding after each add. Every intermediate (``x - max``, ``exp``, products, quotients) is rounded too.
  Softmax is ``round(e / sum)`` with ``e = round(exp(round(x - max)))``; ReduceMean is
  ``round(sum / N)``; MVN is ``d = round(x - mean)``, ``var = round(sum(round(d*d)) / N)``,
  ``round(d / round(sqrt(round(var + eps))))`` (``inside_sqrt``) or
  ``round(d / round(round(sqrt(var)) + eps))`` (``outside_sqrt``); MatMul accumulates
  ``acc = round(acc + a*b)`` (the product of two low-precision numbers is exact in f32, so this models a
  fused multiply-add, except for rare double-rounding ties through f32).

What is NOT modelled
--------------------
Real GPU/NPU kernels differ: they fuse ops (keeping intermediates in registers, often in f32), use their
own ``exp``/``sqrt``/``tanh`` approximations, tile reductions and matrix products in other orders, may
accumulate in f32 (tensor cores), flush subnormals, or keep some tensors in f32. Ops not listed above
(Convolution, pooling, ReduceMax/L2, LogSoftmax, ...) accumulate in f32 here even with ``reductions``.
Bodies of Loop/If/TensorIterator are not rewritten (their outputs are rounded). Reduction emulation needs a
static rank and static lengths of the reduced axes, constant ``axes`` inputs, f32 tensors and (MatMul)
inputs of rank >= 2; other instances of those ops are left alone (per-op rounding still applies), as are
MVN-1 ops (no ``axes`` input). Emulated models must be compiled with ``INFERENCE_PRECISION_HINT`` f32:
a bf16 CPU pipeline would round the rounding arithmetic itself.

How: the CPU plugin removes ``Convert(f32->f16) -> Convert(f16->f32)`` pairs (they come out bit-identical
to f32), so rounding is arithmetic: Veltkamp splitting for the significand, adding and subtracting a
"magic" constant for the fixed quantum of subnormals, Select for overflow, inf, NaN and signed zeros.
Multipliers and addends are made data-dependent (Select outputs), so no graph optimisation can fold them
into a neighbouring ``Multiply``/``Add`` by a constant. This costs ~16 ops per rounded tensor; CPU
compile time grows about linearly with the op count (measured: ~15 s for a 1000-op model, whose emulated
copy has ~17,000 ops).

Naming: original ops keep their friendly names; new ops are named ``<friendly>/emulated_<precision>/...``.
Tensor names move to the rounded tensors (so a tensor name always denotes the stored value; model inputs
and outputs keep theirs), while an op found by friendly name still yields its value *before* rounding,
except for emulated reductions, whose final op takes over the original's friendly name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from bisect_ov.errors import InputError

__all__ = ["PRECISIONS", "REDUCTION_OPS", "round_array", "round_output", "emulate_precision"]

#: Precisions a device can be emulated in.
PRECISIONS = ("f16", "bf16")
#: Op types whose accumulation `emulate_precision` can emulate (``reductions=``).
REDUCTION_OPS = frozenset({"Softmax", "ReduceSum", "ReduceMean", "MVN", "MatMul"})

_FLOAT_TYPES = (ov.Type.f32, ov.Type.f16, ov.Type.bf16)
_F32_MAX = float(np.finfo(np.float32).max)
# Ops whose value is data even without inputs (sources of the data path).
_DATA_SOURCES = {"Parameter", "ReadValue"}
# Ops whose output depends only on the *shape* of their input, never on its values.
_SHAPE_OPS = {"ShapeOf"}
# Float inputs that are parameters of an op rather than values a device stores (input indices).
_NON_VALUE_INPUTS = {"Interpolate": {1, 2, 3}}


def _check_precision(precision: object, allow_f32: bool) -> str:
    valid = PRECISIONS + (("f32",) if allow_f32 else ())
    if not isinstance(precision, str) or precision not in valid:
        raise InputError(f"unknown precision {precision!r}; valid precisions are {', '.join(map(repr, valid))}")
    return str(precision)


# ---------------------------------------------------------------------------------------------- numpy
def round_array(x: np.ndarray, precision: str) -> np.ndarray:
    """Round values to a low precision, as a device storing them would (numpy reference).

    Parameters
    ----------
    x : numpy.ndarray
        Values; converted to float32 first (the emulated model rounds float32 tensors).
    precision : {'f16', 'bf16', 'f32'}
        'f16': IEEE binary16, round to nearest even, subnormals kept, ``|x| >= 65520`` becomes +-inf.
        'bf16': float32 with its 16 low bits rounded off (nearest even); NaN preserved.
        'f32': returned unchanged.

    Returns
    -------
    numpy.ndarray
        float32 array of the same shape holding the rounded values.

    Raises
    ------
    InputError
        If `precision` is not one of the above.
    """
    precision = _check_precision(precision, allow_f32=True)
    x = np.array(x, dtype=np.float32)  # a copy: the result never aliases the caller's array
    if precision == "f32":
        return x
    if precision == "f16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # add half an ulp (ties to even), truncate
    rounded = bits.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, rounded)  # NaNs with only low payload bits would become inf


# ------------------------------------------------------------------------------------ OpenVINO ops
class _Namer:
    """Gives new ops unique friendly names ``<prefix>/<what>[_<n>]``."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._counts: dict[str, int] = {}

    def __call__(self, what: str) -> str:
        n = self._counts.get(what, 0)
        self._counts[what] = n + 1
        return f"{self.prefix}/{what}" if n == 0 else f"{self.prefix}/{what}_{n}"

    def f32(self, value: object) -> ov.Output:
        return ops.constant(np.array(value, dtype=np.float32), name=self("const")).output(0)

    def i64(self, value: object) -> ov.Output:
        return ops.constant(np.array(value, dtype=np.int64), name=self("const")).output(0)


def _pick(cond: ov.Output, if_true: float, if_false: float, nm: _Namer, what: str) -> ov.Output:
    # A data-dependent "constant": graph optimisations cannot fold it into a neighbouring Multiply.
    return ops.select(cond, nm.f32(if_true), nm.f32(if_false), name=nm(what)).output(0)


def _veltkamp(x: ov.Output, factor: ov.Output, nm: _Namer) -> ov.Output:
    # p = x * (2**s + 1); p - (p - x) is x rounded to 24 - s significant bits, ties to even (f32 RNE).
    # With factor 0 it returns x unchanged.
    p = ops.multiply(x, factor, name=nm("split"))
    return ops.subtract(p, ops.subtract(p, x, name=nm("split_lo")), name=nm("split_hi")).output(0)


def _quantize_tiny(x: ov.Output, tiny: ov.Output, magic: float, nm: _Namer) -> ov.Output:
    # Where `tiny`, (x + magic) - magic rounds x to a multiple of ulp(magic), ties to even: the fixed
    # quantum of the low precision's subnormals. Elsewhere magic is 0 and x passes unchanged.
    m = _pick(tiny, magic, 0.0, nm, "magic")
    return ops.subtract(ops.add(x, m, name=nm("quantize")), m, name=nm("quantized")).output(0)


def _round_f16(x: ov.Output, nm: _Namer) -> ov.Output:
    a = ops.abs(x, name=nm("abs"))
    finite = ops.less(a, nm.f32(65520.0), name=nm("finite"))  # f16 rounds |x| >= 65520 to inf; NaN: False
    tiny = ops.less(a, nm.f32(2.0**-14), name=nm("subnormal"))
    # Subnormals are multiples of 2**-24 = ulp(0.75); such values then have <= 11 bits, so the split
    # below keeps them. Normal range: 11 significant bits; the factor is 0 beyond the f16 range, so no
    # overflow there.
    x = _quantize_tiny(x, tiny, 0.75, nm)
    r = _veltkamp(x, _pick(finite, 2.0**13 + 1, 0.0, nm, "factor"), nm)
    return ops.select(finite, r, ops.multiply(x, nm.f32(np.inf), name=nm("inf")), name=nm("select_inf")).output(0)


def _round_bf16(x: ov.Output, nm: _Namer) -> ov.Output:
    a = ops.abs(x, name=nm("abs"))
    big = ops.greater(a, nm.f32(2.0**100), name=nm("big"))  # x * (2**16 + 1) would overflow near f32 max
    tiny = ops.less(a, nm.f32(2.0**-126), name=nm("subnormal"))  # f32 subnormals
    # bf16 subnormals are multiples of 2**-133 = ulp(1.5 * 2**-110); the split must then leave them
    # alone (factor 0): on subnormals it would round to 8 *significant* bits.
    xq = _quantize_tiny(x, tiny, 1.5 * 2.0**-110, nm)
    # Big values are split at 2**-64 times their size (exact power-of-two scaling) and scaled back, which
    # overflows to inf exactly when bf16 rounding does.
    xs = ops.multiply(xq, _pick(big, 2.0**-64, 1.0, nm, "scale"), name=nm("scaled")).output(0)
    r = _veltkamp(xs, _pick(tiny, 0.0, 2.0**16 + 1, nm, "factor"), nm)  # 8 significant bits
    r = ops.multiply(r, _pick(big, 2.0**64, 1.0, nm, "unscale"), name=nm("unscaled"))
    is_inf = ops.greater(a, nm.f32(_F32_MAX), name=nm("is_inf"))  # inf - inf inside the split gave NaN
    return ops.select(is_inf, x, r, name=nm("select_inf")).output(0)


def _fix_zero_sign(r: ov.Output, x: ov.Output, nm: _Namer) -> ov.Output:
    # (x + m) - m, and the CPU's multiply-by-constant, turn -0 into +0; x * 0 restores the sign (x is
    # finite wherever r == 0). The zero factor is data-dependent so the multiply is a true multiply.
    is_zero = ops.equal(r, nm.f32(0.0), name=nm("is_zero"))
    signed_zero = ops.multiply(x, _pick(is_zero, 0.0, 1.0, nm, "zero_factor"), name=nm("signed_zero"))
    return ops.select(is_zero, signed_zero, r, name=nm("select_zero")).output(0)


def _round(x: ov.Output, precision: str, nm: _Namer) -> ov.Output:
    element_type = x.get_element_type()
    if element_type not in _FLOAT_TYPES:
        source = x.get_node().get_friendly_name()
        raise InputError(f"can only round floating tensors, got {element_type} from '{source}'")
    if element_type != ov.Type.f32:  # the CPU runs f16/bf16 models in f32 anyway; round there
        x = ops.convert(x, ov.Type.f32, name=nm("to_f32")).output(0)
    r = _fix_zero_sign(_round_f16(x, nm) if precision == "f16" else _round_bf16(x, nm), x, nm)
    if element_type != ov.Type.f32:
        r = ops.convert(r, element_type, name=nm("to_" + element_type.get_type_name())).output(0)
    return r


def round_output(output: ov.Output, precision: str, *, name: str | None = None) -> ov.Output:
    """Build OpenVINO ops that round a floating tensor to a low precision, arithmetically.

    Convert(f32->f16)->Convert(f16->f32) would be optimised away by the CPU plugin, so the rounding is
    computed arithmetically (see the module docstring). Compiled with ``INFERENCE_PRECISION_HINT`` f32 the
    result is bit-exact to `round_array`, signed zeros and subnormals included; NaN stays NaN.

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
    precision = _check_precision(precision, allow_f32=True)
    if precision == "f32":
        return output
    prefix = name or f"{output.get_node().get_friendly_name()}/emulated_{precision}"
    return _round(output, precision, _Namer(prefix))


# ---------------------------------------------------------------------------- low-precision sums
class _Builder(_Namer):
    """Names ops and knows the emulated precision and lane count of one replaced op."""

    def __init__(self, prefix: str, precision: str, lanes: int) -> None:
        super().__init__(prefix)
        self.precision, self.lanes = precision, lanes

    def rnd(self, node: ov.Node | ov.Output) -> ov.Output:
        """The op's result as the low-precision device stores it."""
        return _round(node if isinstance(node, ov.Output) else node.output(0), self.precision, self)

    def slice(self, x: ov.Output, start: int, stop: int, axis: int, what: str) -> ov.Output:
        bounds = self.i64([start]), self.i64([stop]), self.i64([1]), self.i64([axis])
        return ops.slice(x, *bounds, name=self(what)).output(0)

    def pad(self, x: ov.Output, axis: int, extra: int) -> ov.Output:
        """Append `extra` zeros along `axis` (static rank); adding zeros to a sum is exact."""
        if extra == 0:
            return x
        end = [0] * x.get_partial_shape().rank.get_length()
        end[axis] = extra
        zeros = self.i64([0] * len(end))
        return ops.pad(x, zeros, self.i64(end), "constant", self.f32(0.0), name=self("pad")).output(0)


def _tree_sum(x: ov.Output, axis: int, width: int, b: _Builder) -> ov.Output:
    """Pairwise-combine `width` partial sums along `axis` (element j + element j + width//2), rounding."""
    while width > 1:
        half = width // 2
        lo, hi = b.slice(x, 0, half, axis, "lanes_lo"), b.slice(x, half, 2 * half, axis, "lanes_hi")
        summed = b.rnd(ops.add(lo, hi, name=b("lanes_add")))
        if width % 2:  # the odd lane waits for the next level
            odd = b.slice(x, 2 * half, width, axis, "lanes_odd")
            summed = ops.concat([summed, odd], axis, name=b("lanes_cat")).output(0)
        x, width = summed, half + width % 2
    return x


def _lane_loop(first: ov.Output, sliced: list[tuple[ov.Output, int]], steps: int,
               body_fn: Callable[..., ov.Output], b: _Builder) -> ov.Output:
    """Run ``acc = body_fn(acc, *chunks)`` over `steps` chunks of ``b.lanes`` elements, from ``acc = first``.

    `sliced` holds (tensor, axis) pairs whose axis length is ``steps * lanes``. One Loop op does the
    sequential part, so the op count does not grow with the reduction length.
    """
    acc = ops.parameter(first.get_partial_shape(), ov.Type.f32, name=b("body_acc"))
    chunks = []
    for t, axis in sliced:
        shape = ov.PartialShape(t.get_partial_shape())
        shape[axis] = ov.Dimension(b.lanes)
        chunks.append(ops.parameter(shape, ov.Type.f32, name=b("body_chunk")))
    new_acc = ops.result(body_fn(acc.output(0), *[c.output(0) for c in chunks]), name=b("body_result"))
    keep_going = ops.result(ops.constant(np.array(True), name=b("const")), name=b("body_condition"))
    loop = ops.loop(b.i64(steps), ops.constant(np.array(True), name=b("const")).output(0))
    loop.set_friendly_name(b("loop"))
    loop.set_function(ov.Model([new_acc, keep_going], [acc, *chunks], b("body")))
    loop.set_special_body_ports([-1, 1])  # no iteration-number input; body output 1 is the condition
    for chunk, (t, axis) in zip(chunks, sliced):
        # The CPU Loop ignores a sliced input's start offset, so callers pass tensors starting at 0.
        loop.set_sliced_input(chunk, t, 0, b.lanes, b.lanes, -1, axis)
    loop.set_merged_input(acc, first, new_acc.output(0))
    return loop.get_iter_value(new_acc.output(0), -1)


def _lane_sum(x: ov.Output, axis: int, n: int, b: _Builder) -> ov.Output:
    """Sum a rounded tensor along `axis` (static length `n`) in low precision; the axis stays, length 1."""
    if n <= b.lanes:  # one element per lane: only the tree
        return _tree_sum(x, axis, n, b)
    steps = -(-n // b.lanes)
    x = b.pad(x, axis, steps * b.lanes - n)
    first = b.slice(x, 0, b.lanes, axis, "first_chunk")
    rest = b.slice(x, b.lanes, steps * b.lanes, axis, "rest")
    add_chunk = lambda acc, chunk: b.rnd(ops.add(acc, chunk, name=b("body_add")))  # noqa: E731
    partial = _lane_loop(first, [(rest, axis)], steps - 1, add_chunk, b)
    return _tree_sum(partial, axis, b.lanes, b)


def _reduce_sum(x: ov.Output, axes: list[int], b: _Builder) -> ov.Output:
    """Low-precision sum over sorted static `axes`, kept with length 1; elements taken in row-major order."""
    shape = x.get_partial_shape()
    if len(axes) == 1:
        return _lane_sum(x, axes[0], shape[axes[0]].get_length(), b)
    # Several axes: move them last and flatten them into one axis of length n.
    others = [i for i in range(shape.rank.get_length()) if i not in axes]
    n = _count(x, axes)
    moved = ops.transpose(x, b.i64(others + axes), name=b("move_axes"))
    kept_dims = ops.gather(ops.shape_of(x, name=b("shape")), b.i64(others), b.i64(0), name=b("kept_dims"))
    flat_shape = ops.concat([kept_dims, b.i64([n])], 0, name=b("flat_shape"))
    summed = _lane_sum(ops.reshape(moved, flat_shape, False, name=b("flatten")).output(0), len(others), n, b)
    squeezed = ops.squeeze(summed, b.i64([len(others)]), name=b("squeeze"))
    return ops.unsqueeze(squeezed, b.i64(axes), name=b("unsqueeze")).output(0)


# --------------------------------------------------------------------------- reduction emulators
# Each returns the emulated output, or None when the op cannot be emulated (it then keeps per-op rounding).
def _count(x: ov.Output, axes: list[int]) -> int:
    return int(np.prod([x.get_partial_shape()[a].get_length() for a in axes]))


def _reduced_axes(x: ov.Output, axes: object) -> list[int] | None:
    """Sorted non-negative axes if the rank and those axes' lengths are static, else None."""
    shape = x.get_partial_shape()
    if not shape.rank.is_static:
        return None
    if isinstance(axes, ov.Output):
        if axes.get_node().get_type_name() != "Constant":
            return None
        axes = axes.get_node().get_data()
    rank = shape.rank.get_length()
    result = sorted({int(a) % rank for a in np.ravel(axes)})
    if not all(shape[a].is_static for a in result) or _count(x, result) < 2:
        return None  # dynamic, or nothing to accumulate (the op is an identity up to its rounding)
    return result


def _emulate_softmax(node: ov.Node, b: _Builder) -> ov.Output | None:
    x = node.input_value(0)
    axes = _reduced_axes(x, node.get_attributes()["axis"])
    if axes is None:
        return None
    peak = ops.reduce_max(x, b.i64(axes), True, name=b("max"))  # exact
    e = b.rnd(ops.exp(b.rnd(ops.subtract(x, peak, name=b("shift"))), name=b("exp")))
    return b.rnd(ops.divide(e, _lane_sum(e, axes[0], _count(x, axes), b), name=b("divide")))


def _emulate_reduce(node: ov.Node, b: _Builder) -> ov.Output | None:
    x = node.input_value(0)
    axes = _reduced_axes(x, node.input_value(1))
    if axes is None:
        return None
    total = _reduce_sum(x, axes, b)
    if node.get_type_name() == "ReduceMean":
        total = b.rnd(ops.divide(total, b.f32(_count(x, axes)), name=b("mean")))
    if not node.get_attributes()["keep_dims"]:
        total = ops.squeeze(total, b.i64(axes), name=b("drop_axes")).output(0)
    return total


def _emulate_mvn(node: ov.Node, b: _Builder) -> ov.Output | None:
    if node.get_input_size() != 2:  # MVN-1 has no axes input
        return None
    x = node.input_value(0)
    axes = _reduced_axes(x, node.input_value(1))
    if axes is None:
        return None
    attrs = node.get_attributes()
    n = b.f32(_count(x, axes))
    mean = b.rnd(ops.divide(_reduce_sum(x, axes, b), n, name=b("mean")))
    d = b.rnd(ops.subtract(x, mean, name=b("center")))
    if not attrs["normalize_variance"]:
        return d
    square = b.rnd(ops.multiply(d, d, name=b("square")))
    var = b.rnd(ops.divide(_reduce_sum(square, axes, b), n, name=b("variance")))
    eps = b.f32(round_array(np.float32(attrs["eps"]), b.precision))
    if attrs["eps_mode"].lower() == "inside_sqrt":
        den = b.rnd(ops.sqrt(b.rnd(ops.add(var, eps, name=b("add_eps"))), name=b("sqrt")))
    else:
        den = b.rnd(ops.add(b.rnd(ops.sqrt(var, name=b("sqrt"))), eps, name=b("add_eps")))
    return b.rnd(ops.divide(d, den, name=b("normalize")))


def _emulate_matmul(node: ov.Node, b: _Builder) -> ov.Output | None:
    inputs = node.input_values()
    ranks = [v.get_partial_shape().rank for v in inputs]
    if not all(r.is_static and r.get_length() >= 2 for r in ranks):
        return None
    rank_a, rank_b = (r.get_length() for r in ranks)
    attrs = node.get_attributes()
    for idx, flag in enumerate(("transpose_a", "transpose_b")):  # bring to [..., M, K] x [..., K, N]
        if attrs[flag]:
            rank = (rank_a, rank_b)[idx]
            perm = list(range(rank - 2)) + [rank - 1, rank - 2]
            inputs[idx] = ops.transpose(inputs[idx], b.i64(perm), name=b(flag)).output(0)
    a, bb = inputs
    if not a.get_partial_shape()[rank_a - 1].is_static:
        return None
    k, lanes = a.get_partial_shape()[rank_a - 1].get_length(), b.lanes
    a_axis, b_axis = rank_a - 1, rank_b - 2

    def products(a_part: ov.Output, b_part: ov.Output) -> ov.Node:
        # [..., M, L, 1] * [..., 1, L, N] -> [..., M, L, N]; exact in f32 for low-precision inputs.
        a_col = ops.unsqueeze(a_part, b.i64([-1]), name=b("a_col"))
        b_row = ops.unsqueeze(b_part, b.i64([-3]), name=b("b_row"))
        return ops.multiply(a_col, b_row, name=b("products"))

    width = min(k, lanes)
    acc = b.rnd(products(b.slice(a, 0, width, a_axis, "a_first"), b.slice(bb, 0, width, b_axis, "b_first")))
    if k > lanes:
        steps = -(-k // lanes)
        a, bb = b.pad(a, a_axis, steps * lanes - k), b.pad(bb, b_axis, steps * lanes - k)
        rest = [(b.slice(a, lanes, steps * lanes, a_axis, "a_rest"), a_axis),
                (b.slice(bb, lanes, steps * lanes, b_axis, "b_rest"), b_axis)]
        fma = lambda s, ca, cb: b.rnd(ops.add(s, products(ca, cb), name=b("body_fma")))  # noqa: E731
        acc = _lane_loop(acc, rest, steps - 1, fma, b)
    lane_axis = acc.get_partial_shape().rank.get_length() - 2
    return ops.squeeze(_tree_sum(acc, lane_axis, width, b), b.i64([lane_axis]), name=b("squeeze")).output(0)


_EMULATORS = {"Softmax": _emulate_softmax, "ReduceSum": _emulate_reduce, "ReduceMean": _emulate_reduce,
              "MVN": _emulate_mvn, "MatMul": _emulate_matmul}

# ------------------------------------------------------------------------------- model rewriting
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


def _is_float(out: ov.Output) -> bool:
    return out.get_element_type() in _FLOAT_TYPES


def _redirect(consumers: list[ov.Input], source: ov.Output, rounded: ov.Output, move_names: bool) -> None:
    for inp in consumers:
        inp.replace_source_output(rounded)
    if move_names:  # tensor names now denote the stored (rounded) value; model outputs keep their names
        rounded.get_tensor().set_names(source.get_names())
        source.get_tensor().set_names(set())


def _round_constant(node: ov.Node, out: ov.Output, precision: str, nm: _Namer) -> ov.Output | None:
    """A rounded copy of a Constant's value, or None when rounding changes nothing."""
    if out.get_element_type() == ov.Type.bf16:  # numpy has no bf16: round it with ops
        return _round(out, precision, nm)
    data = np.asarray(node.get_data())
    rounded = round_array(data, precision)
    if np.array_equal(rounded, data.astype(np.float32), equal_nan=True):
        return None  # e.g. f16 weights in an f16 emulation: keep the decompression pattern intact
    if out.get_element_type() != ov.Type.f32:
        return _round(out, precision, nm)
    return ops.constant(rounded, ov.Type.f32, name=nm("constant")).output(0)


def _round_static(node: ov.Node, out: ov.Output, targets: list[ov.Input], data: set[int], precision: str,
                  nm: _Namer) -> None:
    """Round a constant or shape-derived value where it enters the data path (or is a model output)."""
    def is_value_use(inp: ov.Input) -> bool:
        user = inp.get_node()
        if user.get_type_name() == "Result":
            return True
        non_value = _NON_VALUE_INPUTS.get(user.get_type_name(), ())
        return user.get_instance_id() in data and inp.get_index() not in non_value

    consumers = [inp for inp in targets if is_value_use(inp)]
    if not consumers:  # pure shape arithmetic: computed on the host in f32 by real plugins
        return
    if node.get_type_name() == "Constant":
        r = _round_constant(node, out, precision, nm)
    else:  # e.g. decompressed weights, positional encodings computed from ShapeOf
        r = _round(out, precision, nm)
    if r is None:
        return
    everyone = len(consumers) == len(targets)
    _redirect(consumers, out, r, move_names=everyone)
    if everyone and r.get_node().get_type_name() == "Constant":  # the rounded copy takes over the name
        original_name = node.get_friendly_name()
        node.set_friendly_name(nm("original"))
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
        `REDUCTION_OPS` ('Softmax', 'ReduceSum', 'ReduceMean', 'MVN', 'MatMul').
    lanes : int, default 16
        Number of partial sums a reduction kernel keeps (see the module docstring).

    Returns
    -------
    openvino.Model
        A new model with the same inputs, and the same outputs (count, order, tensor names). Original ops
        keep their friendly names; rounding ops are named ``<friendly>/emulated_<precision>/...``; an
        emulated reduction's final op takes over the original's friendly name. Tensor names move to the
        rounded tensors (except on Parameters). Compile it with ``INFERENCE_PRECISION_HINT`` f32.

    Raises
    ------
    InputError
        On an unknown precision, reduction op type, a bad `lanes`, or a non-model.
    """
    precision = _check_precision(precision, allow_f32=False)
    selected = _check_reductions(reductions)
    if isinstance(lanes, bool) or not isinstance(lanes, (int, np.integer)) or lanes < 1:
        raise InputError(f"lanes must be a positive integer, got {lanes!r}")
    if not isinstance(model, ov.Model):
        raise InputError(f"expected an openvino.Model, got {type(model).__name__}")
    clone = model.clone()
    nodes = list(clone.get_ordered_ops())
    data = _data_path(nodes)
    tag = f"emulated_{precision}"
    rounded: dict[tuple[int, int], ov.Output] = {}  # (op id, port) -> rounded data-path output
    for node in nodes:
        if node.get_type_name() == "Result":
            continue
        for out in node.outputs():
            targets = list(out.get_target_inputs())  # taken before the rounding ops become consumers
            if not _is_float(out) or not targets:
                continue
            suffix = f"/out{out.get_index()}" if node.get_output_size() > 1 else ""
            nm = _Namer(f"{node.get_friendly_name()}/{tag}{suffix}")
            if node.get_instance_id() in data:
                r = _round(out, precision, nm)
                _redirect(targets, out, r, move_names=node.get_type_name() != "Parameter")
                rounded[(node.get_instance_id(), out.get_index())] = r
            else:
                _round_static(node, out, targets, data, precision, nm)

    # Low-precision accumulation: rebuild selected ops from their (already rounded) inputs and hand the
    # original's consumers, friendly name and tensor names to the emulated result.
    for node in nodes:
        kind = node.get_type_name()
        r = rounded.get((node.get_instance_id(), 0))
        if kind not in selected or r is None or node.get_output_element_type(0) != ov.Type.f32:
            continue
        name = node.get_friendly_name()
        emulated = _EMULATORS[kind](node, _Builder(f"{name}/{tag}/{kind.lower()}", precision, lanes))
        if emulated is None:  # dynamic reduced axis, non-constant axes, ...: keep per-op rounding only
            continue
        _redirect(list(r.get_target_inputs()), r, emulated, move_names=True)
        node.set_friendly_name(f"{name}/{tag}/replaced")
        emulated.get_node().set_friendly_name(name)

    clone.validate_nodes_and_infer_types()
    return clone
