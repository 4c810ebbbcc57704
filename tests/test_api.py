"""bisect() end to end on tiny models: contract, NaN origin, bad inputs, report round trip."""

import json
import math

import numpy as np
import onnx
import pytest

from bisect_ov import InputError, Report, bisect, inject_fault
from bisect_ov.report.report import SCHEMA_VERSION
from tests.conftest import needs_bf16, tiny_chain
from tests.model.test_load import _onnx_model

F32 = "CPU:f32"


def test_no_divergence_is_an_answer():
    report = bisect(tiny_chain(), "CPU", F32, progress=False)
    assert report.first_divergence is None and report.culprits == [] and not report.diverges
    assert "no divergence" in repr(report)
    assert report.ref.precision == "f32" and report.target.precision == "f32"
    assert {"plain run", "compile and infer", "compare", "score"} <= set(report.timings)
    # Nothing reached half its tolerance: no node was run alone, and the report says so.
    assert not any(n.local_error is not None for n in report.nodes)
    assert any(note.startswith("No local error") and "no node's own error was isolated" in note for note in report.notes)


def test_fault_is_named_with_its_contract_fields():
    model = tiny_chain()
    report = bisect(model, "CPU", F32, target_model=inject_fault(model, "mm2", "scale", 0.3), progress=False)
    first = report.first_divergence
    assert first.name == "mm2" and report.culprits[0].name == "mm2"
    assert first.op_type == "MatMul"  # the user's op, as in the reference model
    assert first.input_error == 0 and first.error > first.tolerance and first.role == "source"
    assert first.shapes == ((1, 8),) and first.dtypes == ("float32",)
    assert first.nan_inf == {"ref_nan": 0, "ref_inf": 0, "target_nan": 0, "target_inf": 0}
    assert report.unmatched["target_model"] == ["mm2/before_fault"]
    downstream = [n for n in report.culprits if n.index > first.index]
    assert downstream and all(n.role in ("inherits", "amplifier") for n in downstream)
    assert "first divergence 'mm2'" in repr(report)
    # No rows asked for is not "none": the count stays (it read "Culprits: none." under a DIVERGES verdict)
    assert f"Culprits: {len(report.culprits)} (not listed: top 0)." in report.to_text(top=0)


def test_nan_produced_in_the_middle_names_its_producer():
    model = tiny_chain(depth=6)
    report = bisect(model, "CPU", F32, target_model=inject_fault(model, "tanh2", "nan"), progress=False)
    assert report.first_divergence.name == "tanh2"
    assert any("NaN" in c for c in report.first_divergence.causes)
    later = report.node("tanh4")  # MatMul and Tanh run as one kernel: the group ends at tanh4
    assert "mm4" in later.group
    assert later.nan_inf["target_nan"] > 0 and later.role == "inherits"
    with pytest.raises(InputError, match="fused it into the kernel that ends at 'tanh4'"):
        report.node("mm4")


def test_report_round_trips_through_json(tmp_path):
    model = tiny_chain()
    report = bisect(model, "CPU", F32, target_model=inject_fault(model, "tanh1", "nan"), progress=False)
    path = report.save(tmp_path / "r.json")
    data = json.loads(path.read_text(), parse_constant=lambda token: pytest.fail(f"not JSON: {token}"))  # strict JSON
    assert data["schema_version"] == SCHEMA_VERSION
    loaded = Report.load(path)
    assert loaded == report
    assert loaded.first_divergence.name == "tanh1" and math.isinf(loaded.node("tanh1").error)
    assert loaded.to_text() == report.to_text()


