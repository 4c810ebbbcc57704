"""f16 headroom: how many powers of two a tensor's largest magnitude stays below the largest finite f16 value.

``headroom = log2(65,504 / max|x|)``, from the reference's values (what the target should compute): 3 means the
tensor could grow 8x before it overflows f16; below 1 it is within 2x of the limit (`NEAR`); below 0 the
reference's values themselves do not fit f16, and an f16 target saturates or overflows there. An overflow that a
later normalization hides (rsqrt(inf) = 0 turns a branch into zeros and the outputs stay finite) still shows as
a negative headroom at the node that overflowed.

Pure functions of numbers; every layer above `analysis` may use them.
"""

from __future__ import annotations

import math
from typing import Iterable

from bisect_ov.core.numeric import F16_MAX

__all__ = ["headroom", "NEAR", "LIMIT"]

LIMIT = F16_MAX
"""The largest finite f16 value, the limit headroom is measured against."""
NEAR = 1.0
"""Headroom below this (within 2x of the limit) is listed first: a model that grows a little overflows."""


def headroom(absmax: Iterable[float] | float, limit: float = LIMIT) -> float:
    """Powers of two between the largest of `absmax` and `limit`: inf for all-zero values, -inf for non-finite
    ones, NaN when there is no value.

    Examples
    --------
    >>> headroom(8188.0)
    3.0
    >>> headroom([1.0, 131008.0])
    -1.0
    >>> headroom(float("inf")), headroom(0.0)
    (-inf, inf)
    """
    values = [float(absmax)] if isinstance(absmax, (int, float)) else [float(a) for a in absmax]
    if not values:
        return math.nan
    largest = max(values, key=lambda a: math.inf if math.isnan(a) else a)
    if math.isnan(largest) or math.isinf(largest):
        return -math.inf
    if largest <= 0.0:
        return math.inf
    return math.log2(limit / largest)
