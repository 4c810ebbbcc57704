"""The command line on a quantized twin: --sensitivity, --fix and --ignored-scope writing NNCF's scope."""

from __future__ import annotations

import json

import openvino as ov

from bisect_ov.cli import main
from bisect_ov.zoo import synthetic


def test_ignored_scope_is_written_as_json_nncf_takes(tmp_path, capsys):
    fp32, int8 = synthetic.fp32_and_int8()
    ov.save_model(fp32, str(tmp_path / "m.xml"), compress_to_fp16=False)
    ov.save_model(int8, str(tmp_path / "q.xml"), compress_to_fp16=False)
    out = tmp_path / "scope.json"
    code = main([str(tmp_path / "m.xml"), "--ref", "CPU:f32", "--target", "CPU:f32", "--target-model",
                 str(tmp_path / "q.xml"), "--fix", "0.05", "--sensitivity", "--ignored-scope", str(out), "-q",
                 "--no-noise"])
    printed = capsys.readouterr().out
    assert code in (0, 1)
    names = json.loads(out.read_text())["names"]
    assert names and set(names) <= {op.get_friendly_name() for op in fp32.get_ops()}
    assert "nncf.IgnoredScope(names=" in printed and "Layer sensitivity" in printed


def test_ignored_scope_needs_fix(tmp_path, capsys):
    fp32, _ = synthetic.fp32_and_int8()
    ov.save_model(fp32, str(tmp_path / "m.xml"), compress_to_fp16=False)
    code = main([str(tmp_path / "m.xml"), "--target", "CPU:f32", "--ignored-scope", str(tmp_path / "s.json")])
    assert code == 2 and "--fix" in capsys.readouterr().err
