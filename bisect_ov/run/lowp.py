"""Low-precision arithmetic in numpy: what an emulated f16 or bf16 device computes.

`round_array` rounds float32 values to f16 or bf16 (round to nearest, ties to even) and back to float32;
the other functions are the kernels of `bisect_ov.run.emulate`'s low-precision accumulation, run inside its
custom OpenVINO ops. They assume their array inputs already hold values of the low precision (stored as
float32), as the emulated device's tensors do, and return float32 arrays of such values.

The accumulation model (``lanes`` partial sums): element ``k`` of the reduced axis goes to lane
``k % lanes`` (the axis is padded with zeros to a multiple of ``lanes``); each lane adds its elements in
order, rounding after every add; the lanes are then combined by a pairwise tree (lane ``j`` + lane
``j + w/2``, an odd last lane waiting for the next level), rounding after each add. A reduction of at most
``lanes`` elements is the tree alone. Every intermediate (``x - max``, ``exp``, products, quotients) is
rounded as well. Additions, products, quotients and square roots are IEEE float32 operations, rounded once
more to the low precision, so they give the same bits as the same arithmetic in OpenVINO ops; ``exp`` is
numpy's, which may differ from another implementation's in the last float32 bit (and then, rarely, by one
low-precision ulp).

Nothing here imports OpenVINO.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from bisect_ov.core.errors import InputError
from bisect_ov.core.numeric import BF16_MAX, F16_MAX

__all__ = ["PRECISIONS", "attention", "lane_sum", "matmul", "mvn", "reduce", "round_array", "rounder", "saturated",
           "softmax"]

#: Precisions a device can be emulated in.
PRECISIONS = ("f16", "bf16")

Rounder = Callable[[np.ndarray], np.ndarray]
# Partial sums a matmul tile holds (float32 values): 1 MB, to stay in a core's L2 cache.
_TILE_VALUES = 1 << 18


def check_precision(precision: object, allow_f32: bool) -> str:
    """`precision` if valid, else an InputError listing the valid ones."""
    valid = PRECISIONS + (("f32",) if allow_f32 else ())
    if not isinstance(precision, str) or precision not in valid:
        raise InputError(f"unknown precision {precision!r}; valid precisions are {', '.join(map(repr, valid))}")
    return str(precision)


def round_array(x: np.ndarray, precision: str) -> np.ndarray:
    """Round values to a low precision, as a device storing them would.

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
        A new float32 array of the same shape holding the rounded values (never a view of `x`).

    Raises
    ------
    InputError
        If `precision` is not one of the above.

    Examples
    --------
    >>> round_array(np.float32([1 + 2**-11, 65520.0, 1e-8]), "f16").tolist()
    [1.0, inf, 0.0]
    >>> round_array(np.float32([1 + 3 * 2**-8]), "bf16").tolist()
    [1.015625]
    """
    precision = check_precision(precision, allow_f32=True)
    x = np.asarray(x, dtype=np.float32)
    if precision == "f32":
        return x.copy()
    if precision == "f16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    bits = x.view(np.uint32)
    # Add half an ulp (ties to even) and truncate. uint32 wraps around only for negative NaNs, which the
    # last line restores; NaNs with only low payload bits would otherwise become inf.
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) & np.uint32(0xFFFF0000)).view(np.float32)
    return np.where(np.isnan(x), x, rounded)


def rounder(precision: str) -> Rounder:
    """``lambda a: round_array(a, precision)``, checked once."""
    precision = check_precision(precision, allow_f32=False)
    return lambda a: round_array(a, precision)


# ----------------------------------------------------------------------------------------- lane sums
def _pad_last(x: np.ndarray, extra: int) -> np.ndarray:
    if extra == 0:
        return x
    return np.concatenate([x, np.zeros(x.shape[:-1] + (extra,), np.float32)], axis=-1)


def _tree(acc: np.ndarray, r: Rounder) -> np.ndarray:
    """Pairwise-combine the partial sums on the last axis (j + j + w//2, the odd one waits); axis kept."""
    while acc.shape[-1] > 1:
        half = acc.shape[-1] // 2
        summed = r(acc[..., :half] + acc[..., half:2 * half])
        acc = np.concatenate([summed, acc[..., 2 * half:]], axis=-1) if acc.shape[-1] % 2 else summed
    return acc


def _lane_sum_last(x: np.ndarray, lanes: int, r: Rounder) -> np.ndarray:
    n = x.shape[-1]
    if n <= lanes:  # one element per lane: only the tree
        return _tree(x, r)
    steps = -(-n // lanes)
    chunks = _pad_last(x, steps * lanes - n).reshape(x.shape[:-1] + (steps, lanes))
    acc = chunks[..., 0, :]
    for i in range(1, steps):
        acc = r(acc + chunks[..., i, :])
    return _tree(acc, r)


def lane_sum(x: np.ndarray, axes: Sequence[int], lanes: int, r: Rounder) -> np.ndarray:
    """Low-precision sum over `axes` (elements taken in row-major order), each kept with length 1.

    Examples
    --------
    >>> x = np.float32([[1.0, 2.0**-11, 2.0**-11, 2.0**-11]])
    >>> float(lane_sum(x, [1], 1, rounder("f16"))[0, 0])  # one accumulator: each small add is lost
    1.0
    >>> float(lane_sum(x, [1], 4, rounder("f16"))[0, 0])  # tree: (1 + s) + (s + s) keeps 2 * s
    1.0009765625
    """
    x = np.asarray(x, np.float32)
    axes = sorted(int(a) % x.ndim for a in axes)
    others = [i for i in range(x.ndim) if i not in axes]
    moved = np.transpose(x, others + axes)
    flat = moved.reshape(moved.shape[:len(others)] + (-1,))
    total = _lane_sum_last(flat, lanes, r)[..., 0]
    return np.expand_dims(total, tuple(axes))


# --------------------------------------------------------------------------------------- kernels
def softmax(x: np.ndarray, axis: int, lanes: int, r: Rounder) -> np.ndarray:
    """``round(e / sum(e))`` with ``e = round(exp(round(x - max)))``, the sum over `lanes` partial sums."""
    x = np.asarray(x, np.float32)
    shifted = r(x - x.max(axis=axis, keepdims=True))  # the max is exact
    with np.errstate(over="ignore", invalid="ignore"):
        e = r(np.exp(shifted))
        return r(e / lane_sum(e, [axis], lanes, r))


def reduce(x: np.ndarray, axes: Sequence[int], keep_dims: bool, mean: bool, lanes: int, r: Rounder) -> np.ndarray:
    """ReduceSum, or ReduceMean (``round(sum / N)``), accumulated over `lanes` partial sums."""
    x = np.asarray(x, np.float32)
    axes = sorted(int(a) % x.ndim for a in axes)
    total = lane_sum(x, axes, lanes, r)
    if mean:
        with np.errstate(over="ignore", invalid="ignore"):
            total = r(total / np.float32(np.prod([x.shape[a] for a in axes])))
    return total if keep_dims else np.squeeze(total, tuple(axes))


def mvn(x: np.ndarray, axes: Sequence[int], normalize_variance: bool, eps: float, eps_mode: str, lanes: int,
        r: Rounder) -> np.ndarray:
    """MVN: ``d = round(x - mean)``, ``var = round(sum(round(d*d)) / N)``, then ``round(d / den)``.

    ``den = round(sqrt(round(var + eps)))`` for ``inside_sqrt``, ``round(round(sqrt(var)) + eps)`` otherwise;
    `eps` is rounded to the low precision first.
    """
    x = np.asarray(x, np.float32)
    n = np.float32(np.prod([x.shape[int(a) % x.ndim] for a in axes]))
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        d = r(x - r(lane_sum(x, axes, lanes, r) / n))
        if not normalize_variance:
            return d
        var = r(lane_sum(r(d * d), axes, lanes, r) / n)
        eps32 = r(np.array(eps, np.float32))
        if eps_mode.lower() == "inside_sqrt":
            den = r(np.sqrt(r(var + eps32)))
        else:
            den = r(r(np.sqrt(var)) + eps32)
        return r(d / den)


def matmul(a: np.ndarray, b: np.ndarray, transpose_a: bool, transpose_b: bool, lanes: int, r: Rounder) -> np.ndarray:
    """Matrix product of rank >= 2 arrays (numpy broadcasting of batch dims), ``acc = round(acc + a*b)``.

    Products of two low-precision numbers are exact in float32, so each step is a fused multiply-add
    rounded to the low precision; the lanes' partial sums are then combined by the pairwise tree. The work
    is done in tiles of rows, so that the partial sums of a tile ([rows, lanes, N]) stay in the CPU's cache.
    """
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    if transpose_a:
        a = np.swapaxes(a, -1, -2)
    if transpose_b:
        b = np.swapaxes(b, -1, -2)
    # Contiguous [..., M, K] and [..., K, N]: the lane chunks below then read whole cache lines.
    a, b = np.asarray(a, order="C"), np.asarray(b, order="C")
    (m, k), n = a.shape[-2:], b.shape[-1]
    width, steps = min(k, lanes), -(-k // lanes)
    if k > lanes:  # pad the reduced axis with zeros to whole lane chunks (adding zeros is exact)
        a = _pad_last(a, steps * lanes - k)
        b = np.swapaxes(_pad_last(np.swapaxes(b, -1, -2), steps * lanes - k), -1, -2)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a, b = np.broadcast_to(a, batch + a.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:])
    out = np.empty(batch + (m, n), np.float32)
    rows = max(1, _TILE_VALUES // (width * max(n, 1)))
    with np.errstate(over="ignore", invalid="ignore"):
        for index in np.ndindex(*batch):
            a2, b2 = a[index], b[index]
            for top in range(0, m, rows):
                a_rows = a2[top:top + rows]
                # [rows, L, 1] * [1, L, N] -> [rows, L, N]
                acc = r(a_rows[:, :width, None] * b2[None, :width, :])
                for i in range(1, steps):
                    lo, hi = i * lanes, (i + 1) * lanes
                    acc = r(acc + a_rows[:, lo:hi, None] * b2[None, lo:hi, :])
                out[index + (slice(top, top + rows),)] = _tree(np.swapaxes(acc, -1, -2), r)[..., 0]
    return out


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, scale: np.ndarray | None,
              causal: bool, lanes: int, r: Rounder) -> np.ndarray:
    """ScaledDotProductAttention with every product, sum and the softmax in the low precision.

    ``s = round(matmul(q, k^T) * scale)`` (`scale` defaults to ``1/sqrt(head size)``), then the mask:
    ``causal`` or a boolean `mask` sets the masked scores to -inf, a float `mask` is added (rounded after
    the add); then `softmax` over the last axis and ``matmul(p, v)``, both accumulated over `lanes`.
    """
    q, k, v = (np.asarray(t, np.float32) for t in (q, k, v))
    if scale is None:
        scale = r(np.array(np.float32(1.0) / np.sqrt(np.float32(q.shape[-1]))))
    with np.errstate(over="ignore", invalid="ignore"):
        s = r(matmul(q, k, False, True, lanes, r) * np.asarray(scale, np.float32))
        if causal:
            length, source = s.shape[-2], s.shape[-1]
            allowed = np.tril(np.ones((length, source), bool))  # the spec's triu(-inf, k=1)
            s = np.where(allowed, s, np.float32(-np.inf))
        elif mask is not None and mask.dtype == np.bool_:
            s = np.where(mask, s, np.float32(-np.inf))
        elif mask is not None:
            s = r(s + np.asarray(mask, np.float32))
    return matmul(softmax(s, -1, lanes, r), v, False, False, lanes, r)


def saturated(values: np.ndarray, precision: str) -> np.ndarray | None:
    """`values` with finite magnitudes past the largest value of `precision` (``f16``, ``bf16``) set to it, sign
    kept; None when there are none.

    A device stores an f32 weight in f16 or bf16 as OpenVINO's precision conversion does: a finite value out of
    range is clamped to the largest one (``torch.finfo(torch.float32).min`` in an attention mask becomes -65,504 in
    f16, -3.39e38 in bf16, not -inf, and ``0 * min`` stays 0), while inf and NaN stay what they are. Activations
    computed at run time still overflow."""
    limit = F16_MAX if precision == "f16" else BF16_MAX
    values = np.asarray(values, np.float32)
    if values.size == 0 or (-limit <= values.min() and values.max() <= limit):  # no copy for the usual weights
        return None
    over = np.isfinite(values) & (np.abs(values) > limit)
    if not over.any():
        return None
    return np.where(over, np.copysign(np.float32(limit), values), values).astype(np.float32)
