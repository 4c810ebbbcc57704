"""Local versus inherited error, partitioned runs, impact, the verified fix, noise."""

from __future__ import annotations

import math
import re

import numpy as np
import openvino as ov
import pytest

from bisect_ov import bisect, inject_fault
from bisect_ov.core.errors import DeviceError, InputError
from bisect_ov.experiments.partitioned import MixedRuns
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.partition import extract
from bisect_ov.model.taps import Tap, tap_model
from bisect_ov.zoo import synthetic
from tests.conftest import needs_bf16

F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def _values(model, inputs, names):
    """Reference values of named tensors, by hand (f32 CPU)."""
    g = ModelGraph(model)
    tapped = tap_model(g, [Tap(n) for n in names])
    out = ov.Core().compile_model(tapped.model, "CPU", F32)(inputs)
    return {n: out[i] for n, i in zip(names, tapped.tap_outputs)}


def test_extracted_piece_recomputes_the_node_from_fed_values():
    model = synthetic.chain()
    x = synthetic.sample_inputs(model, seed=1)
    g = ModelGraph(model)
    piece = extract(g, ["layer3/add", "layer3/clamp"], [Tap("layer3/clamp")])
    assert [t.key for t in piece.fed] == ["layer3/matmul"]
    values = _values(model, x, ["layer3/matmul", "layer3/clamp"])
    got = ov.Core().compile_model(piece.model, "CPU", F32)([values["layer3/matmul"]])[0]
    np.testing.assert_array_equal(got, values["layer3/clamp"])


def test_fault_has_local_error_only_where_injected_and_downstream_gain_is_real():
    model = synthetic.chain()
    x = synthetic.sample_inputs(model, seed=1)
    node = "layer3/add"
    report = bisect(model, "CPU", "CPU:f32", x, target_model=inject_fault(model, node, "scale", 0.2),
                    strategy="full", progress=False, noise=False)
    faulty = report.node(node)
    assert faulty.local_error == pytest.approx(faulty.error, rel=1e-3)
    others = [n for n in report.nodes if n.name != node]
    assert max(n.local_error for n in others) < 1e-6  # everyone else is exact when fed exact inputs
    # Multiplying by a constant keeps relative error: gain 1.
    assert report.node("layer6/rescale").amplification == pytest.approx(1.0, abs=1e-3)
    # Subtracting a constant keeps absolute error: relative error grows by |x| / |x - c|.
    v = _values(model, x, ["layer6/sigmoid", "layer6/center"])
    gain = np.linalg.norm(v["layer6/sigmoid"]) / np.linalg.norm(v["layer6/center"])
    assert report.node("layer6/center").amplification == pytest.approx(gain, rel=1e-2)
    assert report.node("layer6/center").role == "amplifier"


def test_case2_on_emulated_f16_tells_source_from_amplifiers_and_fixes_it():
    model = synthetic.demo()
    report = bisect(model, "CPU", "EMU:f16", synthetic.sample_inputs(model, seed=1), fix=True, progress=False)
    sources = {n.name for n in report.nodes if n.role == "source"}
    assert sources == {"inorm/sub", "inorm/sqdiff"}
    for name in sources:  # their error is their own: large when fed exact inputs
        n = report.node(name)
        assert n.local_error > 100 * n.input_error
    downstream = [n for n in report.nodes if n.diverged and n.name not in sources]
    assert downstream and all(n.local_error < n.tolerance for n in downstream)  # they only pass it on
    fix = report.fix
    assert fix.solved and fix.error_after <= fix.tolerance < fix.error_before
    assert set(fix.on_reference) >= {"inorm/sub"} and len(fix.on_reference) <= 6
    assert "Fix: keeping" in report.to_text()


