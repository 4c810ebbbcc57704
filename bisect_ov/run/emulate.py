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

Why arithmetic rounding: the CPU plugin removes ``Convert(f32->f16) -> Convert(f16->f32)`` pairs, so the
rounding is built from Multiply/Subtract/Round/Select (Veltkamp splitting). Multipliers that could be
fused with a preceding ``Multiply`` by a constant are made data-dependent (Select), so no graph
optimisation can merge them.
"""

from __future__ import annotations

from collections.abc import Iterable

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
    if precision not in valid:
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


def _f32(value: object) -> ov.Output:
    return ops.constant(np.array(value, dtype=np.float32)).output(0)


def _i64(value: object) -> ov.Output:
    return ops.constant(np.array(value, dtype=np.int64)).output(0)


def _pick(cond: ov.Output, if_true: float, if_false: float, name: str) -> ov.Output:
    # A data-dependent "constant": graph optimisations cannot fold it into a neighbouring Multiply.
    return ops.select(cond, _f32(if_true), _f32(if_false), name=name).output(0)


def _veltkamp(x: ov.Output, factor: ov.Output, nm: _Namer) -> ov.Output:
    # p = x * (2**s + 1); p - (p - x) is x rounded to 24 - s significant bits, ties to even (f32 RNE).
    p = ops.multiply(x, factor, name=nm("split"))
    return ops.subtract(p, ops.subtract(p, x, name=nm("split_lo")), name=nm("split_hi")).output(0)


def _round_f16(x: ov.Output, nm: _Namer) -> ov.Output:
    a = ops.abs(x, name=nm("abs"))
    finite = ops.less(a, _f32(65520.0), name=nm("finite"))  # f16 rounds |x| >= 65520 to inf; NaN -> False
    tiny = ops.less(a, _f32(2.0**-14), name=nm("subnormal"))
    # Normal range: 11 significant bits. The factor is 0 outside the f16 range so x * factor cannot overflow.
    normal = _veltkamp(x, _pick(finite, 2.0**13 + 1, 0.0, nm("factor")), nm)
    # Subnormal range: multiples of 2**-24 (x * 2**24 is exact, Round is half to even).
    scaled = ops.multiply(x, _pick(tiny, 2.0**24, 1.0, nm("sub_scale")), name=nm("sub_scaled"))
    sub = ops.multiply(ops.round(scaled, "half_to_even", name=nm("sub_round")), _f32(2.0**-24), name=nm("sub"))
    r = ops.select(tiny, sub, normal, name=nm("select_sub"))
    overflow = ops.greater_equal(a, _f32(65520.0), name=nm("overflow"))
    return ops.select(overflow, ops.multiply(x, _f32(np.inf), name=nm("inf")), r, name=nm("select_inf")).output(0)


def _round_bf16(x: ov.Output, nm: _Namer) -> ov.Output:
    a = ops.abs(x, name=nm("abs"))
    big = ops.greater(a, _f32(2.0**100), name=nm("big"))  # x * (2**16 + 1) would overflow near f32 max
    tiny = ops.less(a, _f32(2.0**-126), name=nm("subnormal"))  # f32 subnormals
    # Bring big and subnormal values into a safe range by exact power-of-two scaling.
    scale = ops.select(big, _f32(2.0**-64), _pick(tiny, 2.0**64, 1.0, nm("scale_tiny")), name=nm("scale"))
    unscale = ops.select(big, _f32(2.0**64), _pick(tiny, 2.0**-64, 1.0, nm("unscale_tiny")), name=nm("unscale"))
    xs = ops.multiply(x, scale, name=nm("scaled")).output(0)
    normal = _veltkamp(xs, _f32(2.0**16 + 1), nm)  # 8 significant bits
    # bf16 subnormals keep multiples of 2**-133, i.e. 2**-69 after the 2**64 scaling.
    sub_round = ops.round(ops.multiply(xs, _f32(2.0**69), name=nm("sub_scaled")), "half_to_even", name=nm("sub_round"))
    sub = ops.multiply(sub_round, _f32(2.0**-69), name=nm("sub"))
    r = ops.multiply(ops.select(tiny, sub, normal, name=nm("select_sub")), unscale, name=nm("unscaled"))
    inf = ops.greater(a, _f32(_F32_MAX), name=nm("is_inf"))  # inf - inf inside the split gave NaN
    return ops.select(inf, x, r, name=nm("select_inf")).output(0)


def _fix_zero_sign(r: ov.Output, x: ov.Output, nm: _Namer) -> ov.Output:
    # Round() and the CPU's multiply-by-constant lose the sign of zero; x * 0 restores it (x is finite
    # wherever r == 0). The zero factor is data-dependent so the multiply is a true multiply.
    is_zero = ops.equal(r, _f32(0.0), name=nm("is_zero"))
    signed_zero = ops.multiply(x, _pick(is_zero, 0.0, 1.0, nm("zero_factor")), name=nm("signed_zero"))
    return ops.select(is_zero, signed_zero, r, name=nm("select_zero")).output(0)


def _round(x: ov.Output, precision: str, nm: _Namer) -> ov.Output:
    element_type = x.get_element_type()
    if element_type not in _FLOAT_TYPES:
        raise InputError(f"can only round floating tensors, got {element_type} from '{x.get_node().get_friendly_name()}'")
    if element_type != ov.Type.f32:  # the CPU runs f16/bf16 models in f32 anyway; round there
        x = ops.convert(x, ov.Type.f32, name=nm("to_f32")).output(0)
    r = _fix_zero_sign(_round_f16(x, nm) if precision == "f16" else _round_bf16(x, nm), x, nm)
    if element_type != ov.Type.f32:
        r = ops.convert(r, element_type, name=nm("to_" + element_type.get_type_name())).output(0)
    return r


def round_output(output: ov.Output, precision: str, *, name: str | None = None) -> ov.Output:
    """Build OpenVINO ops that round a floating tensor to a low precision, arithmetically.

    Convert(f32->f16)->Convert(f16->f32) would be optimised away by the CPU plugin, so the rounding is
    computed with Veltkamp splitting plus Round/Select for subnormals, overflow, inf and NaN. Compiled with
    ``INFERENCE_PRECISION_HINT`` f32 the result is bit-exact to `round_array`, signed zeros included.

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
def _slice(x: ov.Output, start: int, stop: int, axis: int, name: str) -> ov.Output:
    return ops.slice(x, _i64([start]), _i64([stop]), _i64([1]), _i64([axis]), name=name).output(0)


