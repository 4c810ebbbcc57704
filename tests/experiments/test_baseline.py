"""The rounding-only baseline and what it decides: a fault a little more than rounding is named as the origin
even when the final outputs stay within tolerance; what only rounding does is not; absorbed error is named
where it starts."""

from __future__ import annotations

import math

import pytest

from bisect_ov import bisect, inject_fault
from bisect_ov.experiments.baseline import EXCESS, baseline_device
from tests.conftest import every, float_sites, needs_bf16, shape_inputs, shape_model

SHAPES = ("attention_block", "conv_bn_net")
CASES = [(shape, site) for shape in SHAPES for site in float_sites(shape)]


def _named(report, site: str) -> bool:
    return any(site == n.name or site in n.group for n in report.first_divergences)


def _check(report, site: str) -> None:
    """Whatever the outputs do: a fault that moves them clearly beyond rounding is named; one rounding hides is
    not blamed on another node."""
    worst = max(report.outputs, key=lambda o: o.error)
    if worst.diverged:
        assert _named(report, site), report.to_text(width=140)
        return
    if worst.expected is None:  # no node makes error of its own over its tolerance: nothing may be named
        assert report.first_divergence is None, report.to_text(width=140)
    elif worst.error > 1.5 * worst.expected:
        assert _named(report, site), report.to_text(width=140)
    elif worst.error <= worst.expected:
        assert report.first_divergence is None or _named(report, site), report.to_text(width=140)


@pytest.mark.parametrize("shape, site", every(CASES, 2, 1), ids=[f"{s}:{n}" for s, n in every(CASES, 2, 1)])
def test_a_fault_a_little_more_than_rounding_is_named_on_an_emulated_bf16_target(shape, site):
    # The twin carries a 20% fault; the target rounds like bf16 (emulated, so on any CPU).
    model = shape_model(shape)
    report = bisect(model, "CPU:f32", "EMU:bf16", shape_inputs(shape), target_model=inject_fault(model, site, "scale", 0.2),
                    progress=False)
    _check(report, site)


@needs_bf16
@pytest.mark.parametrize("shape, site", CASES[::3], ids=[f"{s}:{n}" for s, n in CASES[::3]])
def test_a_fault_a_little_more_than_rounding_is_named_on_the_cpus_bf16(shape, site):
    model = shape_model(shape)
    report = bisect(model, "CPU:f32", "CPU:bf16", shape_inputs(shape), target_model=inject_fault(model, site, "scale", 0.2),
                    progress=False)
    _check(report, site)


def test_the_within_tolerance_regime_is_exercised():
    """At least one fault of each shape leaves the outputs within tolerance and is still named (the regime the
    baseline is for), so the parametrized tests above do test it."""
    for shape, site in (("attention_block", "ln1/mean"), ("conv_bn_net", "res/bn_a")):
        model = shape_model(shape)
        report = bisect(model, "CPU:f32", "EMU:bf16", shape_inputs(shape),
                        target_model=inject_fault(model, site, "scale", 0.2), progress=False)
        worst = max(report.outputs, key=lambda o: o.error)
        assert not worst.diverged and worst.over_expected is not None and worst.over_expected > 1.5
        assert report.first_divergence is not None and report.first_divergence.name == site
        node = report.node(site)
        assert node.expected_error is not None and node.local_error / node.expected_error >= EXCESS
        assert "what its precision explains" in report.to_text(width=140)


@needs_bf16
@pytest.mark.parametrize("shape", SHAPES)
def test_what_bf16_rounding_alone_does_is_not_a_divergence(shape):
    report = bisect(shape_model(shape), "CPU:f32", "CPU:bf16", shape_inputs(shape), progress=False)
    assert report.first_divergence is None and not report.diverges, report.to_text(width=140)
    worst = max(report.outputs, key=lambda o: o.error)
    assert worst.expected is None or worst.over_expected < 2.5  # measured only where a node could be an origin


def test_the_baseline_applies_to_low_precision_targets_only():
    from bisect_ov.engine.comparison import Comparison
    from bisect_ov.model.graph import ModelGraph
    from bisect_ov.model.match import identity_match, match_nodes
    from bisect_ov.run.devices import make_device

    graph = ModelGraph(shape_model("chain"))
    f32, emu = make_device("CPU:f32", role="ref"), make_device("EMU:bf16")
    one = Comparison(graph, graph, identity_match(graph), f32, emu)
    assert baseline_device(one, "bf16") is None  # the emulated target *is* the rounding
    twin = ModelGraph(inject_fault(graph.model, "layer0/matmul"))
    two = Comparison(graph, twin, match_nodes(graph, twin), f32, emu)
    assert baseline_device(two, "bf16") == "EMU:bf16" and baseline_device(two, "f16") == "EMU:f16"
    assert baseline_device(two, "f32") is None


