import numpy as np
import openvino as ov
import pytest

from bisect_ov.core.errors import InputError
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.inject import FAULT_KINDS, inject_fault
from tests.conftest import tiny_chain

CFG = {"INFERENCE_PRECISION_HINT": "f32"}


def _run(model, x):
    return ov.Core().compile_model(model, "CPU", CFG)(x)[0]


@pytest.mark.parametrize("kind", sorted(FAULT_KINDS))
def test_fault_changes_the_output_and_keeps_names(kind):
    model = tiny_chain()
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    faulty = inject_fault(model, "mm1", kind)
    assert not np.array_equal(_run(model, x), _run(faulty, x), equal_nan=False)
    g = ModelGraph(faulty)
    assert g.find("mm1").op_type != "MatMul"  # the perturbing op now carries the name
    assert g.find("mm1/before_fault").op_type == "MatMul"
    assert {n.name for n in ModelGraph(model)} <= {n.name for n in g}
    assert len(ModelGraph(model).candidates()) == 8  # the original is untouched


def test_bad_requests_are_clear():
    model = tiny_chain()
    with pytest.raises(InputError, match="Unknown fault kind"):
        inject_fault(model, "mm1", "explode")
    with pytest.raises(InputError, match="No node named"):
        inject_fault(model, "nope")
    with pytest.raises(InputError, match="compute nodes"):
        inject_fault(model, "w0")


def _values(model, node, x):
    """Node `node`'s output on the CPU in f32."""
    clone = model.clone()
    (op,) = ModelGraph(clone).ops_of(clone, [ModelGraph(clone).find(node).key])
    clone.add_outputs([op.output(0)])
    return ov.Core().compile_model(clone, "CPU", CFG)(x)[len(clone.outputs) - 1]


@pytest.mark.parametrize("kind, magnitude", [("mnoise", 0.2), ("roffset", 0.2), ("sparse", 1.0), ("signflip", 0.25)])
def test_the_benchmark_s_fault_shapes_change_what_they_say(kind, magnitude):
    model = tiny_chain()
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    clean = _values(model, "mm1", x)
    bad = _values(inject_fault(model, "mm1", kind, magnitude, seed=3), "mm1", x)
    ratio = bad / np.where(clean == 0, 1, clean)
    if kind == "mnoise":  # elementwise 1 + 0.2 N(0, 1): every element moved, by about 0.2 on average
        assert np.all(ratio != 1) and 0.05 < np.std(ratio) < 0.5
    elif kind == "roffset":  # one offset, 0.2 of the tensor's rms
        offset = bad - clean
        assert np.allclose(offset, offset.flat[0], rtol=1e-5) and np.isclose(offset.flat[0], 0.2 * np.sqrt(np.mean(clean ** 2)),
                                                                              rtol=1e-4)
    elif kind == "sparse":  # one element of the 8 doubled, the rest untouched
        assert np.sum(~np.isclose(ratio, 1)) == 1 and np.isclose(ratio[~np.isclose(ratio, 1)], 2).all()
    else:  # a quarter of the 8 elements negated
        assert np.sum(np.isclose(ratio, -1)) == 2 and np.sum(np.isclose(ratio, 1)) == 6


@pytest.mark.parametrize("kind", ["mnoise", "sparse", "signflip", "noise"])
def test_the_random_fault_shapes_work_on_dynamic_tensors_and_repeat(kind):
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter(ov.PartialShape([1, -1]), np.float32, name="x")
    y = ops.relu(ops.add(x, ops.constant(np.float32(2.0))), name="y")
    model = ov.Model([ops.negative(y, name="z").output(0)], [x])
    faulty = inject_fault(model, "y", kind, 0.2 if kind != "sparse" else 1.0, seed=1)
    data = np.random.default_rng(0).uniform(0, 1, (1, 100_000)).astype(np.float32)  # longer than the draws' table
    request = ov.Core().compile_model(faulty, "CPU", CFG).create_infer_request()
    bad = request.infer([data])[0].copy()
    assert np.array_equal(bad, request.infer([data])[0])  # the same draws at every inference of one compile
    assert np.array_equal(bad, _run(faulty, data))  # and of another compile
    clean = _run(model, data)
    ratio = bad / clean
    if kind == "mnoise":
        assert abs(np.std(ratio) - 0.2) < 0.02 and abs(np.mean(ratio) - 1) < 0.01
    elif kind == "sparse":
        assert 0 < np.sum(~np.isclose(ratio, 1)) < 300 and np.isclose(ratio[~np.isclose(ratio, 1)], 2).all()
    elif kind == "signflip":
        assert abs(np.mean(np.isclose(ratio, -1)) - 0.2) < 0.02
    else:
        assert abs(np.std(bad - clean) - 0.2) < 0.02


@pytest.mark.parametrize("size", [16, 100, 1024, 5000])
def test_a_sparse_fault_on_a_dynamic_tensor_picks_at_least_one_element_whatever_its_size(size):
    # The picks come from a table cut to the size at run time: stratified, with the first among the first 16
    # values, so a short tensor is never left without one (a uniform draw left a third of 1,024-value tensors so).
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter(ov.PartialShape([1, -1]), np.float32, name="x")
    y = ops.relu(ops.add(x, ops.constant(np.float32(2.0))), name="y")
    model = ov.Model([ops.negative(y, name="z").output(0)], [x])
    data = np.random.default_rng(0).uniform(0, 1, (1, size)).astype(np.float32)
    clean = _run(model, data)
    for seed in range(5):
        moved = np.sum(~np.isclose(_run(inject_fault(model, "y", "sparse", seed=seed), data) / clean, 1))
        assert 1 <= moved <= size // 1000 + 1, (seed, moved)
