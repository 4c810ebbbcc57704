"""Writing files so that a failure never leaves half a file, a stray temporary file, nor destroys the old one.

Every file bisect_ov writes (reports, HTML pages, node data, captures) goes to a temporary file beside its
destination and is renamed over it only when complete (`os.replace`). The temporary file is removed on any
failure, and also when the process receives SIGTERM while writing (`removed_on_sigterm`). A new file gets the
permissions the umask allows (``0o666 & ~umask``, as `open` would give); a file written over keeps its mode.
A model saved as IR (an ``.xml`` and its ``.bin``) goes the same way, both files at once (`atomic_paths`).

What the user pointed at is what gets written (`destination`), as ``open(path, "w")`` would: a symbolic link is
followed to its target, which is replaced (the link stays a link); a FIFO, a device or one of the process's
own descriptors (``/dev/stdout``, ``/dev/fd/3``) is written in place, appending, never replaced; an existing
file without write permission is refused, as `open` refuses it (so root, whom `open` lets through, writes it).

Assumptions: the destination's folder is on one file system with the temporary file (it is the same folder),
so the rename is atomic. A file written in place is not atomic: a failure leaves what was written so far in
the pipe or device, as with `open`. Errors are `WriteError` (an `InputError` and an `OSError`) naming the path
and the cause.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import os
import pathlib
import re
import signal
import stat
import tempfile
import threading
from collections.abc import Mapping
from typing import IO, Iterator, Sequence

from bisect_ov.core.errors import BisectError, InputError, WriteError

__all__ = ["write_text_atomic", "atomic_file", "atomic_paths", "removed_on_sigterm", "new_file_mode", "check_writable",
           "destination", "ir_files", "labelled_files", "onnx_external_files", "files_read", "refuse_overlaps"]

# A process's own descriptors, named as files: writing them reaches whatever the descriptor is open on.
_DESCRIPTOR = re.compile(r"/(proc/(self|thread-self|\d+)/fd|dev/fd)/\d+|/dev/std(in|out|err)")
_MAX_LINKS = 40  # as the kernel's limit on symbolic links followed in one path


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
    """A temporary file beside `path` (beside its target when `path` is a symbolic link), opened in `mode`
    (``"w"`` text or ``"w+b"``), renamed over it when the block ends without an exception, and removed
    otherwise. A FIFO, a device or a process's descriptor (`destination`) is opened in place instead, for
    appending (binary: as an unseekable stream).

    `what` names the file in messages (``"the capture "``); `error` is the class raised for a path that cannot
    be written (checked before anything is written) and for a failed write, which also keeps the `OSError`'s
    text.
    """
    path = pathlib.Path(path)
    folder = check_writable(path, what=what, error=error)
    target, in_place = destination(path, what=what, error=error)
    if in_place:
        with _in_place(path, target, mode, what, error) as stream:
            yield stream
        return
    try:
        fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.", suffix=".tmp")
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
            os.chmod(tmp, target.stat().st_mode & 0o777 if target.is_file() else new_file_mode())
            os.replace(tmp, target)
            done = True
        except OSError as err:
            if isinstance(err, InputError):
                raise
            raise error(f"Cannot write {what}'{path}': {_reason(err)}. A file already there is left as it was.") from err
        finally:
            if not done:
                tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_paths(path: str | os.PathLike, suffixes: Sequence[str], *, what: str = "",
                 error: type[InputError] = WriteError) -> Iterator[pathlib.Path]:
    """A temporary path beside `path` for a writer that makes several files named after it (``.xml`` and
    ``.bin`` for an OpenVINO IR: `suffixes`, the first being `path`'s own). When the block ends without an
    exception, each temporary file is renamed over its destination, `path` last (a reader finds it only when
    the others are in place); otherwise all are removed and an `OSError` (any exception the writer raised
    that is no `BisectError`) becomes `error`.
    """
    path = pathlib.Path(path)
    folder = check_writable(path, what=what, error=error)
    target, in_place = destination(path, what=what, error=error)
    if in_place:
        raise error(f"Cannot write {what}'{path}': it is a {_kind(target)}; this writer needs a file path.")
    stem = target.name[: -len(suffixes[0])] if target.name.endswith(suffixes[0]) else target.name
    tmp_stem = folder / f".{stem}.{os.urandom(4).hex()}.tmp"
    pairs = [(tmp_stem.with_name(tmp_stem.name + s), target.with_name(stem + s)) for s in suffixes]
    for _, final in pairs[1:]:
        check_writable(final, what=what, error=error)
    done = False
    with contextlib.ExitStack() as stack:
        for tmp, _ in pairs:
            stack.enter_context(removed_on_sigterm(tmp))
        try:
            yield pairs[0][0]
            missing = [tmp.name for tmp, _ in pairs if not tmp.is_file()]
            if missing:
                raise OSError(errno.EIO, f"the writer did not make {missing}")
            for tmp, final in reversed(pairs):
                os.chmod(tmp, final.stat().st_mode & 0o777 if final.is_file() else new_file_mode())
                os.replace(tmp, final)
            done = True
        except Exception as err:
            if isinstance(err, BisectError):
                raise
            reason = _reason(err) if isinstance(err, OSError) else _writer_reason(err)
            raise error(f"Cannot write {what}'{path}': {reason}. A file already there is left as it was.") from err
        finally:
            if not done:
                for tmp, _ in pairs:
                    tmp.unlink(missing_ok=True)


def destination(path: str | os.PathLike, *, what: str = "", error: type[InputError] = WriteError
                ) -> tuple[pathlib.Path, bool]:
    """What writing `path` writes, and whether it is written in place.

    A FIFO, a device, a socket or one of the process's descriptors (``/dev/stdout``, ``/proc/self/fd/1``,
    through any chain of links) is written in place: ``(path, True)``. A symbolic link gives its final target
    (which need not exist yet): replacing the link itself would leave the file it points to unchanged. Anything
    else is `path` itself.

    Raises
    ------
    WriteError
        (or `error`) A loop of symbolic links.
    """
    path = pathlib.Path(path)
    try:
        info = os.stat(path)  # follows links
    except FileNotFoundError:
        info = None
    except OSError as err:
        raise error(f"Cannot write {what}'{path}': {_reason(err)}.") from err
    if _is_descriptor(path) or (info is not None and not stat.S_ISREG(info.st_mode) and not stat.S_ISDIR(info.st_mode)):
        return path, True
    if path.is_symlink():
        return pathlib.Path(os.path.realpath(path)), False
    return path, False


def _is_descriptor(path: pathlib.Path) -> bool:
    """Whether `path`, or a link on its way to its target, names one of the process's descriptors."""
    current = os.path.abspath(path)
    for _ in range(_MAX_LINKS):
        if _DESCRIPTOR.fullmatch(current):
            return True
        if not os.path.islink(current):
            return False
        current = os.path.normpath(os.path.join(os.path.dirname(current), os.readlink(current)))
    return False


