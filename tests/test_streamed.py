"""Streamed measurement: a model whose taps exceed `max_tap_bytes` runs segment by segment on each side.

The fault is made by the target device itself (a CPU device that perturbs one node of whatever it compiles,
whole model or segment), so one model runs on both sides and the streamed path is the one taken: the tool
must name the node, measure what one compile measures, and hold only one segment's tensors at a time.
"""

from __future__ import annotations

import numpy as np
import pytest

from bisect_ov import bisect, make_device
from bisect_ov.engine.streamed import stream
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.partition import plan_segments
from bisect_ov.model.taps import Tap, default_taps, tensor_sizes
from bisect_ov.pipeline.options import BisectOptions
from bisect_ov.pipeline.stages import open_comparison, run_untouched
from tests.conftest import FAULT_SHAPES, FaultyCPU, every, float_sites, needs_bf16, shape_inputs, shape_model

SHAPES = FAULT_SHAPES


def _budget(shape: str) -> int:
    """A third of the model's tensors: the streamed path with a few segments."""
    graph = ModelGraph(shape_model(shape))
    sizes = tensor_sizes(graph, list(shape_inputs(shape).values()))
    return max(1, sum(sizes.get(t, 0) for t in default_taps(graph)) // 3)


def _sites(shape: str) -> list[str]:
    return float_sites(shape)[::3]


CASES = every([(shape, node) for shape in SHAPES for node in _sites(shape)], 2)


@pytest.mark.parametrize("shape, node", CASES, ids=[f"{s}:{n}" for s, n in CASES])
def test_a_streamed_run_names_the_fault(shape, node):
    report = bisect(shape_model(shape), "CPU:f32", FaultyCPU(node), shape_inputs(shape), max_tap_bytes=_budget(shape),
                    strategy="full", noise=False, impact=0, progress=False)
    assert report.costs["measure"]["ref_compiles"] >= 2  # it was streamed: one compile per segment and side
    first = report.first_divergence
    if first is None:  # a fault the network takes out again must then leave the outputs within tolerance
        assert not report.diverges, report.to_text()
        return
    assert first.name == node, report.to_text()
    assert first.role == "source" and first.local_error is not None


@pytest.mark.parametrize("shape", SHAPES)
def test_streaming_measures_what_one_compile_measures(shape):
    node = _sites(shape)[len(_sites(shape)) // 2]
    common = {"strategy": "full", "noise": False, "impact": 0, "local": False, "progress": False}
    whole = bisect(shape_model(shape), "CPU:f32", FaultyCPU(node), shape_inputs(shape), **common)
    streamed = bisect(shape_model(shape), "CPU:f32", FaultyCPU(node), shape_inputs(shape), max_tap_bytes=_budget(shape),
                      **common)
    assert whole.costs["measure"]["target_compiles"] == 1 < streamed.costs["measure"]["target_compiles"]
    assert [n.name for n in streamed.nodes] == [n.name for n in whole.nodes]
    for a, b in zip(whole.nodes, streamed.nodes):
        assert b.error == pytest.approx(a.error, rel=1e-3, abs=1e-7), a.name
    assert streamed.fidelity is not None and not streamed.fidelity.warning


@pytest.mark.parametrize("shape", SHAPES)
def test_segments_end_only_where_every_float_tensor_crossing_is_a_tap(shape):
    graph = ModelGraph(shape_model(shape))
    order = [n.key for n in graph.candidates()]
    sizes = tensor_sizes(graph, list(shape_inputs(shape).values()))
    taps = set(default_taps(graph)[::2])  # half the tensors: some cuts are not allowed
    parts = plan_segments(graph, order, taps, sizes, max_bytes=1)
    assert [k for p in parts for k in p] == order
    position = {k: i for i, k in enumerate(order)}
    for part in parts[:-1]:
        end = position[part[-1]]
        for key in order[: end + 1]:
            for t in graph[key].outputs:
                readers = [c for c in graph.consumers(key)
                           if any(pp == t.port for pp, _ in graph.graph.edges[key, c]["ports"])]
                crosses = any(graph[c].kind == "result" or position.get(c, -1) > end for c in readers)
                if crosses and t.is_float:
                    assert Tap(key, t.port) in taps, (part[-1], key)
    assert len(plan_segments(graph, order, taps, sizes, max_bytes=1 << 40)) == 1


def test_a_streamed_run_holds_one_segment_at_a_time():
    shape = "chain"
    graph = ModelGraph(shape_model(shape))
    sizes = tensor_sizes(graph, list(shape_inputs(shape).values()))
    taps = default_taps(graph)
    total = sum(sizes[t] for t in taps)
    budget = total // 6
    options = BisectOptions(progress=False, noise=False)
    setup = open_comparison(shape_model(shape), "CPU:f32", "CPU:f32", shape_inputs(shape), None, options)
    engine = run_untouched(setup).engine
    held: list[int] = []
    stats = {}
    for part in stream(engine.runner, engine.sample, taps, budget, target_runtime=engine.untouched.target_runtime,
                       sizes=engine.tensor_sizes):
        stats.update(part.stats)
        if part.values is not None:  # the reference's values held while this segment is
            held.append(sum(np.asarray(v).nbytes for v in part.values.values()))
    assert len(stats) == len(taps) and len(held) >= 5
    largest = max(sizes[t] for t in taps)
    assert max(held) <= budget + 2 * largest + sum(np.asarray(a).nbytes for a in shape_inputs(shape).values())
    assert max(held) < total / 2


FUSION_CASES = [(shape, node) for shape in ("conv_bn_net", "attention_block") for node in _sites(shape)]


@pytest.mark.parametrize("shape, node", FUSION_CASES, ids=[f"{s}:{n}" for s, n in FUSION_CASES])
def test_a_streamed_run_of_fusion_taps_names_the_fault(shape, node):
    # The default strategy: segments end only at fusion-group boundaries; groups are refined where they make error.
    report = bisect(shape_model(shape), "CPU:f32", FaultyCPU(node), shape_inputs(shape), max_tap_bytes=_budget(shape) // 2,
                    noise=False, impact=0, progress=False)
    assert report.strategy == "fusion" and report.costs["measure"]["ref_compiles"] >= 2
    assert report.first_divergence is not None and report.first_divergence.name == node, report.to_text()


@pytest.mark.parametrize("shape", ["attention_block", "conv_bn_net"])
def test_against_a_lower_precision_target_the_streamed_run_is_the_plain_run_of_the_reference(shape):
    # No node diverges here, so the reference's whole model never compiles: its plain run is the streamed
    # measurement, whose segments give its final outputs, and the capture stage takes what was measured there.
    model = shape_model(shape)
    whole = bisect(model, "CPU:f32", "EMU:f16", shape_inputs(shape), progress=False)
    streamed = bisect(model, "CPU:f32", "EMU:f16", shape_inputs(shape), max_tap_bytes=_budget(shape) // 2,
                      progress=False)
    assert streamed.costs["plain"]["ref_compiles"] >= 2 and streamed.costs["measure"]["ref_compiles"] == 0
    assert streamed.costs["measure"]["target_compiles"] == 0
    assert sum(c["ref_compiles"] for k, c in streamed.costs.items() if k != "plain") == 0
    assert [n.name for n in streamed.nodes] == [n.name for n in whole.nodes]
    for a, b in zip(whole.nodes, streamed.nodes):
        assert b.error == pytest.approx(a.error, rel=1e-3, abs=1e-7), a.name
    for a, b in zip(whole.outputs, streamed.outputs):
        assert b.error == pytest.approx(a.error, rel=1e-6, abs=1e-9)
    assert streamed.ref.precision == "f32" and sum(streamed.ref.precision_counts.values()) > 0


@needs_bf16
@pytest.mark.parametrize("shape", SHAPES)
def test_against_bf16_the_streamed_run_measures_what_one_compile_measures(shape):
    # The default strategy against the CPU's own bf16: each piece types what it only hands out for comparison
    # in bf16, as one tapped compile does, and exposes only the tensors the target compares; then its kernels
    # run in the precisions of the whole model's, and every measured error is the unstreamed run's. The one
    # exception: a tensor the target stores in f32 (a residual sum) is handed to the next piece in f32, so the
    # streamed run reports it unrounded, where one compile reports it rounded to bf16 like every tap.
    model = shape_model(shape)
    common = {"noise": False, "impact": 0, "local": False, "progress": False}
    whole = bisect(model, "CPU:f32", "CPU:bf16", shape_inputs(shape), **common)
    streamed = bisect(model, "CPU:f32", "CPU:bf16", shape_inputs(shape), max_tap_bytes=_budget(shape) // 2, **common)
    assert streamed.costs["plain"]["target_compiles"] >= 3  # the untouched target, then one per segment
    assert [n.name for n in streamed.nodes] == [n.name for n in whole.nodes]
    stored = make_device("CPU:bf16").compile(model).runtime.by_original  # what the untouched target stores
    exact = 0
    for a, b in zip(whole.nodes, streamed.nodes):
        if a.key in stored and "f32" in stored[a.key].output_precisions:
            assert abs(b.error - a.error) <= 2**-8, a.name  # at most one bf16 rounding apart
        else:
            assert b.error == pytest.approx(a.error, rel=1e-6, abs=1e-9), a.name
            exact += 1
    assert exact >= len(whole.nodes) // 2
    for a, b in zip(whole.outputs, streamed.outputs):
        assert b.error == pytest.approx(a.error, rel=1e-6, abs=1e-9), a.name