def test_newer_schema_or_foreign_json_is_refused(tmp_path):
    report = bisect(tiny_chain(depth=1), "CPU", F32, progress=False)
    data = report.to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    (tmp_path / "new.json").write_text(json.dumps(data))
    with pytest.raises(InputError, match="schema version"):
        Report.load(tmp_path / "new.json")
    (tmp_path / "other.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="not a bisect_ov report"):
        Report.load(tmp_path / "other.json")


def test_onnx_path_names_map_back(tmp_path):
    proto = _onnx_model()
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    report = bisect(path, "CPU", F32, strategy="full", progress=False)
    assert "mm_out" in report.node("mm_out").tensor_names
    assert report.node("relu_out").op_type == "Relu"


def test_bad_arguments_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="not found"):
        bisect(tmp_path / "none.xml", "CPU", F32)
    with pytest.raises(InputError, match="Unknown device 'GPU'"):
        bisect(tiny_chain(), "CPU", "GPU")
    with pytest.raises(InputError, match="shape"):
        bisect(tiny_chain(), "CPU", F32, {"x": np.ones((2, 8), np.float32)})
    with pytest.raises(InputError, match="tolerance must be"):
        bisect(tiny_chain(), "CPU", F32, tolerance="big")


def test_user_tolerance_overrides_the_model():
    model = tiny_chain()
    faulty = inject_fault(model, "mm1", "scale", 0.01)
    assert bisect(model, "CPU", F32, target_model=faulty, progress=False).diverges
    assert not bisect(model, "CPU", F32, target_model=faulty, tolerance=0.5, progress=False).diverges


def test_chunks_give_the_same_answer_as_one_compile():
    model = tiny_chain(depth=5)
    faulty = inject_fault(model, "tanh3", "offset")
    # No impact runs: partitioned runs (which a twin now gets) would add compiles of pieces.
    one = bisect(model, "CPU", F32, target_model=faulty, progress=False, max_tap_bytes=None, strategy="full",
                 local=False, noise=False, impact=0)
    many = bisect(model, "CPU", F32, target_model=faulty, progress=False, max_tap_bytes=64, strategy="full",
                  local=False, noise=False, impact=0)
    assert one.compiles["target"] == 2  # the plain model, then all taps at once
    assert many.compiles["target"] > 3
    assert many.first_divergence.name == one.first_divergence.name == "tanh3"
    assert [n.error for n in many.nodes] == [n.error for n in one.nodes]


@needs_bf16
def test_bf16_target_tolerance_follows_its_precision():
    report = bisect(tiny_chain(), "CPU", "CPU:bf16", progress=False)
    assert report.target.precision == "bf16"
    assert report.tolerance["precision"] == "bf16"
    assert not report.diverges  # plain bf16 rounding on a well-scaled chain is expected, not a culprit
    assert report.outputs[0].error > 1e-4  # ... though bf16 really did change the numbers


def test_fidelity_compares_the_plain_and_the_tapped_run():
    model = tiny_chain()
    report = bisect(model, "CPU", F32, target_model=inject_fault(model, "mm1"), progress=False)
    f = report.fidelity
    assert f.plain_error > 0 and f.ratio == pytest.approx(1.0)
    assert not f.warning and "Fidelity" in report.to_text()


@needs_bf16
def test_taps_do_not_hide_a_bf16_cancellation():
    # On a bf16 CPU, f32 tap outputs make the plugin run the graph's tail in f32; typed taps keep it in bf16.
    from bisect_ov.zoo import synthetic

    model = synthetic.demo()
    report = bisect(model, "CPU", "CPU:bf16", synthetic.sample_inputs(model, seed=1), progress=False)
    assert 0.5 <= report.fidelity.ratio <= 2.0
    assert {"inorm/sub", "inorm/sqdiff"} == {n.name for n in report.first_divergences}


def test_tensors_kept_on_request_and_explained_otherwise(tmp_path):
    model = tiny_chain()
    faulty = inject_fault(model, "mm1", "offset", 0.5)
    report = bisect(model, "CPU", F32, target_model=faulty, keep=["mm1"], strategy="full", progress=False)
    ref, target = report.tensors("mm1")
    assert ref.shape == target.shape == (1, 8)
    np.testing.assert_allclose(target - ref, 0.5, rtol=1e-5)
    assert [n.name for n in report.inputs_of("mm1")] == ["tanh0"]
    assert [n.name for n in report.consumers_of("mm1")] == ["tanh1"]
    with pytest.raises(InputError, match=r"keep=\['tanh1'\]"):
        report.tensors("tanh1")
    loaded = Report.load(report.save(tmp_path / "r.json"))
    with pytest.raises(InputError, match="statistics only"):
        loaded.tensors("mm1")


