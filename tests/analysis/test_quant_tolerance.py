"""The quantization tolerance model against simulated quantization, and how a Tolerance applies it."""

from __future__ import annotations

import numpy as np
import pytest

from bisect_ov.analysis.tolerance import Tolerance, quantization_error


def _simulated(bits: int, group: int, symmetric: bool) -> float:
    """Relative rms error of normal weights quantized as NNCF does (one scale per group)."""
    w = np.random.default_rng(0).standard_normal((256, 4096)).reshape(256, -1, group)
    if symmetric:
        scale = np.abs(w).max(axis=2, keepdims=True) / (2 ** (bits - 1) - 1)
        q = np.round(w / scale) * scale
    else:
        lo, hi = w.min(axis=2, keepdims=True), w.max(axis=2, keepdims=True)
        scale = (hi - lo) / (2 ** bits - 1)
        q = np.round((w - lo) / scale) * scale + lo
    return float(np.sqrt(np.mean((q - w) ** 2) / np.mean(w ** 2)))


@pytest.mark.parametrize("bits, group, symmetric", [(4, 16, True), (4, 64, True), (4, 128, True),
                                                    (8, 64, True), (8, 1024, True), (8, 64, False)])
def test_weight_error_model_matches_simulated_quantization(bits, group, symmetric):
    expected = quantization_error(bits, group, symmetric=symmetric)
    assert 0.5 < _simulated(bits, group, symmetric) / expected < 1.5


def test_twin_nodes_get_the_quantization_tolerance_and_others_the_float_one():
    t = Tolerance(precision="f32").with_quantization({"mm1": 0.1})
    assert t.threshold(64, "f32", "mm1") == pytest.approx(4 * 0.1)
    assert t.threshold(64, "f32", "other") < 1e-5
    assert Tolerance.from_dict(t.to_dict()) == t


def test_the_quantization_threshold_stops_at_half_the_output():
    # Errors added in quadrature along a deep int4 chain, times the factor, passed 1: a tiny int4 Llama's logits
    # got 1.3, and its lm_head scaled by 0.1 (error 0.9) was "within tolerance".
    from bisect_ov.analysis.tolerance import QUANTIZATION_CAP

    t = Tolerance(precision="f32").with_quantization({"logits": 0.33, "mm": 0.1})
    assert QUANTIZATION_CAP == 0.5 and t.threshold(64, "f32", "logits") == 0.5
    assert t.threshold(64, "f32", "mm") == pytest.approx(0.4)  # below the cap: the model's own figure
    assert Tolerance(precision="f32", value=2.0).with_quantization({"logits": 0.33}).threshold(64, "f32", "logits") == 2.0
