"""The reproducer's folder and its options under hostile requests: the user's files are never replaced, the
destination is checked before any work and filled by one rename (a failure leaves it as it was), every option
of the wrong type is refused by name, and names from the model reach the README escaped, the anonymized
README and IR not at all."""

from __future__ import annotations

import os
import pathlib
import shlex

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov import bisect, inject_fault
from bisect_ov.cli import main
from bisect_ov.core.errors import InputError, WriteError
from bisect_ov.repro import folder as repro_folder
from bisect_ov.repro import write as repro_write
from bisect_ov.repro.folder import check_folder
from bisect_ov.zoo import synthetic

CHEAP = {"impact": 0, "noise": False, "baseline": False, "progress": False}
CLI_CHEAP = ["--ref", "CPU:f32", "--target", "EMU:f16", "-q", "--impact", "0", "--no-noise", "--no-baseline"]


@pytest.fixture(scope="module")
def demo_f16():
    return bisect(synthetic.demo(), "CPU:f32", "EMU:f16", **CHEAP)


@pytest.fixture(scope="module")
def demo_xml(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "demo.xml"
    ov.save_model(synthetic.demo(), str(path), compress_to_fp16=False)
    return path


def test_overwrite_no_is_refused_not_counted_as_yes(demo_f16, tmp_path):
    demo_f16.repro(tmp_path / "r")
    before = (tmp_path / "r" / "README.md").read_text()
    (tmp_path / "r" / "README.md").write_text("edited by hand")
    for value in ("no", "False", 0, 1, None):
        with pytest.raises(InputError, match="overwrite must be True or False"):
            demo_f16.repro(tmp_path / "r", overwrite=value)
    assert (tmp_path / "r" / "README.md").read_text() == "edited by hand" != before


def test_overwrite_never_touches_a_folder_that_held_no_reproducer(demo_f16, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    for name, text in (("README.md", "my readme"), ("run.py", "print('mine')"), ("piece.bin", "my weights")):
        (mine / name).write_text(text)
    with pytest.raises(WriteError, match="no earlier reproducer .* never your own files"):
        demo_f16.repro(mine, overwrite=True)
    (mine / "repro.json").write_text('{"format": "something else"}')  # a repro.json bisect_ov did not write
    with pytest.raises(WriteError, match="no earlier reproducer"):
        demo_f16.repro(mine, overwrite=True)
    assert {p.name: p.read_text() for p in mine.iterdir()} == {
        "README.md": "my readme", "run.py": "print('mine')", "piece.bin": "my weights",
        "repro.json": '{"format": "something else"}'}


def test_overwrite_replaces_an_earlier_reproducer_and_keeps_the_user_s_files(demo_f16, tmp_path):
    folder = tmp_path / "r"
    demo_f16.repro(folder)
    (folder / "notes.txt").write_text("mine")
    (folder / "target_piece.xml").write_text("stale")  # a reproducer's file this one does not write
    (folder / "README.md").write_text("old")
    os.chmod(folder, 0o750)
    record = demo_f16.repro(folder, overwrite=True)
    names = {p.name for p in folder.iterdir()}
    assert names == set(record.files) | {"notes.txt"} and "target_piece.xml" not in names
    assert (folder / "notes.txt").read_text() == "mine" and "inorm/sub" in (folder / "README.md").read_text()
    assert os.stat(folder).st_mode & 0o777 == 0o750
    assert [p.name for p in tmp_path.iterdir()] == ["r"]  # no scratch folder left beside it


def test_a_reproducer_file_name_that_is_a_folder_is_refused_before_any_work(demo_f16, tmp_path, monkeypatch):
    folder = tmp_path / "r"
    demo_f16.repro(folder)
    (folder / "run.py").unlink()
    (folder / "run.py").mkdir()
    (folder / "run.py" / "inside.txt").write_text("mine")
    monkeypatch.setattr(repro_write, "build_piece", _never)
    with pytest.raises(WriteError, match="holds 'run.py', which is not a file an earlier reproducer wrote"):
        demo_f16.repro(folder, overwrite=True)
    assert (folder / "run.py" / "inside.txt").read_text() == "mine" and (folder / "piece.bin").is_file()


def _never(*args, **kwargs):
    raise AssertionError("the destination should have been refused before any work")


def test_a_failure_leaves_the_destination_as_it_was(demo_f16, tmp_path, monkeypatch):
    """Replacing an earlier reproducer fails at its last rename: the old folder is back, whole; a failure while
    the pieces run leaves no new folder and no scratch folder."""
    folder = tmp_path / "r"
    demo_f16.repro(folder)
    (folder / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    real = os.rename

    def last_fails(src, dst):
        if pathlib.Path(dst) == folder and "previous" not in str(src):
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(repro_folder.os, "rename", last_fails)
    with pytest.raises(WriteError, match="No space left on device. The folder is as it was"):
        demo_f16.repro(folder, overwrite=True)
    monkeypatch.setattr(repro_folder.os, "rename", real)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["r"]

    def fails(*args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(repro_write, "_savez", fails)
    with pytest.raises(OSError):
        demo_f16.repro(tmp_path / "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_odd_destinations_are_refused_with_what_to_pass(tmp_path):
    (tmp_path / "file").write_text("x")
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    cases = [(None, "must be a path"), (123, "must be a path"), ("", "empty path"), ("-", "cannot go to stdout"),
             (b"bytes", "must be a path"), ("a\x00b", "NUL"), (tmp_path / "dangling", "symbolic link to .* does not exist"),
             (tmp_path / "file", "is a file"), (tmp_path / "missing" / "deeper", "does not exist")]
    for folder, message in cases:
        with pytest.raises(InputError, match=message):
            check_folder(folder, False)
    cwd = os.getcwd()
    try:
        (tmp_path / "here").mkdir()
        os.chdir(tmp_path / "here")
        with pytest.raises(WriteError, match="current working folder"):
            check_folder(".", False)
    finally:
        os.chdir(cwd)
    assert check_folder(tmp_path / "new", False) == (tmp_path / "new").resolve()


def test_a_link_to_an_empty_folder_on_another_file_system_is_filled_there(demo_f16, tmp_path):
    shm = pathlib.Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev or not os.access(shm, os.W_OK):
        pytest.skip("no writable folder on another file system")
    import tempfile

    with tempfile.TemporaryDirectory(dir=shm) as other:
        empty = pathlib.Path(other) / "empty"
        empty.mkdir()
        os.symlink(empty, tmp_path / "link")
        record = demo_f16.repro(tmp_path / "link")
        assert (tmp_path / "link").is_symlink() and (empty / "run.py").is_file()
        assert sorted(p.name for p in empty.iterdir()) == sorted(record.files)
        assert [p.name for p in pathlib.Path(other).iterdir()] == ["empty"]


def test_the_options_are_checked_by_name(demo_f16, tmp_path, monkeypatch):
    monkeypatch.setattr(repro_write, "build_piece", _never)
    cases = [({"max_nodes": "5"}, "max_nodes must be an integer >= 1"), ({"max_nodes": -1}, "max_nodes must be"),
             ({"max_nodes": 0}, "max_nodes must be"), ({"max_nodes": True}, "max_nodes must be"),
             ({"seed": "x"}, "seed must be an integer"), ({"seed": -1}, "seed must be"),
             ({"anonymize": "yes"}, "anonymize must be True or False"), ({"factor": True}, "factor must be"),
             ({"factor": float("nan")}, "factor must be"), ({"factor": 0.5}, "factor must be"),
             ({"node": ["inorm/sub"]}, "node must be a node's name"),
             ({"bogus": 1}, r"takes no option 'bogus'\. Its options: node, anonymize, overwrite")]
    for options, message in cases:
        with pytest.raises(InputError, match=message):
            demo_f16.repro(tmp_path / "r", **options)
    for folder in (None, 123):
        with pytest.raises(InputError, match="must be a path"):
            demo_f16.repro(folder)
    assert not (tmp_path / "r").exists()


def test_the_cli_checks_the_destination_before_the_run(demo_xml, tmp_path, capsys, monkeypatch):
    from bisect_ov.pipeline import api

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(api, "run", _never)
    os.symlink(tmp_path / "nowhere", tmp_path / "dangling")
    (tmp_path / "empty").mkdir()
    for out, extra, message in [("-", [], "cannot go to stdout"), ("dangling", [], "symbolic link"),
                                ("empty", ["--json", "empty/report.json"], "--json empty/report.json would be written "
                                                                           "inside the reproducer's folder"),
                                ("empty", ["--html", "empty/sub/../r.html"], "--html")]:
        code = main(["repro", str(demo_xml), "-o", out, *CLI_CHEAP, *extra])
        err = capsys.readouterr().err
        assert code == 2 and message in err and "Traceback" not in err, err
    assert not (tmp_path / "-").exists() and not any((tmp_path / "empty").iterdir())


def test_the_cli_writes_html_and_the_ignored_scope_it_is_asked_for(demo_xml, tmp_path, capsys):
    code = main(["repro", str(demo_xml), "-o", str(tmp_path / "my r"), *CLI_CHEAP, "--html", str(tmp_path / "r.html"),
                 "--fix", "--ignored-scope", str(tmp_path / "scope.json")])
    out = capsys.readouterr().out
    assert code == 0 and "Reproducer of 'inorm/sub'" in out
    # The command to run it, quoted (a folder with a space in its name broke the copied command).
    assert f"Run: python {shlex.quote(str(tmp_path / 'my r' / 'run.py'))}" in " ".join(out.split())
    assert "<html" in (tmp_path / "r.html").read_text().lower()
    assert '"names"' in (tmp_path / "scope.json").read_text() and (tmp_path / "my r" / "run.py").is_file()


def _named_model(site: str) -> ov.Model:
    """x -> MatMul -> Multiply by a scalar whose tensor is named like a piece's own (``outsourced_secret_7``)
    -> Relu; the Multiply (the fault's site) is named `site`."""
    rng = np.random.default_rng(0)
    x = ops.parameter([1, 64], np.float32, name="x")
    mm = ops.matmul(x, ops.constant(rng.standard_normal((64, 64)).astype(np.float32)), False, False)
    mm.set_friendly_name("secret_mm")
    scale = ops.constant(np.float32(0.5))
    scale.set_friendly_name("outsourced_secret_7")
    scale.output(0).get_tensor().set_names({"outsourced_secret_7"})
    node = ops.multiply(mm, scale)
    node.set_friendly_name(site)
    act = ops.relu(node)
    act.set_friendly_name("secret_act")
    return ov.Model([act], [x], "secret_model")


def _faulted_report(site: str, **options):
    model = _named_model(site)
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    report = bisect(model, "CPU:f32", "CPU:f32", {"x": x}, target_model=inject_fault(model, site, "noise"),
                    **{**CHEAP, **options})
    assert report.first_divergence is not None and report.first_divergence.name == site
    return report


def test_an_anonymized_folder_names_nothing_even_without_local_errors(tmp_path):
    report = _faulted_report("secret_sub", local=False)
    record = report.repro(tmp_path / "anon", anonymize=True)
    assert record.anonymized and any("secret_sub" in n for n in record.notes)  # the record itself may name it
    for path in (tmp_path / "anon").iterdir():
        if path.suffix in (".xml", ".json", ".md"):
            assert "secret" not in path.read_text(), path.name
    assert "No local error was measured for the node" in (tmp_path / "anon" / "README.md").read_text()


def test_names_reach_the_readme_escaped(tmp_path):
    site = "evil\n## Heading\x1b[2J<img src=x onerror=alert(1)>|*x*"
    report = _faulted_report(site)
    report.repro(tmp_path / "r")
    text = (tmp_path / "r" / "README.md").read_text()
    assert "\x1b" not in text and "\n## Heading" not in text and "<img" not in text and "|*x*" not in text
    assert r"evil\\n\#\# Heading\\x1b\[2J&lt;img src=x onerror=alert(1)&gt;\|\*x\*" in text


def test_run_py_says_a_device_error_in_one_line(demo_f16, tmp_path):
    import subprocess
    import sys

    demo_f16.repro(tmp_path / "r")
    proc = subprocess.run([sys.executable, str(tmp_path / "r" / "run.py"), "--target", "NONEXISTENT"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("run.py: error: ") and "Exception from" not in lines[0] and "NONEXISTENT" in lines[0]


def test_a_folder_where_nothing_can_be_made_is_a_write_error(demo_f16, tmp_path):
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc here")
    with pytest.raises(WriteError, match="making a folder in '/proc' failed"):
        demo_f16.repro("/proc/bisect_ov_repro")
    (tmp_path / "file").write_text("x")
    with pytest.raises(WriteError, match="is a file, not a folder"):
        demo_f16.repro(tmp_path / "file" / "sub")


def test_run_py_prints_the_title_escaped(demo_f16, tmp_path):
    import json
    import subprocess
    import sys

    demo_f16.repro(tmp_path / "r")
    spec = json.loads((tmp_path / "r" / "repro.json").read_text())
    spec["title"] = "Op\x1b[2J diverges\n## on"
    (tmp_path / "r" / "repro.json").write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, str(tmp_path / "r" / "run.py")], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path)
    assert proc.returncode == 1 and "\x1b" not in proc.stdout, proc.stderr
    assert proc.stdout.startswith("Op\\x1b[2J diverges\\n## on  (OpenVINO ")


def test_run_py_runs_the_device_it_is_given_not_the_recorded_emulation(demo_f16, tmp_path):
    # The demo against EMU:f16: the folder's target is the CPU running an emulation IR. `--target CPU` ran that
    # emulation too (the recorded side's OpenVINO device is "CPU") and printed "target CPU ... OVER ... REPRODUCED".
    import json
    import subprocess
    import sys

    demo_f16.repro(tmp_path / "r")

    def run_py(*flags):
        proc = subprocess.run([sys.executable, str(tmp_path / "r" / "run.py"), "--json", *flags], capture_output=True,
                              text=True, timeout=300, cwd=tmp_path)
        return proc.returncode, (json.loads(proc.stdout) if proc.stdout.strip() else proc.stderr)

    code, recorded = run_py()
    assert code == 1 and recorded["reproduced"] and recorded["target"].startswith("EMU:f16")
    assert run_py("--target", "EMU:f16")[1]["error"] == recorded["error"]  # its own name: the recorded side
    code, plain = run_py("--target", "CPU:f32")  # the piece itself on the CPU in f32: what the reference computed
    assert plain["target"] == "CPU:f32" and plain["error"] < 1e-6, plain
    code, plain = run_py("--target", "CPU")  # the plugin's default precision (bf16 on some CPUs): not asserted
    assert code in (0, 1) and plain["target"] == "CPU", plain
    code, said = run_py("--target", "EMU:bf16")
    assert code == 2 and "an emulation of bisect_ov's, which this folder does not hold" in said
