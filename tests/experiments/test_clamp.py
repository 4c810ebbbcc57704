"""The clamp remedy: a clamp after the node whose values leave f16's range, verified on the target, made 1-minimal,
with its cost measured; and said not to solve it where what follows needs the values themselves."""

import sys

import numpy as np
import pytest

from bisect_ov import InputError, bisect, clamp_after
from bisect_ov.run.openvino_device import cpu_supports_bf16


def _two_overflows():
    """Two linear layers whose outputs reach ~1e5 in one channel, past f16's 65,504: one feeds a Softmax (inf there
    gives NaN; a bounded stand-in gives the same one-hot answer), the other a Tanh (inf is harmless there)."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([1, 8, 16], np.float32, name="x")

    def linear(t, columns, name):
        weights = rng.normal(0, 0.2, (16, 16)).astype(np.float32)
        weights[:, columns] = 1e4
        return ops.matmul(t, ops.constant(weights), False, False, name=name)

    scores = ops.softmax(linear(x, 5, "scores"), -1, name="softmax")
    gate = ops.tanh(linear(x, 2, "gate"), name="tanh")
    mix = ops.add(scores, gate, name="mix")
    out = ops.matmul(mix, ops.constant(rng.normal(0, 0.5, (16, 4)).astype(np.float32)), False, False, name="head")
    inputs = {"x": np.abs(rng.normal(0, 1, (1, 8, 16))).astype(np.float32) + 0.5}
    return ov.Model([out.output(0)], [x], "two_overflows"), inputs


def _run(model, inputs):
    import openvino as ov

    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return [np.array(a) for a in compiled(list(inputs.values())).values()]


def test_a_clamp_changes_only_the_values_past_its_bound_and_keeps_the_names():
    model, inputs = _two_overflows()
    plain = _run(model, inputs)[0]
    assert np.allclose(_run(clamp_after(model, {"scores": 1e9}), inputs)[0], plain, rtol=1e-6)  # nothing reaches 1e9
    clamped = clamp_after(model, {"scores": 100.0, "gate": 100.0})
    assert [o.get_names() for o in clamped.outputs] == [o.get_names() for o in model.outputs]
    added = [op for op in clamped.get_ops() if op.get_type_name() == "Clamp"]
    assert len(clamped.get_ops()) == len(model.get_ops()) + 2 and len(added) == 2
    assert {op.input_value(0).get_node().get_friendly_name() for op in added} == {"scores", "gate"}
    for bad in ({"scores": 0.0}, {"scores": float("inf")}, {"nowhere": 1.0}):
        with pytest.raises(InputError):
            clamp_after(model, bad)


def test_the_clamp_that_solves_an_overflow_is_found_minimal_and_its_cost_measured():
    model, inputs = _two_overflows()
    report = bisect(model, "CPU:f32", "EMU:f16", inputs, fix=True, progress=False)
    found = report.clamp
    assert found is not None and found.solved and found.emulated and found.device == "EMU:f16"
    assert found.error_before > found.tolerance >= found.error_after
    # Both linear layers overflow; only the Softmax's needs the clamp: the Tanh's was dropped, and the run without
    # the Softmax's clamp did not solve it (three patched models: both, each alone).
    assert [name for name, _ in found.bounds] == ["scores"] and found.runs == 3
    assert found.bounds[0][1] == pytest.approx(65504.0)  # the reference reaches past f16: the bound is f16's limit
    assert found.cost is not None and found.cost.emulated and found.cost.seconds > 0 and found.cost.slowdown > 0
    text = " ".join(report.to_text().split())
    assert "Clamp: clamping 'scores' at 65504 brings the final error from" in text
    assert "bisect_ov.clamp_after(model, dict(report.clamp.bounds))" in text
    assert "the CPU running the emulation: not the real device's cost" in text
    assert type(report).from_dict(report.to_dict()).clamp == found
    fixed = _run(clamp_after(model, dict(found.bounds)), inputs)[0]
    assert np.allclose(fixed, _run(model, inputs)[0], rtol=1e-5)  # the patched model computes what the model does


def test_a_clamp_is_said_not_to_solve_an_overflow_the_next_norm_needs_exactly():
    """A norm's square that leaves f16 (T5-style): clamping it changes the norm's scale, so the clamp does not solve
    it, and the report says so instead of proposing it."""
    from tests.experiments.test_scale_factor import _ffn_block

    model, inputs = _ffn_block(2000.0)
    report = bisect(model, "CPU:f32", "EMU:f16", inputs, fix=True, progress=False)
    found = report.clamp
    assert found is not None and not found.solved and found.cost is None
    assert [name for name, _ in found.bounds] == ["norm1/square"]
    assert found.error_after > found.tolerance
    assert "leaves the final error at" in " ".join(report.to_text().split())


def test_no_clamp_without_a_divergence_or_for_a_bf16_target():
    model, inputs = _two_overflows()
    assert bisect(model, "CPU:f32", "EMU:bf16", inputs, fix=True, progress=False).clamp is None
    assert bisect(model, "CPU:f32", "EMU:f16", inputs, progress=False).clamp is None  # no fix asked for


def test_remedies_rank_those_that_solve_first_then_by_cost_and_a_bound_makes_one_too_slow():
    import dataclasses

    from bisect_ov.core.records import RemedyCost

    model, inputs = _two_overflows()
    report = bisect(model, "CPU:f32", "EMU:f16", inputs, fix=True, progress=False)
    ranked = report.remedies()
    assert sorted(r.kind for r in ranked[:2]) == ["clamp", "fix"] and ranked[2].kind == "scale_factor"
    assert [r.solves for r in ranked] == [True, True, False]  # the scale factor does not solve it: last
    assert all(r.slowdown is not None and r.slowdown > 0 for r in ranked[:2])
    text = " ".join(report.to_text().split())
    assert "Remedies tried, those that solve first, then by measured latency: 1. " in text
    assert f"Use {ranked[0].title} (below)." in text

    # The same records with costs and a bound set here, so that nothing depends on timing: the cheaper first, one
    # over the bound too slow, and the next one that solves within it is the one to use.
    def cost(slowdown):
        return RemedyCost(seconds=slowdown, untouched_seconds=1.0, repeats=7, device="EMU:f16", emulated=True)

    def with_costs(clamp, fix, bound=None):
        return dataclasses.replace(report, clamp=dataclasses.replace(report.clamp, cost=cost(clamp)),
                                   fix=dataclasses.replace(report.fix, cost=cost(fix)),
                                   options=dataclasses.replace(report.options, max_fix_slowdown=bound))

    assert [r.kind for r in with_costs(1.1, 3.0).remedies()] == ["clamp", "fix", "scale_factor"]
    assert [r.kind for r in with_costs(3.0, 1.1).remedies()] == ["fix", "clamp", "scale_factor"]
    bounded = with_costs(2.0, 1.8, bound=1.5)
    assert [(r.kind, r.too_slow, r.usable) for r in bounded.remedies()] == [
        ("fix", True, False), ("clamp", True, False), ("scale_factor", False, False)]
    text = " ".join(bounded.to_text().split())
    assert "clamps after 1 node(s): 2.00x the untouched latency, too slow (over max_fix_slowdown 1.5x)" in text
    assert "None solves it within the bound." in text
    text = " ".join(with_costs(2.0, 1.2, bound=1.5).to_text().split())
    assert "1. 2 node(s) kept in f32: 1.20x the untouched latency; 2. clamps after 1 node(s): 2.00x" in text
    assert "Use 2 node(s) kept in f32 (below)." in text


def test_the_f32_island_is_run_whole_as_its_patched_model_where_the_target_honours_the_marks():
    from bisect_ov import make_device
    from bisect_ov.zoo.user_cases import demo

    report = bisect(demo(), "CPU", "EMU:f16", fix=True, progress=False)
    fix = report.fix
    assert fix is not None and fix.solved and fix.error_on_target is not None
    # The patched model (its nodes marked disable_fp16_compression) run whole on the emulated f16 device holds what
    # the partitioned runs found.
    assert fix.error_on_target <= fix.tolerance < fix.error_before
    assert fix.cost is not None and fix.cost.emulated and fix.cost.slowdown > 0
    text = " ".join(report.to_text().split())
    if sys.platform.startswith("linux"):  # its peak memory and the untouched model's, each in a fresh process whose
        # peak Linux resets after the imports (elsewhere the imports' own peak can hide a small model's)
        assert fix.cost.peak_mb is not None and fix.cost.untouched_peak_mb is not None and fix.cost.memory_ratio > 0
        assert "peak memory to compile and run +" in text
    assert "on the target as a patched model (those nodes marked to stay in f32, run whole)" in text
    assert type(report).from_dict(report.to_dict()).fix == fix
    assert [r.kind for r in report.remedies()] == ["fix"]
    assert make_device("EMU:f16").honours_precision_marks and not make_device("CPU").honours_precision_marks


def _pooled_head():
    """Token embeddings summed over the prompt, then a linear layer whose output grows with the prompt's length:
    one channel reaches ~6,500 at 8 tokens and ~100,000 (past f16) at 128; a Softmax follows."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    ids = ops.parameter([1, -1], np.int64, name="input_ids")
    table = rng.uniform(0.5, 1.5, (50, 16)).astype(np.float32)
    tokens = ops.gather(ops.constant(table), ids, ops.constant(np.int64(0)), name="embed")
    pooled = ops.reduce_sum(tokens, ops.constant(np.array([1])), True, name="pool")
    weights = rng.normal(0, 0.5, (16, 16)).astype(np.float32)
    weights[:, 3] = 50.0
    fc = ops.matmul(pooled, ops.constant(weights), False, False, name="fc")
    probs = ops.softmax(fc, -1, name="softmax")
    out = ops.matmul(probs, ops.constant(rng.normal(0, 1, (16, 4)).astype(np.float32)), False, False, name="head")
    return ov.Model([out.output(0)], [ids], "pooled_head")


