"""No confident verdict from unfaithful taps: when exposing tensors changes what the target computes, the node
where error starts comes from partitioned runs that expose nothing, or the verdict says it cannot be localized.

The devices here change what they compute when outputs are exposed, on purpose: `HiddenByTaps` adds a fault at
one node except when the whole model is compiled with taps (so every tapped run misses it, while pieces of the
model keep it); `PlainOnly` adds it only to the whole untouched model (so every piece
misses it too: nothing but the plain run shows it); `UntypedTaps` is the CPU in bf16 whose taps stay f32 (what
an ``AUTO:CPU`` target did before it compiled taps on the device that ran: f32 outputs make the plugin compute
the ops before them in f32). Whatever they do, the report names the faulty node (or a node the target fused with
it) or no node at all, with the reason.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from openvino import opset13 as ops

from bisect_ov import bisect
from bisect_ov.report.view import view
from bisect_ov.run.openvino_device import OpenVINODevice
from bisect_ov.zoo import synthetic
from tests.conftest import FAULT_SHAPES, default_bf16, float_sites, needs_bf16, shape_inputs, shape_model

FAST = {"local": False, "noise": False, "progress": False}


def _with_fault(model, node: str, magnitude: float):
    """A copy of `model` with seeded noise added to `node`'s output (as `tests.conftest.FaultyCPU`)."""
    model = model.clone()
    (op,) = [o for o in model.get_ops() if o.get_friendly_name() == node]
    out = op.output(0)
    consumers = list(out.get_target_inputs())
    noise = (np.random.default_rng(7).standard_normal([int(d) for d in out.get_shape()]) * magnitude).astype(np.float32)
    faulty = ops.add(out, ops.constant(noise))
    for inp in consumers:
        inp.replace_source_output(faulty.output(0))
    model.validate_nodes_and_infer_types()
    return model


class HiddenByTaps(OpenVINODevice):
    """The CPU in f32 with `node` faulty, except in the whole model compiled with taps (as when exposing tensors
    changes the plugin's fusion): the plain run and every piece of the model holding the node show the fault."""

    def __init__(self, node: str, plain, magnitude: float = 0.05):
        super().__init__("CPU", {"INFERENCE_PRECISION_HINT": "f32"}, name=f"CPU:f32 with '{node}' faulty unless tapped")
        self.node, self.magnitude = node, magnitude
        self._ops = _compute_ops(plain)

    def _compile(self, model, taps=(), fed=()):
        names = {op.get_friendly_name() for op in model.get_ops()}
        whole = self._ops <= names
        if self.node in names and not (taps and whole):
            model = _with_fault(model, self.node, self.magnitude)
        return super()._compile(model, taps, fed)


def _compute_ops(model) -> set[str]:
    return {op.get_friendly_name() for op in model.get_ops() if op.get_type_name() not in ("Constant", "Result")}


class PlainOnly(OpenVINODevice):
    """The CPU in f32 with `node` faulty only in the whole untouched model (`plain`): no tap, no piece shows it."""

    def __init__(self, node: str, plain, magnitude: float = 0.05, *, pieces: bool = True):
        super().__init__("CPU", {"INFERENCE_PRECISION_HINT": "f32"}, name=f"CPU:f32 with '{node}' faulty when plain")
        self.node, self.magnitude, self.pieces = node, magnitude, pieces
        self._ops = _compute_ops(plain)
        self._outputs = len(plain.outputs)

    @property
    def can_run_pieces(self) -> bool:
        return self.pieces

    def _compile(self, model, taps=(), fed=()):
        names = {op.get_friendly_name() for op in model.get_ops()}
        params = {p.get_friendly_name() for p in model.get_parameters()}
        if not taps and len(model.outputs) == self._outputs and self._ops <= names and params <= self._ops:
            model = _with_fault(model, self.node, self.magnitude)
        return super()._compile(model, taps, fed)


class UntypedTaps(OpenVINODevice):
    """The CPU in bf16 whose exposed outputs stay f32: the plugin then computes the ops before them in f32."""

    def __init__(self):
        super().__init__("CPU", {"INFERENCE_PRECISION_HINT": "bf16"}, name="CPU:bf16 with f32 taps")

    @property
    def activation_precision(self) -> str:
        return "f32"


