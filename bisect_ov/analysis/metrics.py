"""Error statistics of one tensor pair, in numpy only.

`compare(ref, target)` returns a frozen `TensorStats`: absolute and relative errors, cosine similarity,
SQNR, NaN/Inf counts on each side, values at the f16 limit or an integer type's limits, and exact mismatch
counts. Large tensors are processed in flat chunks so the temporary memory stays bounded (a few MB) whatever
the tensor size. Integer and boolean tensors are compared exactly (int64 arithmetic).

Positions where both sides hold the same non-finite value (NaN and NaN, +inf and +inf) agree; a value that is
finite on the reference side and not on the target side makes the tensor's error infinite, except a sentinel:
a reference value at float32's extremes (beyond `SENTINEL`, as the additive attention masks of float32's
lowest value) whose target value has the same sign and is infinite or at the limit of the target's range
(bf16 and f16 cannot hold -3.4e38: the same mask is -inf there, and Softmax gives 0 for both). Such
positions are compared as equal and counted as ``saturated``. Sums of huge values are accumulated so that
no numpy overflow warning reaches the user.

A metric is a name in `METRICS` or a callable ``f(stats) -> float`` (larger is worse).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Union

import numpy as np

from bisect_ov.core.numeric import F16_MAX

# Reference values this large are sentinels by design (float32's lowest, 3.4e38, in masks): no activation
# reaches them, and no lower precision can hold them.
SENTINEL = 1e38

__all__ = ["TensorStats", "compare", "METRICS", "metric_value", "F16_MAX", "SHAPES_DIFFER"]

_CHUNK = 1 << 20  # elements per chunk: ~8 MB of float64 temporaries


@dataclass(frozen=True)
class TensorStats:
    """Statistics of target minus reference for one tensor; no tensor data is kept."""

    shape: tuple[int, ...]
    dtype: str
    numel: int
    max_abs: float
    mean_abs: float
    rel_l2: float
    max_rel: float
    cosine: float
    sqnr_db: float
    ref_absmax: float
    target_absmax: float
    mismatches: int
    ref_nan: int
    ref_inf: int
    target_nan: int
    target_inf: int
    new_nonfinite: int
    at_f16_limit: int
    at_int_limit: int
    integer: bool
    note: str = ""
    saturated: int = 0  # sentinel positions (float32's extremes on the reference, at the limit on the target)
    # The worst element's error against its own size: max |t - r| / (|r| + rms(r)), the floor keeping elements
    # near zero from counting their inputs' rounding as their own (0.0 for integers and in reports saved before it).
    max_elem_rel: float = 0.0

    @property
    def exact(self) -> bool:
        return self.mismatches == 0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d

    @classmethod
    def from_dict(cls, data: dict) -> "TensorStats":
        values = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        values["shape"] = tuple(values.get("shape", ()))
        return cls(**values)


def compare(ref: np.ndarray, target: np.ndarray) -> TensorStats:
    """Compare two tensors of the same shape.

    Parameters
    ----------
    ref, target
        Arrays of equal shape; dtypes may differ (e.g. an int8 twin against a float model).

    Returns
    -------
    TensorStats
        With ``rel_l2 = ||t - r|| / ||r||`` (``/ ||t||`` when the reference is all zero), ``max_rel = max|t - r|
        / max|r|``, ``max_elem_rel = max(|t - r| / (|r| + rms(r)))``, ``sqnr_db = 10 log10(||r||^2 /
        ||t - r||^2)``; all infinite when the target has new NaN/Inf.

    Examples
    --------
    >>> s = compare(np.array([1.0, 2.0]), np.array([1.0, 2.5]))
    >>> round(s.max_abs, 3), s.mismatches
    (0.5, 1)
    >>> compare(np.array([1, 2]), np.array([1, 2])).exact
    True
    """
    ref = np.asarray(ref)
    target = np.asarray(target)
    if ref.shape != target.shape:
        if ref.size == target.size:
            target = target.reshape(ref.shape)
        else:
            return _shape_mismatch(ref, target)
    integer = _is_integer(ref.dtype) and _is_integer(target.dtype)
    r_flat, t_flat = ref.reshape(-1), target.reshape(-1)
    # One chunk finds its own rms; more need the whole tensor's first.
    acc = _Accumulator(integer, target.dtype, _rms(r_flat) if r_flat.size > _CHUNK else None)
    for start in range(0, r_flat.size, _CHUNK):
        acc.add(r_flat[start:start + _CHUNK], t_flat[start:start + _CHUNK])
    return acc.stats(tuple(ref.shape), str(target.dtype))


def metric_value(stats: TensorStats, metric: Union[str, Callable[[TensorStats], float]] = "rel_l2") -> float:
    """The scalar error of `stats` under `metric` (a name in `METRICS` or a callable)."""
    if callable(metric):
        return float(metric(stats))
    try:
        return METRICS[metric](stats)
    except KeyError:
        from bisect_ov.core.errors import InputError

        raise InputError(f"Unknown metric '{metric}'. Available: {sorted(METRICS)}, or a callable f(TensorStats) -> float.") from None


def _cosine_distance(s: TensorStats) -> float:
    return 1.0 - s.cosine if math.isfinite(s.cosine) else math.inf


METRICS: dict[str, Callable[[TensorStats], float]] = {
    "rel_l2": lambda s: s.rel_l2,
    "max_rel": lambda s: s.max_rel,
    "max_abs": lambda s: s.max_abs,
    "mean_abs": lambda s: s.mean_abs,
    "cosine_distance": _cosine_distance,
    "mismatch_fraction": lambda s: s.mismatches / s.numel if s.numel else 0.0,
}


class _Accumulator:
    """Running sums over chunks."""

    def __init__(self, integer: bool, target_dtype: np.dtype, floor: float | None = None):
        self.integer = integer
        self.floor = floor  # the reference's rms (`max_elem_rel`'s floor); None: the one chunk's own
        self.max_elem_rel = 0.0
        self.int_limits = _int_limits(target_dtype)
        self.n = 0
        self.sum_abs = 0.0
        self.max_abs = 0.0
        self.sum_sq_diff = 0.0
        self.sum_sq_ref = 0.0
        self.sum_sq_target = 0.0
        self.ref_absmax = 0.0
        self.target_absmax = 0.0
        self.mismatches = 0
        self.ref_nan = self.ref_inf = self.target_nan = self.target_inf = 0
        self.new_nonfinite = 0
        self.at_f16 = 0
        self.at_int = 0
        self.saturated = 0

    def add(self, r: np.ndarray, t: np.ndarray) -> None:
        self.n += r.size
        if self.integer:
            ri, ti = r.astype(np.int64), t.astype(np.int64)
            self.mismatches += int(np.count_nonzero(ri != ti))
            if self.int_limits is not None:
                lo, hi = self.int_limits
                self.at_int += int(np.count_nonzero(((ti <= lo) | (ti >= hi)) & (ri != ti)))
            rf, tf = ri.astype(np.float64), ti.astype(np.float64)
            self._accumulate(rf, tf)
            return
        fast = r.dtype == np.float32 and t.dtype == np.float32 and r.size > 0
        if fast:
            # Fast path, the common case: every value finite and below the sentinels (a NaN fails both
            # comparisons). float32 differences of close values are exact (Sterbenz), and the sums below are
            # accumulated in float64.
            r_low, r_high, t_low, t_high = float(r.min()), float(r.max()), float(t.min()), float(t.max())
            r_absmax, t_absmax = max(-r_low, r_high), max(-t_low, t_high)
            fast = r_absmax < SENTINEL and t_absmax < SENTINEL
        if fast:
            if t_absmax >= F16_MAX:
                self.at_f16 += int(np.count_nonzero((np.abs(t) >= F16_MAX) & (np.abs(r) < F16_MAX)))
            self.mismatches += int(np.count_nonzero(r != t))
            self._accumulate(r, t, (r_absmax, t_absmax))
            return
        rf, tf = r.astype(np.float64), t.astype(np.float64)
        r_fin, t_fin = np.isfinite(rf), np.isfinite(tf)
        self.ref_nan += int(np.count_nonzero(np.isnan(rf)))
        self.ref_inf += int(np.count_nonzero(np.isinf(rf)))
        self.target_nan += int(np.count_nonzero(np.isnan(tf)))
        self.target_inf += int(np.count_nonzero(np.isinf(tf)))
        sentinel = ((np.abs(rf) >= SENTINEL) & r_fin & (np.sign(tf) == np.sign(rf))
                    & (np.abs(tf) >= min(F16_MAX, SENTINEL)))
        self.saturated += int(np.count_nonzero(sentinel))
        both = r_fin & t_fin & ~sentinel
        # Same non-finite value on both sides agrees; anything else non-finite is a mismatch.
        same_special = ~both & ((np.isnan(rf) & np.isnan(tf)) | (rf == tf) | sentinel)
        self.new_nonfinite += int(np.count_nonzero(r_fin & ~t_fin & ~sentinel))
        self.mismatches += int(np.count_nonzero(~both & ~same_special))
        self.at_f16 += int(np.count_nonzero((np.abs(tf) >= F16_MAX) & (np.abs(rf) < F16_MAX)))
        if r_fin.any():  # the reference's magnitude where the target overflowed is what explains it
            self.ref_absmax = max(self.ref_absmax, float(np.abs(rf[r_fin & ~sentinel]).max(initial=0.0)))
        if not both.all():
            rf, tf = rf[both], tf[both]
        self.mismatches += int(np.count_nonzero(rf != tf))
        self._accumulate(rf, tf)

    def _accumulate(self, rf: np.ndarray, tf: np.ndarray, absmax: tuple[float, float] | None = None) -> None:
        """Add a chunk's sums; `absmax`: both sides' largest magnitudes, when known already."""
        if rf.size == 0:
            return
        diff = np.subtract(tf, rf)
        np.abs(diff, out=diff)
        # float32 sums are pairwise in numpy: a relative error near 1e-6 at worst, far below what is printed.
        self.sum_abs += float(diff.sum())
        worst = float(diff.max())
        self.max_abs = max(self.max_abs, worst)
        self.sum_sq_diff += _sum_sq(diff)
        sq_ref = _sum_sq(rf)
        self.sum_sq_ref += sq_ref
        floor = self.floor if self.floor is not None else math.sqrt(sq_ref / rf.size)
        if worst > 0 and floor > 0 and not self.integer:
            den = np.abs(rf)
            den += den.dtype.type(floor)
            np.divide(diff, den, out=den)
            self.max_elem_rel = max(self.max_elem_rel, float(den.max()))
        self.sum_sq_target += _sum_sq(tf)
        if absmax is None:
            absmax = float(np.abs(rf).max()), float(np.abs(tf).max())
        self.ref_absmax = max(self.ref_absmax, absmax[0])
        self.target_absmax = max(self.target_absmax, absmax[1])

    def stats(self, shape: tuple[int, ...], dtype: str) -> TensorStats:
        inf = math.inf
        broken = self.new_nonfinite > 0
        l2_diff, l2_ref, l2_t = (math.sqrt(v) for v in (self.sum_sq_diff, self.sum_sq_ref, self.sum_sq_target))
        denominator = l2_ref or l2_t
        rel_l2 = l2_diff / denominator if denominator else 0.0
        max_rel = self.max_abs / self.ref_absmax if self.ref_absmax else (1.0 if self.max_abs else 0.0)
        if l2_ref and l2_t:
            # From the three sums of squares (|r|^2 + |t|^2 - |t - r|^2 = 2 r.t), written so that the distance
            # 1 - cosine comes from |t - r|^2 itself rather than from a difference of two numbers near 1.
            cosine = 1.0 - (self.sum_sq_diff - (l2_ref - l2_t) ** 2) / (2 * l2_ref * l2_t)
        else:
            cosine = 1.0 if l2_ref == l2_t else 0.0
        sqnr = inf if self.sum_sq_diff == 0 else (10 * math.log10(self.sum_sq_ref / self.sum_sq_diff) if self.sum_sq_ref else -inf)
        return TensorStats(
            shape=shape, dtype=dtype, numel=self.n,
            max_abs=inf if broken else self.max_abs,
            mean_abs=inf if broken else (self.sum_abs / self.n if self.n else 0.0),
            rel_l2=inf if broken else rel_l2,
            max_rel=inf if broken else max_rel, max_elem_rel=inf if broken else self.max_elem_rel,
            cosine=-inf if broken else min(1.0, max(-1.0, cosine)),
            sqnr_db=-inf if broken else sqnr,
            ref_absmax=self.ref_absmax, target_absmax=self.target_absmax,
            mismatches=self.mismatches,
            ref_nan=self.ref_nan, ref_inf=self.ref_inf, target_nan=self.target_nan, target_inf=self.target_inf,
            new_nonfinite=self.new_nonfinite, at_f16_limit=self.at_f16, at_int_limit=self.at_int,
            integer=self.integer, saturated=self.saturated,
        )


def _rms(r: np.ndarray) -> float:
    """The root mean square of `r`'s finite values below the sentinels, over chunks."""
    total, count = 0.0, 0
    for start in range(0, r.size, _CHUNK):
        chunk = r[start:start + _CHUNK]
        if not _is_integer(chunk.dtype):
            chunk = chunk[np.isfinite(chunk) & (np.abs(chunk) < SENTINEL)]
        total += _sum_sq(chunk.astype(np.float64) if _is_integer(chunk.dtype) else chunk)
        count += chunk.size
    return math.sqrt(total / count) if count else 0.0


