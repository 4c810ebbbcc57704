"""Why a node diverged, in words: what its statistics show and what pattern they suggest.

Pure functions over `TensorStats`. Observations (always reported when present): NaN/Inf that appeared on
the target, values at the f16 limit (±65504, overflow or saturation), values at an integer type's limits,
shape mismatches. Diagnoses (for nodes where error starts or is amplified):

* cancellation: the output is much smaller than the inputs it was computed from (x - mean on data with a
  large offset, a difference of nearly equal values), so the inputs' rounding errors, small relative to the
  inputs, are large relative to the output;
* long reduction: the node sums many values (its reduction length K) and its error exceeds what the
  precision predicts for K, as when a kernel keeps its partial sums in low precision;
* otherwise, how many times over its tolerance the error is.
"""

from __future__ import annotations

import math
from typing import Sequence

from bisect_ov.analysis.metrics import TensorStats

__all__ = ["observations", "diagnose", "CANCELLATION_RATIO", "LONG_REDUCTION"]

CANCELLATION_RATIO = 10.0  # inputs this many times larger than the output
LONG_REDUCTION = 64


def observations(stats: Sequence[TensorStats]) -> list[str]:
    """What the target's values show, whatever the node's role."""
    found = []
    new = sum(s.new_nonfinite for s in stats)
    if new:
        found.append(f"NaN/Inf appeared in {new:,} value(s)")
    at_f16 = sum(s.at_f16_limit for s in stats)
    if at_f16:
        found.append(f"{at_f16:,} value(s) at or beyond the f16 limit 65504 (saturation/overflow)")
    at_int = sum(s.at_int_limit for s in stats)
    if at_int:
        found.append(f"{at_int:,} value(s) at the integer type's limits (saturation)")
    found += [s.note for s in stats if s.note]
    return found


def diagnose(
    role: str,
    error: float,
    tolerance: float,
    reduction_length: int,
    output: TensorStats | None,
    inputs: Sequence[TensorStats],
    precision: str,
) -> list[str]:
    """A sentence on the likely mechanism, for sources and amplifiers; empty for other roles.

    Examples
    --------
    >>> from bisect_ov.analysis.metrics import compare
    >>> import numpy as np
    >>> x = np.full(8, 1000.0) + np.arange(8)
    >>> out = compare(x - x.mean(), x - x.mean() + 0.5)
    >>> diagnose("source", 0.2, 0.01, 1, out, [compare(x, x)], "bf16")[0].split(":")[0]
    'cancellation'
    """
    if role not in ("source", "amplifier") or output is None or output.new_nonfinite:
        return []
    scale_in = max((s.ref_absmax for s in inputs), default=0.0)
    if output.ref_absmax > 0 and scale_in > CANCELLATION_RATIO * output.ref_absmax:
        ratio = scale_in / output.ref_absmax
        return [
            f"cancellation: its inputs reach {scale_in:.3g} but its output only {output.ref_absmax:.3g} "
            f"({ratio:.0f}x smaller), so the inputs' {precision} rounding is magnified (as in x - mean on data "
            "with a large offset); compute it in f32 or remove the offset earlier"
        ]
    over = error / tolerance if tolerance > 0 else math.inf
    if reduction_length >= LONG_REDUCTION and math.isfinite(over):
        return [
            f"long reduction over {reduction_length:,} values: error {over:.1f}x what {precision} rounding predicts "
            "for that length, as when partial sums are accumulated in low precision; keep its accumulator in f32"
        ]
    if math.isfinite(over) and tolerance > 0:
        return [f"error {over:.1f}x the tolerance of {precision} rounding for this op"]
    return []
