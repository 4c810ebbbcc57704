"""The pipeline's pieces driven directly: the options record, the engine's records, strategies driven by hand
with a fake measurement, scoring and notes from records, and one run stage by stage compared with `bisect()`."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import numpy as np
import pytest

from bisect_ov import InputError, bisect, inject_fault
from bisect_ov.analysis.metrics import compare
from bisect_ov.analysis.tolerance import Tolerance
from bisect_ov.core.records import Fidelity, Noise
from bisect_ov.engine.comparison import Comparison, Sample
from bisect_ov.engine.engine import Engine
from bisect_ov.engine.runner import Runner
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.match import identity_match
from bisect_ov.model.taps import Tap
from bisect_ov.pipeline.assemble import assemble, run_notes
from bisect_ov.pipeline.measure import measure
from bisect_ov.pipeline.options import BisectOptions
from bisect_ov.pipeline.plan import make_plan
from bisect_ov.pipeline.records import Measurement, Scored
from bisect_ov.pipeline.stages import examine, experiments, open_comparison, run_untouched, score
from bisect_ov.search.strategies import BisectionSearch, FusionSearch, Results, Step, Strategy
from tests.conftest import tiny_chain


# ----- options ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("keywords, fragment", [
    ({"impact": 2.5}, "impact must be an integer >= 0"),
    ({"impact": -1}, "impact must be an integer >= 0"),
    ({"curve": -2}, "curve must be an integer from 0 to 1000"),
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
    twin = options.resolve(local_possible=True, pieces_possible=True, twin=True)
    assert (twin.fix, twin.delegation, twin.curve, twin.impact, twin.local) == (True, True, 4, 3, True)
    assert twin.left_out == ()
    single = BisectOptions(sensitivity=True).resolve(local_possible=True, pieces_possible=True, twin=False)
    assert not single.sensitivity and dict(single.left_out)["sensitivity"].endswith("needs target_model")
    recorded = options.resolve(local_possible=False, pieces_possible=False, twin=False)
    assert not recorded.local and not recorded.partitioned
    assert set(dict(recorded.left_out)) == {"local", "fix", "delegation", "curve", "impact"}
    same = options.resolve(local_possible=True, pieces_possible=True, twin=False)
    assert same == options and same.left_out == ()
    fast = BisectOptions(budget="fast").resolve(local_possible=True, pieces_possible=True, twin=False)
    assert dict(fast.left_out) == {"local": "budget='fast'", "impact": "budget='fast'", "baseline": "budget='fast'"}


def test_the_plan_says_which_experiments_run_and_the_report_what_was_left_out():
    from bisect_ov import bisect
    from bisect_ov.zoo import synthetic

    model = synthetic.demo()
    inputs = synthetic.sample_inputs(model, seed=1)
    fast = bisect(model, "CPU:f32", "EMU:f16", inputs, budget="fast", sensitivity=True, progress=False)
    note = [n for n in fast.notes if n.startswith("Not run:")]
    # The baseline does not apply against an emulated target: it is not listed as left out by the budget.
    assert note == ["Not run: local errors, impact runs (budget='fast'); layer sensitivity (it ranks the quantized "
                    "layers of a twin: it needs target_model)."]
    assert all(n.local_error is None for n in fast.nodes)
    full = bisect(model, "CPU:f32", "EMU:f16", inputs, progress=False)
    assert not [n for n in full.notes if n.startswith("Not run:")]


# ----- the engine ------------------------------------------------------------------------------------------------
def _engine(model=None, target="CPU:f32") -> tuple[Engine, Runner]:
    from bisect_ov.run.devices import make_device
    from bisect_ov.run.inputs import prepare_inputs

    graph = ModelGraph(model or tiny_chain())
    arrays = prepare_inputs(graph.model, None, seed=0)
    comparison = Comparison(graph, graph, identity_match(graph), make_device("CPU", role="ref"), make_device(target))
    runner = Runner(comparison)
    return examine(runner, Sample.of(arrays, arrays)), runner


def test_an_engine_comes_from_the_untouched_run_and_keeps_no_results():
    engine, runner = _engine()
    with pytest.raises(FrozenInstanceError):
        engine.runner.comparison.graph = None  # type: ignore[misc]
    assert engine.runner.compiles == {"ref": 1, "target": 1}  # the untouched run, target first
    engine.runner.compiles["ref"] = 99  # a copy: the ledger's count is not touched
    taps = [Tap("mm1", 0), Tap("tanh1", 0)]
    first, second = engine.measure(taps), engine.measure(taps)
    assert engine.runner.compiles == {"ref": 3, "target": 3}
    # Each measurement returns what it measured, the same whatever ran before it.
    assert len(first.runs) == len(second.runs) == 1 and first.runs[0].reproduced
    assert {t: s.rel_l2 for t, s in first.stats.items()} == {t: s.rel_l2 for t, s in second.stats.items()}
    other = [np.full_like(a, 0.5) for a in engine.sample.ref]
    another = examine(runner, Sample.of(other, other))  # another sample is another engine
    assert np.array_equal(another.sample.ref[0], other[0]) and not np.array_equal(engine.sample.ref[0], other[0])


# ----- strategies driven by hand, with a fake measurement -------------------------------------------------------
def _drive(strategy: Strategy, measure_taps) -> tuple[Results, list[list[Tap]]]:
    """The driver loop of `pipeline.measure`, with `measure_taps(taps) -> stats` instead of an engine."""
    results, asked = Results(), []
    while (step := strategy.next_step(results)) is not None:
        assert not step.local  # no local errors asked for here
        asked.append(list(step.taps))
        results = results.plus(measure_taps(step.taps))
    return results, asked


@pytest.mark.parametrize("bad", ["mm0", "tanh0", "mm3", "tanh5", "mm7", "tanh7"])
def test_bisection_finds_the_node_a_fake_measurement_marks_bad(bad):
    from bisect_ov.analysis.scoring import score_graph
    from bisect_ov.run.devices import make_device

    graph = ModelGraph(tiny_chain(depth=8))
    cpu = make_device("CPU:f32")
    clean = np.ones(16, np.float32)

    def fake(taps):  # every tensor at or after the bad node diverges
        return {t: compare(clean, clean * (1.5 if graph[t.key].index >= graph[bad].index else 1.0)) for t in taps}

    search = BisectionSearch(Comparison(graph, graph, identity_match(graph), cpu, cpu), lambda t, s: s.rel_l2 > 1e-3)
    results, asked = _drive(search, fake)
    errors = {(t.key, t.port): s.rel_l2 for t, s in results.stats.items()}
    scores = score_graph(graph, errors, {t.key: 1e-3 for t in results.stats})
    assert scores.first == (bad,)
    assert len(asked) <= int(np.ceil(np.log2(len(graph.candidates())))) + 2


# ----- scoring and notes from records --------------------------------------------------------------------------
def test_ranking_puts_first_divergences_first_then_measured_impact():
    from bisect_ov.analysis.judge import Evidence, Topology, judge

    # a -> b -> c -> d: a is the source; b and c amplify; d inherits. c's impact is measured, b's is not.
    graph = Topology([("x", "Parameter", ()), ("a", "Relu", ("x",)), ("b", "Exp", ("a",)), ("c", "Exp", ("b",)),
                      ("d", "Relu", ("c",)), ("out", "Result", ("d",))])
    errors = {("a", 0): 0.1, ("b", 0): 0.5, ("c", 0): 2.0, ("d", 0): 2.0}
    ev = Evidence(errors=errors, tolerances={k: 1e-2 for k, _ in errors}, outputs=((2.0, 1e-2),),
                  impacts={"c": 0.9, "a": 0.01})
    assert judge(graph, ev).ranking == ("a", "c", "b", "d")


def test_notes_come_from_the_records():
    class _Opened:
        notes = ("from the plan",)
        options = BisectOptions(progress=False)
        samples = None

    class _Untouched:
        ref_info = None
        target = type("_TargetRun", (), {"info": None})()

    class _Engine:
        untouched = _Untouched()

    class _Examined:
        engine = _Engine()
        plan = make_plan(Tolerance(), ModelGraph(tiny_chain()))

    measurement = Measurement(stats={}, groups={}, strategy="bisection", fell_back=True)
    scored = Scored(errors={}, tolerances={}, scores=None, outputs=(),  # type: ignore[arg-type]
                    noise=Noise(run_to_run=1e-4), fidelity=Fidelity(1.0, 3.0, 3.0, warning="changed"))
    notes = run_notes(_Opened(), _Examined(), measurement, scored)  # type: ignore[arg-type]
    assert notes[0] == "from the plan" and "not deterministic" in notes[1] and "1.00e-04" in notes[1]
    assert notes[2] == "changed" and "bisection strategy was used" in notes[3]


def test_compiles_travel_as_values_and_the_ledger_only_counts():
    """The samples pass hands the untouched pair it compiled to the examined sample's untouched run as a value
    (`Setup.untouched`): that run compiles nothing, and neither the runner nor the ledger holds a compile or the
    devices' facts; the engine's facts are its untouched run's record."""
    from bisect_ov.zoo import synthetic

    model = synthetic.conv_bn_net()
    inputs = [synthetic.sample_inputs(model, seed=s) for s in (1, 2, 3)]
    setup = open_comparison(model, "CPU:f32", "EMU:f16", inputs, None, BisectOptions(progress=False, noise=False))
    assert setup.untouched is not None and setup.summary is not None and setup.summary.count == 3
    before = setup.runner.ledger.compiles
    examined = run_untouched(setup)
    engine = examined.engine
    assert engine.runner.compiles == before == {"ref": 1, "target": 1}  # the samples' pair, run again, not compiled
    assert engine.untouched.target.info is engine.untouched.target.info and engine.untouched.target.info.emulated
    assert engine.untouched.ref_info is engine.untouched.ref_info and not engine.untouched.ref_info.emulated
    assert engine.untouched.target.compiled is None  # the reference ran on it; the record keeps no compile
    held = [v for obj in (setup.runner, setup.runner.ledger) for v in vars(obj).values()]
    assert not [v for v in held if hasattr(v, "infer") or isinstance(v, tuple) and any(hasattr(x, "infer") for x in v)]
    assert not hasattr(setup.runner.ledger, "info") and examined.kept_ref is None  # no steps: nothing kept


