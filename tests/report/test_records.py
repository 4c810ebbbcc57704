"""Typed report records, the field-driven codec, loading old and malformed JSON, and importing without OpenVINO."""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib
import subprocess
import sys
import textwrap

import pytest

from bisect_ov.core import codec
from bisect_ov.core.errors import InputError
from bisect_ov.core.records import (
    Cause,
    CurvePoint,
    Delegation,
    DeviceInfo,
    Fidelity,
    Fix,
    InputInfo,
    Noise,
    RunOptions,
    SamplesSummary,
    StageCost,
    ToleranceInfo,
)
from bisect_ov.report.report import SCHEMA_VERSION, Report

DATA = pathlib.Path(__file__).parent / "data"
V1 = DATA / "report_v1.json"  # saved by schema version 1 (records as untyped dicts), with fix, samples, curve
# Saved by schema version 2 (causes as sentences; tolerance, options, inputs, costs as dicts; the "capture" stage),
# with fix, delegation and curve.
V2 = DATA / "report_v2.json"


def test_a_schema_1_report_loads_into_typed_records_and_renders_as_before():
    report = Report.load(V1)
    assert isinstance(report.fix, Fix) and report.fix.solved and report.fix.patched_model == "patched.xml"
    assert report.fix.on_reference == ("inorm/offset", "inorm/mean", "inorm/sub", "inorm/sqdiff")
    assert isinstance(report.delegation, Delegation) and report.delegation.first == "inorm/mean"
    assert report.curve[0] == CurvePoint(0.0, 0, 0.0) and len(report.curve) == 3
    assert report.noise == Noise(run_to_run=0.0)
    assert isinstance(report.fidelity, Fidelity) and report.fidelity.warning == ""
    s = report.samples
    assert isinstance(s, SamplesSummary) and (s.count, s.k, s.topk_misses, s.top1_flipped) == (2, 5, 0, (0, 1))
    # The text rendered from this file, kept beside it (as the schema-1 code rendered it, but the culprit table
    # fitted without padding, the tolerance line naming the growth a source needs, and the f16 headroom line that
    # the statistics it holds give).
    assert report.to_text(width=120) == (DATA / "report_v1.txt").read_text()
    assert report.schema_version == SCHEMA_VERSION == 4
    assert report.tolerance == ToleranceInfo(precision="f16") and report.options is None and report.costs == {}
    assert report.inputs == (InputInfo("input", (1, 3, 32, 32), "float32"),)
    sub = report.node("inorm/sub")
    assert [c.kind for c in sub.diagnosis] == ["cancellation"] and sub.causes[0].startswith("cancellation: its inputs")


def test_a_schema_2_report_loads_with_typed_settings_cause_records_and_the_measure_stage():
    saved = json.loads(V2.read_text())
    assert saved["schema_version"] == 2 and "capture" in saved["costs"]
    report = Report.load(V2)
    assert report.schema_version == SCHEMA_VERSION
    assert list(report.costs) == ["open", "plain", "generate", "measure", "score", "experiments", "assemble"]
    assert report.costs["measure"] == StageCost(**saved["costs"]["capture"])
    assert isinstance(report.options, RunOptions) and report.options.fix and report.options.curve == 3
    assert report.tolerance.precision == "f16" and report.tolerance.min_growth == 2.0
    assert report.inputs[0].shape == (1, 3, 32, 32)
    # Read by name too, as code written against the dicts of schema 2 reads them.
    assert report.costs["measure"]["target_compiles"] == saved["costs"]["capture"]["target_compiles"]
    assert report.tolerance["precision"] == "f16" and report.options["fix"] and report.inputs[0]["name"] == "input"
    assert report.options.get("no such option") is None
    with pytest.raises(KeyError):
        report.tolerance["no such field"]
    first = report.first_divergences
    assert [[c.kind for c in n.diagnosis] for n in first] == [["cancellation"], ["over_tolerance"]]
    assert [n.causes for n in first] == [tuple(n["causes"]) for n in saved["nodes"] if n["first"]]
    assert all(c.numbers == {} for n in first for c in n.diagnosis)  # schema 2 saved the sentences only
    assert report.to_text(width=120) == (DATA / "report_v2.txt").read_text()
    again = Report.from_dict(report.to_dict())
    encoded = {n["key"]: n for n in again.to_dict()["nodes"]}
    assert again == report and encoded[first[0].key]["causes"] == list(first[0].causes)  # sentences, for readers


