"""Reproducers (`Report.repro`, ``bisect-ov repro``): the written piece reproduces the culprit's local error when
its run.py runs in a fresh process with OpenVINO and numpy only, for the users' cases and for faults injected
into the synthetic zoo's graph shapes; anonymized pieces reproduce and name nothing of the model; bad requests
are refused before anything is written."""

from __future__ import annotations

import json
import math

import numpy as np
import openvino as ov
import pytest

from bisect_ov import Report, bisect, inject_fault
from bisect_ov.cli import main
from bisect_ov.core.errors import InputError
from bisect_ov.repro import FACTOR, reproduces
from bisect_ov.repro import write as repro_write
from bisect_ov.repro.piece import growth, unit_keys
from bisect_ov.zoo import synthetic
from tests.conftest import shape_inputs, shape_model
from tests.repro.conftest import run_fresh

ALLOWED_MODULES = {"numpy", "openvino", "openvino_telemetry", "packaging", "__main__", "__mp_main__", "_distutils_hack"}
CHEAP = {"impact": 0, "noise": False, "baseline": False, "progress": False}


def check_fresh(folder, tmp_path, record) -> dict:
    """run.py in a fresh process: it reproduces what `record` says, with nothing but OpenVINO and numpy."""
    result = run_fresh(folder, tmp_path)
    extra = {m for m in result["modules"] if not m.startswith("__editable__")} - ALLOWED_MODULES
    assert not extra, f"run.py imported {sorted(extra)}"
    assert result["exit"] == 1 and result["reproduced"] is True
    assert result["error"] > record.tolerance
    assert math.isclose(result["error"], record.anonymized_error if record.anonymized else record.error,
                        rel_tol=1e-4) or (math.isinf(result["error"]) and math.isinf(record.error))
    assert reproduces(result["error"], record.local_error, record.tolerance, FACTOR)
    return result


@pytest.fixture(scope="module")
def demo_f16() -> Report:
    return bisect(synthetic.demo(), "CPU:f32", "EMU:f16", **CHEAP)


def test_the_demo_s_first_divergence_reproduces_in_a_fresh_process(demo_f16, tmp_path):
    record = demo_f16.repro(tmp_path / "repro")
    assert record.node == "inorm/sub" == demo_f16.first_divergence.name and record.reproduces and record.grown == 0
    assert record.nodes == ("inorm/sub",)
    files = {p.name for p in (tmp_path / "repro").iterdir()}
    assert {"README.md", "run.py", "repro.json", "inputs.npz", "expected.npz", "piece.xml", "piece.bin",
            "target_emulated.xml"} <= files
    check_fresh(tmp_path / "repro", tmp_path, record)
    readme = (tmp_path / "repro" / "README.md").read_text()
    assert "inorm/sub" in readme and ov.get_version() in readme and "EMU:f16" in readme and "7.24e-01" in readme
    spec = json.loads((tmp_path / "repro" / "repro.json").read_text())
    assert spec["target"]["emulated"] == "f16" and spec["target"]["model_elsewhere"] == "piece.xml"
    with np.load(tmp_path / "repro" / "inputs.npz") as inputs:  # the reference's values of what it reads
        assert sorted(inputs.files) == ["in0", "in1"]


