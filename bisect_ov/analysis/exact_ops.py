"""Exact integer recomputation of integer-valued ops, in numpy only.

`exact_result` recomputes a MatMul, a (Group)Convolution, an Add, Subtract or Multiply, or a ReduceSum
exactly, in int64, from the node's actual input values; `integer_valued` says whether an array holds
integers that float64 and int64 both represent exactly.

Assumptions
-----------
* Inputs are numpy arrays (or array-likes); an input counts as integer-valued when every element is finite,
  has no fractional part and has magnitude below 2**53 (see `integer_valued`); float arrays holding integers
  (``3.0``) count. If any input is not integer-valued, or the op type is not supported, `exact_result`
  returns None: there is no exact integer answer to compare with.
* Op semantics and attribute names are OpenVINO's opset ones, as ``ov.Node.get_attributes()`` returns
  them (``transpose_a``, ``strides``, ``pads_begin``, ``auto_pad``, ``keep_dims``, ...). Missing attributes
  take the opset defaults. The axes of ReduceSum are its second input, as in OpenVINO.
* Convolutions are channels-first (``[N, C, spatial...]``) with 1 to 3 (in fact any number of) spatial
  dimensions; weights are ``[O, I, k...]`` (``[G, O/G, I/G, k...]`` for GroupConvolution).
* Results are int64. Overflow of int64 is not expected for realistic models; rather than wrap around
  silently, `exact_result` bounds the magnitude of every partial sum from the inputs' largest magnitudes
  and returns None when that bound reaches 2**63.
* When the same bound is below 2**53, the products and sums are computed in float64 (BLAS-speed matmul),
  which is exact in that range: every partial sum is an integer that float64 represents exactly, whatever
  the summation order. Otherwise the arithmetic is done in int64.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Mapping, Sequence

import numpy as np

from bisect_ov.core.errors import InputError

__all__ = ["SUPPORTED_OPS", "as_int64", "exact_result", "integer_valued", "max_abs"]

_F64_EXACT = 2**53  # below this, float64 holds every integer exactly
_I64_LIMIT = 2**63  # int64 overflows at this magnitude

SUPPORTED_OPS = frozenset(
    {"MatMul", "Convolution", "GroupConvolution", "Add", "Subtract", "Multiply", "ReduceSum"}
)


# --------------------------------------------------------------------------------------------------------
# integer-valuedness


def integer_valued(a: np.ndarray) -> bool:
    """Whether every element of an array is a finite integer of magnitude below 2**53.

    Parameters
    ----------
    a
        Array of any dtype (array-likes are converted). Boolean and integer dtypes are integers by type;
        floating dtypes must hold finite values with no fractional part. Complex, object, string and other
        dtypes are not integer-valued.

    Returns
    -------
    bool
        True when every element is a finite integer with ``|x| < 2**53`` (so that float64 and int64 both hold
        it exactly); True for an empty array.
    """
    a = np.asarray(a)
    if a.size == 0:
        return a.dtype.kind in "biuf"
    kind = a.dtype.kind
    if kind == "b":
        return True
    if kind in "iu":
        if a.dtype.itemsize < 8:  # int8..int32, uint8..uint32: all below 2**53
            return True
        lo, hi = int(a.min()), int(a.max())
        return -_F64_EXACT < lo and hi < _F64_EXACT
    if kind == "f":
        head = a.reshape(-1)[:4096]  # activations are rarely integer: most arrays are told by their start
        if a.size > head.size and not bool((np.trunc(head) == head).all()):
            return False
        if not bool(np.isfinite(a).all()):
            return False
        a64 = a.astype(np.float64, copy=False)
        if not bool((np.abs(a64) < _F64_EXACT).all()):
            return False
        return bool((np.trunc(a64) == a64).all())
    return False


def as_int64(a: np.ndarray) -> np.ndarray:
    """An integer-valued array as int64 (exact: callers checked `integer_valued`)."""
    a = np.asarray(a)
    if a.dtype == np.int64:
        return a
    return a.astype(np.int64)


def max_abs(a: np.ndarray) -> int:
    """Largest magnitude of an int64 array, as a Python int (0 for an empty array)."""
    if a.size == 0:
        return 0
    return max(abs(int(a.min())), abs(int(a.max())))


# --------------------------------------------------------------------------------------------------------
# exact recomputation


def exact_result(op_type: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> np.ndarray | None:
    """Exact int64 result of an integer-valued op, or None when there is none to give.

    Parameters
    ----------
    op_type
        OpenVINO op type name: one of ``MatMul``, ``Convolution``, ``GroupConvolution``, ``Add``,
        ``Subtract``, ``Multiply``, ``ReduceSum`` (`SUPPORTED_OPS`).
    attrs
        The node's attributes as ``ov.Node.get_attributes()`` returns them; missing ones take the opset
        defaults. MatMul: ``transpose_a``, ``transpose_b``. (Group)Convolution: ``strides``, ``pads_begin``,
        ``pads_end``, ``dilations``, ``auto_pad`` (``explicit``/``notset``, ``valid``, ``same_upper``,
        ``same_lower``). Add/Subtract/Multiply: ``auto_broadcast`` (``numpy`` or ``none``). ReduceSum:
        ``keep_dims``.
    inputs
        The node's input values, in port order. ReduceSum takes its axes as the second input.

    Returns
    -------
    numpy.ndarray or None
        The exact result as int64, or None when the op type is not supported (``auto_broadcast="pdpd"``
        included), when any input is not integer-valued (`integer_valued`), or when int64 could overflow.

    Raises
    ------
    InputError
        When the inputs do not fit the op (wrong count, rank or channel numbers, shapes that do not
        broadcast).
    """
    if op_type not in SUPPORTED_OPS:
        return None
    arrays = [np.asarray(x) for x in inputs]
    if not all(integer_valued(x) for x in arrays):
        return None
    ints = [as_int64(x) for x in arrays]
    attrs = dict(attrs or {})
    if op_type == "MatMul":
        _need(op_type, ints, 2)
        return _matmul(ints[0], ints[1], bool(attrs.get("transpose_a", False)), bool(attrs.get("transpose_b", False)))
    if op_type == "Convolution":
        _need(op_type, ints, 2)
        return _convolution(ints[0], ints[1], attrs, groups=None)
    if op_type == "GroupConvolution":
        _need(op_type, ints, 2)
        return _convolution(ints[0], ints[1], attrs, groups=True)
    if op_type in ("Add", "Subtract", "Multiply"):
        _need(op_type, ints, 2)
        return _elementwise(op_type, ints[0], ints[1], str(attrs.get("auto_broadcast", "numpy")).lower())
    # ReduceSum
    if len(ints) not in (1, 2):
        raise InputError(f"ReduceSum takes a data input and an axes input, got {len(ints)} inputs")
    axes = ints[1] if len(ints) == 2 else np.zeros(0, np.int64)
    return _reduce_sum(ints[0], axes, bool(attrs.get("keep_dims", False)))


def _need(op_type: str, ints: list[np.ndarray], count: int) -> None:
    if len(ints) != count:
        raise InputError(f"{op_type} takes {count} inputs, got {len(ints)}")


def _matmul(a: np.ndarray, b: np.ndarray, transpose_a: bool, transpose_b: bool) -> np.ndarray | None:
    """numpy.matmul semantics; the transpose flags swap the last two axes and are ignored for 1-D inputs."""
    if a.ndim == 0 or b.ndim == 0:
        raise InputError("MatMul inputs must have at least one dimension")
    if transpose_a and a.ndim >= 2:
        a = np.swapaxes(a, -1, -2)
    if transpose_b and b.ndim >= 2:
        b = np.swapaxes(b, -1, -2)
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k_a != k_b:
        raise InputError(f"MatMul inner dimensions differ: {a.shape} @ {b.shape}")
    bound = k_a * max_abs(a) * max_abs(b)
    if bound >= _I64_LIMIT:
        return None
    try:
        if bound < _F64_EXACT:
            return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.int64)
        return np.matmul(a, b)
    except ValueError as err:  # batch dimensions that do not broadcast
        raise InputError(f"MatMul shapes do not fit: {a.shape} @ {b.shape} ({err})") from err


def _spatial_list(attrs: Mapping[str, Any], name: str, rank: int, default: int) -> list[int]:
    value = attrs.get(name)
    if value is None or len(value) == 0:
        return [default] * rank
    value = [int(v) for v in value]
    if len(value) != rank:
        raise InputError(f"attribute {name}={value} has {len(value)} entries for {rank} spatial dimensions")
    return value


def _conv_pads(
    attrs: Mapping[str, Any], in_shape: Sequence[int], k_shape: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
) -> tuple[list[int], list[int]]:
    """Pads at the start and end of each spatial dimension, following OpenVINO's auto_pad rules."""
    rank = len(in_shape)
    auto_pad = str(attrs.get("auto_pad", "explicit")).lower()
    if auto_pad in ("explicit", "notset", ""):
        return _spatial_list(attrs, "pads_begin", rank, 0), _spatial_list(attrs, "pads_end", rank, 0)
    if auto_pad == "valid":
        return [0] * rank, [0] * rank
    if auto_pad in ("same_upper", "same_lower"):
        begin, end = [], []
        for size, k, s, d in zip(in_shape, k_shape, strides, dilations):
            out = -(-size // s)  # ceil
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, large = total // 2, total - total // 2
            begin.append(small if auto_pad == "same_upper" else large)
            end.append(large if auto_pad == "same_upper" else small)
        return begin, end
    raise InputError(f"unknown auto_pad {attrs.get('auto_pad')!r}; expected explicit, valid, same_upper or same_lower")


def _convolution(x: np.ndarray, w: np.ndarray, attrs: Mapping[str, Any], groups: bool | None) -> np.ndarray | None:
    """(Group)Convolution, channels first, by accumulating one kernel tap at a time (im2col by taps).

    Each tap multiplies a strided view of the padded input, ``[N, C, out...]``, by the weights of that tap,
    ``[O, C]``: the temporary memory is one input-sized slice, whatever the channel count.
    """
    if groups:
        if w.ndim < 4:
            raise InputError(f"GroupConvolution weights must be [G, O/G, I/G, k...], got shape {w.shape}")
        n_groups = w.shape[0]
        w = w.reshape((n_groups * w.shape[1],) + w.shape[2:])  # [O, I/G, k...]
    else:
        n_groups = 1
    if x.ndim < 3 or w.ndim != x.ndim:
        raise InputError(f"convolution input {x.shape} and weights {w.shape} must be [N, C, s...] and [O, I, k...]")
    n, c = x.shape[:2]
    o, c_g = w.shape[:2]
    if c != c_g * n_groups or o % n_groups:
        raise InputError(
            f"convolution channels do not fit: input {x.shape}, weights {w.shape} ({n_groups} group(s))"
        )
    spatial, k_shape = x.shape[2:], w.shape[2:]
    rank = len(spatial)
    strides = _spatial_list(attrs, "strides", rank, 1)
    dilations = _spatial_list(attrs, "dilations", rank, 1)
    if min(strides + dilations, default=1) < 1:
        raise InputError(f"strides {strides} and dilations {dilations} must be positive")
    begin, end = _conv_pads(attrs, spatial, k_shape, strides, dilations)

    taps = c_g * math.prod(k_shape)
    bound = taps * max_abs(x) * max_abs(w)
    if bound >= _I64_LIMIT:
        return None
    dtype = np.float64 if bound < _F64_EXACT else np.int64
    x = x.astype(dtype, copy=False)
    w = w.astype(dtype, copy=False)

    # padding; negative pads crop
    if any(p > 0 for p in begin + end):
        x = np.pad(x, [(0, 0), (0, 0)] + [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)])
    crop = tuple(slice(max(-b, 0), x.shape[2 + i] - max(-e, 0)) for i, (b, e) in enumerate(zip(begin, end)))
    x = x[(slice(None), slice(None)) + crop]
    padded = x.shape[2:]
    out_shape = [
        (p - ((k - 1) * d + 1)) // s + 1 for p, k, s, d in zip(padded, k_shape, strides, dilations)
    ]
    if min(out_shape, default=1) < 1:
        raise InputError(f"convolution kernel {k_shape} (dilations {dilations}) is larger than the padded input {padded}")

    o_g = o // n_groups
    result = np.zeros((n, o) + tuple(out_shape), dtype=dtype)
    for g in range(n_groups):
        xg = x[:, g * c_g : (g + 1) * c_g]
        wg = w[g * o_g : (g + 1) * o_g]
        acc = result[:, g * o_g : (g + 1) * o_g]  # view: written in place
        for tap in itertools.product(*(range(k) for k in k_shape)):
            window = tuple(
                slice(t * d, t * d + (m - 1) * s + 1, s) for t, d, m, s in zip(tap, dilations, out_shape, strides)
            )
            xs = xg[(slice(None), slice(None)) + window]  # [N, C/G, out...]
            wt = wg[(slice(None), slice(None)) + tap]  # [O/G, C/G]
            acc += np.moveaxis(np.tensordot(wt, xs, axes=([1], [1])), 0, 1)
    return result.astype(np.int64, copy=False)


