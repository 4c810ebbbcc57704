"""How far each device's output is from the exact integer result, and one sentence saying it.

`check_exact` compares the reference's and the target's outputs with an exact result (as
`bisect_ov.analysis.exact_ops.exact_result` gives it) and returns an `ExactCheck`; `ExactCheck.describe`
says in one sentence who is off and by how much (computed in floating point, or saturated at the f16 limit).

Assumed: the three arrays have one shape and the exact result is integer-valued. Nothing is rounded: a float
``179207392.0`` against the exact ``179209319`` is off by 1,927, ``0.5`` against ``0`` is off by 0.5, and
NaN or an infinity is off by ``inf``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from bisect_ov.analysis.exact_ops import as_int64, integer_valued, max_abs
from bisect_ov.core.errors import InputError
from bisect_ov.core.numeric import F16_MAX

__all__ = ["ExactCheck", "check_exact"]


@dataclass(frozen=True)
class ExactCheck:
    """How far each side's output is from the exact integer result.

    Attributes
    ----------
    exact_max
        Largest magnitude of the exact result (0.0 for an empty tensor).
    ref_off, target_off
        Largest ``|side - exact|``: an int when the difference is whole (the usual case), a float when a side
        holds fractions, ``inf`` when it holds NaN or an infinity.
    ref_exact, target_exact
        Whether the side equals the exact result everywhere.
    exact_sample, ref_sample, target_sample
        Exact, reference and target values at one position: where the target is most off; where the
        reference is most off if the target is exact; where the exact result is largest if both are.
        Whole float values are given as int.
    """

    exact_max: float
    ref_off: float
    target_off: float
    ref_exact: bool
    target_exact: bool
    exact_sample: int | float
    ref_sample: int | float
    target_sample: int | float

    def describe(self) -> str:
        """One human sentence, e.g. ``exact integer result 179,209,319; target computed in floating point:
        off by 97,177 (179,306,496); reference off by 1,927``."""
        if self.ref_exact and self.target_exact:
            return f"integer-exact on both sides (exact integer result up to {_fmt(self.exact_max)})"
        head = f"exact integer result {_fmt(self.exact_sample)}"
        if self.target_exact:
            return f"{head}; {self._side('reference', self.ref_sample, self.ref_off)}; target integer-exact"
        target = self._side("target", self.target_sample, self.target_off)
        ref = "reference integer-exact" if self.ref_exact else f"reference off by {_fmt(self.ref_off)}"
        return f"{head}; {target}; {ref}"

    def _side(self, side: str, value: int | float, off: float) -> str:
        """What one side shows at the sample position, and how far off it is."""
        v = float(value)
        if math.isnan(v):
            return f"{side} is NaN"
        limit = "-65,504" if v < 0 else "65,504"
        if math.isinf(v):
            # the exact result is below 2**63, far inside the f32 and bf16 ranges: an infinity is f16 overflow
            return f"{side} saturated at {limit} (f16 limit): {_fmt(v)}"
        if abs(v) == F16_MAX and abs(float(self.exact_sample)) > F16_MAX:
            return f"{side} saturated at {limit} (f16 limit): off by {_fmt(off)}"
        return f"{side} computed in floating point: off by {_fmt(off)} ({_fmt(value)})"


def _fmt(value: int | float) -> str:
    """Thousands separators; whole floats without a decimal part; inf and nan as words."""
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    v = float(value)
    if not math.isfinite(v):
        return str(v)
    if v.is_integer():
        return f"{int(v):,}"
    return f"{v:,.6f}".rstrip("0").rstrip(".")


def _scalar(value: Any) -> int | float:
    """A numpy scalar as a Python int (integer dtypes and whole finite floats) or float."""
    if isinstance(value, (np.integer, np.bool_, bool, int)):
        return int(value)
    v = float(value)
    return int(v) if math.isfinite(v) and v.is_integer() else v


def _offsets(exact: np.ndarray, side: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-element distance from the exact result, without rounding where it matters.

    Returns ``(key, whole, frac)``: ``key`` a float64 magnitude to rank the positions (inf where the side is
    not finite), and the exact signed difference ``whole + frac`` split into an int64 part and a float
    fraction (|frac| < 1), meaningful where ``key`` is finite.
    """
    if side.dtype.kind in "biu":
        whole = side.astype(np.int64) - exact
        frac = np.zeros(side.shape, np.float64)
        return np.abs(whole).astype(np.float64), whole, frac
    s = side.astype(np.float64)
    finite = np.isfinite(s)
    small = finite & (np.abs(s) < 2.0**62)
    safe = np.where(small, s, 0.0)
    t = np.trunc(safe)
    whole = t.astype(np.int64) - exact
    frac = safe - t  # exact: the fractional part of a float is a float
    key = np.abs(whole.astype(np.float64) + frac)
    huge = finite & ~small  # magnitudes beyond int64: far off anyway, float64 is precise enough
    if huge.any():
        key = np.where(huge, np.abs(s - exact.astype(np.float64)), key)
    key = np.where(finite, key, np.inf)
    return key, whole, frac


