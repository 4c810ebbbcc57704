import math

import numpy as np
import pytest

from bisect_ov.analysis import metrics
from bisect_ov.analysis.metrics import compare, metric_value


def test_identical_tensors_have_zero_error():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    s = compare(x, x.copy())
    assert s.max_abs == 0 and s.rel_l2 == 0 and s.mismatches == 0
    assert s.cosine == pytest.approx(1.0) and math.isinf(s.sqnr_db)


def test_errors_match_their_definitions():
    rng = np.random.default_rng(1)
    r = rng.standard_normal(1000)
    t = r + 0.01 * rng.standard_normal(1000)
    s = compare(r, t)
    d = t - r
    assert s.max_abs == pytest.approx(np.abs(d).max())
    assert s.mean_abs == pytest.approx(np.abs(d).mean())
    assert s.rel_l2 == pytest.approx(np.linalg.norm(d) / np.linalg.norm(r))
    assert s.max_rel == pytest.approx(np.abs(d).max() / np.abs(r).max())
    assert s.cosine == pytest.approx(np.dot(r, t) / np.linalg.norm(r) / np.linalg.norm(t))
    assert s.sqnr_db == pytest.approx(10 * np.log10(np.sum(r * r) / np.sum(d * d)))
    assert s.max_elem_rel == pytest.approx((np.abs(d) / (np.abs(r) + np.sqrt(np.mean(r * r)))).max())


def test_a_small_element_doubled_is_off_by_its_own_size():
    r = np.random.default_rng(4).standard_normal(100_000).astype(np.float32)
    rounded = r.astype(np.float16).astype(np.float32)  # every element within 2**-11 of its own size
    assert compare(r, rounded).max_elem_rel < 2.0 ** -11
    t = r.copy()
    small = int(np.argmin(np.abs(np.abs(r) - 0.1)))  # an element at a tenth of the rms
    t[small] *= 2
    s = compare(r, t)
    assert s.max_elem_rel == pytest.approx(0.1 / 1.1, rel=0.02)
    # a small share of the largest value, far beyond the relative L2 error
    assert s.max_rel < 0.3 * s.max_elem_rel and s.max_elem_rel > 100 * s.rel_l2


def test_chunked_processing_equals_one_pass(monkeypatch):
    rng = np.random.default_rng(2)
    r = rng.standard_normal(10_001)
    t = r * 1.001
    whole = compare(r, t)
    monkeypatch.setattr(metrics, "_CHUNK", 97)
    chunked = compare(r, t)
    for field in ("max_abs", "mean_abs", "rel_l2", "cosine", "sqnr_db", "mismatches", "max_elem_rel"):
        assert getattr(chunked, field) == pytest.approx(getattr(whole, field), rel=1e-9)


def test_new_nan_makes_error_infinite_and_is_counted():
    r = np.ones(5, np.float32)
    t = r.copy()
    t[2] = np.nan
    t[3] = np.inf
    s = compare(r, t)
    assert math.isinf(s.rel_l2) and s.new_nonfinite == 2
    assert (s.target_nan, s.target_inf, s.ref_nan) == (1, 1, 0)


def test_nan_on_both_sides_agrees():
    r = np.array([1.0, np.nan, np.inf], np.float32)
    s = compare(r, r.copy())
    assert s.rel_l2 == 0 and s.mismatches == 0 and s.ref_nan == 1 and s.ref_inf == 1


def test_f16_limit_counted_only_where_reference_is_below():
    r = np.array([1.0, 70000.0, 3.0], np.float32)
    t = np.array([65504.0, 70000.0, np.inf], np.float32)
    assert compare(r, t).at_f16_limit == 2


def test_integers_compare_exactly():
    r = np.array([179209319, 5], np.int64)
    t = np.array([179207392, 5], np.int64)
    s = compare(r, t)
    assert s.integer and s.mismatches == 1 and s.max_abs == 1927
    assert compare(r, r.copy()).exact


def test_integer_saturation_detected():
    r = np.array([100, 300], np.int32)
    t = np.array([100, 127], np.int8)
    assert compare(r, t).at_int_limit == 1


def test_zero_reference_uses_target_norm():
    s = compare(np.zeros(4), np.full(4, 1e-3))
    assert s.rel_l2 == pytest.approx(1.0)


def test_shape_mismatch_is_infinite_with_note():
    s = compare(np.zeros((2, 3)), np.zeros((4,)))
    assert math.isinf(s.rel_l2) and "shapes differ" in s.note


def test_metric_by_name_or_callable():
    s = compare(np.array([1.0, 2.0]), np.array([1.0, 3.0]))
    assert metric_value(s, "max_abs") == 1.0
    assert metric_value(s, lambda st: st.mismatches) == 1
    with pytest.raises(ValueError, match="Unknown metric"):
        metric_value(s, "nope")