@pytest.mark.parametrize("faulty", [False, True])
def test_the_noise_check_compiles_again_only_when_something_is_over_its_tolerance(faulty):
    """A noise floor only raises tolerances: with every node and output within its tolerance it cannot change
    the verdict, so the untouched target is not compiled again for it (and the report says why); with a node
    over its tolerance it is. `reproduced` is set False by hand: a real target whose tapped compile did not give
    the untouched bits (a bf16 CPU's usually does not; an f32 one's usually does)."""
    from dataclasses import replace

    model = tiny_chain(depth=5)
    twin = inject_fault(model, "mm3", "scale", 0.2) if faulty else None
    setup = open_comparison(model, "CPU:f32", "CPU:f32", None, twin, BisectOptions(progress=False))
    examined = run_untouched(setup)
    measured = replace(measure(setup, examined), reproduced=False, beside=None)
    before = setup.runner.ledger.compiles["target"]
    scored = score(setup, examined, measured)
    compiled = setup.runner.ledger.compiles["target"] - before
    assert compiled == (1 if faulty else 0)
    assert bool(scored.noise_note) is not faulty
    # The untouched target ran once: with the second compile, its two runs give both figures; without, nothing
    # was measured and nothing is reported.
    assert (scored.noise is not None and scored.noise.compile_to_compile is not None
            and scored.noise.run_to_run is not None) if faulty else scored.noise is None