def test_run_py_says_when_the_piece_did_not_run_in_the_precision_asked(demo_f16, tmp_path):
    """Asked for another device's bf16, a lone op fed f32 may stay in f32 (the CPU keeps it so): run.py reads the
    precisions back from the runtime graph and says so beside "Not reproduced" (it said nothing)."""
    import contextlib
    import importlib.util
    import io

    demo_f16.repro(tmp_path / "repro")
    spec = importlib.util.spec_from_file_location("repro_run", tmp_path / "repro" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        module.main(["--target", "CPU:bf16"])
    ran = module.run(tmp_path / "repro", target="CPU:bf16")["target_ran"]
    assert ran, "the CPU's runtime graph names each op's precision"
    noted = "note: asked bf16, the piece's ops ran in" in out.getvalue()
    assert noted == ("bf16" not in ran), out.getvalue()


def _case(name: str):
    """(report, the culprit's name) of a case: 1 (a long softmax with one f16 accumulator), 2 (an instance norm
    behind an offset, in f16), 3 (an int8 twin on the CPU), 4 (an integer convolution saturating f16)."""
    if name == "case2":
        face = synthetic.face_resnet(depth=2, width=8)
        return bisect(face, "CPU", "EMU:f16", synthetic.sample_inputs(face, seed=1), **CHEAP), "inorm/sub"
    if name == "case3":
        fp32, int8 = synthetic.fp32_and_int8()
        return bisect(fp32, "CPU", "CPU:f32", target_model=int8, **CHEAP), "stem/add"
    if name == "case4":
        return bisect(synthetic.int_conv(11111, 127), "CPU", "EMU:f16",
                      {"input": synthetic.int_conv_input(11111, 127)}, **CHEAP), "conv"
    x = np.random.default_rng(0).standard_normal([1, 10_000]).astype(np.float32)
    return bisect(synthetic.softmax_model((1, 10_000), axis=1), "CPU", "EMU:f16-acc1", {"input": x}, **CHEAP), "softmax"


@pytest.mark.parametrize("case", ["case1", "case2", "case3", "case4"])
def test_the_cases_culprits_reproduce(case, tmp_path):
    report, culprit = _case(case)
    record = report.repro(tmp_path / case)
    assert record.node == culprit == report.first_divergence.name
    check_fresh(tmp_path / case, tmp_path, record)
    written = {p.name for p in (tmp_path / case).iterdir()}
    # No compressed weights here: the reference runs with its properties as they were (the setting an f32
    # reference takes for compressed weights was written into every reproducer)
    assert "DYNAMIC_QUANTIZATION" not in (tmp_path / case / "repro.json").read_text()
    if case == "case3":
        assert "target_piece.xml" in written  # the twin's own piece
        # Its local error ran the node without its input quantizers, which the piece holds: a CNN twin's culprit
        # (8.2e-01 in the run, 4.3e-03 alone) was refused as "needs more of the model than 48 nodes upstream".
        assert record.held_to == "error in the run" and any("input quantizers" in n for n in record.notes)
    if case == "case1":  # the f16 accumulator written as a Loop in the emulated piece
        assert "target_emulated.xml" in written and 'type="Loop"' in (tmp_path / case / "target_emulated.xml").read_text()


@pytest.mark.parametrize("shape", ["chain", "diamond", "attention_block"])
def test_a_fault_injected_into_a_zoo_shape_reproduces(shape, tmp_path):
    model = shape_model(shape)
    sites = [n.get_friendly_name() for n in model.get_ordered_ops() if n.get_type_name() in ("MatMul", "Add", "Multiply")]
    site = sites[len(sites) // 2]
    report = bisect(model, "CPU:f32", "CPU:f32", shape_inputs(shape), target_model=inject_fault(model, site, "noise"),
                    **CHEAP)
    assert report.first_divergence.name == site
    record = report.repro(tmp_path / "repro")
    assert record.node == site and site in record.nodes
    check_fresh(tmp_path / "repro", tmp_path, record)


def test_an_anonymized_piece_reproduces_and_names_nothing_of_the_model(tmp_path):
    model = shape_model("conv_bn_net")
    site = "res/conv_a"
    report = bisect(model, "CPU:f32", "CPU:f32", shape_inputs("conv_bn_net"),
                    target_model=inject_fault(model, site, "noise"), **CHEAP)
    record = report.repro(tmp_path / "anon", anonymize=True)
    assert record.anonymize_tried and record.anonymized and record.node == site
    check_fresh(tmp_path / "anon", tmp_path, record)
    names = {op.get_friendly_name() for op in model.get_ordered_ops() if op.get_type_name() not in ("Parameter", "Result")}
    names |= {n.split("/")[0] + "/" for n in names if "/" in n} | {model.get_friendly_name()}
    for path in (tmp_path / "anon").iterdir():
        if path.suffix in (".xml", ".json", ".md"):
            text = path.read_text()
            assert not [n for n in names if n and n in text], path.name
    # Same shapes and statistics, other values.
    plain = report.repro(tmp_path / "plain")
    original, replaced = (ov.Core().read_model(str(tmp_path / d / "piece.xml")) for d in ("plain", "anon"))
    weights = [[op.get_data() for op in m.get_ordered_ops() if op.get_type_name() == "Constant" and op.get_data().size > 1]
               for m in (original, replaced)]
    assert [w.shape for w in weights[0]] == [w.shape for w in weights[1]]
    big = [(a, b) for a, b in zip(*weights) if a.size >= 64]
    assert big and all(not np.array_equal(a, b) and abs(a.std() - b.std()) < 0.3 * a.std() for a, b in big)
    assert "Anonymization" in (tmp_path / "anon" / "README.md").read_text() and not plain.anonymize_tried


def test_the_cli_writes_the_same_folder(demo_f16, tmp_path, capsys):
    ov.save_model(synthetic.demo(), str(tmp_path / "demo.xml"), compress_to_fp16=False)
    api = bisect(str(tmp_path / "demo.xml"), "CPU:f32", "EMU:f16", **CHEAP).repro(tmp_path / "api")
    code = main(["repro", str(tmp_path / "demo.xml"), "--ref", "CPU:f32", "--target", "EMU:f16", "-o",
                 str(tmp_path / "cli"), "-q", "--impact", "0", "--no-noise", "--no-baseline"])
    assert code == 0 and "Reproducer of 'inorm/sub'" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == sorted(p.name for p in (tmp_path / "api").iterdir())
    for name in ("piece.xml", "target_emulated.xml", "repro.json", "run.py"):
        assert (tmp_path / "cli" / name).read_text() == (tmp_path / "api" / name).read_text(), name
    for name in ("inputs.npz", "expected.npz"):
        with np.load(tmp_path / "cli" / name) as a, np.load(tmp_path / "api" / name) as b:
            assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)
    assert api.node == "inorm/sub"
    # A non-empty folder is refused before the run.
    code = main(["repro", str(tmp_path / "demo.xml"), "--target", "EMU:f16", "-o", str(tmp_path / "cli"), "-q"])
    assert code == 2 and "not empty" in capsys.readouterr().err


def test_a_model_with_no_divergence_is_refused(tmp_path):
    report = bisect(shape_model("chain"), "CPU:f32", "CPU:f32", shape_inputs("chain"), **CHEAP)
    assert report.first_divergence is None
    with pytest.raises(InputError, match="Nothing diverges in this report"):
        report.repro(tmp_path / "none")
    assert not (tmp_path / "none").exists()


def test_bad_requests_are_refused_and_say_what_to_do(demo_f16, tmp_path):
    folder = tmp_path / "taken"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="is not empty; pass overwrite=True"):
        demo_f16.repro(folder)
    with pytest.raises(InputError, match="no earlier reproducer"):  # overwrite replaces only a reproducer
        demo_f16.repro(folder, overwrite=True)
    (folder / "notes.txt").unlink()
    demo_f16.repro(folder)
    (folder / "notes.txt").write_text("mine")
    (folder / "piece.bin").write_text("stale")
    demo_f16.repro(folder, overwrite=True)  # the reproducer's files replaced, the user's left alone
    assert (folder / "notes.txt").read_text() == "mine" and (folder / "run.py").is_file()
    assert (folder / "piece.bin").read_bytes() != b"stale"
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="is a file"):
        demo_f16.repro(tmp_path / "file")
    with pytest.raises(InputError, match="does not exist"):
        demo_f16.repro(tmp_path / "missing" / "deeper")
    demo_f16.save(tmp_path / "report.json")
    with pytest.raises(InputError, match="holds statistics only .* bisect-ov repro MODEL --ref CPU:f32 --target EMU:f16"):
        Report.load(tmp_path / "report.json").repro(tmp_path / "from_json")
    ok = next(n for n in demo_f16.nodes if n.error <= n.tolerance)
    with pytest.raises(InputError, match="is within its tolerance"):
        demo_f16.repro(tmp_path / "ok", node=ok.name)
    assert not (tmp_path / "from_json").exists() and not (tmp_path / "ok").exists()


