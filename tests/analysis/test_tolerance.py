import pytest

from bisect_ov.analysis.tolerance import Tolerance, unit_roundoff
from bisect_ov.core.errors import InputError


def test_threshold_scales_with_precision():
    f32, bf16, f16 = (Tolerance(precision=p).threshold(1, "f32") for p in ("f32", "bf16", "f16"))
    assert f32 < f16 < bf16
    assert bf16 == pytest.approx(8 * 2**-8)


def test_reductions_get_more_room_than_elementwise():
    t = Tolerance(precision="f16")
    assert t.threshold(4096, "f32") == pytest.approx(t.threshold(1, "f32") * (1 + 12 / 4))


def test_integers_are_exact_and_overrides_win():
    t = Tolerance(precision="bf16", per_node={"conv": 0.5})
    assert t.threshold(1, "i32") == 0.0
    assert t.threshold(1, "f32", name="conv") == 0.5
    assert Tolerance(value=1e-2).threshold(1000, "f32") == 1e-2


def test_with_precision_keeps_user_choice():
    assert Tolerance(precision="f32").with_precision("bf16").precision == "f32"
    assert Tolerance().with_precision("bf16").precision == "bf16"
    assert unit_roundoff("nonsense") == unit_roundoff("f32")


def test_absolute_metric_needs_explicit_value():
    with pytest.raises(InputError, match="explicit threshold"):
        Tolerance().check_metric("max_abs")
    Tolerance(value=0.1).check_metric("max_abs")
