"""LLM-specific pieces without the zoo: stateful models, sentinel masks, absorbed errors, overflow and
underflow diagnoses, PyTorch-frontend names, the pattern fix search, and the LLM default inputs."""

from __future__ import annotations

import warnings

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov import bisect
from bisect_ov.analysis.diagnosis import diagnose
from bisect_ov.analysis.metrics import compare
from bisect_ov.analysis.names import layer_of, module_label, parse_name, pattern
from bisect_ov.model.state import initial_states, is_stateful, make_stateless
from bisect_ov.run.inputs import prepare_inputs, vocabulary_size

LOWEST = np.finfo(np.float32).min
FAST = {"noise": False, "progress": False}


def _stateful_model() -> ov.Model:
    """x [1, ?] -> y = x * 2 + cache; the cache variable accumulates x (a KV cache in miniature)."""
    x = ops.parameter([1, -1], np.float32, name="x")
    info = ov.op.util.VariableInfo()
    info.data_shape, info.data_type, info.variable_id = ov.PartialShape([1, -1]), ov.Type.f32, "cache"
    variable = ov.op.util.Variable(info)
    init = ops.broadcast(ops.constant(np.float32(0)), ops.shape_of(x))
    read = ops.read_value(init, variable)
    total = ops.add(read, x, name="accumulate")
    assign = ops.assign(total, variable)
    y = ops.add(ops.multiply(x, np.float32(2), name="double"), total, name="y")
    return ov.Model([ops.result(y)], [assign], [x], "stateful")


def test_stateful_model_becomes_state_inputs_and_outputs_that_reproduce_a_reset_run():
    model = _stateful_model()
    assert is_stateful(model)
    stateless = make_stateless(model)
    assert not is_stateful(stateless.model) and stateless.variables == ("cache",)
    x = np.arange(5, dtype=np.float32)[None]
    init = initial_states(stateless, [x])
    assert init[0].shape == (1, 5) and not init[0].any()
    request = ov.Core().compile_model(model, "CPU").create_infer_request()
    request.reset_state()
    expected = request.infer([x])[0]
    got = ov.Core().compile_model(stateless.model, "CPU").create_infer_request().infer([x, init[0]])
    np.testing.assert_array_equal(got[0], expected)
    np.testing.assert_array_equal(got[1], x)  # the new state: the cache after one step
    assert model.get_sinks(), "the user's model is not modified"


def test_bisect_compares_a_stateful_model_and_its_state_as_outputs():
    report = bisect(_stateful_model(), "CPU:f32", "EMU:f16", {"x": np.linspace(-1, 1, 7, dtype=np.float32)[None]},
                    **FAST)
    assert [o.name for o in report.outputs] == ["y", "state:cache"]
    assert not report.diverges
    assert any("Stateful model" in n for n in report.notes)


