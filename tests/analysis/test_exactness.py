import itertools
import math

import numpy as np
import pytest

from bisect_ov.analysis.exactness import ExactCheck, check_exact, exact_result, integer_valued
from bisect_ov.core.errors import InputError

EXACT_CASE4 = 127 * 127 * 11111  # 179,209,319


# ---------------------------------------------------------------- references: plain loops, int64 throughout


def ref_conv(x, w, strides, pads_begin, pads_end, dilations, groups=1):
    """Direct convolution with Python loops over output positions, int64 arithmetic."""
    x = np.asarray(x, np.int64)
    w = np.asarray(w, np.int64)
    n, c = x.shape[:2]
    o, cg = w.shape[:2]
    ks = w.shape[2:]
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(pads_begin, pads_end)))
    outs = [(p - ((k - 1) * d + 1)) // s + 1 for p, k, s, d in zip(xp.shape[2:], ks, strides, dilations)]
    og = o // groups
    y = np.zeros((n, o, *outs), np.int64)
    for oc in range(o):
        g = oc // og
        for pos in itertools.product(*(range(m) for m in outs)):
            total = np.zeros(n, np.int64)
            for tap in itertools.product(*(range(k) for k in ks)):
                idx = tuple(p * s + t * d for p, s, t, d in zip(pos, strides, tap, dilations))
                patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + idx]  # [N, C/G]
                total += patch @ w[(oc, slice(None)) + tap]
            y[(slice(None), oc) + pos] = total
    return y


def ints(rng, shape, lo=-8, hi=8, dtype=np.int64):
    return rng.integers(lo, hi, size=shape).astype(dtype)


# ---------------------------------------------------------------- integer_valued


def test_integer_valued_by_dtype_and_value():
    assert integer_valued(np.array([True, False]))
    assert integer_valued(np.array([-128, 127], np.int8))
    assert integer_valued(np.array([3.0, -7.0, 0.0], np.float32))  # floats holding integers count
    assert integer_valued(np.array([2.0**53 - 1]))
    assert not integer_valued(np.array([2.0**53]))
    assert not integer_valued(np.array([2**60], np.int64))
    assert not integer_valued(np.array([1.0, 0.5]))
    assert not integer_valued(np.array([1.0, np.inf]))
    assert not integer_valued(np.array([np.nan]))
    assert not integer_valued(np.array([1 + 0j]))


# ---------------------------------------------------------------- MatMul


@pytest.mark.parametrize(
    "a_shape,b_shape,ta,tb",
    [
        ((3, 5), (5, 4), False, False),
        ((5, 3), (5, 4), True, False),
        ((3, 5), (4, 5), False, True),
        ((2, 1, 3, 5), (4, 4, 5), False, True),  # batch broadcasting
        ((5,), (5, 4), False, False),  # 1-D: transpose ignored
        ((3, 5), (5,), False, True),
        ((5,), (5,), True, True),
    ],
)
def test_matmul_matches_int64_einsum(a_shape, b_shape, ta, tb):
    rng = np.random.default_rng(1)
    a, b = ints(rng, a_shape, dtype=np.int8), ints(rng, b_shape).astype(np.float32)
    got = exact_result("MatMul", {"transpose_a": ta, "transpose_b": tb}, [a, b])
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    if ta and a64.ndim >= 2:
        a64 = np.swapaxes(a64, -1, -2)
    if tb and b64.ndim >= 2:
        b64 = np.swapaxes(b64, -1, -2)
    want = np.matmul(a64, b64)
    assert got.dtype == np.int64
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_matmul_beyond_float64_range_stays_exact():
    # partial sums up to ~2**60: past float64's integer range, still inside int64
    a = np.full((2, 16), 2**28 + 1, np.int64)
    a[1, ::2] = -(2**28) + 3
    b = np.full((16, 3), 2**28 - 1, np.int64)
    got = exact_result("MatMul", {}, [a.astype(np.float64), b.astype(np.float64)])
    want = [[sum(int(a[i, k]) * int(b[k, j]) for k in range(16)) for j in range(3)] for i in range(2)]
    assert got.tolist() == want
    assert abs(want[0][0]) > 2**53


def test_matmul_int64_overflow_gives_none():
    a = np.full((1, 4), 2**50, np.int64)
    assert exact_result("MatMul", {}, [a.astype(np.float64), a.T.astype(np.float64)]) is None