def _tree_sum(x: ov.Output, axis: int, width: int, precision: str, nm: _Namer) -> ov.Output:
    """Pairwise-combine `width` partial sums along `axis` (element j + element j + width//2), rounding."""
    while width > 1:
        half = width // 2
        lo, hi = _slice(x, 0, half, axis, nm("lanes_lo")), _slice(x, half, 2 * half, axis, nm("lanes_hi"))
        summed = _round(ops.add(lo, hi, name=nm("lanes_add")).output(0), precision, nm)
        if width % 2:  # the odd lane waits for the next level
            summed = ops.concat([summed, _slice(x, 2 * half, width, axis, nm("lanes_odd"))], axis, name=nm("lanes_cat")).output(0)
        x, width = summed, half + width % 2
    return x


def _body_parameter(x: ov.Output, axis: int, lanes: int, name: str) -> ov.op.Parameter:
    shape = ov.PartialShape(x.get_partial_shape())
    shape[axis] = ov.Dimension(lanes)
    return ops.parameter(shape, ov.Type.f32, name=name)


def _lane_loop(first: ov.Output, sliced: list[tuple[ov.Output, int]], steps: int, lanes: int, body_fn, nm: _Namer) -> ov.Output:
    """Run ``acc = body_fn(acc, *chunks)`` over `steps` chunks of `lanes` elements, starting from `first`.

    `sliced` holds (tensor, axis) pairs whose axis length is ``steps * lanes``; one Loop op does the
    sequential part, so the op count does not grow with the reduction length.
    """
    acc = ops.parameter(first.get_partial_shape(), ov.Type.f32, name=nm("body_acc"))
    chunks = [_body_parameter(t, axis, lanes, nm("body_chunk")) for t, axis in sliced]
    new_acc = ops.result(body_fn(acc.output(0), *[c.output(0) for c in chunks]))
    keep_going = ops.result(ops.constant(np.array(True)))
    loop = ops.loop(_i64(steps), ops.constant(np.array(True)).output(0))
    loop.set_friendly_name(nm("loop"))
    loop.set_function(ov.Model([new_acc, keep_going], [acc, *chunks], nm("body")))
    loop.set_special_body_ports([-1, 1])
    for chunk, (t, axis) in zip(chunks, sliced):
        # The CPU Loop ignores a sliced input's start offset, so the caller passes tensors starting at 0.
        loop.set_sliced_input(chunk, t, 0, lanes, lanes, -1, axis)
    loop.set_merged_input(acc, first, new_acc.output(0))
    return loop.get_iter_value(new_acc.output(0), -1)