@needs_bf16
def test_case2_face_resnet_on_bf16_fix_keeps_few_nodes(tmp_path):
    model = synthetic.face_resnet()
    report = bisect(model, "CPU", "CPU:bf16", synthetic.sample_inputs(model, seed=1), fix=True,
                    patched_model=tmp_path / "patched.xml", progress=False)
    assert {n.name for n in report.first_divergences} <= {"inorm/sub", "inorm/sqdiff"}
    fix = report.fix
    assert fix.solved and len(fix.on_reference) <= 6 and fix.error_before > 10 * fix.error_after
    patched = ov.Core().read_model(fix.patched_model)
    # OpenVINO 2026 writes the attribute as DisablePrecisionConversion; older versions keep the original key.
    keys = ("disable_fp16_compression_0", "DisablePrecisionConversion_0")
    marked = {op.get_friendly_name() for op in patched.get_ordered_ops() if any(k in op.get_rt_info() for k in keys)}
    assert marked == set(fix.on_reference)


def test_the_patched_model_keeps_the_models_weights(tmp_path):
    # It was saved with OpenVINO's default, f16 weights: on CPU:f32 it differed from the model by 3.5e-4.
    model = synthetic.demo()
    inputs = synthetic.sample_inputs(model, seed=1)
    report = bisect(model, "CPU:f32", "EMU:f16", inputs, fix=True, patched_model=tmp_path / "p.xml", progress=False)
    core = ov.Core()
    patched = core.read_model(report.fix.patched_model)
    assert {op.get_output_element_type(0).get_type_name() for op in patched.get_ordered_ops()
            if op.get_type_name() == "Constant"} <= {"f32", "i64", "i32"}
    run = [core.compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request().infer(inputs)[0]
           for m in (model, patched)]
    np.testing.assert_array_equal(run[0], run[1])


def test_delegation_range_and_curve_find_the_node_that_breaks_it():
    model = synthetic.demo()
    report = bisect(model, "CPU", "EMU:f16", synthetic.sample_inputs(model, seed=1), local=False, impact=0,
                    delegation=True, curve=4, progress=False)
    d = report.delegation
    assert d.error >= d.goal and d.nodes <= 3
    assert d.first.startswith("inorm/")
    errors = [p.error for p in report.curve]
    assert errors[0] == 0.0 and errors[-1] == pytest.approx(report.outputs[0].error, rel=1e-6)


def test_a_fix_asked_for_when_nothing_diverges_says_none_is_needed():
    model = synthetic.demo(inorm_offset=0.0)  # benign in f16: nothing diverges
    report = bisect(model, "CPU", "EMU:f16", local=False, impact=0, fix=True, progress=False)
    assert not report.diverges and report.fix is not None and report.fix.on_reference == ()
    text = " ".join(report.to_text().split())  # as read, whatever the wrapping
    assert re.search(r"Fix: none needed: the final error \S+ is within its tolerance", text)
    assert "no node has to stay on the reference" in text
    assert "keeping 0 node(s)" not in text and "keep:" not in text
    assert "Fix: none needed" in report._repr_html_()


def test_a_curve_asks_each_distinct_prefix_once_however_many_points_were_asked():
    from tests.conftest import tiny_chain

    model = tiny_chain(depth=2)  # 4 compute nodes: 5 prefixes
    report = bisect(model, "CPU", "CPU:f32", target_model=inject_fault(model, "mm1"), local=False, impact=0,
                    curve=1000, progress=False)
    assert [p.nodes for p in report.curve] == [0, 1, 2, 3, 4]
    assert report.curve[-1].error == pytest.approx(report.outputs[0].error, rel=1e-6)
    assert len(report.to_dict()["curve"]) == 5  # the saved report holds five points, not 1,001


def test_impact_reorders_suspects_and_noise_floor_is_reported():
    model = synthetic.demo()
    report = bisect(model, "CPU", "EMU:f16", synthetic.sample_inputs(model, seed=1), impact=2, progress=False)
    with_impact = [n for n in report.culprits if n.impact is not None]
    assert len(with_impact) == 2
    assert report.culprits[0].impact == max(n.impact for n in with_impact)
    # Emulated: the CPU in f32, so no second compile; its untouched run made the first measurement too, so no
    # second run either: nothing is claimed about repeatability.
    assert report.noise is None and "bit-identical" not in report.to_text()
    assert report.costs["measure"].target_compiles == 0


