"""The command line's newer flags under hostile values: a log file that cannot be written is one error before
the run (and one warning when it fails later), not a traceback per record; ``capture`` checks ``--max-tap-mb``
as ``bisect-ov MODEL`` does and refuses ``-o -``; ``repro -o ''`` is refused as an empty path."""

from __future__ import annotations

import logging
import os

import numpy as np
import openvino as ov
import pytest

from bisect_ov.cli import main
from bisect_ov.core.console import LogFile
from bisect_ov.zoo import synthetic


@pytest.fixture(scope="module")
def demo_xml(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "demo.xml"
    ov.save_model(synthetic.demo(), str(path), compress_to_fp16=False)
    return path


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
@pytest.mark.parametrize("command", [["demo", "-q"], ["capture", "DEMO", "-q", "-o", "c.npz"]])
def test_a_log_file_that_cannot_be_written_is_one_error_before_the_run(command, demo_xml, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [str(demo_xml) if a == "DEMO" else a for a in command] + ["--log-file", "/dev/full"]
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and "Logging error" not in err and "Traceback" not in err
    assert err.strip().splitlines() == ["bisect-ov: error: Cannot write the log file '/dev/full': No space left on "
                                        "device. Choose a file on a disk with room."]
    assert not (tmp_path / "c.npz").exists()


def test_a_log_file_failing_later_is_said_once(tmp_path, capsys):
    class Full:
        def write(self, text):
            raise OSError(28, "No space left on device")

        def flush(self):
            raise OSError(28, "No space left on device")

        def close(self):
            pass

    handler = LogFile(tmp_path / "log.txt", encoding="utf-8")
    handler.started(tmp_path / "log.txt")
    handler.stream.close()
    handler.stream = Full()
    logger = logging.getLogger("bisect_ov.test_cli_hostile")
    logger.setLevel(logging.WARNING)  # whatever level an earlier test left on the bisect_ov logger
    logger.addHandler(handler)
    logger.propagate = False
    try:
        for i in range(20):
            logger.warning("record %d", i)
    finally:
        logger.removeHandler(handler)
        handler.close()
    err = capsys.readouterr().err
    assert err.count("writing the log file") == 1 and "Logging error" not in err and "nothing more is logged" in err


@pytest.mark.parametrize("mb", ["nan", "inf", "-inf"])
def test_capture_checks_max_tap_mb_as_the_comparison_does(mb, demo_xml, tmp_path, capsys):
    out = tmp_path / "c.npz"
    for argv in (["capture", str(demo_xml), "-o", str(out), f"--max-tap-mb={mb}", "-q"],
                 [str(demo_xml), "--target", "CPU:f32", f"--max-tap-mb={mb}", "-q"]):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and "--max-tap-mb must be a finite number of MB" in err, (argv, err)
    assert not out.exists()


def test_capture_with_no_tap_limit_and_to_stdout(demo_xml, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["capture", str(demo_xml), "-o", "c.npz", "--max-tap-mb", "0", "--device", "CPU:f32", "-q"]) == 0
    assert (tmp_path / "c.npz").is_file()
    capsys.readouterr()
    assert main(["capture", str(demo_xml), "-o", "-", "-q"]) == 2
    assert "a capture is an .npz file" in capsys.readouterr().err and not (tmp_path / "-").exists()


def test_repro_to_an_empty_path_is_refused(demo_xml, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["repro", str(demo_xml), "-o", "", "--target", "EMU:f16", "-q"]) == 2
    assert "empty path" in capsys.readouterr().err


@pytest.fixture()
def user_files(tmp_path, monkeypatch):
    """A folder holding a user's model (IR), an input array, a folder of samples and a capture, with their bytes."""
    monkeypatch.chdir(tmp_path)
    ov.save_model(synthetic.demo(), "demo.xml", compress_to_fp16=False)
    import numpy as np

    np.save("in.npy", np.zeros((1, 3, 32, 32), np.float32))
    os.mkdir("samples")
    np.save("samples/a.npy", np.zeros((1, 3, 32, 32), np.float32))
    with open("cap.npz", "wb") as f:
        f.write(b"a recording")
    return {p: open(p, "rb").read() for p in ("demo.xml", "demo.bin", "in.npy", "samples/a.npy", "cap.npz")}


@pytest.mark.parametrize("argv, said", [
    (["demo.xml", "--json", "demo.xml"], "--json 'demo.xml' is the model ('demo.xml')"),
    (["demo.xml", "--html", "demo.bin"], "--html 'demo.bin' is the model's weights ('demo.bin')"),
    (["demo.xml", "--log-file", "demo.bin"], "--log-file 'demo.bin' is the model's weights"),
    (["demo.xml", "--input", "input=in.npy", "--json", "in.npy"], "--json 'in.npy' is --input input ('in.npy')"),
    (["demo.xml", "--fix", "--ignored-scope", "demo.xml"], "--ignored-scope 'demo.xml' is the model"),
    (["demo.xml", "--fix", "--patched-model", "demo.xml"], "--patched-model 'demo.xml' is the model"),
    (["demo.xml", "--fix", "--patched-model", "./demo.xml"], "is the model ('demo.xml')"),
    (["demo.xml", "--inputs", "samples", "--html", "samples/r.html"], "is inside --inputs ('samples')"),
    (["demo.xml", "--ref", "capture:cap.npz", "--json", "cap.npz"], "is the recording --ref replays ('cap.npz')"),
    (["demo.xml", "--json", "same", "--html", "same"], "--html 'same' and --json 'same' name the same file"),
    (["demo.xml", "--fix", "--patched-model", "p.xml", "--json", "p.bin"], "--patched-model's weights 'p.bin' and "
                                                                            "--json 'p.bin' name the same file"),
    (["capture", "demo.xml", "-o", "demo.bin"], "-o 'demo.bin' is the model's weights"),
    (["capture", "demo.xml", "--input", "input=in.npy", "-o", "in.npy"], "-o 'in.npy' is --input input"),
    (["repro", "demo.xml", "-o", ".", "--overwrite"], "-o '.' holds the model ('demo.xml')"),
])
def test_no_output_is_written_over_a_file_the_run_reads(argv, said, user_files, capsys):
    # Each of these replaced or appended to the user's model, weights, inputs or recording (or lost one output
    # under another), exit 0 or 1: refused before anything runs, every file as it was.
    code = main(argv + ["-q", "--target", "EMU:f16"] if argv[0] != "capture" else argv + ["-q"])
    err = capsys.readouterr().err
    assert code == 2 and said in err and "Traceback" not in err, err
    assert {p: open(p, "rb").read() for p in user_files} == user_files
    assert not any(os.path.exists(p) for p in ("same", "p.xml", "p.bin", "samples/r.html"))


def test_an_onnx_models_external_data_is_not_written_over(tmp_path, monkeypatch, capsys):
    # `--json w.data` replaced the weights an ONNX model keeps outside it (in a file its graph names), and the
    # model could not be read again: refused like an IR's .bin, by the CLI and by Report.save.
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from bisect_ov import Report, bisect
    from bisect_ov.core.errors import InputError

    monkeypatch.chdir(tmp_path)
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], [w])
    onnx.save(helper.make_model(graph), "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="w.data", size_threshold=0)
    weights = open("w.data", "rb").read()
    assert main(["m.onnx", "--target", "EMU:f16", "--json", "w.data", "-q"]) == 2
    assert "--json 'w.data' is the model's external data ('w.data')" in capsys.readouterr().err
    report: Report = bisect("m.onnx", "CPU:f32", "EMU:f16", progress=False)
    with pytest.raises(InputError, match="is the model's external data"):
        report.save("w.data")
    assert open("w.data", "rb").read() == weights


def test_the_api_refuses_a_patched_model_or_capture_over_its_model(user_files):
    from bisect_ov import bisect
    from bisect_ov.capture import record
    from bisect_ov.core.errors import InputError

    with pytest.raises(InputError, match="patched_model 'demo.xml' is the model"):
        bisect("demo.xml", "CPU:f32", "EMU:f16", fix=True, patched_model="demo.xml", progress=False)
    with pytest.raises(InputError, match="the capture 'in.npy' is the inputs"):
        record("demo.xml", "CPU", "in.npy", "in.npy")
    with pytest.raises(InputError, match="the capture 'demo.bin' is the model's weights"):
        record("demo.xml", "CPU", None, "demo.bin")
    assert {p: open(p, "rb").read() for p in user_files} == user_files


def test_an_unrelated_target_model_is_refused_not_judged(user_files, capsys):
    # A model with none of the demo's node names as its "twin" gave "0 nodes compared" and the verdict "DIVERGES,
    # but no single node creates the error: it accumulates through depth".
    import openvino.opset13 as ops

    x = ops.parameter([1, 3, 32, 32], ov.Type.f32, name="x")
    y = ops.relu(x)
    y.set_friendly_name("something_else")
    ov.save_model(ov.Model([ops.reduce_mean(y, [1, 2, 3], False)], [x], "unrelated"), "other.xml")
    code = main(["demo.xml", "--target", "EMU:f16", "--target-model", "other.xml", "-q"])
    err = capsys.readouterr().err
    assert code == 2 and "Nothing to compare: none of the model's 35 compute nodes has a counterpart in target_model" in err


def test_a_folder_where_one_input_set_is_read_says_so(tmp_path, capsys):
    # capture --inputs FOLDER said "Input file not found" for a folder that exists.
    folder = tmp_path / "samples"
    folder.mkdir()
    np.save(folder / "a.npy", np.zeros((1, 8), np.float32))
    assert main(["capture", "demo", "--inputs", str(folder), "-o", str(tmp_path / "c.npz")]) == 2
    assert "is a folder: here one input set is read" in capsys.readouterr().err


def test_an_error_message_keeps_the_sentence_a_user_can_act_on():
    # OpenVINO's: the last line after the C++ location; Python's wrapped prose (the advice to guard the main
    # module of a script that starts processes): its start, not "section in https://docs.python.org/...".
    from bisect_ov.core.errors import first_line

    openvino = RuntimeError("Exception from src/plugin.cpp:12:\nCheck 'x' failed at y:\nNode image contains empty child edge")
    assert first_line(openvino) == "Node image contains empty child edge"
    python = RuntimeError("\n    An attempt has been made to start a new process before the\n    current process has "
                          "finished its bootstrapping phase.\n\n    ... see the 'Safe importing of main module'\n"
                          "    section in https://docs.python.org/3/library/multiprocessing.html\n")
    assert first_line(python).startswith("An attempt has been made to start a new process before the current process")