def test_a_report_is_never_written_over_a_file_its_run_read(tmp_path):
    """`Report.save`, `save_html` and `to_model_explorer` refuse the model, its weights and the inputs, as the
    command line does; the files stay as they were."""
    import openvino as ov

    model = tmp_path / "m.xml"
    ov.save_model(tiny_chain(), model)
    x = tmp_path / "x.npy"
    np.save(x, np.ones(tuple(tiny_chain().inputs[0].shape), np.float32))
    before = {p: p.read_bytes() for p in (model, model.with_suffix(".bin"), x)}
    report = bisect(str(model), "CPU", F32, str(x), progress=False)
    for write in (report.save, report.save_html, report.to_model_explorer):
        for path in before:
            with pytest.raises(InputError, match="which this run reads: writing it would destroy it"):
                write(path)
    assert {p: p.read_bytes() for p in before} == before
    assert report.save(tmp_path / "r.json").exists()  # elsewhere, as before
    # A report loaded from JSON read no file: it writes where it is told.
    assert Report.load(tmp_path / "r.json").save(tmp_path / "again.json").exists()


def test_a_fix_that_keeps_a_made_up_name_says_it_holds_for_this_file_only():
    """A converter names a convolution its BatchNorm was folded into ``Multiply_<n>`` from a counter: the ignored
    scope holds for this IR as saved; another conversion of the model names it otherwise (NNCF refuses it)."""
    from bisect_ov.report.blocks import made_up_names

    model = tiny_chain()
    for op in model.get_ordered_ops():
        if op.get_friendly_name() == "mm2":
            op.set_friendly_name("MatMul_4330")
    report = bisect(model, "CPU", F32, target_model=inject_fault(model, "MatMul_4330", "scale", 0.3), fix=True,
                    progress=False)
    assert report.ignored_scope() == ["MatMul_4330"]
    text = " ".join(report.to_text().split())
    assert "'MatMul_4330': named by the converter from a counter" in text and "quantize this IR file as saved" in text
    assert made_up_names(["layer2.0.conv2", "Multiply_12", "__module.fc/aten::linear/MatMul"]) == ["'Multiply_12'"]


def test_every_quantized_layer_gets_a_local_error_its_own_or_its_fused_group_s():
    """With the default strategy a layer the target fused into a group is measured with that group: its sensitivity
    row gives the group's local error and names the group (every row read "- local")."""
    from bisect_ov.zoo import synthetic

    fp32, int8 = synthetic.fp32_and_int8()
    report = bisect(fp32, "CPU:f32", "CPU:f32", target_model=int8, sensitivity=True, progress=False)
    assert report.sensitivity and all(s.local_error is not None for s in report.sensitivity)
    for s in report.sensitivity:
        if s.local_unit is not None:
            assert report.node(s.local_unit).local_error == s.local_error
    assert "local of its fused group" in report.to_text()


def test_a_twin_of_another_checkpoint_is_said_to_be_no_quantization_of_the_model():
    """Its error was reported as a badly quantized first layer ("19.9x the tolerance of quantization rounding")."""
    from bisect_ov.zoo import synthetic

    fp32, int8 = synthetic.fp32_and_int8(seed=0)
    _, other = synthetic.fp32_and_int8(seed=1)  # the same architecture, other weights
    wrong = bisect(fp32, "CPU:f32", "CPU:f32", target_model=other, budget="fast", progress=False)
    said = [n for n in wrong.notes if n.startswith("The target model's weights are not the model's quantized")]
    assert said and "of the 6 layers compared differ" in said[0], wrong.notes
    right = bisect(fp32, "CPU:f32", "CPU:f32", target_model=int8, budget="fast", progress=False)
    assert not [n for n in right.notes if "weights are not the model's" in n]
