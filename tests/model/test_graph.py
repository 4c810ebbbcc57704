import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov.core.errors import InputError
from bisect_ov.model.graph import ModelGraph
from tests.conftest import tiny_chain


def _shape_model() -> ov.Model:
    x = ops.parameter([2, 3, 4], np.float32, name="x")
    a = ops.relu(x, name="a")
    shape = ops.shape_of(a, name="shape")
    flat = ops.reshape(a, ops.constant(np.array([2, 12], np.int64), name="target_shape"), False, name="flat")
    back = ops.reshape(flat, shape, False, name="back")
    w = ops.constant(np.ones((4, 5), np.float32), name="w")
    mm = ops.matmul(back, w, False, False, name="mm")
    sm = ops.softmax(mm, 2, name="sm")
    red = ops.reduce_mean(sm, ops.constant(np.array([1, 2], np.int64), name="axes"), True, name="mean")
    return ov.Model([red.output(0)], [x], "shapes")


def test_nodes_in_topological_order_with_roles():
    g = ModelGraph(_shape_model())
    order = g.order
    for key in order:
        for producer, _ in g[key].inputs:
            assert order.index(producer) < order.index(key)
    kinds = {n.key: n.kind for n in g}
    assert kinds["x"] == "parameter" and kinds["w"] == "constant"
    assert kinds["shape"] == "static"  # ShapeOf chains are never culprits
    assert [n.key for n in g.candidates()] == ["a", "flat", "back", "mm", "sm", "mean"]


def test_reduction_lengths():
    g = ModelGraph(_shape_model())
    assert g["mm"].reduction_length == 4
    assert g["sm"].reduction_length == 5
    assert g["mean"].reduction_length == 3 * 5
    assert g["a"].reduction_length == 1


def test_duplicate_friendly_names_get_suffixes_and_lookup():
    x = ops.parameter([1, 2], np.float32, name="x")
    a = ops.relu(x, name="dup")
    b = ops.relu(a, name="dup")
    b.output(0).get_tensor().set_names({"my_tensor"})
    g = ModelGraph(ov.Model([b.output(0)], [x]))
    assert [n.key for n in g.candidates()] == ["dup", "dup#2"]
    assert g.find("my_tensor").key == "dup#2"
    assert g.find(1).key == "dup"
    with pytest.raises(InputError, match="Similar names"):
        g.find("du")


def test_structure_hash_is_stable_and_sensitive():
    assert ModelGraph(tiny_chain()).structure_hash() == ModelGraph(tiny_chain()).structure_hash()
    assert ModelGraph(tiny_chain()).structure_hash() != ModelGraph(tiny_chain(depth=5)).structure_hash()


def test_dynamic_shapes_are_allowed_in_the_graph():
    x = ops.parameter(ov.PartialShape([-1, 4]), np.float32, name="x")
    g = ModelGraph(ov.Model([ops.relu(x, name="r").output(0)], [x]))
    assert g["r"].outputs[0].shape is None and g["r"].outputs[0].nbytes is None


def test_generated_keys_never_collide_with_real_names():
    import numpy as np
    import openvino as ov
    from openvino import opset13 as ops

    from bisect_ov.model.graph import ModelGraph

    x = ops.parameter([1, 4], np.float32, name="x")
    a1 = ops.relu(x, name="a")
    a2 = ops.sigmoid(a1, name="a")
    real = ops.tanh(a2, name="a#2")  # a real op already named like a generated key
    a3 = ops.exp(real, name="a")
    graph = ModelGraph(ov.Model([a3.output(0)], [x], "names"))
    keys = [n.key for n in graph.candidates()]
    assert len(set(keys)) == 4
    by_key = {n.key: n.op_type for n in graph.candidates()}
    assert by_key["a#2"] == "Tanh" and by_key["a"] == "Relu"
    assert sorted(t for k, t in by_key.items() if k not in ("a", "a#2")) == ["Exp", "Sigmoid"]


def test_a_reduction_over_computed_axes_has_the_length_its_shapes_give():
    # An ONNX GlobalAveragePool arrives as a ReduceMean whose axes a small subgraph computes from the input's rank.
    import numpy as np
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 16, 16, 16], np.float32, name="x")
    rank = ops.squeeze(ops.shape_of(ops.shape_of(x)), ops.constant(0))
    axes = ops.range(ops.constant(np.int64(2)), rank, ops.constant(np.int64(1)), "i64")
    pool = ops.reduce_mean(x, axes, keep_dims=True, name="gap")
    flat = ops.reduce_sum(x, ops.constant(np.array([1, 2, 3], np.int64)), keep_dims=False, name="sum")
    g = ModelGraph(ov.Model([pool.output(0), flat.output(0)], [x]))
    assert g.find("gap").reduction_length == 256
    assert g.find("sum").reduction_length == 16 * 16 * 16
