"""One exception family for the whole package.

Every error a user can cause (a bad model, input or option) is an `InputError`; every failure of a device
(missing, compile or infer failed) is a `DeviceError`. Both derive from `BisectError`, so a caller can catch
one type. A file that cannot be written is a `WriteError` (an `InputError`, and an `OSError` too, so code that
catches OSError around file writes keeps working). Messages say what was wrong, what is available, and how to
fix it.

A Ctrl-C is never one of these errors: an OpenVINO call interrupted inside a Python callback (the emulated
devices' ops run in Python while OpenVINO compiles and runs them) raises a RuntimeError whose text is
``KeyboardInterrupt`` (pybind11's rendering of it); `raise_if_interrupted` turns that back into the
`KeyboardInterrupt` it was, where errors are wrapped.
"""

from __future__ import annotations

import re

__all__ = ["BisectError", "InputError", "DeviceError", "CaptureError", "WriteError", "CaptureWriteError", "first_line", "cause_of",
           "interrupted", "raise_if_interrupted"]

# pybind11's text for a Python exception that crossed C++: "KeyboardInterrupt: <message>", on a line of its own
# (OpenVINO puts its "Exception from src/..." lines before it).
_INTERRUPT_TEXT = re.compile(r"^KeyboardInterrupt(:|$)", re.MULTILINE)


class BisectError(Exception):
    """Base class of every error raised on purpose by bisect_ov."""


class InputError(BisectError, ValueError):
    """A model, input array or option the user supplied cannot be used. ``position``: which of several input
    sets given at once it refuses, when that is the cause (None otherwise; `bisect_ov.run.device_base.infer_each`)."""

    position: int | None = None


class DeviceError(BisectError, RuntimeError):
    """A device is missing, or compiling or running the model on it failed."""


class CaptureError(InputError):
    """A recorded capture file is unreadable, corrupted, or does not match the model or inputs."""


class WriteError(InputError, OSError):
    """A file cannot be written: a missing or read-only folder, a folder given as the path, a full disk."""


class CaptureWriteError(CaptureError, WriteError):
    """A capture file cannot be written."""


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # terminal colours, as a cluster's task errors carry them


def cause_of(err: BaseException) -> BaseException:
    """The exception a cluster's wrapper stands for (Ray's ``RayTaskError`` keeps it as ``cause``), else `err`."""
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, BaseException) and cause is not err else err


def first_line(err: BaseException) -> str:
    """The informative sentence of an exception's text, for one-line messages.

    OpenVINO errors start with a C++ source location ("Exception from src/...", "Check '...'"); the sentence
    a user can act on is usually the last remaining line. Other text wrapped over several lines (Python's own
    multiprocessing advice ends "...section in https://docs.python.org/...") is one sentence, its start kept.
    """
    err = cause_of(err)
    lines = [line.strip() for line in _ANSI.sub("", str(err)).splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("Exception from", "Check '"))]
    if useful and len(useful) == len(lines):
        return " ".join(useful)[:300]
    return ((useful or lines or [type(err).__name__])[-1])[:300]


def interrupted(err: BaseException | None) -> bool:
    """Whether `err`, or an exception it was raised from, is a Ctrl-C: a `KeyboardInterrupt`, or the error an
    OpenVINO call raises when a Python callback inside it was interrupted."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, KeyboardInterrupt) or (isinstance(err, Exception) and _INTERRUPT_TEXT.search(str(err))):
            return True
        err = err.__cause__ or err.__context__
    return False


def raise_if_interrupted(err: BaseException) -> None:
    """Raise `KeyboardInterrupt` (from `err`) when `err` is an interrupted call (`interrupted`); call it first in
    an ``except Exception`` that wraps or swallows what an OpenVINO call raised."""
    if interrupted(err):
        raise KeyboardInterrupt from err