def test_a_recorded_target_is_refused(tmp_path, monkeypatch):
    from bisect_ov.capture import record

    model = synthetic.demo()
    record(model, "EMU:f16", synthetic.sample_inputs(model, seed=0), tmp_path / "t.npz")
    report = bisect(model, "CPU:f32", f"capture:{tmp_path / 't.npz'}", **CHEAP)
    assert report.first_divergence is not None
    with pytest.raises(InputError, match="The target is a recorded run"):
        report.repro(tmp_path / "r")
    # The side says it was replayed, in the report and once saved; a report saved before the field says it too.
    from bisect_ov.report.view import view

    assert report.target.recorded and not report.ref.recorded and view(report).sides[1].recorded
    report.save(tmp_path / "r.json")
    saved = json.loads((tmp_path / "r.json").read_text())
    assert Report.load(tmp_path / "r.json").target.recorded
    del saved["target"]["recorded"]
    assert Report.from_dict(saved).target.recorded and not Report.from_dict(saved).ref.recorded
    # The command line says so before the comparison runs (it ran it whole first)
    import openvino as ov

    from bisect_ov.cli import main

    ov.save_model(model, tmp_path / "demo.xml")
    ran = []
    import bisect_ov.cli as cli

    monkeypatch.setattr(cli, "_run", lambda *a, **k: ran.append(1))
    assert main(["repro", str(tmp_path / "demo.xml"), "--target", f"capture:{tmp_path / 't.npz'}", "-o",
                 str(tmp_path / "cli"), "-q"]) == 2
    assert not ran and not (tmp_path / "cli").exists()


