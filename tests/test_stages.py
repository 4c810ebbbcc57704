"""The pipeline's pieces driven directly: the options record, Session state, a strategy with a fake session,
scoring and notes from records, and one run stage by stage compared with `bisect()`."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import numpy as np
import pytest

from bisect_ov import InputError, bisect, inject_fault
from bisect_ov.analysis.metrics import compare
from bisect_ov.core.records import Fidelity, Noise
from bisect_ov.engine.session import Session
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.match import identity_match
from bisect_ov.model.taps import Tap
from bisect_ov.pipeline.assemble import assemble, rank_by_impact, run_notes
from bisect_ov.pipeline.options import BisectOptions
from bisect_ov.pipeline.stages import Measurement, Scored, experiments, measure, open_comparison, plain_run, score
from bisect_ov.search.strategies import run_bisection
from tests.conftest import tiny_chain


# ----- options ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("keywords, fragment", [
    ({"impact": 2.5}, "impact must be an integer >= 0"),
    ({"impact": -1}, "impact must be an integer >= 0"),
    ({"curve": -2}, "curve must be an integer >= 0"),
    ({"seed": "abc"}, "seed must be an integer"),
    ({"seed": -1}, "seed must be an integer"),
    ({"ref_config": "str"}, "ref_config must be a dict"),
    ({"fix": -1}, "fix tolerance must be a finite number >= 0"),
    ({"fix": float("nan")}, "fix must be True, False or a tolerance"),
    ({"max_tap_bytes": -5}, "max_tap_bytes must be a positive integer, 'auto' or None"),
    ({"max_tap_bytes": float("nan")}, "max_tap_bytes must be a positive integer, 'auto' or None"),
    ({"strategy": "smart"}, "Unknown strategy 'smart'"),
    ({"metric": "l3"}, "Unknown metric 'l3'"),
    ({"tolerance": -0.1}, "tolerance must be None"),
    ({"local": "yes"}, "local must be True or False"),
    ({"keep": [1, 2]}, "keep must hold node names"),
    ({"patched_model": "fixed.onnx"}, "ending in .xml"),
    ({"colour": "red"}, "Unknown option"),
])
def test_bad_options_are_refused_with_the_valid_range(keywords, fragment):
    with pytest.raises(InputError, match=fragment):
        BisectOptions.from_keywords(**keywords)


def test_options_are_frozen_and_fix_takes_a_tolerance():
    options = BisectOptions.from_keywords(fix=0.01, keep="culprits")
    assert options.fix and options.fix_tolerance == 0.01 and options.keep == ("culprits",)
    with pytest.raises(FrozenInstanceError):
        options.impact = 0  # type: ignore[misc]
    assert BisectOptions.from_keywords(fix=True).fix_tolerance is None
    assert options.to_dict()["fix_tolerance"] == 0.01


def test_resolve_switches_off_what_cannot_run_and_says_why():
    options = BisectOptions(fix=True, delegation=True, curve=4, impact=3, local=True)
    # A twin runs partitioned runs too: its segments come from the twin.
    twin, notes = options.resolve(local_possible=True, pieces_possible=True, twin=True)
    assert (twin.fix, twin.delegation, twin.curve, twin.impact, twin.local) == (True, True, 4, 3, True)
    assert notes == ()
    single, notes = BisectOptions(sensitivity=True).resolve(local_possible=True, pieces_possible=True, twin=False)
    assert not single.sensitivity and notes and "needs target_model" in notes[0]
    recorded, notes = options.resolve(local_possible=False, pieces_possible=False, twin=False)
    assert not recorded.local and not recorded.partitioned and notes == ()
    same, notes = options.resolve(local_possible=True, pieces_possible=True, twin=False)
    assert same == options and notes == ()


# ----- Session -----------------------------------------------------------------------------------------------
def _session(model=None, target="CPU:f32") -> Session:
    from bisect_ov.run.devices import make_device
    from bisect_ov.run.inputs import prepare_inputs

    graph = ModelGraph(model or tiny_chain())
    arrays = prepare_inputs(graph.model, None, seed=0)
    return Session(graph, graph, identity_match(graph), make_device("CPU", role="ref"), make_device(target),
                   arrays, arrays)


def test_session_state_changes_only_through_its_methods():
    session = _session()
    with pytest.raises(AttributeError):
        session.ref_arrays = []  # type: ignore[misc]
    session.compiles["ref"] = 99  # a copy: the session's count is not touched
    assert session.compiles == {"ref": 0, "target": 0}
    session.plain()
    assert session.compiles == {"ref": 1, "target": 1}
    session.measure([Tap("mm1", 0), Tap("tanh1", 0)])
    assert session.compiles == {"ref": 2, "target": 2} and len(session.tapped_runs) == 1
    session.forget_tapped_runs()
    assert session.tapped_runs == ()
    other = [np.full_like(a, 0.5) for a in session.ref_arrays]
    session.select_sample(other, other)
    assert np.array_equal(session.ref_arrays[0], other[0])


# ----- a strategy with a fake session -------------------------------------------------------------------------
class _FakeSession:
    """Pretends every tensor at or after one node diverges: what the bisection must find."""

    def __init__(self, graph: ModelGraph, bad: str):
        self.graph, self.match = graph, identity_match(graph)
        self.untappable: frozenset[Tap] = frozenset()
        self.bad_index = graph[bad].index
        self.measured: list[list[Tap]] = []

    def measure(self, taps):
        self.measured.append(list(taps))
        clean = np.ones(16, np.float32)
        return {t: compare(clean, clean * (1.5 if self.graph[t.key].index >= self.bad_index else 1.0)) for t in taps}


@pytest.mark.parametrize("bad", ["mm0", "tanh0", "mm3", "tanh5", "mm7", "tanh7"])
def test_bisection_finds_the_node_a_fake_session_marks_bad(bad):
    graph = ModelGraph(tiny_chain(depth=8))
    fake = _FakeSession(graph, bad)
    stats = run_bisection(fake, lambda tap, s: s.rel_l2 > 1e-3)  # type: ignore[arg-type]
    errors = {(t.key, t.port): s.rel_l2 for t, s in stats.items()}
    from bisect_ov.analysis.scoring import score_graph

    scores = score_graph(graph, errors, {t.key: 1e-3 for t in stats})
    assert scores.first == (bad,)
    assert len(fake.measured) <= int(np.ceil(np.log2(len(graph.candidates())))) + 2


# ----- scoring and notes from records --------------------------------------------------------------------------
def test_ranking_puts_measured_impact_first():
    assert rank_by_impact(("a", "b", "c", "d"), {"c": 0.5, "d": 0.9}) == ("d", "c", "a", "b")
    assert rank_by_impact(("a", "b"), {}) == ("a", "b")


def test_notes_come_from_the_records():
    class _Session:
        exact: dict = {}

    class _Opened:
        session, notes = _Session(), ("from the plan",)

    measurement = Measurement(stats={}, groups={}, strategy="bisection", fell_back=True)
    scored = Scored(errors={}, tolerances={}, scores=None, outputs=(),  # type: ignore[arg-type]
                    noise=Noise(run_to_run=1e-4), fidelity=Fidelity(1.0, 3.0, 3.0, warning="changed"))
    notes = run_notes(_Opened(), measurement, scored)  # type: ignore[arg-type]
    assert notes[0] == "from the plan" and "not deterministic" in notes[1] and "1.00e-04" in notes[1]
    assert notes[2] == "changed" and "bisection strategy was used" in notes[3]


# ----- the stages composed by hand give what bisect() gives --------------------------------------------------------
def test_stages_by_hand_match_bisect():
    model = tiny_chain(depth=5)
    twin = inject_fault(model, "mm3", "scale", 0.2)
    options = BisectOptions(progress=False)
    opened = open_comparison(model, "CPU", "CPU:f32", None, twin, options)
    assert opened.options.impact == 3  # twins get partitioned runs (segments cut from the twin)
    plain = plain_run(opened)
    measured = measure(opened, plain)
    assert measured.strategy == "fusion" and measured.stats
    scored = score(opened, plain, measured)
    assert scored.scores.first == ("mm3",)
    findings = experiments(opened, measured, scored)
    assert findings.local and findings.fix is None
    report = assemble(opened, plain, measured, scored, findings, model_source=model, target_source=twin)
    direct = bisect(model, "CPU", "CPU:f32", target_model=twin, progress=False)
    assert report.first_divergence.name == direct.first_divergence.name == "mm3"
    assert [n.name for n in report.culprits] == [n.name for n in direct.culprits]


# ----- fusion groups are refined where error starts -----------------------------------------------------------
def _fusion_session(node: str):
    from bisect_ov.zoo import synthetic

    model = synthetic.conv_bn_net()
    options = BisectOptions(progress=False, noise=False)
    opened = open_comparison(model, "CPU:f32", "CPU:f32", synthetic.sample_inputs(model, seed=1),
                             inject_fault(model, node, "noise", 0.05, seed=7), options)
    plain = plain_run(opened)
    graph, tol = opened.session.graph, plain.tolerance
    return opened, lambda tap, stats: opened.error_of(stats) > tol.for_node(graph[tap.key], tap.port)


@pytest.mark.parametrize("makes_error, refined", [(None, True), (True, True), (False, False)])
def test_a_group_is_refined_only_when_it_makes_error_of_its_own(monkeypatch, makes_error, refined):
    from bisect_ov.search.strategies import run_fusion

    opened, diverged = _fusion_session("res/bn_a")
    session = opened.session
    descs: list[str] = []
    measure = session.measure_chunked
    monkeypatch.setattr(session, "measure_chunked", lambda taps, max_bytes, desc="compare", **kw:
                        descs.append(desc) or measure(taps, max_bytes, desc=desc, **kw))
    asked: list[set[str]] = []

    def own_error(stats, groups):
        asked.append({t.key for t in stats})
        return {t.key: makes_error for t in stats}

    stats, _ = run_fusion(session, None, diverged, own_error=None if makes_error is None else own_error)
    assert ("refine" in descs) == refined
    assert makes_error is None or asked  # consulted once the groups were measured
    if refined:
        assert Tap("res/bn_a", 0) in stats  # the faulty member itself was measured


# ----- no work done twice -------------------------------------------------------------------------------------
@pytest.mark.parametrize("node", ["attn/q/transpose", "attn/context", "mlp/fc2/matmul"])
def test_a_lower_precision_target_never_compiles_the_reference_twice(node):
    # The f32 reference exposes, in its plain run, every tensor the fusion taps and the local-error runs need.
    from bisect_ov.zoo import synthetic

    model = synthetic.attention_block()
    report = bisect(model, "CPU:f32", "EMU:f16", synthetic.sample_inputs(model, seed=1),
                    target_model=inject_fault(model, node, "noise", 0.05, seed=7), impact=0, progress=False)
    assert report.first_divergence is not None and report.first_divergence.name == node
    assert report.first_divergence.local_error is not None  # the local-error runs took place
    assert sum(c["ref_compiles"] for c in report.costs.values()) == 1
    assert report.costs["plain"]["ref_compiles"] == 1


def test_the_auto_tap_budget_is_half_the_weights_and_at_least_64_mb():
    from bisect_ov.pipeline.options import auto_tap_bytes

    report = bisect(tiny_chain(), "CPU", "CPU:f32", progress=False)
    assert report.options["max_tap_bytes"] == 64 << 20  # resolved, and recorded as a number
    assert auto_tap_bytes(1 << 30) == 512 << 20 and auto_tap_bytes(0) == 64 << 20
    assert bisect(tiny_chain(), "CPU", "CPU:f32", progress=False, max_tap_bytes=None).options["max_tap_bytes"] is None
