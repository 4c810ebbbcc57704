"""Saving reports, pages, node data and captures: errors of the library's family, old files kept, no
temporary file left (full disk and SIGTERM included), and modes that follow the umask."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

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
    (lambda h: h.update(seed="0"), r"seed is '0', not an integer"),
])
def test_malformed_capture_headers_are_clear_refusals(tmp_path, change, message):
    path = record(tiny_chain(depth=1), "CPU:f32", path=tmp_path / "c.npz")
    with pytest.raises(CaptureError, match="header is malformed .*" + message):
        load_capture(_with_header(path, tmp_path / "bad.npz", change))