def _elementwise(op_type: str, a: np.ndarray, b: np.ndarray, auto_broadcast: str) -> np.ndarray | None:
    if auto_broadcast not in ("numpy", "none", "explicit"):
        return None  # pdpd broadcasting is not numpy's
    if auto_broadcast != "numpy" and a.shape != b.shape:
        raise InputError(f"{op_type} with auto_broadcast={auto_broadcast!r} needs equal shapes, got {a.shape} and {b.shape}")
    ma, mb = max_abs(a), max_abs(b)
    bound = ma * mb if op_type == "Multiply" else ma + mb
    if bound >= _I64_LIMIT:
        return None
    fn = {"Add": np.add, "Subtract": np.subtract, "Multiply": np.multiply}[op_type]
    try:
        return fn(a, b, dtype=np.int64)
    except ValueError as err:
        raise InputError(f"{op_type} shapes do not broadcast: {a.shape} and {b.shape}") from err


def _reduce_sum(x: np.ndarray, axes: np.ndarray, keep_dims: bool) -> np.ndarray | None:
    rank = x.ndim
    axes_list = [int(v) for v in np.ravel(axes)]
    for ax in axes_list:
        if not -rank <= ax < max(rank, 1):
            raise InputError(f"ReduceSum axis {ax} is out of range for rank {rank}")
    norm = tuple(sorted({ax % rank for ax in axes_list})) if rank else ()
    count = math.prod(x.shape[ax] for ax in norm)
    if count * max_abs(x) >= _I64_LIMIT:
        return None
    return np.asarray(np.sum(x, axis=norm, keepdims=keep_dims, dtype=np.int64))