def test_typed_settings_and_causes_round_trip_through_the_codec():
    cause = Cause("overflow", "overflow: ...", {"input_max": 400.0, "limit": math.inf})
    assert codec.from_dict(Cause, json.loads(json.dumps(codec.to_dict(cause)))) == cause and str(cause) == cause.text
    options = RunOptions(tolerance=ToleranceInfo(value=0.1, per_node={"a": 1e-3}), keep=("a",), max_tap_bytes=None)
    assert codec.from_dict(RunOptions, codec.to_dict(options)) == options
    assert codec.from_dict(RunOptions, codec.to_dict(RunOptions(tolerance=0.5))).tolerance == 0.5
    with pytest.raises(InputError, match=r"options.seed: expected an integer"):
        codec.from_dict(RunOptions, {"seed": "0"}, where="options")


def test_a_record_refuses_a_field_it_does_not_have():
    """(That `RunOptions` and `ToleranceInfo` hold every option and tolerance field: tests/test_options.py.)"""
    from bisect_ov.pipeline.assemble import record_of

    with pytest.raises(TypeError, match="no field for"):
        record_of(StageCost, {"seconds": 1.0, "gpu_compiles": 1})


def test_save_and_load_round_trip_and_keep_empty_experiments_null(tmp_path):
    report = Report.load(V1)
    again = Report.load(report.save(tmp_path / "r.json"))
    assert again == report and again.to_text() == report.to_text()
    data = json.loads(V1.read_text())
    for key in ("fix", "delegation", "noise", "fidelity", "samples"):
        data[key] = {}  # schema 1 wrote experiments that did not run as empty objects
    plain = Report.from_dict(data)
    assert (plain.fix, plain.delegation, plain.noise, plain.fidelity, plain.samples) == (None,) * 5
    saved = json.loads(plain.save(tmp_path / "p.json").read_text())
    assert saved["fix"] is None and saved["schema_version"] == SCHEMA_VERSION
    assert Report.load(tmp_path / "p.json") == plain


def test_codec_writes_non_finite_floats_as_strings_and_reads_them_back():
    fix = Fix(on_reference=("a",), error_before=math.inf, error_after=math.nan, tolerance=-math.inf, verified=True, runs=2)
    data = codec.to_dict(fix)
    assert (data["error_before"], data["error_after"], data["tolerance"]) == ("Infinity", "NaN", "-Infinity")
    assert data["on_reference"] == ["a"] and data["solved"] is False  # derived property, written for readers
    json.dumps(data, allow_nan=False)
    back = codec.from_dict(Fix, data)
    assert back.on_reference == ("a",) and math.isinf(back.error_before) and math.isnan(back.error_after)
    assert back.tolerance == -math.inf
    for spelling, value in (("inf", math.inf), ("-inf", -math.inf), ("Infinity", math.inf), ("-Infinity", -math.inf)):
        assert codec.decode_float(spelling) == value
    assert math.isnan(codec.decode_float("nan")) and math.isnan(codec.decode_float("NaN"))
    with pytest.raises(InputError, match='expected a number \\(or "Infinity", "-Infinity", "NaN"\\), got \'infinite\''):
        codec.decode_float("infinite", "x")
    info = DeviceInfo("CPU", "CPU", config={"A": "1"}, precision_counts={"f32": 3})
    assert codec.from_dict(DeviceInfo, codec.to_dict(info)) == info


def _strict(text: str):
    """JSON as a strict parser (a browser's JSON.parse) reads it: no NaN, Infinity or -Infinity tokens."""
    def refuse(token: str):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def test_a_saved_report_with_non_finite_numbers_is_strict_json_and_loads_back(tmp_path):
    report = Report.load(V1)
    node = dataclasses.replace(report.nodes[0], error=math.inf, growth=math.nan, local_error=-math.inf)
    changed = dataclasses.replace(report, nodes=(node, *report.nodes[1:]),
                                  fix=dataclasses.replace(report.fix, error_after=math.nan))
    path = changed.save(tmp_path / "r.json")
    data = _strict(path.read_text())
    assert (data["nodes"][0]["error"], data["nodes"][0]["growth"], data["nodes"][0]["local_error"]) == \
        ("Infinity", "NaN", "-Infinity")
    assert data["fix"]["error_after"] == "NaN" and data["schema_version"] == SCHEMA_VERSION
    loaded = Report.load(path)
    first = loaded.nodes[0]
    assert first.error == math.inf and math.isnan(first.growth) and first.local_error == -math.inf
    assert loaded == changed and loaded.to_text() == changed.to_text()


