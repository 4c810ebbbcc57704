"""The bisect-ov command: exit codes, files, one-line errors."""

import json
import subprocess
import sys

import numpy as np
import openvino as ov
import pytest

from bisect_ov import inject_fault
from bisect_ov.cli import main
from tests.conftest import tiny_chain


@pytest.fixture
def model_files(tmp_path):
    model = tiny_chain()
    ov.save_model(model, tmp_path / "m.xml")
    ov.save_model(inject_fault(model, "mm2"), tmp_path / "faulty.xml")
    return tmp_path


def test_diverging_run_exits_1_and_writes_json(model_files, capsys):
    out_json = model_files / "r.json"
    code = main([str(model_files / "m.xml"), "--ref", "CPU", "--target", "CPU:f32", "--target-model",
                 str(model_files / "faulty.xml"), "--json", str(out_json), "-q", "--top", "3"])
    text = capsys.readouterr().out
    assert code == 1
    assert "Error starts at 'mm2'" in text
    assert json.loads(out_json.read_text())["first_divergence"] == ["mm2"]


def test_agreeing_run_exits_0_with_inputs_and_config(model_files, capsys):
    x = np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)
    np.save(model_files / "x.npy", x)
    code = main([str(model_files / "m.xml"), "--target", "CPU", "--target-config", "INFERENCE_PRECISION_HINT=f32",
                 "--input", f"x={model_files / 'x.npy'}", "-q"])
    assert code == 0
    assert "no divergence" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.xml", "--target", "CPU"], "not found"),
        (["{m}", "--target", "TPU"], "Unknown device 'TPU'. Available:"),
        (["{m}", "--target", "CPU", "--input", "x={d}/nope.npy"], "not found"),
        (["{m}", "--target", "CPU", "--target-config", "NOEQUALS"], "expected KEY=VALUE"),
        (["{m}", "--target", "CPU", "--metric", "max_abs"], "explicit threshold"),
    ],
)
def test_user_errors_exit_2_in_one_line(model_files, capsys, args, message):
    code = main([a.format(m=model_files / "m.xml", d=model_files) for a in args])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_console_script_entry_point(model_files):
    # The real process: python -m bisect_ov, no traceback on a user error.
    proc = subprocess.run([sys.executable, "-m", "bisect_ov", str(model_files / "none.xml"), "--target", "CPU"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "not found" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--width", "0"], "--width must be at least 40"),
        (["--seed", "-1"], "seed must be an integer in [0, 2**32)"),
        (["--max-tap-mb", "inf"], "--max-tap-mb must be a finite number"),
        (["--impact", "-2"], "impact must be an integer >= 0"),
        (["--json", "{d}/no/such/folder/r.json"], "does not exist"),
        (["--html", "{d}"], "it is a folder. Pass a file name, such as '"),
        (["--html", "{d}"], "/report.html'."),
        (["--patched-model", "{d}/fixed.onnx", "--fix"], "ending in .xml"),
    ],
)
def test_bad_flags_are_refused_before_the_run(model_files, capsys, extra, message):
    code = main([str(model_files / "m.xml"), "--target", "CPU:f32", "-q",
                 *[a.format(d=model_files) for a in extra]])
    captured = capsys.readouterr()
    assert code == 2 and message in captured.err and "Traceback" not in captured.err
    assert captured.out == ""  # nothing ran


def test_read_only_output_folder_is_refused_before_the_run(model_files, capsys):
    import os

    folder = model_files / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as a user who can write anywhere (root): permissions are not enforced")
        code = main([str(model_files / "m.xml"), "--target", "CPU:f32", "-q", "--json", str(folder / "r.json")])
        assert code == 2 and "not writable" in capsys.readouterr().err
    finally:
        folder.chmod(0o700)


def test_demo_exits_0_when_it_ran_as_intended(capsys):
    code = main(["demo", "-q", "--no-local", "--impact", "0", "--no-noise"])
    out = capsys.readouterr().out
    assert code == 0
    assert "Error starts at" in out  # it did diverge, by design