def _sites(shape: str) -> list[str]:
    sites = float_sites(shape)
    return list(dict.fromkeys([sites[0], sites[len(sites) // 2], sites[-1]]))


def _named_or_refused(report, node: str, group: tuple[str, ...] = ()) -> str:
    """Whether the report names `node` (or a node of `group`) or refuses with a reason; fails on anything else."""
    v = view(report)
    fidelity = report.fidelity
    assert fidelity is not None and fidelity.rejected, report.to_text()
    named = [n.name for n in report.first_divergences]
    if fidelity.outcome == "localized_by_partitions":
        assert named and (named[0] == node or named[0] in group or node in fidelity.group), report.to_text()
        assert [n.name for n in report.culprits] == named[:1]
        assert v.verdict.kind == "localized_by_partitions" and "partitioned runs" in v.verdict.headline
        return "named"
    assert fidelity.outcome == "unfaithful", report.to_text()
    assert not named and not report.culprits, report.to_text()
    assert v.verdict.kind == "unfaithful" and "cannot be localized on this device" in v.verdict.headline
    assert f"fidelity {fidelity.ratio:.2f}" in v.verdict.headline
    return "refused"


CASES = [(shape, node) for shape in FAULT_SHAPES for node in _sites(shape)]


@pytest.mark.parametrize("shape, node", CASES, ids=[f"{s}:{n}" for s, n in CASES])
def test_a_fault_the_taps_hide_is_named_by_partitioned_runs(shape, node):
    report = bisect(shape_model(shape), "CPU:f32", HiddenByTaps(node, shape_model(shape)), shape_inputs(shape), **FAST)
    assert _named_or_refused(report, node) == "named"
    assert report.first_divergence.name == node
    assert report.fidelity.partitioned_runs <= 2 * np.log2(len(report.nodes) + 64) + 4
    assert any("partitioned runs" in note for note in report.notes)
    assert "found by" in view(report).verdict.headline and "unfaithful" in report.to_text()


@pytest.mark.parametrize("shape", FAULT_SHAPES)
def test_with_a_twin_a_fault_the_taps_hide_is_named_by_partitioned_runs_of_the_twin(shape):
    """The target runs a twin (`target_model`): partitioned runs cut the target's pieces from the twin, so a fault
    that only tapped compiles hide is localized as with the model itself (it was refused for twins)."""
    node = _sites(shape)[1]
    model = shape_model(shape)
    twin = model.clone()  # the device adds the fault: the twin itself changes nothing
    report = bisect(model, "CPU:f32", HiddenByTaps(node, model), shape_inputs(shape), target_model=twin, **FAST)
    assert _named_or_refused(report, node) == "named"
    assert report.first_divergence.name == node and report.fidelity.partitioned_runs > 0


@pytest.mark.parametrize("shape", FAULT_SHAPES)
def test_a_fault_only_the_plain_run_shows_is_never_pinned_on_another_node(shape):
    node = _sites(shape)[1]
    model = shape_model(shape)
    report = bisect(model, "CPU:f32", PlainOnly(node, model), shape_inputs(shape), **FAST)
    outcome = _named_or_refused(report, node)
    if outcome == "refused":
        assert "cutting the graph changes what the target computes" in report.fidelity.reason or \
            "pieces do not run what the plain run ran" in report.fidelity.reason


def test_a_target_that_cannot_run_pieces_refuses_with_the_reason(tmp_path):
    shape = "chain"
    node = _sites(shape)[1]
    model = shape_model(shape)
    report = bisect(model, "CPU:f32", PlainOnly(node, model, pieces=False), shape_inputs(shape), **FAST)
    assert _named_or_refused(report, node) == "refused"
    assert "cannot run pieces" in report.fidelity.reason
    assert report.fidelity.partitioned_runs == 0
    # The measured numbers stay, marked unfaithful; none is a culprit.
    assert report.nodes and not report.ranking
    assert any("unfaithful" in note for note in report.notes)
    page = report.save_html(tmp_path / "r.html").read_text()
    assert "cannot be localized on this device" in page


def test_faithful_taps_change_nothing():
    shape = "chain"
    node = _sites(shape)[1]
    model = shape_model(shape)
    from tests.conftest import FaultyCPU

    report = bisect(model, "CPU:f32", FaultyCPU(node), shape_inputs(shape), **FAST)
    assert report.fidelity is not None and not report.fidelity.rejected and report.fidelity.outcome == ""
    assert report.first_divergence.name == node and report.fidelity.partitioned_runs == 0


def test_a_saved_report_keeps_the_outcome(tmp_path):
    shape = "diamond"
    node = _sites(shape)[1]
    report = bisect(shape_model(shape), "CPU:f32", HiddenByTaps(node, shape_model(shape)), shape_inputs(shape), **FAST)
    path = tmp_path / "r.json"
    report.save(path)
    again = type(report).load(path)
    assert again.fidelity == report.fidelity and again.first_divergence.name == node
    assert view(again).verdict.kind == "localized_by_partitions"


def test_unfaithful_taps_with_outputs_within_tolerance_name_nothing():
    shape = "chain"
    node = _sites(shape)[1]
    report = bisect(shape_model(shape), "CPU:f32", HiddenByTaps(node, shape_model(shape)), shape_inputs(shape), **FAST)
    calm = dataclasses.replace(report, outputs=tuple(dataclasses.replace(o, error=o.tolerance / 2) for o in report.outputs),
                               first_keys=(), ranking=(),
                               fidelity=dataclasses.replace(report.fidelity, outcome="unfaithful", node=None))
    v = view(calm)
    assert v.verdict.kind == "no_divergence" and not v.verdict.absorbed and v.verdict.closest is None
    assert "no node is named" in v.verdict.headline


# ----- the CPU's bf16: the demo's cancellation at inorm/sub --------------------------------------------------
INORM = ("inorm/sub", "inorm/sqdiff")


@needs_bf16
def test_taps_left_in_f32_on_a_bf16_target_name_the_cancellation_or_refuse():
    report = bisect(synthetic.demo(), "CPU:f32", UntypedTaps(), progress=False)
    assert report.fidelity is not None
    if not report.fidelity.rejected:  # the taps happened to keep it in bf16: the ordinary verdict speaks
        assert report.first_divergence.name in INORM, report.to_text()
        return
    _named_or_refused(report, "inorm/sub", INORM)


@default_bf16
@pytest.mark.parametrize("target", ["AUTO:CPU", "HETERO:CPU", "MULTI:CPU"])
def test_auto_and_hetero_run_taps_where_the_plain_run_ran(target):
    report = bisect(synthetic.demo(), "CPU:f32", target, progress=False)
    assert report.target.execution_devices == ("CPU",)
    assert report.target.precision == "bf16"  # the CPU plugin's default here (default_bf16)
    assert "ran the model on CPU in bf16" in report.target.note
    assert any(note.startswith(f"Target: {target} ran the model on CPU in bf16") for note in report.notes)
    side = view(report).sides[1]
    assert side.execution_devices == ("CPU",) and "on CPU" in side.text
    if report.fidelity is not None and report.fidelity.rejected:
        _named_or_refused(report, "inorm/sub", INORM)
    else:
        assert report.first_divergence is not None and report.first_divergence.name in INORM, report.to_text()


def test_a_virtual_reference_runs_f32():
    report = bisect(synthetic.demo(), "AUTO:CPU", "CPU:f32", progress=False, **{"local": False})
    assert report.ref.precision == "f32" and report.ref.execution_devices == ("CPU",)
    assert not report.diverges


class ManyTapsDrift(OpenVINODevice):
    """The CPU in f32 whose compiles exposing more than `most` tensors compute the model's last op a little
    differently (as when many taps break a kernel's fusion): a few taps at a time stay faithful."""

    def __init__(self, last: str, most: int = 3):
        super().__init__("CPU", {"INFERENCE_PRECISION_HINT": "f32"}, name=f"CPU:f32 drifting with over {most} taps")
        self.last, self.most = last, most

    def _compile(self, model, taps=(), fed=()):
        names = {op.get_friendly_name() for op in model.get_ops()}
        if len(taps) > self.most and self.last in names:
            model = _with_fault(model, self.last, 0.5)
        return super()._compile(model, taps, fed)


@pytest.mark.parametrize("shape", ["chain", "diamond"])
def test_auto_starts_over_with_the_bisection_when_the_fusion_taps_are_unfaithful(shape):
    # The fusion taps (every tensor, on this f32 target) drift; the bisection's cuts, a few tensors each, do
    # not: `auto` drops what the fusion taps measured and names the injected fault from the cuts alone.
    from bisect_ov import inject_fault

    model = shape_model(shape)
    site = float_sites(shape)[len(float_sites(shape)) // 2]
    last = float_sites(shape)[-1]
    report = bisect(model, "CPU:f32", ManyTapsDrift(last), shape_inputs(shape),
                    target_model=inject_fault(model, site, "scale", 0.3), **FAST)
    assert report.strategy == "bisection", report.to_text()
    assert any("the bisection strategy was used" in n for n in report.notes)
    assert report.fidelity is not None and not report.fidelity.rejected, report.to_text()
    assert report.first_divergence is not None and report.first_divergence.name == site, report.to_text()


@pytest.mark.parametrize("shape", FAULT_SHAPES)
def test_against_a_reference_that_runs_only_whole_models_prefixes_of_the_target_name_the_fault(shape, tmp_path):
    """A recorded reference replays whole runs, so no partitioned run can put the rest of the graph on it: prefixes
    of the graph run alone on the target and their cuts are compared with the recording's values instead."""
    from bisect_ov.capture.write import record

    node = _sites(shape)[1]
    model = shape_model(shape)
    path = record(model, "CPU:f32", shape_inputs(shape), tmp_path / "ref.npz")
    report = bisect(model, f"capture:{path}", HiddenByTaps(node, model), shape_inputs(shape), **FAST)
    assert _named_or_refused(report, node) == "named"
    assert report.first_divergence.name == node
    assert report.fidelity.cut_compared and "off the reference's" in view(report).verdict.headline
    assert report.fidelity.prefix_error > 4 * report.node(node).tolerance > report.fidelity.before_error
    report.save(tmp_path / "r.json")
    again = type(report).load(tmp_path / "r.json")
    assert again.fidelity == report.fidelity and view(again).verdict.headline == view(report).verdict.headline