def test_older_files_with_nan_tokens_or_the_old_spelling_still_load(tmp_path):
    """Files with Python's bare tokens (written by hand or by other tools), and reports of schema 3 with the
    strings "inf"/"-inf"/"nan", read as the same numbers."""
    data = json.loads(V2.read_text())
    data["nodes"][0].update(error=math.inf, growth=math.nan, local_error=-math.inf)
    tokens = json.dumps(data)  # Python's default: bare Infinity, NaN and -Infinity tokens
    old = tokens.replace("-Infinity", '"-inf"').replace("Infinity", '"inf"').replace("NaN", '"nan"')
    assert '"error": Infinity' in tokens and '"error": "inf"' in old
    for name, text in (("tokens", tokens), ("old", old)):
        path = tmp_path / f"{name}.json"
        path.write_text(text)
        node = Report.load(path).nodes[0]
        assert node.error == math.inf and math.isnan(node.growth) and node.local_error == -math.inf, name


def test_kept_tensors_are_given_at_construction_and_never_saved(tmp_path):
    report = Report.load(V1)
    key = report.nodes[0].key
    kept = dataclasses.replace(report, kept_tensors={key: ("ref", "target")})
    assert kept.tensors(key) == ("ref", "target") and kept == report
    assert "kept_tensors" not in kept.to_dict()
    with pytest.raises(InputError, match="were not kept"):
        Report.load(kept.save(tmp_path / "k.json")).tensors(key)
    assert not hasattr(Report, "keep_tensors")
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.fix = None  # type: ignore[misc]


def _broken(tmp_path, change) -> pathlib.Path:
    data = json.loads(V1.read_text())
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(schema_version="2"), r"schema version is '2'; it must be a positive integer"),
    (lambda d: d.update(schema_version=True), r"schema version is True; it must be a positive integer"),
    (lambda d: d.update(schema_version=-1), r"schema version is -1; it must be a positive integer"),
    (lambda d: d.pop("schema_version"), r"schema version is None"),
    (lambda d: d.pop("metric"), r"report: the key 'metric' is missing"),
    (lambda d: d["nodes"][2].pop("error"), r"report.nodes\[2\]: the key 'error' is missing"),
    (lambda d: d["nodes"][1].update(error="abc"), r"report.nodes\[1\].error: expected a number .*got 'abc'"),
    (lambda d: d["outputs"][0]["stats"].update(shape="1x10"), r"report.outputs\[0\].stats.shape: expected a list"),
    (lambda d: d["ref"].update(emulated="no"), r"report.ref.emulated: expected true or false, got 'no'"),
    (lambda d: d["fix"].update(runs=1.5), r"report.fix.runs: expected an integer, got 1.5"),
    (lambda d: d.update(nodes={}), r"report.nodes: expected a list"),
    (lambda d: d.update(timings={"load": [[[[1]]]]}), r"report.timings.load: expected a number"),
    # Integers too large for a float loaded, then crashed to_text and to_dataframe with OverflowError.
    (lambda d: d["nodes"][1].update(error=10 ** 400), r"report.nodes\[1\].error: expected a number .*got an integer "
                                                      r"of 401 digits"),
    (lambda d: d["nodes"][0].update(index=10 ** 400), r"report.nodes\[0\].index: expected an integer of 64 bits"),
    (lambda d: d["fix"].update(runs=2 ** 63), r"report.fix.runs: expected an integer of 64 bits, got 9223372036854775808"),
    # Names of nodes that are not in the report loaded, and failed on use.
    (lambda d: d.update(first_divergence=["no/such"]), r"report.first_divergence names 1 node\(s\) that are not in "
                                                       r"report.nodes: \['no/such'\]"),
    (lambda d: d["ranking"].append("ghost"), r"report.ranking names 1 node\(s\) that are not in report.nodes: "
                                             r"\['ghost'\]"),
    (lambda d: d["nodes"][1].update(key=d["nodes"][0]["key"]), r"report.nodes: the key\(s\) .* appear more than once"),
])
def test_malformed_reports_are_clear_refusals(tmp_path, change, message):
    with pytest.raises(InputError, match=message):
        Report.load(_broken(tmp_path, change))


def test_the_references_a_saved_report_holds_are_all_checked_on_its_own_nodes():
    report = Report.load(V1)
    assert report.first_keys and set(report.first_keys) <= {n.key for n in report.nodes}
    assert report.ranking and set(report.ranking) <= {n.key for n in report.nodes}
    assert report.to_text() and report.culprits[0].key == report.ranking[0]


