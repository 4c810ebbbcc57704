"""JSON form of frozen dataclass records, driven by their fields: one codec for every record bisect_ov saves.

`to_dict(record)` gives plain JSON values: nested records become objects, tuples lists, and non-finite
floats the strings ``"Infinity"``, ``"-Infinity"`` and ``"NaN"``, as the protobuf JSON mapping writes them: JSON
has no such numbers (strict parsers and JavaScript's ``JSON.parse`` refuse the bare ``NaN`` tokens Python's
`json` writes by default), and those strings are what JavaScript's ``Number()`` and Python's ``float()`` read.
`from_dict(cls, data)` reads them back, with the spelling of files saved before (``"inf"``, ``"-inf"``,
``"nan"``) and the bare tokens (which `json.loads` reads as floats), checking each value against the field's
type annotation, and refuses anything else with an `InputError` that names the field
(``nodes[3].error: expected a number, got 'abc'``); integers must fit 64 bits and numbers a float (a file holding ``10**400`` is
refused, not read to overflow later).

Field options (``dataclasses.field(metadata=...)``): ``{"json": "name"}`` writes the field under another key;
``{"json": False}`` leaves it out (kept tensors, caches). A class attribute ``JSON_PROPERTIES`` names derived
properties written for readers of the file and ignored when reading.

Assumptions: records are dataclasses whose annotations resolve with `typing.get_type_hints` in their
module; the types understood are dataclasses, ``X | None``, ``bool``, ``int``, ``float``, ``str``,
``tuple[X, ...]``, ``tuple[X, Y]``, ``list[X]``, ``dict[str, X]`` and ``Any``. Keys a record does not know are
ignored (files of a later minor change still load); a missing key without a default is refused. Pure
standard library: no numpy arrays, no OpenVINO.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from typing import Any, TypeVar, Union

from bisect_ov.core.errors import InputError

__all__ = ["to_dict", "from_dict", "encode", "decode_float", "MAX_DEPTH"]

T = TypeVar("T")
MAX_DEPTH = 64  # deeper than any record: a file nested deeper is not one of ours
# Written: the protobuf JSON mapping's spelling. Read: that, and the spelling of reports of schema 3 and before.
_WRITTEN = {"inf": "Infinity", "-inf": "-Infinity", "nan": "NaN"}
_SPECIAL = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan, "inf": math.inf, "-inf": -math.inf,
            "nan": math.nan}
_INT64 = 2 ** 63


def to_dict(record: Any) -> dict[str, Any]:
    """The JSON-ready dict of a dataclass record (see the module docstring)."""
    if not dataclasses.is_dataclass(record) or isinstance(record, type):
        raise TypeError(f"to_dict takes a dataclass instance, not {type(record).__name__}")
    out: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        key = f.metadata.get("json", f.name)
        if key is False:
            continue
        out[key] = encode(getattr(record, f.name))
    for name in getattr(type(record), "JSON_PROPERTIES", ()):
        out[name] = encode(getattr(record, name))
    return out


def encode(value: Any) -> Any:
    """A value as JSON: records as dicts, tuples as lists, non-finite floats as strings, numpy scalars as numbers."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_dict(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return _WRITTEN["nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if hasattr(value, "item") and hasattr(value, "dtype"):  # a numpy scalar
        return encode(value.item())
    return value


def from_dict(cls: type[T], data: Any, *, where: str = "") -> T:
    """Build record `cls` from its JSON dict, checking every field.

    Raises
    ------
    InputError
        A missing key, a value of the wrong type, or nesting deeper than `MAX_DEPTH`; the message names the
        field.
    """
    return _decode(cls, data, where or cls.__name__, 0)


def decode_float(value: Any, where: str = "value") -> float:
    """A JSON number or one of the strings ``Infinity``, ``-Infinity``, ``NaN`` (or ``inf``, ``-inf``, ``nan``) as a float."""
    return _decode(float, value, where, 0)


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _decode(hint: Any, value: Any, where: str, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise InputError(f"{where}: nested deeper than {MAX_DEPTH} levels; this is not a bisect_ov record.")
    origin = typing.get_origin(hint)
    if hint is Any:
        _check_depth(value, where, depth)
        return value
    if origin is Union or (hasattr(types, "UnionType") and isinstance(hint, types.UnionType)):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        concrete = [o for o in options if o is not type(None)]
        if len(concrete) == 1:
            return _decode(concrete[0], value, where, depth)
        errors = []
        for option in concrete:
            try:
                return _decode(option, value, where, depth)
            except InputError as err:
                errors.append(str(err))
        raise InputError(errors[0] if errors else f"{where}: unexpected {value!r}")
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _record(hint, value, where, depth)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _wrong(where, "true or false", value)
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if -_INT64 <= value < _INT64:
                return value
            raise _wrong(where, "an integer of 64 bits", value)
        raise _wrong(where, "an integer", value)
    if hint is float:
        if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool) and _fits_float(value)):
            return value  # an integer stays one: 3 and 3.0 are the same number
        if isinstance(value, str) and value in _SPECIAL:
            return _SPECIAL[value]
        raise _wrong(where, 'a number (or "Infinity", "-Infinity", "NaN")', value)
    if hint is str:
        if isinstance(value, str):
            return value
        raise _wrong(where, "a string", value)
    if origin in (tuple, list):
        if not isinstance(value, list):
            raise _wrong(where, "a list", value)
        args = typing.get_args(hint)
        if origin is tuple and args and (len(args) != 2 or args[1] is not Ellipsis):
            if len(value) != len(args):
                raise InputError(f"{where}: expected {len(args)} values, got {len(value)}.")
            return tuple(_decode(a, v, f"{where}[{i}]", depth + 1) for i, (a, v) in enumerate(zip(args, value)))
        item = args[0] if args else Any
        decoded = [_decode(item, v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
        return tuple(decoded) if origin is tuple else decoded
    if origin is dict:
        if not isinstance(value, dict):
            raise _wrong(where, "an object", value)
        args = typing.get_args(hint)
        item = args[1] if len(args) == 2 else Any
        return {k: _decode(item, v, f"{where}.{k}", depth + 1) for k, v in value.items()}
    raise TypeError(f"{where}: the codec does not handle the type {hint!r}")  # a record's own defect


def _record(cls: type, value: Any, where: str, depth: int) -> Any:
    if not isinstance(value, dict):
        raise _wrong(where, f"an object ({cls.__name__})", value)
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        key = f.metadata.get("json", f.name)
        if key is False or not f.init:
            continue
        if key not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise InputError(f"{where}: the key '{key}' is missing.")
            continue
        kwargs[f.name] = _decode(hints[f.name], value[key], f"{where}.{key}", depth + 1)
    return cls(**kwargs)


def _fits_float(value: int) -> bool:
    """Whether an integer is a number a float holds (10**400 is not: every use of it as one would overflow)."""
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _check_depth(value: Any, where: str, depth: int) -> None:
    """Untyped values (free-form dicts) are walked only to bound their depth."""
    if depth > MAX_DEPTH:
        raise InputError(f"{where}: nested deeper than {MAX_DEPTH} levels; this is not a bisect_ov record.")
    if isinstance(value, dict):
        for v in value.values():
            _check_depth(v, where, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _check_depth(v, where, depth + 1)


def _wrong(where: str, expected: str, value: Any) -> InputError:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** 30:
        shown = f"an integer of {len(str(abs(value)))} digits"
    else:
        shown = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return InputError(f"{where}: expected {expected}, got {shown[:80]}.")
