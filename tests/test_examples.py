"""The four users' cases in `examples/`: each example's `run()` must reach the diagnosis it tells.

Each example is run once per module (module-scoped fixtures); the bf16 parts only where the CPU has bf16.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

from bisect_ov import bisect
from bisect_ov.run.devices import cpu_supports_bf16
from examples import case1_softmax, case2_face_delegate, case3_int8_cpus, case4_int_conv, case6_generated_attention
from tests.conftest import needs_bf16
from tests.zoo.conftest import needs_zoo

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The cases' runs are module fixtures: on one worker each is made once (spread over workers, every worker that ran
# one of a case's tests made it again: 16 s for case 2).
pytestmark = pytest.mark.xdist_group("examples")


@pytest.fixture(scope="module")
def case1():
    return case1_softmax.run()


@pytest.fixture(scope="module")
def case2():
    return case2_face_delegate.run()


@pytest.fixture(scope="module")
def case3():
    return case3_int8_cpus.run()


@pytest.fixture(scope="module")
def case4():
    return case4_int_conv.run()


# ----- case 1: softmax / activations in f16 ---------------------------------------------------------------


def test_case1_short_ops_are_expected_f16_rounding(case1):
    for key in ("softmax", "relu", "sigmoid", "gelu"):
        report = case1[key]
        assert not report.diverges, key
        assert report.first_divergence is None and report.culprits == [], key
        assert report.target.precision == "f16" and report.target.emulated


def test_case1_softmax_error_is_the_size_the_users_saw(case1):
    mean_abs = case1["softmax"].outputs[0].stats.mean_abs
    assert mean_abs == case1["softmax"].nodes[0].stats.mean_abs
    # Users: GPU 4.6e-5, NPU 6.0e-5; emulated f16 must be within 10x of both.
    assert 4.6e-6 <= mean_abs <= 6.0e-4


def test_case1_long_softmax_with_one_f16_accumulator_is_a_culprit(case1):
    report = case1["softmax_long_acc1"]
    assert report.diverges
    first = report.first_divergence
    assert first.name == "softmax" and first.role == "source"
    assert any("long reduction" in c for c in first.causes)
    # With 16 lanes the same accumulation stays within what f16 predicts.
    assert not case1["softmax_long_acc16"].diverges


# ----- case 2: face model, instance norm cancellation ------------------------------------------------------


def _check_face_report(report):
    firsts = report.first_divergences
    assert firsts and all(n.name.startswith("inorm/") for n in firsts), [n.name for n in firsts]
    assert any(c.startswith("cancellation") for n in firsts for c in n.causes)
    start = min(n.index for n in firsts)
    culprits = report.culprits
    assert all(n.index >= start for n in culprits), [n.name for n in culprits if n.index < start]
    assert not any(n.diverged for n in report.nodes if n.index < start)
    assert report.node("preprocess/sub").role == "ok"
    assert all(o.diverged for o in report.outputs)
    # Everything downstream only inherits or amplifies: no other source outside the pattern.
    assert all(n.name.startswith("inorm/") for n in culprits if n.role == "source")


def test_case2_f16_error_starts_in_the_instance_norm(case2):
    _check_face_report(case2["f16"])


def test_case2_depth_profile_shows_error_carried_to_the_output(case2):
    profile = case2_face_delegate.depth_profile(case2["f16"])
    assert profile[-1].name == "l2norm/div" and profile[-1].role == "inherits"
    names = [n.name for n in profile]
    assert "inorm/sub" in names
    assert all(not n.diverged for n in profile[: names.index("inorm/sub")])


def test_case2_fix_keeps_few_nodes_and_is_verified(case2):
    fix = case2["f16"].fix
    assert fix.solved and fix.error_after <= fix.tolerance < fix.error_before
    assert "inorm/sub" in fix.on_reference and len(fix.on_reference) <= 6


def test_case2_without_the_offset_f16_stays_within_tolerance(case2):
    assert not case2["f16_benign"].diverges


@needs_bf16
def test_case2_bf16_error_starts_in_the_instance_norm(case2):
    _check_face_report(case2["bf16"])
    assert case2["bf16"].target.precision == "bf16"
    assert not case2["bf16_benign"].diverges


# ----- case 3: FP32 vs int8 twin ---------------------------------------------------------------------------


def test_case3_fp32_vs_int8_names_the_changed_nodes_and_the_fake_quantizes(case3):
    report = case3["fp32_vs_int8"]
    assert report.diverges
    # The stem reads the clipped input: its convolution, or the int8 kernel it is fused into (conv + bias).
    first = report.first_divergence
    assert first.name == "stem/conv" or "stem/conv" in first.group, (first.name, first.group)
    # The twin's FakeQuantize ops are its quantization of matched nodes, not unmatched nodes.
    assert report.unmatched["target_model"] == [] and report.unmatched["model"] == []
    assert report.coverage >= 0.8
    # Inside the calibrated range, quantization stays within int8 rounding.
    assert not case3["fp32_vs_int8_in_range"].diverges


def test_case3_reports_what_ran(case3):
    report = case3["fp32_vs_int8"]
    assert report.target.precision == "f32"
    kernels = {case3_int8_cpus.kernel(n.runtime, "target") for n in report.nodes}
    assert kernels - {"-"}, "no runtime kernel was read back"


@needs_bf16
def test_case3_int8_on_bf16(case3):
    report = case3["int8_f32_vs_bf16"]
    assert report.target.precision == "bf16"
    ran = {n.runtime.get("target", {}).get("precision") for n in report.nodes} - {None}
    assert ran, "no runtime precision was read back"
    if case3_int8_cpus.int8_twin(case3_int8_cpus.synthetic.fp32_and_int8()[0])[1] != "nncf.quantize":
        # The code-built twin leaves float ops between its quantizers; NNCF's runs int8 kernels throughout.
        assert "bf16" in ran


def test_case3_bf16_key_only_with_bf16(case3):
    assert ("int8_f32_vs_bf16" in case3) == cpu_supports_bf16()


def test_case3_twin_is_made_by_nncf_when_installed():
    import importlib.util

    _, made_by = case3_int8_cpus.int8_twin(case3_int8_cpus.synthetic.fp32_and_int8()[0])
    assert (made_by == "nncf.quantize") == (importlib.util.find_spec("nncf") is not None)


# ----- an LLM against its int4 twin (needs the zoo extra) ------------------------------------------------------


@needs_zoo
def test_llm_int4_twin_prints_the_layers_to_keep_and_a_scope_nncf_meets():
    from examples import llm_int4_twin

    found = llm_int4_twin.run()
    report = found["report"]
    assert report.sensitivity and all(s.quantization.startswith(("int4", "int8")) for s in report.sensitivity)
    assert found["scope"] and report.fix.solved
    assert found["nncf_error"] <= found["goal"], found
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "examples/llm_int4_twin.py"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "nncf.IgnoredScope(names=[" in proc.stdout and "Layers int4 hurts most" in proc.stdout


# ----- case 4: integer convolution -------------------------------------------------------------------------


def test_case4_f16_saturates_at_the_conv(case4):
    first = case4["f16"].first_divergence
    assert first.name == "conv" and first.role == "source"
    causes = " ".join(first.causes)
    assert "179,209,319" in causes
    assert "65,504" in causes and "inf" in causes.lower()


def test_case4_f32_agrees_but_notes_the_reference_is_off(case4):
    report = case4["f32"]
    assert not report.diverges
    # 179,209,319 is odd and above 2**24, so no f32 result can equal it: the note must say by how much the f32
    # reference is off (how much depends on the CPU's accumulation order: 1,927 with AVX-512, 7 with AVX2).
    notes = [n for n in report.notes if "179,209,319" in n]
    assert notes
    off = [int(m.replace(",", "")) for n in notes for m in re.findall(r"reference off by ([\d,]+)", n)]
    assert off and all(o >= 1 for o in off)


@needs_bf16
def test_case4_bf16_computed_in_floating_point(case4):
    first = case4["bf16"].first_divergence
    assert first.name == "conv"
    assert any("computed in floating point: off by 97,177" in c for c in first.causes)


def test_case4_script_prints_the_exact_answer():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "examples/case4_int_conv.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "179,209,319" in proc.stdout


# ----- case 5: massive activations overflow f16 in every layer's RMSNorm (needs the zoo extra to build) -----
@pytest.fixture(scope="module")
def case5():
    from bisect_ov.zoo import cache

    if cache.missing_packages():
        pytest.skip(f"building the LLM needs the zoo extra (missing {cache.missing_packages()})")
    from examples import case5_llm_overflow

    return case5_llm_overflow.run()


def test_case5_overflow_is_named_at_the_first_rmsnorm_with_its_magnitudes(case5):
    report = case5["f16"]
    first = report.first_divergence
    assert first is not None and first.op_type == "Power", report.to_text()
    assert first.label == "model.layers.0.input_layernorm (aten::pow -> Power)"
    cause = " ".join(first.causes)
    assert "overflow" in cause and "x*x" in cause and "65,504" in cause, cause


def test_case5_every_square_that_overflows_from_finite_inputs_is_a_source_whatever_its_impact():
    """With impact runs (the default job): the post-attention norm's x*x overflows again after the input norm's
    inf was turned into 0, and alone on the target it moves the outputs by ~5e-5 (it zeroes a small branch). It is
    still a source, never absorbed, and the means of the squares inherit."""
    from bisect_ov.zoo import cache

    if cache.missing_packages():
        pytest.skip(f"building the LLM needs the zoo extra (missing {cache.missing_packages()})")
    from bisect_ov.zoo.llm_cases import massive_llama
    from examples.case5_llm_overflow import LAYERS, PEAK

    report = bisect(massive_llama(layers=LAYERS, peak=PEAK), "CPU:f32", "EMU:f16", prompt_length=8, noise=False,
                    progress=False)
    squares = [n for n in report.nodes if n.name.endswith("norm/aten::pow/Power")]
    assert len(squares) == 2 * LAYERS + 1
    assert all(n.role == "source" for n in squares), [(n.name, n.role) for n in squares]
    assert report.first_divergence.name == squares[0].name
    means = [n for n in report.nodes if n.op_type == "ReduceMean" and n.error > n.tolerance]
    assert means and all(n.role == "inherits" for n in means), [(n.name, n.role) for n in means]
    assert f"{2 * LAYERS} more node(s) overflow on their own" in " ".join(report.to_text().split())
    # Headroom names every square that leaves the f16 range, the least headroom first.
    over = report.headroom(0.0)
    assert {n.name for n in squares} <= {n.name for n in over} and over[0].f16_headroom < 0
    assert f"f16 headroom: {len(over)} node(s) whose reference values exceed 65,504" in " ".join(report.to_text().split())


def test_case5_the_patched_model_is_the_stateful_export_marked(tmp_path):
    """The marks go on the model as exported (its variables kept): the stateless form the comparison runs, with
    the KV cache as state:* inputs, was written, which optimum-intel's generate() could not run."""
    import openvino as ov

    from bisect_ov.model.state import is_stateful
    from bisect_ov.zoo import cache

    if cache.missing_packages():
        pytest.skip(f"building the LLM needs the zoo extra (missing {cache.missing_packages()})")
    from bisect_ov.zoo.llm_cases import massive_llama
    from examples.case5_llm_overflow import PEAK

    model = massive_llama(layers=1, peak=PEAK)
    report = bisect(model, "CPU:f32", "EMU:f16", prompt_length=8, noise=False, impact=0, fix=True,
                    patched_model=tmp_path / "patched.xml", progress=False)
    assert report.fix is not None and report.fix.on_reference and report.fix.patched_model
    patched = ov.Core().read_model(tmp_path / "patched.xml")
    assert is_stateful(patched) and [p.get_any_name() for p in patched.inputs] == [p.get_any_name() for p in model.inputs]
    marked = {op.get_friendly_name() for op in patched.get_ordered_ops()
              if any("disable_fp16" in k.lower() or "precisionconversion" in k.lower() for k in op.get_rt_info())}
    assert marked == set(report.ignored_scope() or [report.node(k).name for k in report.fix.on_reference]), marked


