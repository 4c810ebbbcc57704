"""Where the command line writes: the report's text, a file sent to stdout, one-line errors; and a reader that
went away.

`Console` flushes every write, so a closed pipe (``bisect-ov ... | head -1``) is seen at the write that failed;
the stream is then pointed at the null device (`to_null`: nothing more is written to it, and the interpreter's
last flush succeeds) and `Console.reader_gone` tells the command to exit as a command SIGPIPE ended would (141),
once it has written the files it was asked for. Standard library only; the streams are the process's
``sys.stdout`` and ``sys.stderr`` as they are when written to (tests replace them).
"""

from __future__ import annotations

import os
import sys
from typing import IO

__all__ = ["Console", "to_null"]


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

    def say(self, text: str = "") -> None:
        """One block of the report's text."""
        self._write(self.text, text + "\n")

    def data(self, text: str) -> None:
        """A file's content written to stdout (``--json -``)."""
        self._write(sys.stdout, text if text.endswith("\n") else text + "\n")

    def error(self, text: str) -> None:
        self._write(sys.stderr, text + "\n")

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