def test_deeply_nested_json_is_refused(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"schema_version": 1, "nodes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(InputError, match="nested too deeply"):
        Report.load(deep)
    nested = _broken(tmp_path, lambda d: d["nodes"][0].update(runtime={"ref": _nest(200)}))
    with pytest.raises(InputError, match="nested deeper than"):
        Report.load(nested)


def _nest(n: int):
    value: object = 1
    for _ in range(n):
        value = {"x": value}
    return value


def test_reading_a_report_does_not_import_openvino():
    """`bisect_ov.report` and the records sit below the device layer: a JSON report loads with numpy only.

    The package's `__init__` imports everything (the front door), so the probe loads the submodules with a
    bare package object in its place.
    """
    root = pathlib.Path(__file__).resolve().parents[2] / "bisect_ov"
    code = textwrap.dedent(f"""
        import sys, types
        package = types.ModuleType("bisect_ov")
        package.__path__ = [{str(root)!r}]
        package.__version__ = "0"  # the real one lives in the __init__ left out here
        sys.modules["bisect_ov"] = package
        from bisect_ov.report.report import Report
        import bisect_ov.report.text, bisect_ov.report.html, bisect_ov.report.export, bisect_ov.core.codec
        report = Report.load({str(V1)!r})
        report.to_text()
        bisect_ov.report.html.render_page(report, plots=False)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "openvino")
        print(loaded)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_nodes_in_takes_any_name_prefix_onnx_ir_and_module_paths():
    report = Report.load(V2)
    assert [n.name for n in report.nodes_in("inorm")][:3] == ["inorm/offset", "inorm/mean", "inorm/sub"]
    assert all(n.name.startswith("inorm/") for n in report.nodes_in("inorm/"))
    assert report.nodes_in("inor") == [] and report.nodes_in("") == []  # whole parts of the name only
    names = {0: "/layer1/conv/Conv", 1: "/layer1/relu/Relu", 2: "/layer10/conv/Conv",
             3: "__module.model.layers.3.self_attn.q_proj/aten::linear/MatMul"}
    renamed = dataclasses.replace(report, nodes=tuple(
        dataclasses.replace(n, name=names.get(i, n.name)) for i, n in enumerate(report.nodes)))
    assert [n.name for n in renamed.nodes_in("/layer1")] == [names[0], names[1]]
    assert [n.name for n in renamed.nodes_in("layer1")] == [names[0], names[1]]  # the leading / is optional
    assert [n.name for n in renamed.nodes_in("model.layers.3")] == [names[3]]
    assert renamed.node("layer10").name == names[2]  # node() takes a prefix too: the node furthest over its tolerance


@pytest.mark.parametrize("noise, line", [
    (Noise(run_to_run=0.0), "Noise: the target gave bit-identical outputs across two runs."),
    (Noise(compile_to_compile=0.0), "Noise: the target gave bit-identical outputs across two compiles."),
    (Noise(0.0, 0.0), "Noise: the target gave bit-identical outputs across two runs and two compiles."),
    (Noise(None, 2e-4), "Noise: the target's outputs differ by 2.0e-04 compile to compile."),
])
def test_the_noise_line_names_only_what_was_measured(noise, line):
    # A generation step's noise is measured between compiles only (its run-to-run is None): the line must not
    # claim two runs agreed.
    report = dataclasses.replace(Report.load(V1), noise=noise)
    assert line in report.to_text(width=120).splitlines()


def test_a_final_output_holding_inf_has_no_cosine_printed_as_minus_inf():
    # The statistics keep -inf for a tensor that gained NaN/Inf; the report printed "cosine -inf" (below -1).
    import numpy as np

    from bisect_ov.analysis.metrics import compare
    from bisect_ov.report.numbers import fmt_cosine

    broken = compare(np.ones(4, np.float32), np.array([1, 1, np.inf, 1], np.float32))
    assert broken.cosine == -math.inf and fmt_cosine(broken.cosine) == "n/a (NaN/Inf)"
    assert fmt_cosine(0.9943141) == "0.994314"
    report = Report.load(V1)
    worst = dataclasses.replace(report.outputs[0], stats=broken)
    text = dataclasses.replace(report, outputs=(worst,)).to_text(width=120)
    assert "cosine n/a (NaN/Inf)" in text and "cosine -inf" not in text


def test_loading_a_folder_says_it_is_a_folder(tmp_path):
    with pytest.raises(InputError, match="is a folder: pass the report's JSON file"):
        Report.load(tmp_path)
    with pytest.raises(InputError, match="Report file not found"):
        Report.load(tmp_path / "missing.json")


def test_a_pipeline_s_differing_tokens_say_how_many_more_there_are():
    # Five were shown and the rest dropped with no sign of it
    from bisect_ov.report.pipeline import PipelineReport

    report = PipelineReport("t5", "folder", "CPU:f32", "EMU:f16", (), ref_tokens=(0, 27, 27, 27, 27, 27, 27, 27),
                            target_tokens=(0, 80, 80, 80, 80, 80, 80, 80))
    line = next(line for line in report.overview().splitlines() if "generated tokens differ" in line)
    assert "reference [27, 27, 27, 27, 27, ... 2 more], target [80, 80, 80, 80, 80, ... 2 more]" in line, line
