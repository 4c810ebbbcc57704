"""A node's error over many samples, kept as a mergeable summary: count, exact sum, max, quantiles.

Many samples run in pieces (chunks in one process, or units on the workers of a cluster) and their
summaries are merged afterwards. `Distribution` is built so that the merged result does not depend on how
the samples were split nor in which order the pieces arrive:

* the sum is kept exactly (Shewchuk's partials, the representation `math.fsum` uses), so the mean is the
  correctly rounded mean of all values whatever the order of additions;
* up to `EXACT` values are kept as they are, so small runs report exact quantiles (`numpy.quantile`, linear
  interpolation); beyond that every value goes to a logarithmic sketch (bins of relative width `ALPHA`,
  integer counts, as in DDSketch): quantiles within 1% of the true value, memory bounded by the range of
  the values, not their number;
* the max and the sample that gave it (the lowest index on ties) are exact.

Non-finite errors (a NaN or an inf on a side) rank above every finite one, as they did when all values were
held: they count as the largest float in the quantiles, make the mean inf, and a NaN makes the max NaN.

Assumes nothing but numpy: values are plain floats, indices plain ints.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

__all__ = ["Distribution", "EXACT", "ALPHA"]

EXACT = 256  # values kept as they are; beyond, the sketch
ALPHA = 0.01  # relative accuracy of sketched quantiles
_GAMMA = (1 + ALPHA) / (1 - ALPHA)
_LOG_GAMMA = math.log(_GAMMA)
_HUGE = float(np.finfo(np.float64).max)


class Distribution:
    """Mergeable summary of one node's error over samples; see the module docstring.

    Examples
    --------
    >>> a, b = Distribution(), Distribution()
    >>> for i, v in enumerate([0.1, 0.3, 0.2]):
    ...     (a if i < 2 else b).add(v, i)
    >>> a.merge(b).summary()["max"], a.summary()["worst_sample"], a.count
    (0.3, 1, 3)
    """

    __slots__ = ("count", "_partials", "_values", "_bins", "_zeros", "_nonfinite", "_max", "_nan", "_worst")

    def __init__(self) -> None:
        self.count = 0
        self._partials: list[float] = []  # exact sum of the finite values
        self._values: list[float] | None = []  # None once sketched
        self._bins: dict[int, int] = {}  # signed bin index -> count (negative keys: negative values)
        self._zeros = 0
        self._nonfinite = 0
        self._max = -math.inf
        self._nan = False
        self._worst: tuple[float, int] | None = None  # (value ranked with NaN highest, sample index)

    # ----- adding -----------------------------------------------------------------------------------
    def add(self, value: float, index: int) -> None:
        """One sample's error (`index`: the sample's number, for `worst_sample`)."""
        value = float(value)
        self.count += 1
        rank = math.inf if math.isnan(value) else value
        if self._worst is None or rank > self._worst[0] or (rank == self._worst[0] and index < self._worst[1]):
            self._worst = (rank, int(index))
        if math.isnan(value):
            self._nan = True
        else:
            self._max = max(self._max, value)
        if not math.isfinite(value):
            self._nonfinite += 1
            return
        _add_exact(self._partials, value)
        if self._values is not None:
            self._values.append(value)
            if len(self._values) > EXACT:
                self._sketch()
        else:
            self._bin(value)

    def extend(self, values: Iterable[tuple[float, int]]) -> "Distribution":
        for value, index in values:
            self.add(value, index)
        return self

    def merge(self, other: "Distribution") -> "Distribution":
        """Add `other`'s samples to this one (in place); returns self."""
        self.count += other.count
        for p in other._partials:
            _add_exact(self._partials, p)
        self._nonfinite += other._nonfinite
        self._nan = self._nan or other._nan
        self._max = max(self._max, other._max)
        if other._worst is not None and (self._worst is None or other._worst[0] > self._worst[0]
                                         or (other._worst[0] == self._worst[0] and other._worst[1] < self._worst[1])):
            self._worst = other._worst
        if self._values is not None and other._values is not None:
            self._values.extend(other._values)
            if len(self._values) > EXACT:
                self._sketch()
        else:
            if self._values is not None:
                self._sketch()
            for v in other._values or ():
                self._bin(v)
            for key, n in other._bins.items():
                self._bins[key] = self._bins.get(key, 0) + n
            self._zeros += other._zeros
        return self

    # ----- reading ----------------------------------------------------------------------------------
    @property
    def exact(self) -> bool:
        """True while every value is kept (quantiles are exact)."""
        return self._values is not None

    def quantile(self, q: float) -> float:
        """The `q` quantile: exact (linear interpolation) while `exact`, else within `ALPHA` relative."""
        if self.count == 0:
            return math.nan
        if self._values is not None:
            # Non-finite samples rank highest (as `_HUGE`); a quantile that reaches into them is inf.
            values = np.sort(np.asarray(self._values + [_HUGE] * self._nonfinite, dtype=np.float64))
            position = q * (len(values) - 1)
            if values[math.ceil(position)] == _HUGE and (position % 1 or values[math.floor(position)] == _HUGE):
                return math.inf
            return float(np.quantile(values, q))
        rank = int(round(q * (self.count - 1)))
        seen = 0
        for value, n in self._ordered():
            seen += n
            if rank < seen:
                return math.inf if value == _HUGE else value
        return math.inf

    def count_above(self, limit: float) -> int:
        """How many samples' errors exceed `limit` (a NaN or an inf is above any finite limit): exact while
        `exact`, else by the sketch's bins (a value within `ALPHA` of the limit may fall on either side).

        >>> Distribution().extend([(0.1, 0), (0.5, 1), (float("nan"), 2)]).count_above(0.2)
        2
        """
        nonfinite = self._nonfinite if math.isfinite(limit) else 0
        if self._values is not None:
            return sum(1 for v in self._values if v > limit) + nonfinite
        finite = self._ordered()[: -1 if self._nonfinite else None]
        return sum(n for value, n in finite if value > limit) + nonfinite

    def summary(self) -> dict[str, float]:
        """mean, p50, p90, max and the worst sample's index, as the report shows them."""
        if self.count == 0:
            return {}
        finite = self.count - self._nonfinite
        mean = math.inf if self._nonfinite else (math.fsum(self._partials) / finite if finite else 0.0)
        top = math.nan if self._nan else (math.inf if self._nonfinite and self._max == -math.inf else self._max)
        assert self._worst is not None
        return {"mean": mean, "p50": self.quantile(0.5), "p90": self.quantile(0.9), "max": top,
                "worst_sample": self._worst[1], "count": self.count}

    # ----- helpers ----------------------------------------------------------------------------------
    def _sketch(self) -> None:
        values, self._values = self._values or [], None
        for v in values:
            self._bin(v)

    def _bin(self, value: float) -> None:
        if value == 0.0 or abs(value) < 1e-300:
            self._zeros += 1
            return
        key = math.ceil(math.log(abs(value)) / _LOG_GAMMA)
        # Keys of negative values are shifted below every positive one so a key names one bin.
        signed = key if value > 0 else -(key + (1 << 20))
        self._bins[signed] = self._bins.get(signed, 0) + 1

    def _ordered(self) -> list[tuple[float, int]]:
        """(representative value, count) from the smallest value to the largest."""
        out: list[tuple[float, int]] = []
        negative = sorted((k for k in self._bins if k < -(1 << 19)), reverse=False)
        for k in negative:  # more negative key: larger magnitude, so smaller value
            magnitude = -k - (1 << 20)
            out.append((-_representative(magnitude), self._bins[k]))
        if self._zeros:
            out.append((0.0, self._zeros))
        for k in sorted(k for k in self._bins if k >= -(1 << 19)):
            out.append((_representative(k), self._bins[k]))
        if self._nonfinite:
            out.append((_HUGE, self._nonfinite))
        return out


def _representative(key: int) -> float:
    """The value standing for bin `key`, (gamma^(key-1), gamma^key]: within ALPHA of any value in it."""
    try:
        return 2 * math.exp(key * _LOG_GAMMA) / (_GAMMA + 1)
    except OverflowError:
        return _HUGE


def _add_exact(partials: list[float], x: float) -> None:
    """Add `x` to the exact sum held as non-overlapping partials (Shewchuk; `math.fsum`'s representation)."""
    i = 0
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo:
            partials[i] = lo
            i += 1
        x = hi
    partials[i:] = [x]