def test_a_piece_that_does_not_reproduce_grows_upstream_or_nothing_is_written(demo_f16, tmp_path, monkeypatch):
    """The smallest piece is made to miss (as a defect that needs its neighbours would): the piece grows, and the
    README says how large it had to be; with no room to grow, nothing is written and the sizes are given."""
    real = repro_write.script.run
    calls = []

    def first_misses(folder, **kw):
        result = real(folder, **kw)
        calls.append(result["error"])
        return {**result, "error": 0.0} if len(calls) == 1 else result

    monkeypatch.setattr(repro_write.script, "run", first_misses)
    record = demo_f16.repro(tmp_path / "grown")
    assert record.grown == 1 and len(record.nodes) > 1 and record.attempts[0] == 0.0 and record.reproduces
    assert "grew 1 step(s) upstream" in (tmp_path / "grown" / "README.md").read_text()
    check_fresh(tmp_path / "grown", tmp_path, record)
    calls.clear()
    with pytest.raises(InputError, match=r"No piece around 'inorm/sub' reproduces .* 1 node\(s\): 0\.0e\+00"):
        demo_f16.repro(tmp_path / "none", max_nodes=1)
    assert not (tmp_path / "none").exists() and not list(tmp_path.glob(".none.*"))


def test_growth_adds_the_upstream_neighbours_within_the_bound(demo_f16):
    graph = demo_f16.repro_source.comparison.graph
    unit = unit_keys(graph, "inorm/sub", ())
    sizes = growth(graph, unit, max_nodes=8)
    assert sizes[0] == ("inorm/sub",)
    assert set(sizes[1]) == {"inorm/sub", "inorm/offset", "inorm/mean"}
    assert all(set(a) < set(b) for a, b in zip(sizes, sizes[1:])) and all(len(s) <= 8 for s in sizes)
    assert growth(graph, unit, max_nodes=1) == [("inorm/sub",)]


def test_each_device_says_how_a_reproducer_rebuilds_it():
    """`side_spec` asks the device (`Device.repro_side`) instead of switching on classes: a device class of the
    user's own is refused unless it says how run.py rebuilds it, and then it is written as it says."""
    from bisect_ov import make_device
    from bisect_ov.core.errors import InputError
    from bisect_ov.core.records import DeviceInfo
    from bisect_ov.repro.sides import side_spec
    from bisect_ov.run.devices import OpenVINODevice

    cpu = make_device("CPU:f32")
    assert side_spec(cpu, DeviceInfo("CPU:f32", "CPU", precision="f32"), "target")["device"] == "CPU"
    emulated = make_device("EMU:f16")
    spec = side_spec(emulated, DeviceInfo("EMU:f16", "CPU", precision="f16", emulated=True), "target")
    assert spec["device"] == "CPU" and spec["emulated"] == "f16"

    class Shifted(OpenVINODevice):  # computes something else than its device name says
        def _compile(self, model, taps=(), fed=(), *, extra=None):
            return super()._compile(model, taps, fed, extra=extra)

    shifted = Shifted("CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    with pytest.raises(InputError, match="a Shifted .* run.py cannot rebuild"):
        side_spec(shifted, DeviceInfo("shifted", "CPU"), "target")

    class Described(Shifted):
        def repro_side(self, info, role):
            return {"device": "CPU", "config": {"INFERENCE_PRECISION_HINT": "f32"}}

    described = Described("CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    assert side_spec(described, DeviceInfo("described", "CPU"), "target")["config"] == {"INFERENCE_PRECISION_HINT": "f32"}