@contextlib.contextmanager
def _in_place(path: pathlib.Path, target: pathlib.Path, mode: str, what: str, error: type[InputError]) -> Iterator[IO]:
    """`target` opened for appending, without creating or truncating it (a pipe or device is written as it is;
    a descriptor redirected to a file keeps what is already there); binary as an unseekable stream, so a zip
    writer never seeks back over what it wrote."""
    try:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND)
    except OSError as err:
        raise error(f"Cannot write {what}'{path}': {_reason(err)}.") from err
    binary = "b" in mode
    f: IO = os.fdopen(fd, "ab" if binary else "a", encoding=None if binary else "utf-8")
    try:
        yield _Unseekable(f) if binary else f  # type: ignore[misc]
        f.flush()
        f.close()
    except OSError as err:
        _close_quietly(f)
        if isinstance(err, InputError):
            raise
        raise error(f"Cannot write {what}'{path}': {_reason(err)}.") from err
    except BaseException:
        _close_quietly(f)
        raise


class _Unseekable(io.RawIOBase):
    """A binary file that says it cannot seek (written in place: a pipe, a device, a redirected descriptor)."""

    def __init__(self, inner: IO) -> None:
        super().__init__()
        self._inner = inner

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._inner.write(data)
        return len(data)

    def flush(self) -> None:
        self._inner.flush()

    def tell(self) -> int:
        raise io.UnsupportedOperation("written in place: not seekable")

    def seekable(self) -> bool:
        return False

    def close(self) -> None:  # the owner closes the file itself
        super().close()


def _kind(path: pathlib.Path) -> str:
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "descriptor"
    return "FIFO" if stat.S_ISFIFO(mode) else "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else \
        "socket" if stat.S_ISSOCK(mode) else "descriptor"