def test_case5_fix_covers_every_layer_as_a_pattern_and_is_verified(case5):
    from examples.case5_llm_overflow import LAYERS

    fix = case5["f16"].fix
    assert fix is not None and fix.solved and fix.error_before > fix.tolerance
    # Run whole as its patched model on the emulated f16 device, it holds; clamping the squares does not (the norms
    # need their values) and no activation scale factor reaches values that come from the embedding: the island is
    # the remedy to use.
    assert fix.error_on_target is not None and fix.error_on_target <= fix.tolerance
    clamp, factor = case5["f16"].clamp, case5["f16"].scale_factor
    assert clamp is not None and not clamp.solved and all(n.endswith("norm/aten::pow/Power") for n, _ in clamp.bounds)
    assert factor is not None and not factor.solved
    assert [(r.kind, r.usable) for r in case5["f16"].remedies()][0] == ("fix", True)
    squares = [k for k in fix.on_reference if k.endswith("input_layernorm/aten::pow/Power")]
    assert len(squares) == LAYERS, fix.on_reference
    assert any(p.startswith("__module.model.layers.*.input_layernorm/aten::pow/Power") and f"({LAYERS} of {LAYERS})" in p
               for p in fix.patterns), fix.patterns


# ----- case 6: the CPU's generated attention against ONNX Runtime ------------------------------------------


def test_case6_the_generated_attention_is_named_its_setting_verified_and_a_reproducer_written(tmp_path):
    pytest.importorskip("onnxruntime")
    off = case6_generated_attention.kernel_difference()
    report = case6_generated_attention.run(folder=tmp_path)["attention"]
    attention = {"scores", "weights", "mixed", "heads"}
    if off < 1e-5:
        # This plugin's generated kernel is exact: both sides agree, and nothing is named.
        assert not report.diverges and report.kernel_setting is None
        pytest.skip(f"this CPU plugin's generated attention agrees with its ordinary kernels ({off:.1e})")
    assert report.diverges and report.kernel_setting is not None and report.kernel_setting.solved
    assert report.kernel_setting.error_after <= 1e-5 < report.kernel_setting.error_before
    assert all(n.name in attention for n in report.first_divergences)
    written = case6_generated_attention.reproduce(report, tmp_path / "repro")
    assert attention <= set(written.nodes) and written.error > 1e-5
    readme = " ".join((tmp_path / "repro" / "README.md").read_text().split())
    assert "not run by run.py (onnxruntime, run by bisect" in readme