def test_a_suspect_whose_pieces_the_target_cannot_run_loses_its_impact_not_the_job(monkeypatch):
    """The CPU plugin refuses some pieces of ONNX exports it runs whole ("contains empty child edge"): the impact
    of a suspect whose partitioned run fails is left unknown, and the others are measured."""
    from bisect_ov.core.errors import DeviceError
    from bisect_ov.experiments import partitioned

    model = synthetic.demo()
    inputs = synthetic.sample_inputs(model, seed=1)
    clean = bisect(model, "CPU", "EMU:f16", inputs, impact=2, progress=False)
    refused = clean.culprits[0].key
    real = partitioned.MixedRuns.error

    def error(self, on_target):
        if refused in on_target:
            raise DeviceError("Compiling for EMU:f16 failed: Node x contains empty child edge for index 0")
        return real(self, on_target)

    monkeypatch.setattr(partitioned.MixedRuns, "error", error)
    report = bisect(model, "CPU", "EMU:f16", inputs, impact=2, progress=False)
    assert report.node(refused).impact is None
    measured = {n.key for n in clean.culprits if n.impact is not None} - {refused}
    assert measured and all(report.node(k).impact == clean.node(k).impact for k in measured)
    assert report.first_divergence.name == clean.first_divergence.name


class _Runs(MixedRuns):
    """Partitioned runs on paper: the final error is within the tolerance only when exactly one of `ok` is kept
    on the reference (errors of mixed precision need not shrink as more is kept); keeping exactly one of
    `failing` makes a piece the plugin refuses."""

    def __init__(self, order, ok, failing=()):  # no engine: the runs are made up
        self.order, self.ok, self.cache, self.runs = list(order), {frozenset(s) for s in ok}, {}, 0
        self.failing, self.failures, self.outputs, self.scales = {frozenset(s) for s in failing}, [], {}, ()

    def error(self, on_target):
        key = frozenset(on_target)
        if frozenset(self.order) - key in self.failing:
            raise DeviceError("Compiling for EMU:f16 failed: Node image contains empty child edge for index 0")
        if key not in self.cache:
            self.runs += 1
            self.cache[key] = 1e-3 if frozenset(self.order) - key in self.ok else 1.0
        return self.cache[key]


def test_the_fix_is_1_minimal_pass_after_pass_within_its_run_budget():
    from bisect_ov.experiments.partitioned import find_fix

    # One suspect unit of three nodes. Dropping b leaves {a, c}; only then can a go too: one pass keeps {a, c}.
    ok = [{"a", "b", "c"}, {"a", "c"}, {"c"}]
    fix = find_fix(_Runs("abc", ok), [("a", "b", "c")], 1e-2)
    assert fix.on_reference == ("c",) and fix.solved and fix.minimal
    capped = find_fix(_Runs("abc", ok), [("a", "b", "c")], 1e-2, max_single=2)  # the budget ends the passes
    assert capped.on_reference == ("a", "c") and capped.solved and not capped.minimal


def test_a_partitioned_run_the_plugin_refuses_is_no_fix_and_the_search_goes_on():
    from bisect_ov.experiments.partitioned import find_fix

    # Keeping b alone makes a piece that does not compile: that assignment is unsolved, a is found, and the fix
    # says how many runs failed and why (it ended the whole run before).
    runs = _Runs("abc", ok=[{"a"}, {"a", "b"}], failing=[{"b"}])
    fix = find_fix(runs, [("b",), ("a",)], 1e-2)
    assert fix.on_reference == ("a",) and fix.solved, fix
    assert fix.failed is not None and fix.failed[0] == 1 and "empty child edge" in fix.failed[1], fix
    assert runs.cache[frozenset("ac")] == math.inf  # not tried again


