"""The bisect-ov command as a user runs it: a real process, its pipes and its signals.

Each test runs the built-in example (`bisect-ov demo`, about two seconds with the experiments it does not need
switched off) in a subprocess: narrow terminals, the JSON on stdout, a reader that goes away (``| head -1``),
Ctrl-C at several moments (during a compile too), ``-v`` and ``--log-file``, a report written through a link
to ``/dev/stdout``. No assertion depends on timing: signals are sent when the process says (on stderr, with
``-vv``) that it reached the moment wanted.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import pytest

from bisect_ov.cli import EXIT_CODES, main

ROOT = pathlib.Path(__file__).resolve().parents[1]
QUICK = ["-q", "--no-local", "--impact", "0", "--no-noise", "--no-baseline"]  # the demo's verdict, in seconds
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def _default_sigint() -> None:
    # A process started in the background by a shell inherits SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler: give the command the disposition a terminal gives it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run(*args: str, cwd: pathlib.Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bisect_ov", *args], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("width", [40, 80])
def test_a_narrow_terminal_gets_every_line_within_its_width_and_the_culprit_table(tmp_path, width):
    proc = _run("demo", *QUICK, "--width", str(width), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line for line in lines if len(line) > width] == []
    table = lines.index(next(line for line in lines if line.startswith("rank  node")))
    assert {"error", "role"} <= set(lines[table].split())
    assert "inorm/sub" in lines[table + 1] and "source*" in lines[table + 1]


def test_json_to_stdout_is_the_json_alone_and_the_text_goes_to_stderr(tmp_path):
    proc = _run("demo", *QUICK, "--json", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # nothing else on stdout
    assert data["first_divergence"] == ["inorm/sub", "inorm/sqdiff"]
    assert "Verdict: DIVERGES" in proc.stderr and "Report written" not in proc.stderr + proc.stdout
    assert list(tmp_path.iterdir()) == []  # no file named '-'
    both = _run("demo", *QUICK, "--json", "-", "--html", "-", cwd=tmp_path)
    assert both.returncode == 2 and "both ask for stdout" in both.stderr and both.stdout == ""


def test_html_to_stdout_is_the_page(tmp_path):
    proc = _run("demo", *QUICK, "--html", "-", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.lstrip().lower().startswith("<!doctype html>") and proc.stdout.rstrip().endswith("</html>")
    assert "Verdict: DIVERGES" in proc.stderr


def test_a_reader_that_goes_away_ends_the_text_quietly_with_141_and_the_files_are_written(tmp_path):
    """``bisect-ov ... | head -1`` in a shell with pipefail: what head shows is the first line, the exit status is
    what a command SIGPIPE ended gives (141), no traceback, no error blamed on the file, and the JSON asked for
    is complete."""
    command = (f"set -o pipefail; {sys.executable} -m bisect_ov demo {' '.join(QUICK)} --json r.json --html r.html"
               " | head -1")
    proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 141, proc.stderr
    assert proc.stdout == "Demo: the built-in example model, CPU (f32) against EMU:f16.\n"
    assert proc.stderr == "", proc.stderr  # no BrokenPipeError, no "Writing the report failed"
    assert json.loads((tmp_path / "r.json").read_text())["first_divergence"] == ["inorm/sub", "inorm/sqdiff"]
    assert (tmp_path / "r.html").read_text().rstrip().endswith("</html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "r.json"]


def test_a_stdout_closed_before_anything_is_written_gives_141_and_the_report_file(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "bisect_ov", "demo", *QUICK, "--json", "r.json"], cwd=tmp_path,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader is gone before the first line
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141 and err == "", err
    assert json.loads((tmp_path / "r.json").read_text())["schema_version"] >= 4


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (a device that is always full)")
def test_a_stdout_that_takes_nothing_still_gets_the_files_written_and_says_so(tmp_path):
    # ``>/dev/full`` gave an OSError traceback, exit 1 (which reads "diverges") and no report file.
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "bisect_ov", "demo", *QUICK, "--json", "r.json"], cwd=tmp_path,
                              env=ENV, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "the report's text could not be written to stdout (No space left on device)" in proc.stderr
    assert json.loads((tmp_path / "r.json").read_text())["first_divergence"] == ["inorm/sub", "inorm/sqdiff"]


@pytest.mark.parametrize("closed", [">&-", "2>&-", ">&- 2>&-"])
def test_closed_standard_streams_still_get_the_files_written(tmp_path, closed):
    # A closed stdout (Python makes it None) gave "'NoneType' object has no attribute 'write'"; a closed stderr
    # failed silently, exit 1, nothing written (`sys.stderr.isatty()` on None).
    quick = [flag for flag in QUICK if flag != "-q"]  # without -q: the progress bars ask stderr whether it is a tty
    command = f"{sys.executable} -m bisect_ov demo {' '.join(quick)} --json r.json {closed}"
    proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert json.loads((tmp_path / "r.json").read_text())["first_divergence"] == ["inorm/sub", "inorm/sqdiff"]


def test_a_stream_that_cannot_encode_a_name_gets_it_escaped(tmp_path):
    # PYTHONIOENCODING=ascii (or latin-1 with a snowman in a node's name): UnicodeEncodeError, exit 1, no file.
    import openvino as ov

    from bisect_ov.zoo.synthetic import demo

    model = demo()
    next(op for op in model.get_ordered_ops() if op.get_friendly_name() == "inorm/sub").set_friendly_name("inorm/süb☃")
    ov.save_model(model, str(tmp_path / "m.xml"), compress_to_fp16=False)
    proc = subprocess.run([sys.executable, "-m", "bisect_ov", "m.xml", "--target", "EMU:f16", *QUICK, "--json", "r.json"],
                          cwd=tmp_path, env={**ENV, "PYTHONIOENCODING": "ascii"}, capture_output=True, timeout=120)
    assert proc.returncode == 1 and b"Traceback" not in proc.stderr, proc.stderr
    assert b"inorm/s\\xfcb\\u2603" in proc.stdout, proc.stdout
    assert json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))["first_divergence"][0] == "inorm/süb☃"


def _interrupt_when(tmp_path: pathlib.Path, marker: str, *extra: str) -> tuple[int, str]:
    """Run the demo with -vv, send SIGINT once stderr shows `marker`; (exit code, stderr)."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "bisect_ov", "demo", "-q", "-vv", "--json", str(out / "r.json"),
                             "--html", str(out / "r.html"), "--fix", "--patched-model", str(out / "fixed.xml"), *extra],
                            cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if marker in line:
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.communicate(timeout=120)[1]
    return proc.returncode, "".join(seen) + rest


