"""Tests of bisect_ov.run.lowp: the numpy kernels of the emulated devices, without OpenVINO."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

from bisect_ov.core.errors import InputError
from bisect_ov.run import lowp
from tests.run.test_emulate import lane_sum as reference_lane_sum
from tests.run.test_emulate import same_bits


def test_doctests():
    assert doctest.testmod(lowp, raise_on_error=False).failed == 0


@pytest.mark.parametrize("precision", ["f16", "bf16"])
@pytest.mark.parametrize("n, lanes", [(1, 16), (5, 16), (16, 16), (37, 8), (100, 1), (1000, 16), (33, 3)])
def test_lane_sum_is_the_lane_model(precision, n, lanes):
    r = lowp.rounder(precision)
    x = r(np.random.default_rng(n).standard_normal((3, n)).astype(np.float32) * 10)
    got = lowp.lane_sum(x, [1], lanes, r)
    assert got.shape == (3, 1)
    assert same_bits(got[:, 0], reference_lane_sum(x, 1, lanes, precision)).all()


def test_lane_sum_over_several_axes_takes_row_major_order():
    r = lowp.rounder("f16")
    x = r(np.random.default_rng(0).standard_normal((4, 3, 5)).astype(np.float32))
    got = lowp.lane_sum(x, [2, 0], 4, r)
    assert got.shape == (1, 3, 1)
    flat = np.moveaxis(x, 1, 0).reshape(3, -1)
    assert same_bits(got[0, :, 0], reference_lane_sum(flat, 1, 4, "f16")).all()


def test_one_accumulator_loses_what_lanes_keep():
    r = lowp.rounder("f16")
    x = np.full((1, 4096), 1.0, np.float32)
    assert lowp.lane_sum(x, [1], 1, r)[0, 0] == 2048  # 2048 + 1 rounds back to 2048 in f16
    assert lowp.lane_sum(x, [1], 16, r)[0, 0] == 4096  # 256 per lane, then a tree of exact sums


def test_matmul_accumulates_products_like_the_lane_model():
    r = lowp.rounder("bf16")
    rng = np.random.default_rng(1)
    a, b = r(rng.standard_normal((2, 5, 40)).astype(np.float32)), r(rng.standard_normal((40, 3)).astype(np.float32))
    got = lowp.matmul(a, b.T, False, True, 8, r)
    assert got.shape == (2, 5, 3)
    expected = reference_lane_sum(a[..., :, None] * b, 2, 8, "bf16")
    assert same_bits(got, expected).all()
    np.testing.assert_allclose(got, a @ b, rtol=0.05, atol=0.2)


def test_kernels_keep_nan_inf_and_shapes():
    r = lowp.rounder("f16")
    x = np.array([[1.0, np.nan, 2.0], [70000.0, 1.0, 0.0]], np.float32)
    assert np.isnan(lowp.softmax(x, 1, 16, r)[0]).all()
    total = lowp.reduce(x, [1], False, False, 16, r)
    assert np.isnan(total[0]) and np.isinf(total[1]) and total.shape == (2,)
    assert lowp.mvn(np.ones((2, 3), np.float32), [1], True, 1e-5, "inside_sqrt", 16, r).shape == (2, 3)


def test_rounder_checks_the_precision():
    with pytest.raises(InputError, match="'f16', 'bf16'"):
        lowp.rounder("f32")