def check_writable(path: str | os.PathLike, *, what: str = "", error: type[InputError] = WriteError) -> pathlib.Path:
    """The folder `path` will be written into, after checking it exists, is writable, `path` is no folder
    and, when it exists, `open(path, "w")` would be allowed to write it (a symbolic link is checked at its
    target; a FIFO, device or descriptor only for write permission, see `destination`).

    Raises
    ------
    WriteError
        (or `error`) With what is wrong and how to fix it.
    """
    path = pathlib.Path(path)
    if path.is_dir():
        name = next((n for key, n in (("capture", "capture.npz"), ("html", "report.html"), ("log", "bisect-ov.log"),
                                      ("patched", "patched.xml"), ("scope", "ignored_scope.json")) if key in what),
                    "report.json")
        raise error(f"Cannot write {what}to '{path}': it is a folder. Pass a file name, such as '{path / name}'.")
    target, in_place = destination(path, what=what, error=error)
    folder = target.parent if str(target.parent) else pathlib.Path(".")
    if in_place:
        if not os.access(target, os.W_OK):
            raise error(f"Cannot write {what}'{path}': permission denied. Choose a path you can write to.")
        return folder
    if not folder.is_dir():
        shown = f"'{folder}'" + (f" (where the link '{path}' points)" if target != path else "")
        raise error(f"Cannot write {what}'{path}': the folder {shown} does not exist. Create it, or choose another path.")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise error(f"Cannot write {what}'{path}': the folder '{folder}' is not writable. Choose a folder you can write to.")
    if target.is_file() and not os.access(target, os.W_OK):
        raise error(f"Cannot write {what}'{path}': permission denied (the file is read-only; open(path, 'w') refuses "
                    "it too). Make it writable, or choose another path.")
    return folder


def ir_files(path: str | os.PathLike) -> tuple[pathlib.Path, ...]:
    """The files an OpenVINO IR named `path` is made of: the ``.xml`` and its ``.bin`` (what `atomic_paths` writes
    for ``(".xml", ".bin")`` and what OpenVINO reads beside an ``.xml``); any other path alone."""
    path = pathlib.Path(path)
    stem = path.name[:-4] if path.name.lower().endswith(".xml") else None
    return (path, path.with_name(stem + ".bin")) if stem is not None else (path,)


def labelled_files(what: str, path: object) -> list[tuple[str, pathlib.Path]]:
    """(what, file) for each file of `path` (`ir_files`: an IR's ``.bin`` is "`what`'s weights"; an existing ONNX
    file's external data files, `onnx_external_files`, are "`what`'s external data"); nothing when `path` is no
    path (a model object, None)."""
    if not isinstance(path, (str, os.PathLike)):
        return []
    return [*((what if i == 0 else f"{what}'s weights", f) for i, f in enumerate(ir_files(path))),
            *((f"{what}'s external data", f) for f in onnx_external_files(path))]


def onnx_external_files(path: str | os.PathLike) -> tuple[pathlib.Path, ...]:
    """The files an existing ``.onnx`` file keeps tensors in (external data, named relative to its folder), in
    the main graph, its subgraphs and constants; none for other paths, or for a file ONNX cannot parse (its
    reader says why when the model is read)."""
    path = pathlib.Path(path)
    if path.suffix.lower() != ".onnx" or not path.is_file():
        return ()
    state = path.stat()  # one run asks up to three times (the command's checks, the reader, the report's reads)
    return _external_files(str(path), state.st_mtime_ns, state.st_size)


@functools.lru_cache(maxsize=16)
def _external_files(name: str, modified: int, size: int) -> tuple[pathlib.Path, ...]:
    """`onnx_external_files` of the ONNX file `name` as it was when `modified` and of `size` bytes (the cache key)."""
    path = pathlib.Path(name)
    import onnx  # only for an ONNX path

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - not parsable here: nothing more to protect than the file itself
        return ()
    found: dict[pathlib.Path, None] = {}

    def tensors(graph) -> Iterator:
        yield from graph.initializer
        for sparse in graph.sparse_initializer:
            yield from (sparse.values, sparse.indices)
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.HasField("t"):
                    yield attribute.t
                yield from attribute.tensors
                if attribute.HasField("g"):
                    yield from tensors(attribute.g)
                for sub in attribute.graphs:
                    yield from tensors(sub)

    for tensor in tensors(model.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in tensor.external_data if e.key == "location"), None)
            if location:
                found[path.parent / location] = None
    return tuple(found)


