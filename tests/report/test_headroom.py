"""f16 headroom: each node's largest magnitude on the reference against 65,504, listed and drawn for f16 targets."""

import math

import numpy as np
import pytest

from bisect_ov import bisect
from bisect_ov.analysis.headroom import headroom


def _scaled(scale: float):
    """x * scale -> / scale -> Relu: the middle tensor reaches |scale| on the reference."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 8, 64], np.float32, name="x")
    big = ops.multiply(x, ops.constant(np.float32(scale)), name="big")
    back = ops.divide(big, ops.constant(np.float32(scale)), name="back")
    act = ops.relu(back, name="act")
    values = np.random.default_rng(0).uniform(-1, 1, (1, 8, 64)).astype(np.float32)
    values[0, 0, 0] = 1.0  # the largest magnitude is exactly `scale`
    return ov.Model([act.output(0)], [x], "scaled"), {"x": values}


def test_headroom_is_powers_of_two_below_the_f16_limit():
    assert headroom(65504.0 / 8) == pytest.approx(3.0)
    assert headroom([0.5, 2 * 65504.0]) == pytest.approx(-1.0)
    assert headroom(0.0) == math.inf and headroom(math.inf) == -math.inf and math.isnan(headroom([]))


def test_a_node_within_2x_of_the_f16_range_is_listed_first_even_when_nothing_diverges():
    model, inputs = _scaled(45000.0)
    report = bisect(model, "CPU:f32", "EMU:f16", inputs, progress=False)
    assert not report.diverges  # 45,000 fits f16: rounding only
    near = report.headroom(1.0)
    assert [n.name for n in near] == ["big"]
    assert near[0].f16_headroom == pytest.approx(math.log2(65504 / 45000), abs=1e-3)
    assert report.headroom()[0].name == "big"  # the least headroom first
    text = " ".join(report.to_text().split())
    assert "f16 headroom: 0 node(s) whose reference values exceed 65,504 and 1 within 2x of it" in text
    assert "'big' (Multiply, #" in text and "headroom 0.5" in text
    df = pytest.importorskip("pandas") and report.to_dataframe()
    assert df.loc[near[0].key, "f16_headroom"] == pytest.approx(near[0].f16_headroom)


def test_an_overflowing_node_has_negative_headroom_and_the_column_shows_it():
    model, inputs = _scaled(70000.0)
    report = bisect(model, "CPU:f32", "EMU:f16", inputs, progress=False)
    big = report.node("big")
    assert big.f16_headroom < 0 and report.headroom(0.0) == [big]
    assert report.first_divergence is not None and report.first_divergence.name == "big"
    text = report.to_text()
    assert "headroom" in text.split("Culprits", 1)[1].splitlines()[1]  # the column, in the table's header
    assert "(overflows f16)" in text


def test_far_from_the_range_one_line_and_no_column():
    model, inputs = _scaled(10.0)
    report = bisect(model, "CPU:f32", "EMU:f16", inputs, progress=False)
    assert report.headroom(1.0) == []
    text = " ".join(report.to_text().split())
    assert "f16 headroom: every compared node's reference values stay at least 2x below 65,504" in text


def test_no_headroom_for_targets_that_do_not_run_f16():
    model, inputs = _scaled(45000.0)
    report = bisect(model, "CPU:f32", "EMU:bf16", inputs, progress=False)
    assert not report.f16_target and "f16 headroom" not in report.to_text()
    assert report.headroom(1.0)[0].name == "big"  # still a figure of the reference's values, asked for directly


def test_the_headroom_plot_marks_the_nodes_near_the_limit():
    pytest.importorskip("matplotlib")
    model, inputs = _scaled(45000.0)
    report = bisect(model, "CPU:f32", "EMU:f16", inputs, progress=False)
    fig = report.plot_headroom()
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["big"]
    assert any("within 2x" in t.get_text() for t in ax.get_legend().get_texts())


def test_with_many_samples_headroom_is_over_every_sample():
    """The examined sample is the worst by final error; the largest magnitude can come from another: headroom
    reads every sample's (the per-node pass over the samples)."""
    model, inputs = _scaled(20000.0)
    quiet = {"x": inputs["x"] * 0.5}  # reaches 10,000: 2.7 powers of two of headroom
    loud = {"x": inputs["x"] * 3.0}  # reaches 60,000: within 2x of 65,504
    report = bisect(model, "CPU:f32", "EMU:f16", [quiet, loud, quiet], progress=False)
    big = report.node("big")
    assert big.outputs[0].ref_absmax < 20000  # the examined sample is a quiet one
    assert big.ref_absmax_samples == pytest.approx(60000.0, rel=1e-6)
    assert big.f16_headroom == pytest.approx(math.log2(65504 / 60000), abs=1e-3)
    assert [n.name for n in report.headroom(1.0)] == ["big"]
    assert report.node("act").ref_absmax_samples == pytest.approx(3.0, rel=1e-6)


def test_a_value_put_at_the_f16_limit_is_no_headroom_alarm():
    # A causal mask's -65,504 (exported LLMs fill masked positions with f16's lowest) was listed as "headroom 0.0".
    model, inputs = _scaled(65504.0)
    report = bisect(model, "CPU:f32", "EMU:f16", inputs, progress=False)
    assert math.isnan(report.node("big").f16_headroom) and report.headroom(1.0) == []
    assert report.node("back").f16_headroom > 10
