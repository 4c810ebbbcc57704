"""Where the command line writes: the report's text, a file sent to stdout, one-line errors; and a reader that
went away.

`Console` flushes every write, so a closed pipe (``bisect-ov ... | head -1``) is seen at the write that failed;
the stream is then pointed at the null device (`to_null`: nothing more is written to it, and the interpreter's
last flush succeeds) and `Console.reader_gone` tells the command to exit as a command SIGPIPE ended would (141),
once it has written the files it was asked for. `LogFile` is ``--log-file``'s handler: a file that cannot be
written is an error before the command runs, and one that fails later says so once. Standard library only; the streams are the process's
``sys.stdout`` and ``sys.stderr`` as they are when written to (tests replace them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
from typing import IO, Any, Iterator

from bisect_ov.core.errors import InputError

__all__ = ["Console", "LogFile", "to_null", "usable_streams"]


class Console:
    """Where the command writes: the report's text (stdout, or stderr when stdout carries a file), files
    written to stdout, and one-line errors (stderr).

    Each write is flushed, so a reader that went away is seen at the write that failed: its stream is then
    pointed at the null device (nothing more is written to it, and the interpreter's last flush succeeds) and
    `reader_gone` is set for the exit code. Nothing raises `BrokenPipeError` past this object.
    """

    def __init__(self) -> None:
        self.text: IO[str] = sys.stdout
        self.reader_gone = False
        self.lost: OSError | None = None  # the first failed write of the report's text to stdout (a full disk)

    def say(self, text: str = "") -> None:
        """One block of the report's text."""
        self._write(self.text, text + "\n")

    def data(self, text: str) -> None:
        """A file's content written to stdout (``--json -``)."""
        self._write(sys.stdout, text if text.endswith("\n") else text + "\n")

    def error(self, text: str) -> None:
        self._write(sys.stderr, text + "\n")

    def columns(self) -> int:
        """The report's default width: a terminal's own, from 40 to 120 columns; 120 into a file or a pipe."""
        isatty = getattr(self.text, "isatty", None)
        if not callable(isatty) or not isatty():
            return 120
        return min(120, max(40, shutil.get_terminal_size((120, 24)).columns))

    def exit_code(self, code: int, *, lost: int, gone: int, ran: tuple[int, ...]) -> int:
        """The command's exit code: `gone` when the reader went away, `lost` (said on stderr) when a command that
        ran to its end (exit code in `ran`: the files asked for are written) could not write its text to stdout,
        else `code`."""
        if self.reader_gone:
            return gone
        if self.lost is not None and code in ran:
            self.error(f"bisect-ov: error: the report's text could not be written to stdout "
                       f"({self.lost.strerror or self.lost}); the files asked for are written.")
            return lost
        return code

    def _write(self, stream: IO[str], text: str) -> None:
        if stream is sys.stdout and self.reader_gone:
            return
        try:
            stream.write(text)
            stream.flush()
        except BrokenPipeError:
            to_null(stream)
            if stream is sys.stdout:
                self.reader_gone = True
        except OSError as err:  # a stream that takes nothing (``>/dev/full``): the files asked for are still written
            to_null(stream)
            if stream is sys.stdout and self.lost is None:
                self.lost = err


@contextlib.contextmanager
def usable_streams() -> Iterator[None]:
    """While a command runs, stdout and stderr take any text: a closed one (``2>&-``: Python makes it None) writes
    to the null device, and characters its encoding lacks (``PYTHONIOENCODING=ascii``) are escaped, not raised;
    both as they were after."""
    saved = sys.stdout, sys.stderr
    opened: list[IO[str]] = []
    modes: list[tuple[Any, str]] = []
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            stream = open(os.devnull, "w", encoding="utf-8")
            opened.append(stream)
            setattr(sys, name, stream)
        elif getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="backslashreplace")
                modes.append((stream, "strict"))
            except (ValueError, OSError):  # a stream that cannot change it: left as it is
                pass
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        for stream, errors in modes:
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(errors=errors)
        for stream in opened:
            stream.close()


def to_null(stream: IO[str]) -> None:
    """Point `stream`'s descriptor at the null device, so what is still buffered flushes somewhere."""
    try:
        fd = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):
        return
    try:
        os.dup2(null, fd)
    except OSError:
        pass
    finally:
        os.close(null)


class LogFile(logging.FileHandler):
    """``--log-file``: a file that cannot be written (a full disk, ``/dev/full``) is an error before the command
    runs; one that fails later says so once on stderr and takes no more records (not a traceback per record)."""

    def __init__(self, *args: Any, **keywords: Any) -> None:
        super().__init__(*args, **keywords)
        self.failure: BaseException | None = None
        self.running = False

    def emit(self, record: logging.LogRecord) -> None:
        if self.failure is None:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:
        failure = sys.exc_info()[1]
        if not isinstance(failure, OSError):
            super().handleError(record)
            return
        if self.failure is None and self.running:
            sys.stderr.write(f"bisect-ov: warning: writing the log file {self.baseFilename!r} failed "
                             f"({failure.strerror or failure}); nothing more is logged to it.\n")
        self.failure = self.failure or failure

    def started(self, path: Any) -> None:
        """Raise the first write's failure as an `InputError`; later ones are warned about once."""
        if self.failure is not None:
            reason = getattr(self.failure, "strerror", None) or self.failure
            raise InputError(f"Cannot write the log file '{path}': {reason}. Choose a file on a disk with room.")
        self.running = True

    def close(self) -> None:
        try:
            super().close()
        except OSError:  # its last flush failed: said already, or the file was gone
            pass