def test_an_fc_output_that_overflows_only_at_long_prompts_gets_its_headroom_and_remedies():
    report = bisect(_pooled_head(), "CPU:f32", "EMU:f16", prompt_lengths=(8, 128), fix=True, progress=False)
    assert report.first_divergence is not None and report.first_divergence.name == "fc"
    assert "8 tokens: none; 128 tokens: 'fc'" in " ".join(report.to_text().split())
    # Headroom over the sweep: the FC's values pass f16's limit (at 128 tokens), and it is listed first.
    below = report.headroom(0.0)
    assert [n.name for n in below] == ["fc"] and below[0].ref_absmax > 65504.0
    clamp, fix = report.clamp, report.fix
    assert clamp is not None and clamp.solved and [n for n, _ in clamp.bounds] == ["fc"]
    assert fix is not None and fix.solved and "fc" in fix.on_reference and fix.minimal
    assert fix.error_on_target is not None and fix.error_on_target <= fix.tolerance
    assert clamp.cost is not None and fix.cost is not None  # each remedy that solves has its cost
    assert report.scale_factor is not None and not report.scale_factor.solved  # a Softmax follows, not a norm
    assert {r.kind for r in report.remedies() if r.solves} == {"clamp", "fix"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the peak is reset after the imports on Linux only")
def test_peak_memory_grows_with_the_weights_a_compile_holds_and_is_none_for_a_device_that_does_not_pickle():
    """Two models alike but for their weights' size (a MatMul with 4 MB and one with 64 MB of f32 weights): the
    peak that a fresh process reaches to compile and run the larger grows by at least the 60 MB more it holds."""
    import threading

    import openvino as ov
    from openvino import opset13 as ops

    from bisect_ov.experiments.peak import peak_memory
    from bisect_ov.run.devices import make_device

    def model(n: int) -> ov.Model:
        x = ops.parameter([1, n], np.float32, name="x")
        w = ops.constant(np.random.default_rng(0).standard_normal((n, n)).astype(np.float32))
        return ov.Model([ops.result(ops.matmul(x, w, False, False))], [x])

    device = make_device("CPU:f32")
    small = peak_memory(device, model(1024), [np.ones((1, 1024), np.float32)])
    large = peak_memory(device, model(4096), [np.ones((1, 4096), np.float32)])
    assert small is not None and large is not None and large - small >= 60, (small, large)

    class Unpicklable:  # a device holding a lock cannot travel to another process
        lock = threading.Lock()

        def __reduce__(self):
            raise TypeError("cannot pickle a lock")

    assert peak_memory(Unpicklable(), model(16), [np.ones((1, 16), np.float32)]) is None


@pytest.mark.skipif(not cpu_supports_bf16(), reason="needs a CPU that runs bf16 (AVX512_BF16 or AMX): elsewhere "
                    "CPU:bf16 runs f32 and the demo does not diverge")
def test_a_patched_model_written_for_the_cpu_is_run_whole_there_and_its_error_said(tmp_path):
    """The CPU plugin keeps some marked ops in f32 and fuses others with unmarked ones: a patched model the user
    will run is run whole on the CPU, and its final error reported beside the partitioned runs' (it was claimed
    verified while the patched demo gave 4.7e-01 there, against 9.0e-02 untouched)."""
    from bisect_ov.zoo.user_cases import demo

    plain = bisect(demo(), "CPU:f32", "CPU:bf16", fix=True, progress=False)
    assert plain.fix is not None and plain.fix.solved and plain.fix.error_on_target is None  # nothing to run whole
    report = bisect(demo(), "CPU:f32", "CPU:bf16", fix=True, patched_model=tmp_path / "fixed.xml", progress=False)
    fix = report.fix
    assert fix is not None and fix.solved and fix.error_on_target is not None and fix.patched_model
    text = " ".join(report.to_text().split())
    assert "on the target as a patched model (those nodes marked to stay in f32, run whole): final error" in text
    held = fix.error_on_target <= fix.tolerance
    assert ("it holds" in text) == held and ("this device does not keep those nodes in f32" in text) == (not held)
    assert [r.solves for r in report.remedies() if r.kind == "fix"] == [held]