# ---------------------------------------------------------------- Convolution


@pytest.mark.parametrize(
    "spatial,kernel,strides,pads_begin,pads_end,dilations",
    [
        ((7,), (3,), [1], [0], [0], [1]),
        ((9,), (3,), [2], [1], [2], [2]),
        ((6, 7), (3, 2), [1, 1], [0, 0], [0, 0], [1, 1]),
        ((7, 8), (3, 3), [2, 3], [1, 0], [2, 1], [1, 2]),
        ((5, 4, 6), (2, 3, 2), [1, 2, 2], [1, 1, 0], [0, 1, 1], [2, 1, 1]),
    ],
)
def test_convolution_matches_loops(spatial, kernel, strides, pads_begin, pads_end, dilations):
    rng = np.random.default_rng(2)
    x = ints(rng, (2, 3, *spatial), dtype=np.int8)
    w = ints(rng, (4, 3, *kernel)).astype(np.float32)
    attrs = {"strides": strides, "pads_begin": pads_begin, "pads_end": pads_end, "dilations": dilations, "auto_pad": "explicit"}
    got = exact_result("Convolution", attrs, [x, w])
    want = ref_conv(x, w, strides, pads_begin, pads_end, dilations)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "auto_pad,strides,dilations,want_begin,want_end",
    [
        ("same_upper", [2, 1], [1, 1], [0, 1], [1, 1]),  # H: 8 -> 4, total pad 1 -> (0, 1); W: 6 -> 6, (1, 1)
        ("same_lower", [2, 1], [1, 1], [1, 1], [0, 1]),
        ("same_upper", [1, 1], [2, 2], [2, 2], [2, 2]),
        ("valid", [1, 2], [1, 1], [0, 0], [0, 0]),
    ],
)
def test_convolution_auto_pad(auto_pad, strides, dilations, want_begin, want_end):
    rng = np.random.default_rng(3)
    x = ints(rng, (1, 2, 8, 6))
    w = ints(rng, (3, 2, 3, 3))
    # stale explicit pads from the node must be ignored when auto_pad decides
    attrs = {"strides": strides, "pads_begin": [9, 9], "pads_end": [9, 9], "dilations": dilations, "auto_pad": auto_pad}
    got = exact_result("Convolution", attrs, [x, w])
    want = ref_conv(x, w, strides, want_begin, want_end, dilations)
    np.testing.assert_array_equal(got, want)
    if auto_pad.startswith("same"):
        assert got.shape[2:] == tuple(-(-s // st) for s, st in zip(x.shape[2:], strides))


@pytest.mark.parametrize("auto_pad", ["same_upper", "same_lower", "valid", "explicit"])
@pytest.mark.parametrize("groups", [1, 2])
def test_convolution_agrees_with_openvino_cpu(auto_pad, groups):
    """Small integers are exact in f32: OpenVINO's own CPU result pins the padding semantics."""
    ov = pytest.importorskip("openvino")
    from openvino import opset13 as ops

    rng = np.random.default_rng(7)
    x = ints(rng, (1, 4, 8, 7)).astype(np.float32)
    attrs = {"strides": [2, 3], "pads_begin": [1, 2], "pads_end": [0, 1], "dilations": [1, 2], "auto_pad": auto_pad}
    param = ops.parameter(list(x.shape), np.float32)
    if groups == 1:
        w = ints(rng, (3, 4, 3, 2)).astype(np.float32)
        node = ops.convolution(param, ops.constant(w), attrs["strides"], attrs["pads_begin"], attrs["pads_end"],
                               attrs["dilations"], auto_pad=auto_pad)
    else:
        w = ints(rng, (2, 3, 2, 3, 2)).astype(np.float32)
        node = ops.group_convolution(param, ops.constant(w), attrs["strides"], attrs["pads_begin"], attrs["pads_end"],
                                     attrs["dilations"], auto_pad=auto_pad)
    compiled = ov.Core().compile_model(ov.Model([node], [param]), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    want = compiled(x)[0]
    got = exact_result(node.get_type_name(), node.get_attributes(), [x, w])
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want.astype(np.int64))
    got_own_attrs = exact_result(node.get_type_name(), attrs, [x, w])  # pads recomputed from auto_pad here
    np.testing.assert_array_equal(got_own_attrs, want.astype(np.int64))


def test_convolution_beyond_float64_range_stays_exact():
    x = np.full((1, 8, 3, 3), 2**27 + 5, np.int64)
    w = np.full((2, 8, 2, 2), -(2**27) + 7, np.int64)
    got = exact_result("Convolution", {"strides": [1, 1], "pads_begin": [0, 0], "pads_end": [0, 0], "dilations": [1, 1]}, [x, w])
    want = 32 * (2**27 + 5) * (-(2**27) + 7)
    assert abs(want) > 2**53
    assert got.shape == (1, 2, 2, 2)
    assert {int(v) for v in got.ravel()} == {want}


@pytest.mark.parametrize("groups,per_in,per_out", [(2, 2, 3), (4, 1, 1), (3, 2, 1)])
def test_group_convolution_matches_loops(groups, per_in, per_out):
    rng = np.random.default_rng(4)
    x = ints(rng, (2, groups * per_in, 6, 5))
    w = ints(rng, (groups, per_out, per_in, 3, 2))
    attrs = {"strides": [2, 1], "pads_begin": [1, 0], "pads_end": [1, 1], "dilations": [1, 2], "auto_pad": "explicit"}
    got = exact_result("GroupConvolution", attrs, [x, w])
    want = ref_conv(x, w.reshape(groups * per_out, per_in, 3, 2), [2, 1], [1, 0], [1, 1], [1, 2], groups=groups)
    np.testing.assert_array_equal(got, want)


def test_group_convolution_same_upper():
    rng = np.random.default_rng(5)
    x = ints(rng, (1, 4, 5, 5))
    w = ints(rng, (2, 1, 2, 3, 3))
    got = exact_result("GroupConvolution", {"strides": [2, 2], "dilations": [1, 1], "auto_pad": "same_upper"}, [x, w])
    want = ref_conv(x, w.reshape(2, 2, 3, 3), [2, 2], [1, 1], [1, 1], [1, 1], groups=2)
    np.testing.assert_array_equal(got, want)


def test_convolution_channel_mismatch_is_an_input_error():
    with pytest.raises(InputError):
        exact_result("Convolution", {}, [np.zeros((1, 3, 4, 4), np.int8), np.zeros((2, 4, 1, 1), np.int8)])


# ---------------------------------------------------------------- the users' case: 11,111 channels of 127


def case4():
    x = np.full((1, 11111, 1, 1), 127, np.int8)
    w = np.full((1, 11111, 1, 1), 127, np.int8)
    attrs = {"strides": [1, 1], "pads_begin": [0, 0], "pads_end": [0, 0], "dilations": [1, 1], "auto_pad": "explicit"}
    return exact_result("Convolution", attrs, [x, w])


def test_case4_exact_value():
    got = case4()
    assert got.dtype == np.int64
    assert got.shape == (1, 1, 1, 1)
    assert int(got.item()) == EXACT_CASE4 == 179_209_319
    # the same from float inputs holding the integers
    x = np.full((1, 11111, 1, 1), 127.0, np.float32)
    assert int(exact_result("Convolution", {}, [x, x]).item()) == EXACT_CASE4


def test_case4_f32_vs_bf16():
    check = check_exact(case4(), np.array([[[[179207392.0]]]], np.float32), np.array([[[[179306496.0]]]], np.float32))
    assert check.ref_off == 1927 and check.target_off == 97177
    assert not check.ref_exact and not check.target_exact
    assert check.exact_max == float(EXACT_CASE4)
    assert (check.exact_sample, check.ref_sample, check.target_sample) == (EXACT_CASE4, 179207392, 179306496)
    text = check.describe()
    assert text == (
        "exact integer result 179,209,319; target computed in floating point: off by 97,177 (179,306,496); "
        "reference off by 1,927"
    )


def test_case4_f16_saturates():
    exact = case4()
    check = check_exact(exact, np.full(exact.shape, 179207392.0), np.full(exact.shape, 65504.0, np.float16))
    assert check.target_off == EXACT_CASE4 - 65504
    text = check.describe()
    assert "saturated at 65,504 (f16 limit)" in text
    assert "off by 179,143,815" in text and "reference off by 1,927" in text
    inf = check_exact(exact, np.full(exact.shape, 179207392.0), np.full(exact.shape, np.inf, np.float16))
    assert inf.target_off == math.inf
    assert "saturated at 65,504 (f16 limit)" in inf.describe()


def test_case4_int32_output_on_both_sides_is_exact():
    exact = case4()
    check = check_exact(exact, exact.astype(np.int32), np.full(exact.shape, float(EXACT_CASE4)))
    assert check.ref_exact and check.target_exact
    assert check.ref_off == 0 and check.target_off == 0
    assert check.describe().startswith("integer-exact on both sides")


# ---------------------------------------------------------------- check_exact details


def test_check_exact_rounds_nothing_and_counts_nan_as_inf():
    exact = np.array([0, 10, -4], np.int64)
    check = check_exact(exact, np.array([0.5, 10.0, -4.0]), np.array([0.0, np.nan, -4.0]))
    assert check.ref_off == 0.5 and not check.ref_exact
    assert check.target_off == math.inf and not check.target_exact
    assert check.exact_sample == 10 and math.isnan(check.target_sample)
    assert "NaN" in check.describe()


def test_check_exact_picks_target_worst_position():
    exact = np.array([100, 200, 300], np.int64)
    check = check_exact(exact, np.array([101.0, 200.0, 300.0]), np.array([100.0, 200.0, 296.0]))
    assert (check.exact_sample, check.ref_sample, check.target_sample) == (300, 300, 296)
    assert check.ref_off == 1 and check.target_off == 4
    assert check.describe() == "exact integer result 300; target computed in floating point: off by 4 (296); reference off by 1"


def test_check_exact_target_exact_reference_off():
    exact = np.array([5, 7], np.int64)
    check = check_exact(exact, np.array([5.0, 9.0]), exact.astype(np.int32))
    assert check.target_exact and check.ref_off == 2 and check.exact_sample == 7
    assert check.describe().endswith("target integer-exact")
    assert "reference computed in floating point: off by 2 (9)" in check.describe()


def test_check_exact_shape_mismatch():
    with pytest.raises(InputError):
        check_exact(np.zeros(3, np.int64), np.zeros(3), np.zeros(4))


def test_exact_check_is_frozen():
    check = check_exact(np.array([1]), np.array([1.0]), np.array([1.0]))
    assert isinstance(check, ExactCheck)
    with pytest.raises(AttributeError):
        check.ref_off = 3


# ---------------------------------------------------------------- elementwise, reductions, refusals


def test_elementwise_and_reduce_sum():
    rng = np.random.default_rng(6)
    a = ints(rng, (2, 3, 4)).astype(np.float32)
    b = ints(rng, (3, 1), dtype=np.int32)
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    np.testing.assert_array_equal(exact_result("Add", {"auto_broadcast": "numpy"}, [a, b]), a64 + b64)
    np.testing.assert_array_equal(exact_result("Subtract", {}, [a, b]), a64 - b64)
    np.testing.assert_array_equal(exact_result("Multiply", {}, [a, b]), a64 * b64)
    got = exact_result("ReduceSum", {"keep_dims": True}, [a, np.array([0, -1])])
    np.testing.assert_array_equal(got, a64.sum(axis=(0, 2), keepdims=True))
    got = exact_result("ReduceSum", {"keep_dims": False}, [a, np.array([1])])
    np.testing.assert_array_equal(got, a64.sum(axis=1))
    assert got.dtype == np.int64


def test_non_integer_or_unsupported_gives_none():
    x = np.ones((1, 2, 3, 3), np.float32)
    w = np.ones((1, 2, 1, 1), np.float32)
    assert exact_result("Convolution", {}, [x, w * 0.5]) is None
    assert exact_result("MatMul", {}, [np.array([[1.0, 2.5]]), np.ones((2, 1))]) is None
    assert exact_result("Add", {}, [np.array([1.0, np.nan]), np.array([1.0, 1.0])]) is None
    assert exact_result("Softmax", {}, [x]) is None
    assert exact_result("Add", {"auto_broadcast": "pdpd"}, [x, x]) is None
    # floats holding integers are accepted
    np.testing.assert_array_equal(exact_result("Add", {}, [np.array([3.0]), np.array([4.0])]), [7])
