"""Saving reports, pages, node data, captures and patched models: errors of the library's family, old files
kept, no temporary file left (full disk and SIGTERM included), modes that follow the umask, and what the user
pointed at written as `open` would write it (links followed, FIFOs and devices in place, read-only refused)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pathlib
import signal
import stat
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from bisect_ov.capture.read import load_capture
from bisect_ov.capture.write import record
from bisect_ov.core import fileio
from bisect_ov.core.errors import BisectError, CaptureError, WriteError
from bisect_ov.report.report import Report
from tests.conftest import tiny_chain

V1 = pathlib.Path(__file__).parent / "report" / "data" / "report_v1.json"
ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report() -> Report:
    return Report.load(V1)


SAVERS = {
    "save": lambda r, p: r.save(p),
    "save_html": lambda r, p: r.save_html(p, plots=False),
    "to_model_explorer": lambda r, p: r.to_model_explorer(p),
}


@pytest.mark.parametrize("saver", SAVERS)
def test_saving_into_a_missing_folder_or_onto_a_folder_is_a_write_error(report, tmp_path, saver):
    with pytest.raises(WriteError, match="the folder .* does not exist"):
        SAVERS[saver](report, tmp_path / "missing" / "out.json")
    with pytest.raises(WriteError, match="it is a folder"):
        SAVERS[saver](report, tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
@pytest.mark.parametrize("saver", SAVERS)
def test_saving_into_a_read_only_folder_is_a_write_error(report, tmp_path, saver):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(WriteError, match="not writable"):
            SAVERS[saver](report, folder / "out.json")
    finally:
        folder.chmod(0o755)


class _FullDisk:
    """A file whose writes and flushes fail with ENOSPC once `room` bytes went through."""

    def __init__(self, inner, room: int):
        self._inner, self._room = inner, room

    def write(self, data):
        if len(data) > self._room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self._room -= len(data)
        return self._inner.write(data)

    def flush(self):
        if self._room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self._inner.flush()

    def close(self):
        try:
            self.flush()  # like a buffered file: bytes still held make close fail too...
        finally:
            self._inner.close()  # ...and, as CPython's buffered files do, the descriptor is closed anyway

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _full_disk(monkeypatch, room: int) -> None:
    real = os.fdopen
    monkeypatch.setattr(fileio.os, "fdopen", lambda fd, *a, **k: _FullDisk(real(fd, *a, **k), room))


@pytest.mark.parametrize("saver", SAVERS)
def test_a_full_disk_keeps_the_old_file_and_leaves_no_temporary_file(report, tmp_path, monkeypatch, saver):
    path = tmp_path / "out.json"
    path.write_text("old")
    _full_disk(monkeypatch, room=100)
    with pytest.raises(WriteError, match="no space left on the device") as caught:
        SAVERS[saver](report, path)
    assert isinstance(caught.value, BisectError) and isinstance(caught.value, OSError)
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_capture_onto_a_full_disk_leaves_no_temporary_file(tmp_path, monkeypatch):
    """The zip's central directory and the file's close fail on the same full disk as the write."""
    model = tiny_chain()
    path = record(model, "CPU:f32", path=tmp_path / "c.npz")
    before = path.read_bytes()
    _full_disk(monkeypatch, room=len(before) // 2)
    with pytest.raises(CaptureError, match="no space left on the device"):
        record(model, "CPU:f32", path=path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz"]
    _full_disk(monkeypatch, room=len(before) - 200)  # fails only when the central directory is written
    with pytest.raises(CaptureError, match="no space left on the device"):
        record(model, "CPU:f32", path=tmp_path / "new.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz"]


def test_sigterm_while_capturing_leaves_no_temporary_file(tmp_path, report):
    before = signal.getsignal(signal.SIGTERM)
    code = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        import numpy as np
        from bisect_ov.capture.write import record
        from tests.conftest import tiny_chain
        real = np.lib.format.write_array
        calls = []
        def write_then_terminate(*args, **kwargs):
            calls.append(1)
            if len(calls) == 3:
                os.kill(os.getpid(), signal.SIGTERM)
            return real(*args, **kwargs)
        np.lib.format.write_array = write_then_terminate
        record(tiny_chain(), "CPU:f32", path={str(tmp_path / "c.npz")!r})
        print("not terminated")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == -signal.SIGTERM, (out.returncode, out.stdout, out.stderr[-2000:])
    assert list(tmp_path.iterdir()) == []
    # Outside a write, the handler in place before is back.
    report.save(tmp_path / "r.json")
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_saved_reports_follow_the_umask(report, tmp_path, umask):
    old = os.umask(umask)
    try:
        path = report.save(tmp_path / "r.json")
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask
        page = report.save_html(tmp_path / "r.html", plots=False)
        assert page.stat().st_mode & 0o777 == 0o666 & ~umask
        cap = record(tiny_chain(depth=1), "CPU:f32", path=tmp_path / "c.npz")
        assert cap.stat().st_mode & 0o777 == 0o666 & ~umask
    finally:
        os.umask(old)


def test_saving_over_a_file_keeps_its_mode(report, tmp_path):
    path = tmp_path / "r.json"
    path.write_text("{}")
    path.chmod(0o644)
    report.save(path)
    assert path.stat().st_mode & 0o777 == 0o644
    assert json.loads(path.read_text())["model"] == report.model


# ----- capture headers that are not what a capture writes ---------------------------------------------------


def _with_header(src: pathlib.Path, out: pathlib.Path, change) -> pathlib.Path:
    with np.load(src, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files if k != "__header__"}
        header = json.loads(data["__header__"][()].decode())
    change(header)
    arrays["__header__"] = np.array(json.dumps(header).encode())
    np.savez(out, **arrays)
    return out


@pytest.mark.parametrize("change, message", [
    (lambda h: h.update(samples=[]), r"'samples' is \[\]; it must list at least one recorded input set"),
    (lambda h: h.update(samples=[{}]), r"samples\[0\] has no inputs_hash"),
    (lambda h: h.update(device={}), r"'device' is \{\}; it must hold the device name"),
    (lambda h: h["device"].update(info={"name": "CPU"}), r"device.info: the key 'device' is missing"),
    (lambda h: h["device"]["info"].update(emulated="yes"), r"device.info.emulated: expected true or false"),
    (lambda h: h["model"].pop("inputs"), r"'model' lacks its inputs and outputs"),
    (lambda h: h.update(seed="0"), r"seed is '0', not a non-negative integer"),
])
def test_malformed_capture_headers_are_clear_refusals(tmp_path, change, message):
    path = record(tiny_chain(depth=1), "CPU:f32", path=tmp_path / "c.npz")
    with pytest.raises(CaptureError, match="header is malformed .*" + message):
        load_capture(_with_header(path, tmp_path / "bad.npz", change))


# ----- what the user pointed at is what gets written -------------------------------------------------------


@pytest.mark.parametrize("saver", SAVERS)
def test_saving_through_a_symbolic_link_writes_its_target_and_keeps_the_link(report, tmp_path, saver):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "out.json"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(pathlib.Path("real") / "out.json")  # relative, as `ln -s` makes them
    chain = tmp_path / "chain.json"
    chain.symlink_to(link)
    SAVERS[saver](report, chain)
    assert chain.is_symlink() and link.is_symlink() and os.readlink(link) == "real/out.json"
    assert target.read_text() != "old" and target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.json", "link.json", "real"]
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["out.json"]
    dangling = tmp_path / "new.json"
    dangling.symlink_to(tmp_path / "real" / "made.json")
    SAVERS[saver](report, dangling)
    assert dangling.is_symlink() and (tmp_path / "real" / "made.json").stat().st_size > 0


def test_a_link_into_a_missing_folder_or_a_loop_of_links_is_a_write_error(report, tmp_path):
    (tmp_path / "nowhere.json").symlink_to(tmp_path / "missing" / "r.json")
    with pytest.raises(WriteError, match="the folder '.*missing' \\(where the link .* points\\) does not exist"):
        report.save(tmp_path / "nowhere.json")
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(WriteError, match="symbolic links"):
        report.save(tmp_path / "a")


def _read_fifo_in_background(fifo: pathlib.Path) -> tuple[threading.Thread, list[bytes]]:
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader, got


def test_a_fifo_is_written_in_place_and_its_reader_gets_everything(report, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader, got = _read_fifo_in_background(fifo)
    report.save(fifo)
    reader.join(30)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still a FIFO, not a file put in its place
    assert Report.from_dict(json.loads(got[0])) == report
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_a_capture_streams_into_a_fifo_as_a_readable_npz(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader, got = _read_fifo_in_background(fifo)
    record(tiny_chain(depth=2), "CPU:f32", path=fifo)
    reader.join(60)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    (tmp_path / "copy.npz").write_bytes(got[0])
    with load_capture(tmp_path / "copy.npz") as cap:
        assert len(cap.taps) >= 4


def test_a_device_is_written_in_place(report):
    # The classification is checked first: on a regression, nothing is written (root could replace /dev/null).
    assert fileio.destination("/dev/null") == (pathlib.Path("/dev/null"), True)
    report.save("/dev/null")
    report.save_html("/dev/null", plots=False)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_descriptor_is_written_in_place_and_what_it_holds_is_kept(report, tmp_path):
    """/dev/stdout, /proc/self/fd/N, and links to them reach the open pipe or file: a pipe gets the report, a
    file the descriptor is open on keeps what was written before (appended to, not replaced)."""
    read_end, write_end = os.pipe()
    link = tmp_path / "out.json"
    link.symlink_to(f"/proc/self/fd/{write_end}")
    assert fileio.destination(link) == (link, True)
    got: list[bytes] = []

    def read() -> None:  # beside the write: a report larger than the pipe's buffer would block it otherwise
        with os.fdopen(read_end, "rb", closefd=False) as r:
            got.append(r.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        report.save(link)
        os.close(write_end)
        reader.join(60)
        assert got and Report.from_dict(json.loads(got[0])) == report
    finally:
        for fd in (read_end, write_end):
            with contextlib.suppress(OSError):
                os.close(fd)
    assert link.is_symlink()
    log = tmp_path / "log.txt"
    with open(log, "w") as f:
        f.write("text printed before\n")
        f.flush()
        inode = os.stat(log).st_ino
        report.save(f"/proc/self/fd/{f.fileno()}")
    assert os.stat(log).st_ino == inode
    head, body = log.read_text().split("\n", 1)
    assert head == "text printed before" and Report.from_dict(json.loads(body)) == report


def test_a_read_only_file_is_refused_as_open_refuses_it(report, tmp_path, monkeypatch):
    path = tmp_path / "r.json"
    path.write_text("old")
    path.chmod(0o444)
    try:
        open(path, "a").close()
    except PermissionError:
        refused = True
    else:
        refused = False  # root: open() writes it, and so does save()
    if refused:
        with pytest.raises(WriteError, match="permission denied \\(the file is read-only"):
            report.save(path)
        assert path.read_text() == "old"
    else:
        report.save(path)
        assert Report.load(path) == report
        path.write_text("old")
    # The refusal itself, wherever the suite runs: a file this process may not write is left as it was.
    real = os.access
    monkeypatch.setattr(fileio.os, "access", lambda p, m, **k: False if pathlib.Path(p) == path else real(p, m, **k))
    for saver in SAVERS.values():
        with pytest.raises(WriteError, match="permission denied"):
            saver(report, path)
    assert path.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


# ----- the patched model: an IR of two files, moved into place together --------------------------------------


def test_the_patched_model_is_written_under_temporary_names_and_moved(tmp_path):
    import openvino as ov

    from bisect_ov.model.graph import ModelGraph
    from bisect_ov.pipeline.assemble import save_patched

    model = tiny_chain()
    path = save_patched(model, ModelGraph(model), ["mm1"], tmp_path / "fixed.xml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fixed.bin", "fixed.xml"]
    assert path.stat().st_mode & 0o777 == fileio.new_file_mode()
    marked = [op.get_friendly_name() for op in ov.Core().read_model(path).get_ordered_ops() if op.get_rt_info()
              and any("disable_fp16" in k.lower() or "precisionconversion" in k.lower() for k in op.get_rt_info())]
    assert marked == ["mm1"]


def test_a_patched_model_that_fails_to_write_leaves_nothing_and_is_a_write_error(tmp_path, monkeypatch):
    """OpenVINO's serializer on a full disk raises RuntimeError('basic_ios::clear') after writing part of the
    files: no partial model is left, one already there is kept, and the error is the library's."""
    from bisect_ov.model.graph import ModelGraph
    from bisect_ov.pipeline import assemble

    def partial_then_fail(model, path, *args, **kwargs):
        pathlib.Path(path).write_text("<?xml half")
        pathlib.Path(path).with_suffix(".bin").write_bytes(b"\0" * 10)
        raise RuntimeError("Exception from src/core/src/pass/serialize.cpp:1200:\nbasic_ios::clear: iostream error")

    (tmp_path / "fixed.xml").write_text("old xml")
    (tmp_path / "fixed.bin").write_bytes(b"old bin")
    monkeypatch.setattr(assemble.ov, "save_model", partial_then_fail)
    model = tiny_chain()
    with pytest.raises(WriteError, match="Cannot write the patched model .*fixed.xml': the write failed "
                                         "\\(.*basic_ios::clear.*\\), as on a full disk") as caught:
        assemble.save_patched(model, ModelGraph(model), ["mm1"], tmp_path / "fixed.xml")
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert (tmp_path / "fixed.xml").read_text() == "old xml" and (tmp_path / "fixed.bin").read_bytes() == b"old bin"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fixed.bin", "fixed.xml"]
    with pytest.raises(WriteError, match="the folder .* does not exist"):
        assemble.save_patched(model, ModelGraph(model), ["mm1"], tmp_path / "no" / "fixed.xml")
