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