def files_read(model: object, target_model: object, inputs: object, *sides: object) -> tuple[tuple[str, str], ...]:
    """(what, path) of each existing file a comparison reads, for `refuse_overlaps` when its report is written
    later: the model and its weights, a twin's, the inputs (a file, a folder, files named in a dict, a list or a
    `Samples` list) and each recording a side replays (``capture:PATH``, or a recorded device)."""
    pairs = [*labelled_files("the model", model), *labelled_files("the target model", target_model)]

    def given(what: str, value: object) -> None:
        if isinstance(value, (str, os.PathLike)):
            pairs.append((what, pathlib.Path(value)))

    given("the inputs", inputs)
    items = getattr(inputs, "listed", inputs)  # a `Samples` list keeps its items as given
    if isinstance(items, Mapping):
        for name, value in items.items():
            given(f"input '{name}'", value)
    elif isinstance(items, (list, tuple)):
        for i, value in enumerate(items):
            given(f"sample #{i}", value)
    for side in sides:
        if isinstance(side, str) and side.startswith("capture:"):
            given("the recording a side replays", side.split(":", 1)[1])
        else:
            given("the recording a side replays", getattr(getattr(side, "capture", None), "path", None))
    return tuple((what, str(path)) for what, path in pairs if path.exists())


def refuse_overlaps(outputs: Sequence[tuple[str, str | os.PathLike | None]],
                    inputs: Sequence[tuple[str, str | os.PathLike | None]], *, folders: Sequence[str] = (),
                    error: type[InputError] = InputError) -> None:
    """Refuse, before anything runs, a run that would write over a file it reads or write two outputs to one file.

    `outputs` and `inputs` are (what, path) pairs, as the user named them (``"--json"``, ``"the model"``); None and
    ``-`` (stdout) are skipped. Paths are compared after following symbolic links, and existing files also by
    identity (a hard link). An input that is a folder (a folder of samples, an export folder) takes no output
    inside it; an output written as a folder (named in `folders`: a reproducer's) holds no input. Expand IR paths
    first (`labelled_files`).

    Raises
    ------
    InputError
        (or `error`) Naming both sides and what to do.
    """
    def named(pairs):
        return [(what, pathlib.Path(p)) for what, p in pairs if p is not None and str(p) != "-"]

    def same(a: pathlib.Path, b: pathlib.Path) -> bool:
        if os.path.realpath(a) == os.path.realpath(b):
            return True
        try:
            return a.exists() and b.exists() and os.path.samefile(a, b)
        except OSError:
            return False

    def inside(path: pathlib.Path, folder: pathlib.Path) -> bool:
        return folder.is_dir() and os.path.commonpath([os.path.realpath(path), os.path.realpath(folder)]) == \
            os.path.realpath(folder)

    outs, ins = named(outputs), named(inputs)
    for i, (what, path) in enumerate(outs):
        for other, read in ins:
            if same(path, read):
                raise error(f"{what} '{path}' is {other} ('{read}'), which this run reads: writing it would destroy "
                            f"it. Write {what} elsewhere.")
            if inside(path, read):
                raise error(f"{what} '{path}' is inside {other} ('{read}'), a folder this run reads: write {what} "
                            "outside it.")
            if what in folders and inside(read, path):
                raise error(f"{what} '{path}' holds {other} ('{read}'), which this run reads, and this run writes "
                            "into it: choose another folder.")
        for other, earlier in outs[:i]:
            if same(path, earlier):
                raise error(f"{what} '{path}' and {other} '{earlier}' name the same file: one would replace the other. "
                            "Give each its own path.")


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


def _writer_reason(err: BaseException) -> str:
    """The cause of a failure a writer (OpenVINO's IR serializer) reports in its own words."""
    text = " ".join(str(err).split())[:300] or type(err).__name__
    if "basic_ios" in text or "ios_base" in text:  # a C++ stream's failure: the write itself failed
        return f"the write failed ({text}), as on a full disk or a failing device"
    return text


def _reason(err: OSError) -> str:
    if err.errno == errno.ENOSPC:
        return "no space left on the device"
    if err.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if err.errno == errno.EROFS:
        return "the file system is read-only"
    return err.strerror or str(err)