def test_an_unsolved_fix_writes_no_patched_model_or_ignored_scope(tmp_path, capsys):
    """A fix that does not bring the outputs within their tolerance (here: an int8 twin on f16, whose rounding no
    kept quantized layer removes) is no model to ship: its patched model and ignored scope were written all the same
    (the scope undoing every layer's quantization)."""
    from bisect_ov.cli import main
    from bisect_ov.zoo.user_cases import demo

    report = bisect(demo(), "CPU:f32", "EMU:f16", fix=1e-9, patched_model=tmp_path / "p.xml", impact=0, progress=False)
    assert report.fix is not None and not report.fix.solved and report.fix.patched_model is None
    assert not (tmp_path / "p.xml").exists() and "patched model not written to" in " ".join(report.to_text().split())
    fp32, int8 = synthetic.fp32_and_int8()
    ov.save_model(fp32, tmp_path / "m.xml")
    ov.save_model(int8, tmp_path / "q.xml")
    main([str(tmp_path / "m.xml"), "--ref", "CPU:f32", "--target", "EMU:f16", "--target-model", str(tmp_path / "q.xml"),
          "--fix", "1e-9", "--ignored-scope", str(tmp_path / "s.json"), "--impact", "0", "-q"])
    assert not (tmp_path / "s.json").exists()
    assert "No ignored scope written: no fix brings the outputs within their tolerance." in capsys.readouterr().out


def test_a_fix_the_plugin_kept_from_running_is_not_said_to_fail(monkeypatch):
    """Partitioned runs that fail in the plugin ("... contains dead weak ptr" on a Phi-3 piece) leave the fix not
    found, which the remedies say, rather than "does not solve it ... None solves it"; the failure is logged."""
    import logging

    from bisect_ov.core.errors import DeviceError
    from bisect_ov.experiments.partitioned import MixedRuns

    original = MixedRuns.error

    def error(self, on_target):
        if on_target:
            raise DeviceError("Inference failed on EMU:f16: Node state:x contains dead weak ptr")
        return original(self, on_target)

    monkeypatch.setattr(MixedRuns, "error", error)
    model = synthetic.demo()
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)  # -v shows it, --log-file keeps it
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("bisect_ov")  # heard here whatever an earlier test left its level or propagation at
    level, disabled = logger.level, logging.root.manager.disable
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logging.disable(logging.NOTSET)
    try:
        report = bisect(model, "CPU:f32", "EMU:f16", synthetic.sample_inputs(model, seed=1), fix=True, impact=0,
                        progress=False)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logging.disable(disabled)
    assert report.fix is not None and not report.fix.solved and report.fix.failed
    assert any("dead weak ptr" in r.getMessage() for r in records)
    # Beside another remedy tried (an activation scale factor that did not solve it), the remedies say so
    from dataclasses import replace

    from bisect_ov.core.remedies import ScaleFactor

    tried = replace(report, scale_factor=ScaleFactor(None, 0.1, None, 7.2e-3, ((2.0, 0.1),), "EMU:f16", emulated=True))
    text = " ".join(tried.to_text().split())
    assert "kept in f32: not found: partitioned runs failed in the plugin" in text and "None was found." in text, text
    assert "an activation scale factor: does not solve it" in text


def test_a_dynamic_piece_gets_its_shapes_fixed_and_an_empty_input_folded():
    """The CPU plugin failed at run time on pieces of a Phi-3's stateless form ("... contains dead weak ptr", then
    "... contains empty child edge" with static shapes): an input read only by shape computations, and the
    prefill's KV cache of length 0. `static_piece` fixes the shapes, folds the empty input and drops both."""
    from types import SimpleNamespace

    import openvino.opset13 as ops

    from bisect_ov.engine.pieces import static_piece
    from bisect_ov.model.partition import Extracted
    from bisect_ov.model.taps import Tap

    past = ops.parameter(ov.PartialShape([-1, 2, -1, 4]), np.float32, name="past")
    new = ops.parameter(ov.PartialShape([-1, 2, -1, 4]), np.float32, name="new")
    other = ops.parameter(ov.PartialShape([-1, 2, -1, 4]), np.float32, name="other")  # its shape only is read
    length = ops.gather(ops.shape_of(other), ops.constant(np.int64([2])), ops.constant(np.int64(0)))
    both = ops.concat([past, new], 2)
    out = ops.multiply(both, ops.convert(length, "f32"))
    piece = Extracted(ov.Model([ops.result(out)], [past, new, other]), (Tap("past", 0), Tap("new", 0), Tap("other", 0)),
                      (), (Tap("out", 0),))
    values = {Tap("past", 0): np.zeros((1, 2, 0, 4), np.float32), Tap("new", 0): np.ones((1, 2, 3, 4), np.float32),
              Tap("other", 0): np.ones((1, 2, 5, 4), np.float32)}
    fixed = static_piece(piece, SimpleNamespace(target=[], ref=[]), "target", values)
    assert fixed is not None and fixed.fed == (Tap("new", 0),) and len(fixed.model.get_parameters()) == 1
    got = ov.Core().compile_model(fixed.model, "CPU").create_infer_request().infer([values[Tap("new", 0)]])
    assert np.array_equal(list(got.values())[0], np.full((1, 2, 3, 4), 5.0, np.float32))
    assert static_piece(fixed, SimpleNamespace(target=[], ref=[]), "target", values) is None  # static already