def _off_at(key: np.ndarray, whole: np.ndarray, frac: np.ndarray, i: int, side_flat: np.ndarray) -> float:
    """The exact distance at flat position ``i`` (int when whole)."""
    k = float(key[i])
    if not math.isfinite(k):
        return math.inf
    v = float(side_flat[i]) if side_flat.dtype.kind == "f" else 0.0
    if side_flat.dtype.kind == "f" and abs(v) >= 2.0**62:
        return _scalar(k)
    w, f = int(whole[i]), float(frac[i])
    if f == 0.0:
        return abs(w)
    return abs(w + f)


def check_exact(exact: np.ndarray, ref: np.ndarray, target: np.ndarray) -> ExactCheck:
    """Compare the reference and target outputs with the exact integer result.

    Parameters
    ----------
    exact
        Exact result, as `exact_result` returns it (any integer-valued array; it is taken as int64).
    ref, target
        The two devices' outputs, float or integer arrays of the same shape as ``exact``. Nothing is
        rounded: a fraction counts, NaN and infinities are off by ``inf``.

    Returns
    -------
    ExactCheck

    Raises
    ------
    InputError
        When the shapes differ or ``exact`` is not integer-valued.
    """
    exact = np.asarray(exact)
    ref = np.asarray(ref)
    target = np.asarray(target)
    if not (exact.shape == ref.shape == target.shape):
        raise InputError(f"shapes differ: exact {exact.shape}, reference {ref.shape}, target {target.shape}")
    if not integer_valued(exact):
        raise InputError("the exact result must be integer-valued (finite integers below 2**53 in magnitude)")
    e = as_int64(exact).ravel()
    r, t = ref.ravel(), target.ravel()
    if e.size == 0:
        return ExactCheck(0.0, 0, 0, True, True, 0, 0, 0)

    r_key, r_whole, r_frac = _offsets(e, r)
    t_key, t_whole, t_frac = _offsets(e, t)
    ri, ti = int(np.argmax(r_key)), int(np.argmax(t_key))
    ref_off = _off_at(r_key, r_whole, r_frac, ri, r)
    target_off = _off_at(t_key, t_whole, t_frac, ti, t)
    ref_exact, target_exact = ref_off == 0, target_off == 0
    if not target_exact:
        pos = ti
    elif not ref_exact:
        pos = ri
    else:
        pos = int(np.argmax(np.abs(e)))
    return ExactCheck(
        exact_max=float(max_abs(e)),
        ref_off=ref_off,
        target_off=target_off,
        ref_exact=bool(ref_exact),
        target_exact=bool(target_exact),
        exact_sample=int(e[pos]),
        ref_sample=_scalar(r[pos]),
        target_sample=_scalar(t[pos]),
    )
