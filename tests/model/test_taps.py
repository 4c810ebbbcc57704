import numpy as np
import openvino as ov

from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.taps import Tap, default_taps, plan_chunks, tap_model, tensor_sizes
from tests.conftest import tiny_chain


def test_tapped_copy_exposes_tensors_and_leaves_the_model_alone():
    model = tiny_chain()
    g = ModelGraph(model)
    taps = default_taps(g)
    tapped = tap_model(g, taps)
    assert len(model.outputs) == 1  # the user's model is untouched
    assert len(tapped.model.outputs) == 1 + len(taps) - 1  # tanh3 already is the output
    compiled = ov.Core().compile_model(tapped.model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    x = np.ones((1, 8), np.float32)
    out = compiled(x)
    # mm0 by hand: the tap shows the real intermediate value.
    w0 = g.ops_of(model, ["w0"])[0].get_data()
    np.testing.assert_allclose(out[tapped.tap_outputs[taps.index(Tap("mm0"))]], x @ w0, rtol=1e-5)
    assert tapped.tap_outputs[taps.index(Tap("tanh3"))] == 0


def test_chunks_respect_the_byte_budget():
    g = ModelGraph(tiny_chain(depth=6))
    taps = default_taps(g)
    per_tensor = 8 * 4
    chunks = plan_chunks(g, taps, max_bytes=3 * per_tensor)
    assert [len(c) for c in chunks] == [3, 3, 3, 3]
    assert [t for c in chunks for t in c] == taps
    assert plan_chunks(g, taps, None) == [taps]


def _dynamic_chain(depth: int = 6) -> ov.Model:
    model = tiny_chain(depth=depth)
    model.reshape({model.inputs[0]: ov.PartialShape([-1, 8])})  # a dynamic batch, as exports often have
    return model


def test_tensor_sizes_follow_the_inputs_of_a_dynamic_model():
    g = ModelGraph(_dynamic_chain())
    taps = default_taps(g)
    assert all(g[t.key].outputs[t.port].nbytes is None for t in taps)  # unknown from the model alone
    sizes = tensor_sizes(g, [np.ones((5, 8), np.float32)])
    assert {sizes[t] for t in taps} == {5 * 8 * 4}
    # Without sizes, dynamic tensors count as zero and the budget cannot split them; with sizes it does.
    assert len(plan_chunks(g, taps, max_bytes=3 * 5 * 8 * 4)) == 1
    assert [len(c) for c in plan_chunks(g, taps, 3 * 5 * 8 * 4, sizes)] == [3, 3, 3, 3]


def test_the_tap_budget_splits_a_dynamic_model_into_compiles():
    from bisect_ov import bisect

    model = _dynamic_chain()
    x = {"x": np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)}
    whole = bisect(model, "CPU:f32", "CPU:f32", x, strategy="full", local=False, noise=False, progress=False)
    split = bisect(model, "CPU:f32", "CPU:f32", x, strategy="full", local=False, noise=False, progress=False,
                   max_tap_bytes=3 * 5 * 8 * 4)
    assert whole.costs["measure"]["target_compiles"] == 1
    assert split.costs["measure"]["target_compiles"] == 4
    assert len(split.nodes) == len(whole.nodes) == 12