def test_the_baseline_can_be_switched_off():
    model = shape_model("attention_block")
    report = bisect(model, "CPU:f32", "EMU:bf16", shape_inputs("attention_block"), baseline=False,
                    target_model=inject_fault(model, "ln1/mean", "scale", 0.2), progress=False)
    assert all(o.expected is None for o in report.outputs) and all(n.expected_error is None for n in report.nodes)


# ----- the origin rule on records ----------------------------------------------------------------------------
def _origins(local, expected, impact, output_error=0.02, tolerance=0.03):
    """The origins the judge finds for one diverged node 'a' (error 0.05 over 0.03) with all outputs within."""
    from bisect_ov.analysis.judge import Evidence, Topology, judge

    graph = Topology([("x", "Parameter", ()), ("a", "Add", ("x",)), ("out", "Result", ("a",))])
    ev = Evidence(errors={("a", 0): 0.05}, tolerances={"a": 0.03}, outputs=((output_error, tolerance),),
                  local={"a": local}, expected={"a": expected} if expected is not None else {},
                  impacts={"a": impact} if impact is not None else {})
    return list(judge(graph, ev).origins)


@pytest.mark.parametrize("local, expected, impact, origin", [
    (0.2, 0.004, None, True),      # 50x what rounding gives: an origin whatever the outputs do
    (0.2, 0.004, 0.02, True),
    (0.2, 0.004, 0.001, True),     # barely moves the outputs, but 50x its rounding: a defect rounding hides
    (0.01, 0.004, 0.02, False),    # within its own tolerance: what it shows, it inherited
    (0.05, 0.04, None, False),     # about what rounding gives, impact unknown
    (0.05, 0.04, 0.015, True),     # most of the final error is its doing
    (0.05, None, 0.015, True),     # no baseline: its impact decides
    (0.05, None, None, False),
])
def test_an_origin_makes_its_own_error_and_matters(local, expected, impact, origin):
    assert (_origins(local, expected, impact) == ["a"]) == origin


def test_most_of_a_noise_level_error_makes_no_origin():
    # Two f32 runs agreeing to 1e-7: a node that "makes most of" that is no defect.
    assert _origins(0.05, None, 1e-7, output_error=1.5e-7, tolerance=1e-6) == []


def test_absorbed_error_is_named_where_it_starts_not_where_it_is_largest():
    from bisect_ov.report.report import NodeResult
    from bisect_ov.report.view import absorbed_start

    def node(name, index, error, growth, local=None):
        return NodeResult(name, name, "Add", index, error, error / max(growth, 1e-9), 0.03, growth, "absorbed",
                          local_error=local)

    early = node("early", 1, 0.05, 8.0, local=0.05)
    big = node("big", 5, 0.4, 1.0, local=0.004)
    assert absorbed_start([big, early]) is early
    assert absorbed_start([big, node("grown", 3, 0.06, 3.0)]).name == "grown"
    assert math.isfinite(early.error)


def test_a_movement_unit_without_a_baseline_gets_the_rounding_bound_and_no_other_unit_does():
    """Where the plugin refused a unit's baseline piece, a unit of ops that only move values is bounded by the
    unit roundoff (it adds no rounding of its own); a unit with arithmetic, or under an uncalibrated metric, gets
    nothing it did not measure."""
    from types import SimpleNamespace

    from bisect_ov.analysis.tolerance import Tolerance, unit_roundoff
    from bisect_ov.experiments.baseline import Baseline
    from bisect_ov.pipeline.decide import expected

    plan = SimpleNamespace(tolerance=Tolerance(precision="bf16"), movement=frozenset({"gather", "t", "view"}),
                           two_implementations=False)
    examined = SimpleNamespace(plan=plan)
    measurement = SimpleNamespace(groups={"t": ("fc",), "view": ("gather",)})
    findings = SimpleNamespace(baseline=Baseline("EMU:bf16", local={"fc": 3e-3}),
                               local_errors={"gather": 0.2, "t": 0.2, "view": 0.2, "fc": 4e-3, "relu": 0.1})
    assert expected(examined, measurement, findings, "rel_l2") == {
        "fc": 3e-3, "gather": unit_roundoff("bf16"), "view": unit_roundoff("bf16")}
    assert expected(examined, measurement, findings, "max_abs") == {"fc": 3e-3}
    assert expected(examined, measurement, SimpleNamespace(baseline=None, local_errors={"gather": 0.2}),
                    "rel_l2") == {}
