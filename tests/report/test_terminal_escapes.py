"""Names from the model never reach the terminal raw: control characters (ANSI escapes, carriage returns,
bidirectional overrides) show as Python escapes in `to_text()`, `repr` and everything the CLI prints.

The model is an ONNX file (OpenVINO's IR is XML, which cannot hold most control characters) whose op names
hold an erase-line-and-move-up sequence: printed raw, it would wipe the verdict line.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from bisect_ov import bisect, inject_fault

onnx = pytest.importorskip("onnx")

ERASE = "\x1b[2K\x1b[1A\r"
BAD = "mul" + ERASE + "\u202e"
# Anything a terminal acts on instead of printing, except the newlines between lines.
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def onnx_path(tmp_path_factory):
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.full((1, 8), 1.001, np.float32), "w")
    nodes = [helper.make_node("Tanh", ["x"], ["t1"], name="tanh\x1b[31m"),
             helper.make_node("Mul", ["t1", "w"], [BAD + "_out"], name=BAD),
             helper.make_node("Sigmoid", [BAD + "_out"], ["y"], name="sig\x07")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [w])
    path = tmp_path_factory.mktemp("ansi") / "ansi.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def report(onnx_path):
    import openvino as ov

    model = ov.Core().read_model(onnx_path)
    return bisect(model, "CPU", "CPU:f32", target_model=inject_fault(model, BAD, "scale", 2.0),
                  local=False, noise=False, impact=0, progress=False)


def test_the_faulty_node_is_found_and_named_with_its_escapes_visible(report):
    assert report.first_divergence.name == BAD  # the report keeps the real name
    text = report.to_text()
    assert not CONTROL.search(text), repr(text)
    assert "mul\\x1b[2K\\x1b[1A\\r\\u202e" in text
    assert text.splitlines()[2].startswith("Verdict: DIVERGES")


def test_repr_of_the_report_and_its_nodes_hold_no_control_characters(report):
    for shown in (repr(report), repr(report.first_divergence), repr(report.outputs[0])):
        assert not CONTROL.search(shown) and "\n" not in shown, shown


def test_cli_output_and_errors_hold_no_control_characters(onnx_path, capsys):
    from bisect_ov.cli import main

    code = main([str(onnx_path), "--ref", "CPU", "--target", "CPU:bf16", "--no-local", "--impact", "0"])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert "Verdict" in out
    assert not CONTROL.search(out + err), repr(out + err)
    code = main([str(onnx_path), "--ref", "CPU", "--target", "CPU:bf16", "--input", "x\x1b[2J=nope.npy"])
    out, err = capsys.readouterr()
    assert code == 2 and err.startswith("bisect-ov: error:")
    assert not CONTROL.search(out + err), repr(err)


@pytest.mark.parametrize("raw, shown", [
    ("a\x1b[2Kb", "a\\x1b[2Kb"), ("x\ry", "x\\ry"), ("tab\t", "tab\\t"), ("\x9b31m", "\\x9b31m"),
    ("rtl\u202eevil", "rtl\\u202eevil"), ("plain/name:0", "plain/name:0"), ("ünïcode", "ünïcode"),
])
def test_printable_escapes_controls_and_keeps_ordinary_text(raw, shown):
    from bisect_ov.report.text import printable

    assert printable(raw) == shown
    assert printable(printable(raw)) == shown  # escaping twice changes nothing more