def test_mask_of_float32_lowest_compares_equal_to_minus_inf_and_is_counted_once():
    ref = np.array([0.5, LOWEST, LOWEST, -1.0], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning reaches the user
        s = compare(ref, np.array([0.5, -np.inf, -np.inf, -1.0], np.float32))
        huge = compare(np.full(4096, 3e38, np.float32), np.full(4096, 3e38, np.float32))
    assert s.rel_l2 == 0 and s.saturated == 2 and s.new_nonfinite == 0
    assert huge.rel_l2 == 0
    # A real overflow (1e5 in the reference) is not a sentinel.
    assert compare(np.array([1e5], np.float32), np.array([np.inf], np.float32)).rel_l2 == np.inf


def _masked_attention() -> ov.Model:
    scores = ops.parameter([1, 4, 8], np.float32, name="scores")
    mask = np.where(np.tril(np.ones((8, 8))) > 0, 0, LOWEST).astype(np.float32)[None, :4]
    masked = ops.add(scores, ops.constant(mask), name="mask_add")
    return ov.Model([ops.softmax(masked, -1, name="probs")], [scores], "masked")


def test_causal_mask_add_is_not_a_divergence_in_f16():
    report = bisect(_masked_attention(), "CPU:f32", "EMU:f16", **FAST)
    assert not report.diverges, report.to_text()
    assert sum("saturated by design" in n for n in report.notes) == 1


def _norm_after_scale(scale: float) -> ov.Model:
    x = ops.parameter([1, 8, 64], np.float32, name="x")
    big = ops.multiply(x, np.float32(scale), name="massive")
    square = ops.power(big, np.float32(2), name="square")
    mean = ops.reduce_mean(square, [-1], True, name="mean")
    norm = ops.divide(big, ops.sqrt(ops.add(mean, np.float32(1e-6), name="eps")), name="norm")
    return ov.Model([ops.multiply(norm, np.float32(0.5), name="out")], [x], "rmsnorm")


def test_overflow_in_a_square_is_named_with_its_magnitudes():
    report = bisect(_norm_after_scale(200.0), "CPU:f32", "EMU:f16", **FAST)
    first = report.first_divergence
    assert first is not None and first.name == "square", report.to_text()
    cause = " ".join(first.causes)
    assert "overflow" in cause and "65,504" in cause, cause


def test_a_tiny_scale_is_underflow_not_cancellation():
    small = compare(np.full(16, 2e-8), np.zeros(16))
    inputs = [compare(np.full(16, 0.02), np.full(16, 0.02))]
    causes = diagnose("source", 1.0, 1e-3, 1, small, inputs, "f16", "Multiply")
    assert causes[0].kind == "underflow", causes
    product = compare(np.full(4, 1.0), np.full(4, 1.1))
    big = [compare(np.full(4, 100.0), np.full(4, 100.0))]
    assert not any(c.kind == "cancellation" for c in diagnose("source", 1.0, 1e-3, 1, product, big, "f16", "Multiply"))


def test_absorbed_node_is_not_the_verdict():
    """A node's error taken out again by the next op (a softmax invariant to a per-row offset)."""
    x = ops.parameter([1, 4, 16], np.float32, name="x")
    shifted = ops.add(x, np.float32(1.0), name="shift")
    probs = ops.softmax(shifted, -1, name="probs")
    model = ov.Model([probs], [x], "absorbs")
    from bisect_ov import inject_fault

    faulty = inject_fault(model, "shift", "offset", 5.0)
    report = bisect(model, "CPU:f32", "CPU:f32", target_model=faulty, **FAST)
    assert not report.diverges, report.to_text()
    assert report.node("shift").absorbed and report.first_divergence is None
    assert "absorbs" in report.to_text()


def test_pytorch_frontend_names_map_to_module_and_operation():
    traced = "__module.encoder.layer.11.output.dense/aten::linear/MatMul"
    assert parse_name(traced).module == "encoder.layer.11.output.dense"
    assert module_label(traced) == "encoder.layer.11.output.dense (aten::linear -> MatMul)"
    assert layer_of(traced) == "encoder.layer.11"
    assert module_label("linear_6/aten.linear.default/MatMul") == "linear_6 (aten.linear -> MatMul)"
    assert pattern("__module.model.layers.3.input_layernorm/aten::pow/Power") == \
        pattern("__module.model.layers.30.input_layernorm/aten::pow/Power")
    assert module_label("conv2_1/Add") == "conv2_1/Add"


def test_llm_inputs_get_their_usual_values_with_a_prompt_length():
    ids = ops.parameter([-1, -1], np.int64, name="input_ids")
    mask = ops.parameter([-1, -1], np.int64, name="attention_mask")
    table = ops.constant(np.random.default_rng(0).standard_normal((321, 8)).astype(np.float32))
    emb = ops.gather(table, ids, 0)
    out = ops.multiply(emb, ops.unsqueeze(ops.convert(mask, np.float32), -1))
    model = ov.Model([out], [ids, mask], "lm")
    assert vocabulary_size(model) == 321
    ids_value, mask_value = prepare_inputs(model, None, prompt_length=5)
    assert ids_value.shape == (1, 5) and 0 <= ids_value.min() and ids_value.max() < 321
    assert (mask_value == 1).all()


def test_fix_search_takes_a_pattern_for_every_layer():
    from bisect_ov.experiments.partitioned import MixedRuns, find_fix

    class Runs(MixedRuns):
        def __init__(self):  # no engine: the runs are made up
            self.order = [f"layer{i}/{op}" for i in range(32) for op in ("square", "mean", "add")]
            self.runs, self.cache, self.failures = 0, {}, []  # the runs already made: none kept, each trial counts

        def error(self, on_target):
            self.runs += 1
            return 1.0 if any(k.endswith("square") for k in on_target) else 0.0

    runs = Runs()
    fix = find_fix(runs, [("layer0/square",)], 0.5, pattern_of={k: pattern(k) for k in runs.order})
    assert len(fix.on_reference) == 32 and all(k.endswith("square") for k in fix.on_reference)
    assert fix.error_after <= 0.5 and fix.patterns == ("layer*/square (32 of 32)",)
    assert runs.runs < 40


def test_non_finite_inputs_are_described():
    x = np.array([[1.0, np.nan, np.inf, -2.0]], np.float32)
    p = ops.parameter([1, 4], np.float32, name="x")
    model = ov.Model([ops.relu(p, name="relu")], [p], "m")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = bisect(model, "CPU:f32", "EMU:f16", {"x": x}, **FAST)
    assert any("holds 1 NaN and 1 Inf" in n for n in report.notes), report.notes


def test_generation_steps_survive_the_json_round_trip(tmp_path):
    import dataclasses

    from bisect_ov import Report
    from bisect_ov.core.records import Step

    report = bisect(_stateful_model(), "CPU:f32", "CPU:f32", {"x": np.ones((1, 3), np.float32)}, **FAST)
    steps = (Step(0, 5, 5, 1e-3, 1e-3, 0.0, 3e-2, False), Step(1, 7, 9, 4e-2, 1e-3, 2e-2, 3e-2, True))
    report = dataclasses.replace(report, steps=steps, examined_step=0)
    report.save(tmp_path / "r.json")
    again = Report.load(tmp_path / "r.json")
    assert again.steps == steps and again.examined_step == 0
    assert "1 token flip(s)" in again.to_text()


def test_steps_without_token_inputs_are_refused_with_what_the_model_takes():
    from bisect_ov.core.errors import InputError

    with pytest.raises(InputError, match="input_ids"):
        bisect(_stateful_model(), "CPU:f32", "CPU:f32", {"x": np.ones((1, 3), np.float32)}, steps=1, **FAST)
