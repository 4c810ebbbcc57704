"""Writing files so that a failure never leaves half a file, a stray temporary file, nor destroys the old one.

Every file bisect_ov writes (reports, HTML pages, node data, captures) goes to a temporary file beside its
destination and is renamed over it only when complete (`os.replace`). The temporary file is removed on any
failure, and also when the process receives SIGTERM while writing (`removed_on_sigterm`). A new file gets the
permissions the umask allows (``0o666 & ~umask``, as `open` would give); a file written over keeps its mode.

Assumptions: the destination's folder is on one file system with the temporary file (it is the same folder),
so the rename is atomic. Errors are `WriteError` (an `InputError` and an `OSError`) naming the path and the
cause.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import signal
import tempfile
import threading
from typing import IO, Iterator

from bisect_ov.core.errors import InputError, WriteError

__all__ = ["write_text_atomic", "atomic_file", "removed_on_sigterm", "new_file_mode", "check_writable"]


def write_text_atomic(path: str | os.PathLike, text: str) -> pathlib.Path:
    """Write `text` (UTF-8) to `path` atomically.

    Raises
    ------
    WriteError
        The folder is missing or not writable, `path` is a folder, or writing failed (a full disk); an
        existing file at `path` is then unchanged, and no temporary file is left.
    """
    with atomic_file(path, "w") as f:
        f.write(text)
    return pathlib.Path(path)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w", *, what: str = "",
                error: type[InputError] = WriteError) -> Iterator[IO]:
    """A temporary file beside `path`, opened in `mode` (``"w"`` text or ``"w+b"``), renamed over `path` when
    the block ends without an exception, and removed otherwise.

    `what` names the file in messages (``"the capture "``); `error` is the class raised for a path that cannot
    be written (checked before anything is written) and for a failed write, which also keeps the `OSError`'s
    text.
    """
    path = pathlib.Path(path)
    folder = check_writable(path, what=what, error=error)
    try:
        fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise error(f"Cannot write {what}'{path}': {_reason(err)}.") from err
    tmp = pathlib.Path(tmp_name)
    done = False
    with removed_on_sigterm(tmp):
        try:
            try:
                f: IO = os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8")
            except BaseException:
                os.close(fd)
                raise
            try:
                yield f
                f.flush()
                os.fsync(f.fileno())
                f.close()
            except BaseException:
                _close_quietly(f)  # a close that fails (bytes still buffered on a full disk) must not hide why
                raise
            # mkstemp makes the file private (0600): give it the mode `open` would, or keep the old file's.
            os.chmod(tmp, path.stat().st_mode & 0o777 if path.is_file() else new_file_mode())
            os.replace(tmp, path)
            done = True
        except OSError as err:
            if isinstance(err, InputError):
                raise
            raise error(f"Cannot write {what}'{path}': {_reason(err)}. A file already there is left as it was.") from err
        finally:
            if not done:
                tmp.unlink(missing_ok=True)


def check_writable(path: str | os.PathLike, *, what: str = "", error: type[InputError] = WriteError) -> pathlib.Path:
    """The folder `path` will be written into, after checking it exists, is writable and `path` is no folder.

    Raises
    ------
    WriteError
        (or `error`) With what is wrong and how to fix it.
    """
    path = pathlib.Path(path)
    folder = path.parent if str(path.parent) else pathlib.Path(".")
    if path.is_dir():
        raise error(f"Cannot write {what}to '{path}': it is a folder. Pass a file name, such as "
                    f"'{path / ('capture.npz' if 'capture' in what else 'report.json')}'.")
    if not folder.is_dir():
        raise error(f"Cannot write {what}'{path}': the folder '{folder}' does not exist. Create it, or choose another path.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise error(f"Cannot write {what}'{path}': the folder '{folder}' is not writable. Choose a folder you can write to.")
    return folder


def new_file_mode() -> int:
    """The mode `open` gives a new file: ``0o666`` without the bits of the process's umask."""
    return 0o666 & ~_umask()


def _umask() -> int:
    try:  # Linux states it without changing it (changing it is not thread-safe)
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        current = os.umask(0o022)
        os.umask(current)
    return current


_UMASK_LOCK = threading.Lock()
_PENDING: set[pathlib.Path] = set()  # temporary files being written, removed if SIGTERM arrives
_PENDING_LOCK = threading.Lock()


@contextlib.contextmanager
def removed_on_sigterm(tmp: pathlib.Path) -> Iterator[None]:
    """Remove `tmp` if the process is terminated (SIGTERM) before the block ends.

    The default action of SIGTERM ends the process without running ``finally`` blocks. While temporary files
    are pending, a handler removes them and then terminates the process as the default action would (same
    exit status). A handler the application installed itself is left in place: it decides how to end. Only
    the main thread installs handlers; a file written from another thread is covered while the main thread's
    handler is in place.
    """
    main = threading.current_thread() is threading.main_thread()
    with _PENDING_LOCK:
        _PENDING.add(tmp)
        if main and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        with _PENDING_LOCK:
            _PENDING.discard(tmp)
            if main and not _PENDING and signal.getsignal(signal.SIGTERM) is _on_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _on_sigterm(signum, frame) -> None:  # pragma: no cover - runs in a terminated process
    for tmp in list(_PENDING):
        try:
            tmp.unlink()
        except OSError:
            pass
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _close_quietly(f: IO) -> None:
    """Close `f`; a close that fails (buffered bytes on a full disk) must not hide the first error."""
    try:
        f.close()
    except (OSError, ValueError):
        pass  # buffered files close their descriptor even when the final flush fails


def _reason(err: OSError) -> str:
    if err.errno == errno.ENOSPC:
        return "no space left on the device"
    if err.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if err.errno == errno.EROFS:
        return "the file system is read-only"
    return err.strerror or str(err)
