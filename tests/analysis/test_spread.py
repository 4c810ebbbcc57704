"""Per-node distributions over samples merge to the same figures however the samples were split."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bisect_ov.analysis.spread import ALPHA, EXACT, Distribution


def _split(values, cuts, order):
    """Distributions of `values` cut at `cuts`, merged in `order`."""
    pieces = np.split(np.arange(len(values)), cuts)
    parts = [Distribution().extend((values[i], int(i)) for i in piece) for piece in pieces]
    merged = Distribution()
    for k in order(len(parts)):
        merged.merge(parts[k])
    return merged.summary()


@pytest.mark.parametrize("n", [7, EXACT, EXACT + 1, 3000])
def test_the_figures_do_not_depend_on_how_samples_were_split_or_merged(n):
    rng = np.random.default_rng(n)
    values = list(np.exp(rng.normal(-6, 2, n)))
    whole = Distribution().extend((v, i) for i, v in enumerate(values)).summary()
    for cuts in ([n // 3, n // 2], [1], list(range(5, n, 17))):
        assert _split(values, cuts, lambda m: range(m)) == whole
        assert _split(values, cuts, lambda m: reversed(range(m))) == whole
    assert whole["mean"] == math.fsum(values) / n  # the correctly rounded mean
    assert whole["max"] == max(values) and whole["worst_sample"] == int(np.argmax(values)) and whole["count"] == n


def test_quantiles_are_exact_while_small_and_within_alpha_beyond():
    rng = np.random.default_rng(0)
    small = rng.random(EXACT)
    s = Distribution().extend((v, i) for i, v in enumerate(small)).summary()
    assert s["p50"] == float(np.quantile(small, 0.5)) and s["p90"] == float(np.quantile(small, 0.9))
    large = np.exp(rng.normal(-5, 1.5, 20000))
    d = Distribution().extend((v, i) for i, v in enumerate(large))
    assert not d.exact
    for q in (0.5, 0.9):
        assert abs(d.quantile(q) / np.quantile(large, q) - 1) < 2 * ALPHA


def test_zeros_negatives_and_non_finite_errors():
    d = Distribution().extend([(0.0, 0), (-0.5, 1), (0.25, 2)] * 200)
    assert d.quantile(0.0) == pytest.approx(-0.5, rel=ALPHA) and d.quantile(0.5) == 0.0
    nan = Distribution().extend([(0.1, 0), (math.nan, 1), (0.2, 2)]).summary()
    assert math.isnan(nan["max"]) and nan["worst_sample"] == 1 and nan["mean"] == math.inf
    inf = Distribution().extend([(0.1, 0), (math.inf, 3)]).summary()
    assert inf["max"] == math.inf and inf["worst_sample"] == 3 and inf["p90"] > 1e300
    assert Distribution().summary() == {}
    ties = Distribution().extend([(0.5, 4), (0.5, 2)])
    assert ties.merge(Distribution().extend([(0.5, 9)])).summary()["worst_sample"] == 2


@pytest.mark.parametrize("n", [50, EXACT + 1, 3000])
def test_samples_over_a_limit_are_counted_exactly_while_small_and_by_the_bins_beyond(n):
    rng = np.random.default_rng(n)
    values = list(np.exp(rng.normal(-6, 2, n)))
    values[3] = math.nan
    values[5] = math.inf
    limit = float(np.quantile(values[6:], 0.7))
    truth = sum(1 for v in values if not v <= limit)  # NaN and inf count as above
    parts = [Distribution().extend((v, i) for i, v in enumerate(values) if i % 3 == k) for k in range(3)]
    merged = parts[0].merge(parts[1]).merge(parts[2])
    got = merged.count_above(limit)
    if merged.exact:
        assert got == truth
    else:  # values within ALPHA of the limit may fall on either side
        near = sum(1 for v in values if math.isfinite(v) and abs(v - limit) <= 2 * ALPHA * limit)
        assert abs(got - truth) <= near
    assert merged.count_above(-1.0) == n and merged.count_above(math.inf) == 0


@pytest.mark.parametrize("many", [False, True])
def test_a_quantile_that_reaches_the_non_finite_samples_is_inf_not_a_huge_number(many):
    # Non-finite samples rank highest: a quantile among them, or between one and a finite sample, is inf (the
    # report printed 'p50 1.8e+308'); below them it stays the finite samples' own.
    finite = [(float(i), i) for i in range(3000 if many else 2)]
    d = Distribution().extend(finite + [(math.inf, 10 ** 6 + i) for i in range(len(finite))])
    summary = d.summary()
    assert summary["p90"] == math.inf and summary["max"] == math.inf
    assert d.quantile(0.25) < len(finite)
    half = Distribution().extend([(1e-3, 0), (math.inf, 1)])
    assert half.quantile(0.5) == math.inf and half.quantile(0.0) == 1e-3