def _sum_sq(x: np.ndarray) -> float:
    """Sum of squares. float32 data goes through BLAS in blocks of 64k terms, each block summed in float64:
    a relative error near 1e-5 at worst, far below what the report prints, at a fraction of the cost of
    converting every value to float64."""
    if x.dtype != np.float32:
        return float(np.einsum("i,i->", x, x, dtype=np.float64))
    with np.errstate(all="ignore"):
        total = float(sum(float(np.dot(b, b)) for b in (x[i:i + 65536] for i in range(0, x.size, 65536))))
    if not math.isfinite(total):  # squares beyond float32's range (values above 1.8e19): sum in float64
        total = float(np.einsum("i,i->", x, x, dtype=np.float64))
    return total


def _is_integer(dtype: np.dtype) -> bool:
    return np.issubdtype(dtype, np.integer) or dtype == np.bool_


def _int_limits(dtype: np.dtype) -> tuple[int, int] | None:
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return int(info.min), int(info.max)
    return None


SHAPES_DIFFER = "shapes differ: "  # the note of two tensors of different shapes (`compare`)


def _shape_mismatch(ref: np.ndarray, target: np.ndarray) -> TensorStats:
    inf = math.inf
    return TensorStats(
        shape=tuple(ref.shape), dtype=str(target.dtype), numel=int(ref.size), max_abs=inf, mean_abs=inf,
        rel_l2=inf, max_rel=inf, cosine=-inf, sqnr_db=-inf, ref_absmax=0.0, target_absmax=0.0,
        mismatches=int(max(ref.size, target.size)), ref_nan=0, ref_inf=0, target_nan=0, target_inf=0,
        new_nonfinite=0, at_f16_limit=0, at_int_limit=0, integer=False,
        note=f"{SHAPES_DIFFER}reference {list(ref.shape)}, target {list(target.shape)}",
    )
