"""Checks of option values shared by every entry point that takes them: `bisect()` (through
`bisect_ov.pipeline.options.BisectOptions`), `record` (a capture) and the devices of a recorded run.

Each check takes the option's name and value and returns the value to keep, or raises an `InputError` that
names the option, says what is valid and shows what was given; so ``record(..., config="abc")`` is refused
with the words ``bisect(..., ref_config="abc")`` gets, not with a ``ValueError`` from deep inside.

Standard library only.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping, TypeGuard

from bisect_ov.core.errors import InputError

__all__ = ["SEED_LIMIT", "is_integer", "check_flag", "check_config", "check_seed", "check_tap_bytes", "tap_bytes_of_mb"]

SEED_LIMIT = 2 ** 32  # numpy's legacy seeding and OpenVINO's random ops take 32-bit seeds


def is_integer(value: Any) -> TypeGuard[int]:
    """An int (or a numpy integer), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{name} must be True or False; got {value!r}.")
    return value


def check_config(name: str, value: Any) -> dict[str, Any]:
    """Compile properties: None or a mapping of property names to values, as a new dict."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InputError(f"{name} must be a dict of compile properties (name -> value); got {_shown(value)}.")
    if not all(isinstance(k, str) and k for k in value):
        raise InputError(f"{name}'s keys must be property names (strings such as 'INFERENCE_PRECISION_HINT'); "
                         f"got {list(value)!r}.")
    return dict(value)


def check_seed(name: str, value: Any) -> int:
    """A seed: an integer in [0, 2**32)."""
    if not is_integer(value) or not 0 <= value < SEED_LIMIT:
        raise InputError(f"{name} must be an integer in [0, 2**32); got {_shown(value)}.")
    return int(value)


def check_tap_bytes(name: str, value: Any, *, auto: bool = True) -> Any:
    """Most bytes of exposed tensors per compile: a positive integer, None (no limit) or, where `auto`, ``"auto"``."""
    if value is None or (auto and value == "auto"):
        return value
    if not is_integer(value) or value <= 0:
        forms = "a positive integer, 'auto' or None (no limit)" if auto else "a positive integer or None (no limit)"
        raise InputError(f"{name} must be {forms}; got {_shown(value)}.")
    return int(value)


def tap_bytes_of_mb(flag: str, mb: Any) -> int | None:
    """A command line's MB of exposed tensors per compile as bytes: 0 or less for no limit (None); NaN and
    infinity refused (``bisect-ov MODEL`` and ``bisect-ov capture`` both read ``--max-tap-mb`` through it)."""
    if isinstance(mb, bool) or not isinstance(mb, (int, float)) or not math.isfinite(mb):
        raise InputError(f"{flag} must be a finite number of MB (0 or less: no limit); got {_shown(mb)}.")
    return int(mb * (1 << 20)) if mb > 0 else None


def _shown(value: Any) -> str:
    """The value as a message shows it: its repr, cut, or its type when that is long (an object, a big int)."""
    text = repr(value) if not (isinstance(value, float) and math.isnan(value)) else "nan"
    return text if len(text) <= 60 else f"a {type(value).__name__} ({text[:40]}...)"