def test_a_local_error_piece_the_plugin_cannot_run_dynamic_runs_again_with_fixed_shapes(monkeypatch):
    """The local-error runs go through `Engine.run_piece`, which had no second try: a dynamic piece the plugin
    refuses at run time (as on a Phi-3's pieces) runs again with its shapes fixed, and gives the same local errors."""
    import openvino.opset13 as ops

    from bisect_ov.core.errors import DeviceError
    from bisect_ov.engine import engine as engine_module

    x = ops.parameter(ov.PartialShape([-1, 16]), np.float32, name="x")
    w = ops.constant(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32))
    h = ops.matmul(x, w, False, False)
    h.set_friendly_name("mm")
    big = ops.add(h, ops.constant(np.float32(3000.0)))
    big.set_friendly_name("offset")
    sq = ops.multiply(big, big)
    sq.set_friendly_name("square")
    out = ops.reduce_mean(sq, ops.constant(np.int64([1])), True)
    out.set_friendly_name("mean")
    model = ov.Model([ops.result(out)], [x])
    inputs = {"x": np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)}

    def local_errors():
        report = bisect(model, "CPU:f32", "EMU:f16", inputs, impact=0, progress=False)
        return {n.name: n.local_error for n in report.nodes if n.local_error is not None}

    expected = local_errors()
    assert expected, "no local error was measured"
    original, refused = engine_module.run_compiled_piece, []

    def run_compiled_piece(runner, sample, side, piece, compiled, values):
        if any(p.get_partial_shape().is_dynamic for p in piece.model.get_parameters()):
            refused.append(side)
            raise DeviceError("Inference failed on EMU:f16: Node x contains dead weak ptr")
        return original(runner, sample, side, piece, compiled, values)

    monkeypatch.setattr(engine_module, "run_compiled_piece", run_compiled_piece)
    assert local_errors() == expected
    assert refused, "no dynamic piece was run: the test does not reach the retry"


def test_a_patched_model_against_a_twin_is_refused_before_the_run(tmp_path):
    """Marks keep nodes in f32 on GPU/NPU; against a twin the fix keeps the twin's layers as the model has them
    (unquantized), which no mark does: the patched model written was the float model marked, presented as the
    fix (0 error because nothing in it was quantized)."""
    fp32, int8 = synthetic.fp32_and_int8()
    with pytest.raises(InputError, match=r"--ignored-scope"):
        bisect(fp32, "CPU:f32", "EMU:f16", target_model=int8, fix=True, patched_model=tmp_path / "p.xml", progress=False)
    assert not (tmp_path / "p.xml").exists()


