"""Scoring on hand-made error maps: no device involved."""

import math

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov.analysis.scoring import score_graph
from bisect_ov.model.graph import ModelGraph


def _two_branches() -> ModelGraph:
    x = ops.parameter([1, 4], np.float32, name="x")
    a = ops.relu(x, name="a")
    b = ops.sigmoid(a, name="b")
    c = ops.tanh(a, name="c")
    b2 = ops.exp(b, name="b2")
    c2 = ops.negative(c, name="c2")
    d = ops.add(b2, c2, name="d")
    return ModelGraph(ov.Model([d.output(0)], [x]))


TOL = 1e-3


def _score(errors: dict[str, float]):
    g = _two_branches()
    keys = [n.key for n in g.candidates()]
    full = {(k, 0): errors.get(k, 0.0) for k in keys}
    return score_graph(g, full, {k: TOL for k in keys})


def test_single_source_is_first_and_downstream_inherits():
    s = _score({"b": 0.1, "b2": 0.1, "d": 0.05})
    assert s.first == ("b",)
    assert s.nodes["b"].role == "source"
    assert s.nodes["b2"].role == "inherits" and s.nodes["d"].role == "inherits"
    assert s.ranking[0] == "b"


def test_amplifier_is_told_apart_from_source():
    s = _score({"b": 0.01, "b2": 0.5, "d": 0.5})
    assert s.nodes["b"].role == "source"
    assert s.nodes["b2"].role == "amplifier" and s.nodes["b2"].growth == pytest.approx(50)
    assert s.first == ("b",)
    assert s.ranking[:2] == ("b", "b2")


def test_independent_branches_give_two_first_divergences():
    s = _score({"b": 0.1, "c": 0.2, "b2": 0.1, "c2": 0.2, "d": 0.2})
    assert set(s.first) == {"b", "c"}


def test_nothing_over_tolerance_means_no_culprit():
    s = _score({"a": TOL / 2, "b": TOL / 2})
    assert s.first == () and s.ranking == ()
    assert all(n.role == "ok" for n in s.nodes.values())


def test_slow_drift_has_no_source():
    # Each node adds a little: the crossing node grows what it got by less than min_growth.
    s = _score({"a": 0.9 * TOL, "b": 1.1 * TOL, "b2": 1.2 * TOL, "d": 1.2 * TOL})
    assert s.first == ()
    assert s.nodes["b"].role == "inherits"


def test_nan_source_is_infinite_growth_and_consumers_inherit():
    s = _score({"c": math.inf, "c2": math.inf, "d": math.nan})
    assert s.first == ("c",)
    assert math.isinf(s.nodes["c"].growth)
    assert s.nodes["c2"].role == "inherits" and s.nodes["d"].role == "inherits"


def test_unmeasured_nodes_pass_their_inputs_error_on():
    g = _two_branches()
    errors = {("b", 0): 0.1, ("d", 0): 0.1}  # b2 not measured
    s = score_graph(g, errors, {"b": TOL, "d": TOL})
    assert s.nodes["d"].inherited == pytest.approx(0.1)
    assert s.nodes["d"].role == "inherits" and s.first == ("b",)


def test_a_reader_that_only_carries_an_absorbed_node_s_error_on_is_no_source():
    # b is absorbed (a bystander: its error, 4x its tolerance, barely moves the outputs); b2 carries that error on
    # (an ONNX convolution's bias Add): it grows nothing, so it inherits and names nothing. Measured against b's
    # tolerance instead of b's error, b2 had growth 4 and was named the first divergence of an MNASNet on f16.
    keys = [n.key for n in _two_branches().candidates()]
    g = _two_branches()
    errors = {(k, 0): {"b": 4 * TOL, "b2": 4 * TOL, "c": 0.1, "c2": 0.1, "d": 0.1}.get(k, 0.0) for k in keys}
    s = score_graph(g, errors, {k: TOL for k in keys}, absorbed={"b"})
    assert s.nodes["b"].role == "absorbed" and s.nodes["b2"].role == "inherits", s.nodes["b2"]
    assert s.nodes["b2"].inherited == pytest.approx(4 * TOL) and s.first == ("c",)
    # Its reader growing the error it was handed is a source (the absorbed node is no amplifier's upstream).
    errors[("b2", 0)] = 40 * TOL
    grown = score_graph(g, errors, {k: TOL for k in keys}, absorbed={"b"})
    assert grown.nodes["b2"].role == "source" and set(grown.first) == {"b2", "c"}


def test_a_tap_whose_sides_differ_in_shape_is_not_compared():
    # A plugin can hand back the tensor it fused a tap into (the CPU's RoPE kernel gave a partial-rotary Add the
    # shape of the Concat after it): the two sides then differ in shape, and the tap was compared as an infinite
    # error, its node a source of 'inf'. It is set aside with the shapes instead, and its readers carry on.
    from bisect_ov.analysis.metrics import compare
    from bisect_ov.engine.measured import Measured, Part
    from bisect_ov.model.taps import Tap

    rng = np.random.default_rng(0)
    wide, narrow = rng.standard_normal((1, 4, 16, 16)), rng.standard_normal((1, 4, 16, 4))
    first = Part({Tap("add", 0): compare(wide, narrow), Tap("cat", 0): compare(wide, wide)})
    measured = Measured.of([first])
    assert set(measured.stats) == {Tap("cat", 0)}
    assert measured.misshapen == {Tap("add", 0): "reference [1, 4, 16, 16], target [1, 4, 16, 4]"}
    again = measured.plus(Measured.of([Part({Tap("mul", 0): compare(narrow, narrow)})]))
    assert set(again.stats) == {Tap("cat", 0), Tap("mul", 0)} and Tap("add", 0) in again.misshapen
