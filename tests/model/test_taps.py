import numpy as np
import openvino as ov

from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.taps import Tap, default_taps, plan_chunks, tap_model
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