def _two_outputs(offset: float) -> ov.Model:
    """A Softmax over logits offset by `offset` (its output's tolerance is its reduction's, 9.4e-03 in f16) beside
    a small linear head (an Add's, 3.9e-03)."""
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)

    def linear(x, n_in, n_out, scale=1.0, shift=0.0, name=""):
        bound = 1 / np.sqrt(n_in)
        w = (rng.uniform(-bound, bound, (n_in, n_out)) * scale).astype(np.float32)
        b = (rng.uniform(-bound, bound, n_out) + shift).astype(np.float32)
        return ops.add(ops.matmul(x, ops.constant(w), False, False), ops.constant(b), name=name)

    x = ops.parameter([1, 8, 32], np.float32, name="x")
    hidden = ops.relu(linear(x, 32, 64, name="l1"))
    probs = ops.softmax(linear(hidden, 64, 50, scale=3.0, shift=offset, name="l2"), -1, name="probs")
    return ov.Model([probs.output(0), linear(x, 32, 4, name="side").output(0)], [x], "two_outputs")


def test_the_fix_holds_each_output_to_its_own_tolerance():
    """The Softmax's output is within its own tolerance but over the other output's: the run does not diverge,
    yet the fix was held to the tightest tolerance for the worst error of any output ("none found ... within
    3.9e-03" beside "no divergence"). `fix=True` means each output's tolerance."""
    x = np.random.default_rng(1).standard_normal((1, 8, 32)).astype(np.float32)
    report = bisect(_two_outputs(16.0), "CPU:f32", "EMU:f16", inputs=[x], fix=True, progress=False)
    probs, side = report.outputs
    assert side.tolerance < probs.error <= probs.tolerance and side.error <= side.tolerance  # the case in point
    assert not report.diverges and report.fix is not None and report.fix.solved and report.fix.on_reference == ()
    text = " ".join(report.to_text().split())
    assert "Fix: none needed" in text and "(each output's error scaled by it over its own)" in text
    given = bisect(_two_outputs(16.0), "CPU:f32", "EMU:f16", inputs=[x], fix=side.tolerance, progress=False)
    assert given.fix is not None and given.fix.error_before == pytest.approx(probs.error, rel=1e-3)  # one limit for all


def test_the_fix_tries_what_feeds_a_first_divergence_that_amplifies_its_inputs_rounding():
    """A Softmax of logits offset by 32 diverges on f16: kept alone on the reference it still reads them rounded,
    and the search, which tried its producers only for a cancellation, stopped there: "not solved"."""
    x = np.random.default_rng(1).standard_normal((1, 8, 32)).astype(np.float32)
    report = bisect(_two_outputs(32.0), "CPU:f32", "EMU:f16", inputs=[x], fix=True, progress=False)
    assert report.diverges
    fix = report.fix
    assert fix is not None and fix.solved and "l2" in fix.on_reference, fix


def test_kept_pieces_hold_at_most_their_budget_of_weights_and_the_answer_stays(monkeypatch):
    """A 24-layer BERT's impact runs against EMU:f16 kept six compiled pieces of 0.5 to 0.6 GB alive to the end:
    the kept pieces' weights are bounded (`Engine.piece_budget`); a search that must compile again finds the same."""
    from bisect_ov.engine.engine import Engine
    from bisect_ov.model.graph import weight_bytes

    model = synthetic.demo()
    unbounded = bisect(model, "CPU:f32", "EMU:f16", fix=True, progress=False)
    budget = weight_bytes(model) // 2
    kept: list[tuple[int, int]] = []  # after each segment run: the bytes kept, the largest piece kept
    run_segment = Engine.run_segment

    def spy(self, *args, **kwargs):
        out = run_segment(self, *args, **kwargs)
        kept.append((sum(self._piece_bytes.values()), max(self._piece_bytes.values(), default=0)))
        return out

    monkeypatch.setattr(Engine, "piece_budget", property(lambda self: budget))
    monkeypatch.setattr(Engine, "run_segment", spy)
    bounded = bisect(model, "CPU:f32", "EMU:f16", fix=True, progress=False)
    assert kept and all(total <= max(budget, largest) for total, largest in kept)  # one piece alone may be larger
    assert bounded.fix.on_reference == unbounded.fix.on_reference and bounded.fix.solved
    assert [n.name for n in bounded.culprits] == [n.name for n in unbounded.culprits]
    assert sum(bounded.compiles.values()) > sum(unbounded.compiles.values())  # dropped pieces compiled again