@pytest.mark.parametrize("marker", ["bisect-ov demo", "Stage 'plain' starts", "Compiled 'demo'",
                                    "Stage 'measure' starts", "Stage 'experiments' starts"])
def test_ctrl_c_at_any_moment_says_interrupted_exits_130_and_leaves_no_file(tmp_path, marker):
    code, err = _interrupt_when(tmp_path, marker)
    assert code == 130, err[-3000:]
    assert err.rstrip().endswith("bisect-ov: interrupted"), err[-3000:]
    assert "Traceback" not in err and "error:" not in err and "failed" not in err, err[-3000:]
    assert list((tmp_path / "out").iterdir()) == []  # nothing half-written, no temporary file


def test_ctrl_c_inside_a_compile_is_an_interruption_not_a_device_error(tmp_path):
    """The signal lands while OpenVINO compiles the emulated model and calls its Python ops: OpenVINO hands
    the KeyboardInterrupt back as a RuntimeError ("Compiling for EMU:f16 ... failed: KeyboardInterrupt" and
    exit 2 before); the command still says it was interrupted."""
    script = textwrap.dedent(f"""
        import os, signal, sys, threading
        from bisect_ov.run import emulate
        from bisect_ov.cli import main
        real = emulate.EmulatedRound.clone_with_new_inputs
        calls = []
        def interrupting(self, new_inputs):  # called by OpenVINO's C++ while it compiles the model
            calls.append(1)
            if len(calls) == 3 and threading.current_thread() is threading.main_thread():
                os.kill(os.getpid(), signal.SIGINT)
            return real(self, new_inputs)
        emulate.EmulatedRound.clone_with_new_inputs = interrupting
        code = main(["demo", "-q", "--json", {str(tmp_path / "r.json")!r}])
        print("calls", len(calls))
        sys.exit(code)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=ENV, capture_output=True, text=True,
                          timeout=120, preexec_fn=_default_sigint)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "bisect-ov: interrupted\n"
    assert proc.stdout.splitlines()[-1] == "calls 3"  # it did land inside the compile's callbacks
    assert list(tmp_path.iterdir()) == []


def test_verbose_shows_progress_and_the_log_file_gets_everything(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("an earlier run\n")
    proc = _run("demo", *QUICK, "-v", "--log-file", str(log), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    progress = [line for line in proc.stderr.splitlines() if line.startswith("bisect-ov: Stage '")]
    assert [line.split("'")[1] for line in progress][:3] == ["open", "plain", "generate"]
    assert "debug:" not in proc.stderr and "Verdict" in proc.stdout
    text = log.read_text()
    assert text.startswith("an earlier run\n")  # appended to, never replaced
    assert " DEBUG bisect_ov.run.device_base: Compiled 'demo'" in text and "bisect-ov demo" in text
    assert " INFO bisect_ov.engine.ledger: Stage 'measure'" in text
    quiet = _run("demo", *QUICK, cwd=tmp_path)
    assert quiet.stderr == "" and quiet.returncode == 0
    failed = _run("missing.xml", "--target", "CPU", "--log-file", str(log), cwd=tmp_path)
    assert failed.returncode == 2 and len(failed.stderr.splitlines()) == 1
    assert "Traceback" in log.read_text() and "InputError: Model file not found" in log.read_text()
    bad = _run("demo", "--log-file", str(tmp_path / "no" / "x.log"), cwd=tmp_path)
    assert bad.returncode == 2 and "the log file" in bad.stderr and "does not exist" in bad.stderr


def test_a_report_written_through_a_link_to_stdout_reaches_the_pipe_and_the_link_stays(tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to("/dev/stdout")
    proc = _run("demo", *QUICK, "--json", str(link), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == "/dev/stdout"
    assert list(tmp_path.iterdir()) == [link]
    start = proc.stdout.index("\n{\n") + 1
    data, end = json.JSONDecoder().raw_decode(proc.stdout, start)
    assert data["first_divergence"] == ["inorm/sub", "inorm/sqdiff"]
    assert "Verdict: DIVERGES" in proc.stdout[:start] and f"Report written to {link}" in proc.stdout[end:]


def test_help_names_the_inputs_folder_the_diagnostics_and_the_exit_codes(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "--inputs FILE.npz|FOLDER" in out and "folder" in out.rsplit("--inputs FILE.npz|FOLDER", 1)[1][:300]
    for flag in ("-v, --verbose", "--log-file FILE", "--json FILE", "'-': to stdout"):
        assert flag in out
    assert EXIT_CODES in out and "141" in EXIT_CODES
    assert main(["capture", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--log-file FILE" in out and "--version" in out and "130  interrupted" in out
    assert "1    something diverges" not in out  # capture has no verdict


def test_ctrl_c_during_a_capture_leaves_no_file(tmp_path):
    import openvino as ov

    from tests.conftest import tiny_chain

    ov.save_model(tiny_chain(), tmp_path / "m.xml")
    before = sorted(p.name for p in tmp_path.iterdir())
    proc = subprocess.Popen([sys.executable, "-m", "bisect_ov", "capture", "m.xml", "-o", "c.npz", "-q", "-vv"],
                            cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "Compiled" in line:
            proc.send_signal(signal.SIGINT)
            break
    err = "".join(seen) + proc.communicate(timeout=120)[1]
    if proc.returncode == 0:  # the capture finished before the signal arrived: it is then whole
        assert (tmp_path / "c.npz").stat().st_size > 0
        return
    assert proc.returncode == 130 and err.rstrip().endswith("bisect-ov: interrupted"), err[-2000:]
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