# ----- the stages composed by hand give what bisect() gives --------------------------------------------------------
def test_stages_by_hand_match_bisect():
    model = tiny_chain(depth=5)
    twin = inject_fault(model, "mm3", "scale", 0.2)
    options = BisectOptions(progress=False)
    setup = open_comparison(model, "CPU", "CPU:f32", None, twin, options)
    assert setup.options.impact == 3  # twins get partitioned runs (segments cut from the twin)
    examined = run_untouched(setup)
    measured = measure(setup, examined)
    assert measured.strategy == "fusion" and measured.stats
    scored = score(setup, examined, measured)
    assert scored.scores.first == ("mm3",)
    findings = experiments(setup, examined, measured, scored)
    assert findings.local_errors and findings.fix is None
    report = assemble(setup, examined, measured, scored, findings, model_source=model, target_source=twin)
    direct = bisect(model, "CPU", "CPU:f32", target_model=twin, progress=False)
    assert report.first_divergence.name == direct.first_divergence.name == "mm3"
    assert [n.name for n in report.culprits] == [n.name for n in direct.culprits]


# ----- fusion groups are refined where error starts -----------------------------------------------------------
@pytest.mark.parametrize("makes_error, refined", [(None, True), (True, True), (False, False)])
def test_a_group_is_refined_only_when_it_makes_error_of_its_own(makes_error, refined):
    from bisect_ov.zoo import synthetic

    model = synthetic.conv_bn_net()
    options = BisectOptions(progress=False, noise=False)
    setup = open_comparison(model, "CPU:f32", "CPU:f32", synthetic.sample_inputs(model, seed=1),
                             inject_fault(model, "res/bn_a", "noise", 0.05, seed=7), options)
    examined = run_untouched(setup)
    engine, plan = examined.engine, examined.plan

    def diverged(tap, stats):
        return setup.error_of(stats) > plan.node(tap.key, tap.port)

    # Local errors are asked for only when the strategy may use them; the answer here is made up.
    search = FusionSearch(engine.runner.comparison, diverged, runtime=engine.untouched.target_runtime, local=makes_error is not None)
    results, descs, asked = Results(), [], False
    while (step := search.next_step(results)) is not None:
        if step.local:
            asked = True
            results = results.plus(creates={t.key: bool(makes_error) for t in results.stats})
            continue
        descs.append(step.desc)
        results = results.plus(engine.measure_chunked(step.taps, None).stats)
    assert ("refine" in descs) == refined
    assert asked == (makes_error is not None)  # consulted once the groups were measured
    if refined:
        assert Tap("res/bn_a", 0) in results.stats  # the faulty member itself was measured


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


