"""One exception family for the whole package.

Every error a user can cause (a bad model, input or option) is an `InputError`; every failure of a device
(missing, compile or infer failed) is a `DeviceError`. Both derive from `BisectError`, so a caller can catch
one type. Messages say what was wrong, what is available, and how to fix it.
"""

from __future__ import annotations

__all__ = ["BisectError", "InputError", "DeviceError", "CaptureError"]


class BisectError(Exception):
    """Base class of every error raised on purpose by bisect_ov."""


class InputError(BisectError, ValueError):
    """A model, input array or option the user supplied cannot be used."""


class DeviceError(BisectError, RuntimeError):
    """A device is missing, or compiling or running the model on it failed."""


class CaptureError(InputError):
    """A recorded capture file is unreadable, corrupted, or does not match the model or inputs."""