def test_garbage_model_file_gives_one_line_and_no_frontend_noise(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_text("garbage")
    proc = subprocess.run([sys.executable, "-m", "bisect_ov", str(bad), "--target", "CPU"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Cannot read model" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_an_npz_given_to_input_points_to_inputs(model_files, capsys):
    np.savez(model_files / "x.npz", x=np.zeros((1, 8), np.float32))
    code = main([str(model_files / "m.xml"), "--target", "CPU:f32", "--input", f"x={model_files / 'x.npz'}"])
    assert code == 2 and f"--inputs {model_files / 'x.npz'}" in capsys.readouterr().err


def test_help_groups_the_flags_by_concern_and_gives_the_exit_codes(capsys):
    from bisect_ov.pipeline.options import GROUPS

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for title in GROUPS.values():
        assert f"\n{title}:\n" in out
    sections = {title: out.split(f"\n{title}:\n", 1)[1].split("\n\n", 1)[0] for title in GROUPS.values()}
    assert "--ref-config" in sections["devices and compiling"] and "--strategy" in sections["what to tap and search"]
    assert "--budget" in sections["which experiments run"] and "--executor" in sections["inputs, samples and executors"]
    assert "--steps" in sections["LLM prompts and generation"] and "--quiet" in sections["output"]
    codes = out.split("exit codes:", 1)[1]
    for code in ("0 ", "1 ", "2 ", "130 "):
        assert f"\n  {code}" in codes


def test_version_names_the_package_and_openvino(capsys):
    from bisect_ov import __version__

    for argv in (["--version"], ["model.xml", "--version"], ["demo", "--version"]):
        assert main(argv) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines == [f"bisect_ov {__version__}", f"OpenVINO {ov.get_version()}"]


def test_version_without_openvino_still_answers():
    from tests.conftest import run_without_openvino

    proc = run_without_openvino("from bisect_ov.cli import main\nsys.exit(main(['--version']))\n", timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == "OpenVINO: not installed"


def test_repro_takes_the_built_in_demo_and_ends_on_one_clean_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no file named 'demo' here
    code = main(["repro", "demo", "--ref", "CPU:f32", "--target", "EMU:f16", "--budget", "fast", "-o", "r", "-q"])
    out = capsys.readouterr().out
    assert code == 0 and (tmp_path / "r" / "run.py").is_file()
    last = out.rstrip("\n").splitlines()[-1]
    assert last.startswith("Reproducer of 'inorm/sub'"), last
    assert "\\n" not in out


def test_a_folder_named_like_a_command_does_not_hide_it(tmp_path, monkeypatch, capsys):
    # report.repro("repro/") (the README's call) leaves a folder 'repro': 'bisect-ov repro ...' then failed with
    # "unrecognized arguments" (the folder was taken for the model to compare).
    monkeypatch.chdir(tmp_path)
    (tmp_path / "repro").mkdir()
    (tmp_path / "demo").mkdir()
    code = main(["repro", "demo", "--ref", "CPU:f32", "--target", "EMU:f16", "--budget", "fast", "-o", "r", "-q"])
    assert code == 0 and (tmp_path / "r" / "run.py").is_file(), capsys.readouterr().err
    capsys.readouterr()
    code = main(["demo", "--budget", "fast", "-q", "--top", "1"])
    assert code == 0 and "bisect_ov: demo |" in capsys.readouterr().out


def test_capture_takes_the_built_in_demo_and_says_how_to_compare_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["capture", "demo", "--device", "CPU:f32", "-o", "demo.npz", "-q"])
    out = capsys.readouterr().out
    assert code == 0 and (tmp_path / "demo.npz").is_file()
    assert "bisect-ov demo --ref capture:demo.npz --target CPU:f32" in out


@pytest.mark.parametrize("args, message", [(["--target", "NOSUCH"], "Unknown device 'NOSUCH'"),
                                           (["--ref", "CPU:f64"], "Unknown precision 'f64'")])
def test_demo_checks_its_devices_before_announcing_them(capsys, args, message):
    code = main(["demo", *args, "-q"])
    captured = capsys.readouterr()
    assert code == 2 and message in captured.err
    assert captured.out == "", "the demo's header named a device it then refused"


@pytest.mark.parametrize("ref, label", [("CPU", "CPU (f32)"), ("CPU:f32", "CPU:f32 against")])
def test_demo_header_says_a_precision_only_where_the_name_does_not(ref, label, monkeypatch, capsys):
    import bisect_ov.cli as cli

    monkeypatch.setattr(cli, "_run", lambda *a, **k: None)  # the header only
    assert main(["demo", "--ref", ref, "-q"]) == 0
    out = capsys.readouterr().out
    assert label in out and "EMU:f16 (" not in out


def test_top_sets_the_html_page_s_culprits_too(tmp_path, monkeypatch):
    # The page always listed 25 while telling the reader to raise top; it lists at least 25, more when asked.
    from bisect_ov.report.report import Report

    asked, real = [], Report.save_html

    def save_html(self, path, **kwargs):
        asked.append(kwargs.get("top"))
        return real(self, path, **kwargs)

    monkeypatch.setattr(Report, "save_html", save_html)
    for top in (3, 40):
        assert main(["demo", "--top", str(top), "--html", str(tmp_path / f"{top}.html"), "-q"]) == 0
    assert asked == [25, 40]
