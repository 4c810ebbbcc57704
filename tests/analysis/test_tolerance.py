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


@pytest.mark.parametrize("metric", ["max_abs", "mean_abs", "cosine_distance", "mismatch_fraction", lambda s: 0.0])
def test_a_metric_the_model_is_not_calibrated_for_needs_an_explicit_value(metric):
    with pytest.raises(InputError, match="explicit threshold"):
        Tolerance().check_metric(metric)
    with pytest.raises(InputError, match="explicit threshold"):  # a few nodes' thresholds do not cover the rest
        Tolerance(per_node={"a": 0.1}).check_metric(metric)
    Tolerance(value=0.1).check_metric(metric)


def test_every_built_in_metric_is_calibrated_or_needs_a_value():
    from bisect_ov.analysis.metrics import METRICS
    from bisect_ov.analysis.tolerance import CALIBRATED_METRICS

    assert set(CALIBRATED_METRICS) == {"rel_l2", "max_rel"} and set(CALIBRATED_METRICS) <= set(METRICS)
    for metric in CALIBRATED_METRICS:
        Tolerance().check_metric(metric)


def test_cosine_distance_without_a_tolerance_is_refused_before_compiling_with_the_rel_l2_equivalent():
    from bisect_ov import bisect
    from tests.conftest import tiny_chain

    with pytest.raises(InputError, match=r"cosine_distance.*t\*\*2 / 2"):
        bisect(tiny_chain(), "CPU", "CPU:f32", metric="cosine_distance")


def test_per_node_keys_the_model_does_not_have_are_named_before_compiling():
    from bisect_ov import bisect
    from tests.conftest import tiny_chain

    with pytest.raises(InputError, match=r"names 1 node\(s\) the model does not have: \['no_such_node'\]"):
        bisect(tiny_chain(), "CPU", "CPU:f32", tolerance=Tolerance(per_node={"no_such_node": 0.1}))
    with pytest.raises(InputError, match=r"\['MM1'\].*similar: \['mm1'\]"):
        bisect(tiny_chain(), "CPU", "CPU:f32", tolerance=Tolerance(per_node={"mm0": 0.1, "MM1": 0.1}))
    report = bisect(tiny_chain(), "CPU", "CPU:f32", tolerance=Tolerance(per_node={"mm1": 0.25}), strategy="full",
                    progress=False)
    assert report.node("mm1").tolerance == 0.25


def test_a_movement_op_carries_its_producer_s_tolerance_unless_the_user_set_one():
    import numpy as np
    import openvino as ov
    from openvino import opset13 as ops

    from bisect_ov.analysis.judge import MOVEMENT
    from bisect_ov.analysis.tolerance import Tolerance, node_thresholds
    from bisect_ov.model.graph import ModelGraph

    x = ops.parameter([1, 16, 256], np.float32, name="x")
    w = ops.constant(np.ones((256, 256), np.float32))
    mm = ops.matmul(x, w, False, False, name="mm")
    t = ops.transpose(mm, ops.constant(np.array([0, 2, 1], np.int64)), name="t")
    act = ops.relu(t, name="act")
    graph = ModelGraph(ov.Model([act.output(0)], [x]))
    keys = {n.name: n.key for n in graph}
    found = node_thresholds(Tolerance(precision="bf16"), graph, MOVEMENT)
    assert found[(keys["t"], 0)] == found[(keys["mm"], 0)] > found[(keys["act"], 0)]  # K = 256 vs elementwise
    assert node_thresholds(Tolerance(precision="bf16", value=1e-3), graph, MOVEMENT)[(keys["t"], 0)] == 1e-3
    per_node = node_thresholds(Tolerance(precision="bf16", per_node={"t": 5e-4}), graph, MOVEMENT)
    assert per_node[(keys["t"], 0)] == 5e-4


def _pool_with_ties():
    """x * 1 -> MaxPool (values and i64 indices) -> Relu, and an input whose every 2x2 window holds four values
    within f16's rounding of each other (the largest last): on f16 they tie, so the indices change."""
    import numpy as np
    import openvino as ov
    from openvino import opset8
    from openvino import opset13 as ops

    x = ops.parameter([1, 4, 8, 8], np.float32, name="x")
    scaled = ops.multiply(x, ops.constant(np.float32(1.0)), name="scale")
    pool = opset8.max_pool(scaled, [2, 2], [1, 1], [0, 0], [0, 0], [2, 2], index_element_type="i64", name="pool")
    act = ops.relu(pool.output(0), name="act")
    rng = np.random.default_rng(0)
    coarse = rng.uniform(1, 2, (1, 4, 4, 4)).astype(np.float32)
    values = np.repeat(np.repeat(coarse, 2, 2), 2, 3) + np.tile(np.array([[0, 1e-4], [2e-4, 3e-4]], np.float32), (4, 4))
    return ov.Model([act.output(0)], [x], "pool_ties"), {"x": values}


def test_a_selection_s_indices_do_not_count_toward_its_error():
    from bisect_ov import bisect, inject_fault
    from bisect_ov.analysis.tolerance import Tolerance
    from bisect_ov.model.graph import ModelGraph
    from bisect_ov.pipeline.plan import make_plan

    model, inputs = _pool_with_ties()
    graph = ModelGraph(model)
    pool = next(n for n in graph if n.name == "pool")
    plan = make_plan(Tolerance(precision="f16"), graph)
    assert not plan.counts(pool.key, 1) and plan.counts(pool.key, 0) and plan.node(pool.key, 1) == float("inf")

    clean = bisect(model, "CPU:f32", "EMU:f16", inputs, progress=False)
    node = clean.node("pool")
    assert node.outputs[1].mismatches > 0  # the ties did change the indices; they are still compared and shown
    assert not node.diverged and not clean.diverges and node.error == pytest.approx(node.outputs[0].rel_l2)

    faulty = bisect(model, "CPU:f32", "EMU:f16", inputs, progress=False,
                    target_model=inject_fault(model, "scale", kind="scale", magnitude=0.2))
    assert [n.name for n in faulty.first_divergences] == ["scale"]
    assert faulty.node("pool").role == "inherits"  # not an amplifier for indices that moved with ties