@pytest.mark.parametrize("strategy", ["auto", "fusion", "bisection"])
def test_the_search_s_first_target_compile_starts_beside_the_reference_s_run(strategy):
    """A search whose first taps are known before it starts (the fusion boundaries) has its target compile
    started beside the reference's untouched run, and the first measurement takes it: counted once, in the
    measure stage, as if made there; nothing is held after. A bisection's first cut is not known: none starts."""
    from bisect_ov.zoo import synthetic

    model = synthetic.attention_block()
    twin = inject_fault(model, "attn/context", "noise", 0.05, seed=7)
    setup = open_comparison(model, "CPU:f32", "EMU:f16", synthetic.sample_inputs(model, seed=1), twin,
                            BisectOptions(progress=False, strategy=strategy, impact=0))
    examined = run_untouched(setup)
    engine = examined.engine
    ahead = engine._ahead
    assert (ahead is not None) is (strategy != "bisection")
    if ahead is not None:
        assert set(ahead.taps) == set(engine.tappable(examined.plan.fusion.boundaries))
    ledger = setup.runner.ledger
    before = ledger.compiles["target"]
    measurement = measure(setup, examined)
    made = ledger.compiles["target"] - before
    assert engine._ahead is None and (ahead is None or ahead.compiled.done())
    # The same search on an engine without it: as many target compiles, the same statistics.
    from dataclasses import replace

    plain = replace(examined, engine=Engine(engine.runner, engine.sample, engine.untouched))
    before = ledger.compiles["target"]
    again = measure(setup, plain)
    assert ledger.compiles["target"] - before == made
    assert {t: s.rel_l2 for t, s in again.stats.items()} == {t: s.rel_l2 for t, s in measurement.stats.items()}
    report = bisect(model, "CPU:f32", "EMU:f16", synthetic.sample_inputs(model, seed=1), target_model=twin,
                    strategy=strategy, impact=0, progress=False)
    assert report.first_divergence is not None and report.first_divergence.name == "attn/context"


def test_a_compile_started_ahead_for_other_taps_is_dropped_uncounted():
    """The first measurement takes the compile started ahead only when it measures exactly its taps; otherwise
    the target compiles what is asked (counted once) and the one made ahead is dropped, never counted."""
    from bisect_ov.engine.engine import start_ahead
    from bisect_ov.zoo import synthetic

    model = synthetic.attention_block()
    setup = open_comparison(model, "CPU:f32", "EMU:f16", synthetic.sample_inputs(model, seed=1), None,
                            BisectOptions(progress=False))
    examined = run_untouched(setup)
    old = examined.engine
    ready = list(old.untouched.ready.index)
    engine = Engine(old.runner, old.sample, old.untouched, start_ahead(old.runner, ready[:2]))
    before = setup.runner.ledger.compiles["target"]
    part = engine.measure_part(ready[:3])
    assert setup.runner.ledger.compiles["target"] - before == 1 and engine._ahead is None
    assert set(part.stats) == set(ready[:3])
    taken = Engine(old.runner, old.sample, old.untouched, start_ahead(old.runner, ready[:3]))
    again = taken.measure_part(ready[:3])
    assert setup.runner.ledger.compiles["target"] - before == 2
    assert {t: s.rel_l2 for t, s in again.stats.items()} == {t: s.rel_l2 for t, s in part.stats.items()}


def test_the_auto_tap_budget_is_half_the_weights_and_at_least_64_mb():
    from bisect_ov.pipeline.options import auto_tap_bytes

    report = bisect(tiny_chain(), "CPU", "CPU:f32", progress=False)
    assert report.options["max_tap_bytes"] == 64 << 20  # resolved, and recorded as a number
    assert auto_tap_bytes(1 << 30) == 512 << 20 and auto_tap_bytes(0) == 64 << 20
    assert bisect(tiny_chain(), "CPU", "CPU:f32", progress=False, max_tap_bytes=None).options["max_tap_bytes"] is None


