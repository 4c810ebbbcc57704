"""How the report writes a number, the same in every rendering: two significant digits in exponent form
(``5.8e-01``), growth as a multiple (``1.46e+03x``), ``-`` for a value not measured and ``inf``/``nan`` as
words. Pure functions of floats."""

from __future__ import annotations

import math

__all__ = ["fmt", "fmt_growth", "fmt_cosine"]


def fmt(x: float | None) -> str:
    """A measured value: ``5.8e-01``; ``-`` for None; ``inf``, ``-inf``, ``nan``."""
    if x is None:
        return "-"
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return {math.inf: "inf", -math.inf: "-inf"}.get(x, "nan")
    return f"{x:.1e}"


def fmt_growth(g: float) -> str:
    """A growth factor: ``1.46e+03x``, ``0.799x``; ``inf`` when the inherited error was zero."""
    if math.isinf(g):
        return "inf"
    return f"{g:.3g}x"


def fmt_cosine(c: float) -> str:
    """A cosine similarity: ``0.994314``; ``n/a (NaN/Inf)`` when the target gave non-finite values where the
    reference had finite ones (the statistics record that as -inf: no cosine exists there)."""
    return f"{c:.6f}" if isinstance(c, float) and math.isfinite(c) else "n/a (NaN/Inf)"
