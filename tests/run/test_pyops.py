"""Tests of bisect_ov.run.pyops: an emulated model's graph is freed with its compile.

OpenVINO's Python ops are never freed (the C++ node holds its Python object), and each holds the graph above
it: without `pyops.release`, every emulated compile kept its model's weights in memory for good.
"""

from __future__ import annotations

import gc
import sys

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov.run import pyops
from bisect_ov.run.devices import make_device
from bisect_ov.run.emulate import EmulatedRound, emulate_precision
from bisect_ov.run.emulate_ir import saveable_emulation

WIDTH = 4096  # a 4096 x 4096 f32 weight: 64 MB


def weighted_model(seed: int = 0) -> ov.Model:
    rng = np.random.default_rng(seed)
    x = ops.parameter([1, WIDTH], ov.Type.f32, name="x")
    w = ops.constant(rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) / 64)
    return ov.Model([ops.relu(ops.matmul(x, w, False, False))], [x], "weighted")


def holders_of_weights() -> int:
    """Emulation ops alive that still hold a MatMul above them (directly or through ops between)."""
    gc.collect()

    def holds_matmul(node: ov.Node, depth: int = 0) -> bool:
        if node.get_type_name() == "MatMul":
            return True
        return depth < 4 and any(holds_matmul(v.get_node(), depth + 1) for v in node.input_values())

    return sum(1 for o in gc.get_objects() if isinstance(o, EmulatedRound) and holds_matmul(o))


def test_an_emulated_compile_frees_its_graph_when_it_is_released():
    before = holders_of_weights()
    device = make_device("EMU:f16")
    x = np.ones((1, WIDTH), np.float32)
    compiled = device._compile(weighted_model())
    expected = compiled.infer([x], share_outputs=False)[0]
    assert holders_of_weights() > before  # alive while the compile is
    again = compiled.another()
    del compiled
    assert holders_of_weights() > before  # another infer request on the same compile keeps it
    np.testing.assert_array_equal(again.infer([x], share_outputs=False)[0], expected)
    del again
    assert holders_of_weights() == before


def test_rewriting_without_python_ops_frees_the_ops_it_replaced():
    before = holders_of_weights()
    saved = saveable_emulation(weighted_model(), "f16")
    assert not any(n.get_type_name().startswith("Emulated") for n in saved.get_ordered_ops())
    assert holders_of_weights() == before


def test_ops_made_outside_a_block_are_left_alone():
    with pyops.collecting() as made:
        pass
    emulated = emulate_precision(weighted_model(), "f16")  # no block: the caller owns it, nothing is released
    assert made == []
    compiled = ov.Core().compile_model(emulated, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    assert np.isfinite(compiled([np.ones((1, WIDTH), np.float32)])[0]).all()


def test_nested_blocks_gather_into_the_outer_one():
    with pyops.collecting() as outer:
        with pyops.collecting() as inner:
            emulate_precision(weighted_model(), "f16")
        assert inner and all(op in outer for op in inner)
    pyops.release(outer)
    assert outer == [] and inner and all(v.get_node().get_type_name() == "Parameter"
                                         for op in inner for v in op.input_values())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the resident memory from /proc")
def test_memory_stays_flat_over_many_emulated_compiles():
    """Five compiles of a model holding 64 MB of weights: without the release each kept its rounded copy
    (about 64 MB a compile)."""
    device = make_device("EMU:f16")
    x = np.ones((1, WIDTH), np.float32)

    def resident_mb() -> float:
        gc.collect()
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20

    model = weighted_model()
    device._compile(model).infer([x])  # the first compile's one-off allocations
    start = resident_mb()
    for _ in range(5):
        device._compile(model).infer([x])
    assert resident_mb() - start < 128
