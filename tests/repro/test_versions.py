"""OpenVINO versions as a workflow: every report and capture carries the runtime's version and build, and a
comparison against a run recorded with another release says so (the other release's metadata simulated in the
capture file; `benchmarks/version_regression.py` does it with two real releases in two environments)."""

from __future__ import annotations

import json

import numpy as np
import openvino as ov

from bisect_ov import Report, bisect
from bisect_ov.capture import load_capture, record
from bisect_ov.zoo import synthetic
from tests.repro.conftest import run_fresh

OTHER = "2025.4.0-17500-0123456789a-releases/2025/4"  # a build of another release, as ov.get_version() writes it
CHEAP = {"impact": 0, "noise": False, "baseline": False, "progress": False}


def as_if_recorded_with(path, out, version: str):
    """The capture at `path` rewritten as if the OpenVINO `version` had recorded it."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    header = json.loads(arrays["__header__"][()].decode())
    header["openvino_version"] = version
    header["device"]["info"]["openvino_version"] = version
    arrays["__header__"] = np.array(json.dumps(header).encode())
    np.savez(out, **arrays)
    return out


def test_every_report_and_capture_carries_the_runtime_version_and_build(tmp_path):
    here = ov.get_version()
    assert "-" in here  # the release and its build number
    model = synthetic.demo()
    report = bisect(model, "CPU:f32", "EMU:f16", **CHEAP)
    assert report.ref.openvino_version == report.target.openvino_version == report.openvino_version == here
    assert report.openvino_versions == {"both": here}
    assert not any("different OpenVINO releases" in n for n in report.notes)
    report.save(tmp_path / "r.json")
    assert Report.load(tmp_path / "r.json").target.openvino_version == here
    path = record(model, "CPU:f32", synthetic.sample_inputs(model, seed=0), tmp_path / "a.npz")
    with load_capture(path) as cap:
        assert cap.header["openvino_version"] == here and cap.device_info.openvino_version == here


def test_a_comparison_across_versions_says_so_and_its_reproducer_too(tmp_path):
    model = synthetic.demo()
    recorded = record(model, "CPU:f32", synthetic.sample_inputs(model, seed=0), tmp_path / "here.npz")
    other = as_if_recorded_with(recorded, tmp_path / "other.npz", OTHER)
    report = bisect(model, f"capture:{other}", "EMU:f16", **CHEAP)
    assert report.ref.openvino_version == OTHER and report.target.openvino_version == ov.get_version()
    assert report.openvino_versions == {"reference": OTHER, "target": ov.get_version()}
    note = next(n for n in report.notes if "different OpenVINO releases" in n)
    assert OTHER in note and ov.get_version() in note
    assert f"OpenVINO: reference 2025.4.0, target {ov.get_version().split('-')[0]} (different releases)" in report.to_text()
    assert OTHER in report._repr_html_()
    # The same release on both sides says nothing of the kind.
    same = bisect(model, f"capture:{recorded}", "EMU:f16", **CHEAP)
    assert same.openvino_versions == {"both": ov.get_version()} and "different releases" not in same.to_text()
    # The reproducer of a recorded reference: its values are the expected ones, run.py does not run it.
    written = report.repro(tmp_path / "repro")
    assert written.node == "inorm/sub"
    readme = (tmp_path / "repro" / "README.md").read_text()
    assert f"reference {OTHER}, target {ov.get_version()}: the sides ran different releases" in readme
    spec = json.loads((tmp_path / "repro" / "repro.json").read_text())
    assert spec["reference"]["runnable"] is False and spec["reference"]["openvino"] == OTHER
    result = run_fresh(tmp_path / "repro", tmp_path)
    assert result["reproduced"] and "reference" not in result