def _pad_axis(x: ov.Output, axis: int, rank: int, extra: int, name: str) -> ov.Output:
    if extra == 0:
        return x
    end = [0] * rank
    end[axis] = extra
    return ops.pad(x, _i64([0] * rank), _i64(end), "constant", _f32(0.0), name=name).output(0)


def _lane_sum(x: ov.Output, axis: int, n: int, precision: str, lanes: int, nm: _Namer) -> ov.Output:
    """Sum a rounded tensor along `axis` (static length `n`) in low precision; the axis is kept with length 1."""
    rank = x.get_partial_shape().rank.get_length()
    if n <= lanes:  # one element per lane: only the tree
        return _tree_sum(x, axis, n, precision, nm)
    steps = -(-n // lanes)
    x = _pad_axis(x, axis, rank, steps * lanes - n, nm("pad"))  # zeros: adding them is exact
    first = _slice(x, 0, lanes, axis, nm("first_chunk"))
    rest = _slice(x, lanes, steps * lanes, axis, nm("rest"))
    partial = _lane_loop(first, [(rest, axis)], steps - 1, lanes, lambda acc, chunk: _round(ops.add(acc, chunk, name=nm("body_add")).output(0), precision, nm), nm)
    return _tree_sum(partial, axis, lanes, precision, nm)


def _reduce_sum(x: ov.Output, axes: list[int], precision: str, lanes: int, nm: _Namer) -> ov.Output:
    """Low-precision sum over `axes` (sorted, static), keeping them with length 1; row-major element order."""
    shape = x.get_partial_shape()
    rank = shape.rank.get_length()
    if len(axes) == 1:
        return _lane_sum(x, axes[0], shape[axes[0]].get_length(), precision, lanes, nm)
    others = [i for i in range(rank) if i not in axes]
    n = int(np.prod([shape[a].get_length() for a in axes]))
    moved = ops.transpose(x, _i64(others + axes), name=nm("move_axes"))
    kept_dims = ops.gather(ops.shape_of(x, name=nm("shape")), _i64(others), _i64(0), name=nm("kept_dims"))
    flat = ops.reshape(moved, ops.concat([kept_dims, _i64([n])], 0, name=nm("flat_shape")), False, name=nm("flatten"))
    summed = _lane_sum(flat.output(0), len(others), n, precision, lanes, nm)
    squeezed = ops.squeeze(summed, _i64([len(others)]), name=nm("squeeze"))
    return ops.unsqueeze(squeezed, _i64(axes), name=nm("unsqueeze")).output(0)


# --------------------------------------------------------------------------- reduction emulators
def _static_axes(node: ov.Node, rank: int) -> list[int] | None:
    source = node.input_value(1).get_node()
    if source.get_type_name() != "Constant":
        return None
    return sorted({int(a) % rank for a in np.ravel(source.get_data())})


def _static_rank(x: ov.Output) -> int | None:
    shape = x.get_partial_shape()
    return shape.rank.get_length() if shape.rank.is_static else None


def _axes_ok(x: ov.Output, axes: list[int] | None) -> bool:
    return bool(axes) and all(x.get_partial_shape()[a].is_static for a in axes)


def _emulate_softmax(node: ov.Node, precision: str, lanes: int, nm: _Namer) -> ov.Output | None:
    x = node.input_value(0)
    rank = _static_rank(x)
    if rank is None:
        return None
    axis = int(node.get_attributes()["axis"]) % rank
    if not _axes_ok(x, [axis]):
        return None
    rnd = lambda t: _round(t.output(0), precision, nm)  # noqa: E731 - keeps the formulas readable
    peak = ops.reduce_max(x, _i64([axis]), True, name=nm("max"))  # exact
    e = rnd(ops.exp(rnd(ops.subtract(x, peak, name=nm("shift"))), name=nm("exp")))
    total = _lane_sum(e, axis, x.get_partial_shape()[axis].get_length(), precision, lanes, nm)
    return rnd(ops.divide(e, total, name=nm("divide")))


def _emulate_reduce(node: ov.Node, precision: str, lanes: int, nm: _Namer) -> ov.Output | None:
    x = node.input_value(0)
    rank = _static_rank(x)
    axes = None if rank is None else _static_axes(node, rank)
    if not _axes_ok(x, axes):
        return None
    total = _reduce_sum(x, axes, precision, lanes, nm)
    if node.get_type_name() == "ReduceMean":
        n = int(np.prod([x.get_partial_shape()[a].get_length() for a in axes]))
        total = _round(ops.divide(total, _f32(n), name=nm("mean")).output(0), precision, nm)
    if not node.get_attributes()["keep_dims"]:
        total = ops.squeeze(total, _i64(axes), name=nm("drop_axes")).output(0)
    return total


def _emulate_mvn(node: ov.Node, precision: str, lanes: int, nm: _Namer) -> ov.Output | None:
    x = node.input_value(0)
    rank = _static_rank(x)
    if node.get_input_size() != 2 or rank is None:  # MVN-1 has no axes input
        return None
    axes = _static_axes(node, rank)
    if not _axes_ok(x, axes):
        return None
    attrs = node.get_attributes()
    n = _f32(int(np.prod([x.get_partial_shape()[a].get_length() for a in axes])))
    rnd = lambda t: _round(t.output(0), precision, nm)  # noqa: E731
    mean = rnd(ops.divide(_reduce_sum(x, axes, precision, lanes, nm), n, name=nm("mean")))
    d = rnd(ops.subtract(x, mean, name=nm("center")))
    if not attrs["normalize_variance"]:
        return d
    square = rnd(ops.multiply(d, d, name=nm("square")))
    var = rnd(ops.divide(_reduce_sum(square, axes, precision, lanes, nm), n, name=nm("variance")))
    eps = _f32(round_array(np.float32(attrs["eps"]), precision))
    if attrs["eps_mode"].lower() == "inside_sqrt":
        den = rnd(ops.sqrt(rnd(ops.add(var, eps, name=nm("add_eps"))), name=nm("sqrt")))
    else:
        den = rnd(ops.add(rnd(ops.sqrt(var, name=nm("sqrt"))), eps, name=nm("add_eps")))
    return rnd(ops.divide(d, den, name=nm("normalize")))


def _emulate_matmul(node: ov.Node, precision: str, lanes: int, nm: _Namer) -> ov.Output | None:
    a, b = node.input_value(0), node.input_value(1)
    rank_a, rank_b = _static_rank(a), _static_rank(b)
    if rank_a is None or rank_b is None or rank_a < 2 or rank_b < 2:
        return None
    if a.get_element_type() != ov.Type.f32 or b.get_element_type() != ov.Type.f32:
        return None
    attrs = node.get_attributes()
    # Bring both to [..., M, K] x [..., K, N].
    for flag, rank, idx in (("transpose_a", rank_a, 0), ("transpose_b", rank_b, 1)):
        if attrs[flag]:
            perm = list(range(rank - 2)) + [rank - 1, rank - 2]
            t = ops.transpose((a, b)[idx], _i64(perm), name=nm(flag)).output(0)
            a, b = (t, b) if idx == 0 else (a, t)
    k_dim = a.get_partial_shape()[rank_a - 1]
    if not k_dim.is_static:
        return None
    k = k_dim.get_length()
    rnd = lambda t: _round(t.output(0), precision, nm)  # noqa: E731

    def products(a_part: ov.Output, b_part: ov.Output) -> ov.Node:
        # [..., M, L, 1] * [..., 1, L, N] -> [..., M, L, N]; exact in f32 for low-precision inputs.
        return ops.multiply(ops.unsqueeze(a_part, _i64([-1])), ops.unsqueeze(b_part, _i64([-3])), name=nm("products"))

    width = min(k, lanes)
    steps = -(-k // lanes)
    a = _pad_axis(a, rank_a - 1, rank_a, steps * lanes - k if k > lanes else 0, nm("pad_a"))
    b = _pad_axis(b, rank_b - 2, rank_b, steps * lanes - k if k > lanes else 0, nm("pad_b"))
    acc = rnd(products(_slice(a, 0, width, rank_a - 1, nm("a_first")), _slice(b, 0, width, rank_b - 2, nm("b_first"))))
    if steps > 1:
        rest = [(_slice(a, lanes, steps * lanes, rank_a - 1, nm("a_rest")), rank_a - 1),
                (_slice(b, lanes, steps * lanes, rank_b - 2, nm("b_rest")), rank_b - 2)]
        acc = _lane_loop(acc, rest, steps - 1, lanes, lambda s, ca, cb: rnd(ops.add(s, products(ca, cb), name=nm("body_fma"))), nm)
    acc_rank = acc.get_partial_shape().rank.get_length()
    total = _tree_sum(acc, acc_rank - 2, width, precision, nm)
    return ops.squeeze(total, _i64([acc_rank - 2]), name=nm("squeeze")).output(0)


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
        raise InputError(f"cannot emulate low-precision accumulation of {unknown}; supported op types are {sorted(REDUCTION_OPS)}")
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

    def namer(node: ov.Node, port: int) -> _Namer:
        suffix = f"/out{port}" if node.get_output_size() > 1 else ""
        return _Namer(f"{node.get_friendly_name()}/{tag}{suffix}")

    rounded: dict[tuple[int, int], ov.Output] = {}  # (op id, port) -> rounded data-path output
    for node in nodes:
        kind = node.get_type_name()
        if kind == "Result":
            continue
        is_data = node.get_instance_id() in data
        for out in node.outputs():
            if not _is_float(out):
                continue
            targets = list(out.get_target_inputs())  # before the rounding ops become consumers too
            if is_data:
                r = _round(out, precision, namer(node, out.get_index()))
                _redirect(targets, out, r, move_names=kind not in _DATA_SOURCES)
                rounded[(node.get_instance_id(), out.get_index())] = r
                continue
            # Constant or shape-derived value: round where it enters the data path (or is a model output).
            consumers = [inp for inp in targets if inp.get_node().get_type_name() == "Result" or (
                inp.get_node().get_instance_id() in data
                and inp.get_index() not in _NON_VALUE_INPUTS.get(inp.get_node().get_type_name(), ()))]
            if not consumers:
                continue
            nm = namer(node, out.get_index())
            r = _round_constant(node, out, precision, nm) if kind == "Constant" else _round(out, precision, nm)
            if r is not None:
                everyone = len(consumers) == len(targets)
                _redirect(consumers, out, r, move_names=everyone)
                if everyone and kind == "Constant" and r.get_node().get_type_name() == "Constant":
                    node.set_friendly_name(nm("original"))  # the rounded constant takes over the name
                    r.get_node().set_friendly_name(nm.prefix.rsplit("/", 1)[0])

    # Low-precision accumulation: rebuild selected ops from their (already rounded) inputs and hand the
    # original's consumers, friendly name and tensor names to the emulated result.
    for node in nodes:
        kind = node.get_type_name()
        if kind not in selected or node.get_instance_id() not in data or node.get_output_element_type(0) != ov.Type.f32:
            continue
        name = node.get_friendly_name()
        emulated = _EMULATORS[kind](node, precision, lanes, _Namer(f"{name}/{tag}/{kind.lower()}"))
        if emulated is None:  # dynamic reduced axis, non-constant axes, ...: keep per-op rounding only
            continue
        r = rounded[(node.get_instance_id(), 0)]
        _redirect(list(r.get_target_inputs()), r, emulated, move_names=True)
        node.set_friendly_name(f"{name}/{tag}/replaced")
        emulated.get_node().set_friendly_name(name)

    clone.validate_nodes_and_infer_types()
    return clone