@pytest.mark.parametrize("prefetches", [True, False])
def test_a_strategy_says_what_the_reference_s_plain_run_exposes_for_it(prefetches):
    # A strategy registered by a user: with a `prefetch`, its one step is answered from the reference's plain run
    # (one reference compile in all); without, the reference compiles again for it.
    from bisect_ov.search import strategies

    class EveryTensor(Strategy):
        name = "test-every-tensor"

        def plan(self):
            yield Step(tuple(r for r, _ in self.comparison.match.pairs))

    if prefetches:
        EveryTensor.prefetch = classmethod(lambda cls, comparison, prefetch: ([r for r, _ in comparison.match.pairs], None))
    strategies.register_strategy(EveryTensor)
    try:
        report = bisect(tiny_chain(), "CPU:f32", "EMU:f16", strategy="test-every-tensor", impact=0, local=False,
                        noise=False, baseline=False, progress=False)
    finally:
        strategies._REGISTRY.pop("test-every-tensor")
    computes = [op for op in tiny_chain().get_ordered_ops() if op.get_type_name() not in ("Parameter", "Constant", "Result")]
    assert len(report.nodes) == len(computes)  # every compute node was compared
    assert sum(c["ref_compiles"] for c in report.costs.values()) == (1 if prefetches else 2)


def test_the_plan_reads_the_target_s_fused_kernels_once_and_the_search_measures_them():
    # A real CPU compile fuses each convolution with its BatchNorm and ReLU: the plan holds those groups, and the
    # fusion search (no refinement) measures exactly the plan's boundaries.
    from bisect_ov.pipeline.plan import plan_fusion
    from bisect_ov.zoo import synthetic

    model = synthetic.conv_bn_net()
    options = BisectOptions(progress=False, noise=False, refine=False, local=False)
    setup = open_comparison(model, "CPU:f32", "CPU:f32", synthetic.sample_inputs(model, seed=1), None, options)
    examined = run_untouched(setup)
    fusion = examined.plan.fusion
    assert fusion.boundaries and any(len(members) >= 2 for members in fusion.groups.values())
    assert set(fusion.units) == {t.key for t in fusion.boundaries} and fusion.kernels.outputs
    engine = examined.engine
    assert plan_fusion(setup.comparison, engine.untouched.target_runtime, engine.untouched.untappable) == fusion  # what it read is all
    measurement = measure(setup, examined)
    assert set(measurement.stats) == set(fusion.boundaries)
    assert measurement.groups == dict(fusion.groups)


def test_impact_runs_go_to_the_first_divergences_then_to_the_most_local_error_then_to_growth():
    """A fault below a source by growth makes the most error of its own: its impact is measured right after the
    first divergence's, before sources and amplifiers that growth ranks higher (the judge's dominant origins need
    it)."""
    from bisect_ov.analysis.judge import Topology
    from bisect_ov.analysis.scoring import score_graph
    from bisect_ov.pipeline.stages import impact_suspects

    graph = Topology([("x", "Parameter", ()), ("bn", "BatchNormInference", ("x",)), ("relu", "Relu", ("bn",)),
                      ("add", "Add", ("relu",)), ("fc", "MatMul", ("add",)), ("out", "Result", ("fc",))])
    errors = {("bn", 0): 0.054, ("relu", 0): 0.17, ("add", 0): 0.2, ("fc", 0): 0.22}
    tolerances = {k: 0.031 for k in ("bn", "relu", "add", "fc")}
    scores = score_graph(graph, errors, tolerances)
    assert scores.first == ("bn",) and scores.nodes["relu"].growth > scores.nodes["add"].growth
    local = {"bn": 0.017, "relu": 9e-4, "add": 0.2, "fc": 0.04}
    assert impact_suspects(scores, local, tolerances)[:3] == ["bn", "add", "fc"]


def test_same_bits_compares_bit_for_bit():
    """A tapped compile reproduces the untouched outputs only when every bit agrees: the same NaN is equal to
    itself, -0.0 is not 0.0, a strided view is read as its values, and shapes and types must agree."""
    from bisect_ov.engine.runner import same_bits

    a = np.array([[1.0, np.nan], [0.0, 3.0]], np.float32)
    assert same_bits([a, np.arange(3)], [a.copy(), np.arange(3)])
    assert not same_bits([a], [np.where(a == 0.0, np.float32(-0.0), a)])
    assert not same_bits([a], [np.nextafter(a, np.float32(9))])
    assert same_bits([a.T], [np.ascontiguousarray(a.T)])
    assert not same_bits([a], [a.astype(np.float64)]) and not same_bits([a], [a.reshape(4)])
    assert not same_bits([a], [a, a])
    assert same_bits([np.array([True, False])], [np.array([True, False])])
