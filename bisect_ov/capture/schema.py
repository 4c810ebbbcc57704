"""A capture file is untrusted input: its header is checked against the format's schema, and every member's
declared size against the bytes it really holds, before anything reads an array.

`check_header` checks every header field a reader relies on, with its type and its relation to the others
(one summary per recorded tensor and output in every sample, at least one output, shapes of non-negative
integers); `check_members` checks that every member a sample needs is there and that each ``.npy`` member's
header (dtype and shape) asks for no more bytes than the member holds, so a member claiming 10**12 values
with 64 bytes of data is refused by name instead of numpy allocating terabytes for it; in mode ``full`` the
recorded shapes must also be the members' shapes. Both raise `CaptureError` saying what is wrong.

Assumptions: the members are stored, as `bisect_ov.capture.format.NpzWriter` writes them, or deflated (numpy's
``savez_compressed``): the zip directory's uncompressed size is what a member holds. Reading a member's ``.npy``
header reads a few hundred bytes.
"""

from __future__ import annotations

import math
import pathlib
import zipfile
from typing import Any

import numpy as np

from bisect_ov.core import codec
from bisect_ov.core.errors import CaptureError, InputError
from bisect_ov.core.records import DeviceInfo

__all__ = ["check_header", "check_members", "SUMMARY_KEYS"]

SUMMARY_KEYS = ("min", "max", "mean", "std", "absmax", "nan", "inf", "numel")  # `format.tensor_summary`
_COUNTS = ("nan", "inf", "numel")
_MAX_DIM = 2 ** 62  # a dimension beyond int64 is no tensor's


class _Bad(Exception):
    """What is malformed, as a phrase for the message."""


def check_header(path: pathlib.Path, header: dict[str, Any]) -> None:
    """Every header field a reader relies on, with its type: a malformed header is refused here, by name."""
    try:
        _header(header)
    except _Bad as what:
        raise CaptureError(f"The capture '{path}' is corrupted: its header is malformed ({what}). Record the capture "
                           "again.") from None


def _header(header: dict[str, Any]) -> None:
    device = header["device"]
    if not isinstance(device, dict) or not isinstance(device.get("spec"), str) or not isinstance(device.get("info"), dict):
        raise _Bad(f"'device' is {_short(device)}; it must hold the device name ('spec') and what it ran ('info')")
    try:
        codec.from_dict(DeviceInfo, device["info"], where="device.info")
    except InputError as err:
        raise _Bad(str(err).rstrip(".")) from None
    model = header["model"]
    if not isinstance(model, dict) or not all(isinstance(model.get(k), list) for k in ("inputs", "outputs")):
        raise _Bad("'model' lacks its inputs and outputs")
    for k in ("label", "structure_hash", "playback_hash"):
        if not isinstance(model.get(k), str):
            raise _Bad(f"model.{k} is missing")
    if not model["outputs"]:
        raise _Bad("model.outputs is empty; a recorded run has at least one output")
    for what, entries in (("model.inputs", model["inputs"]), ("model.outputs", model["outputs"])):
        for i, entry in enumerate(entries):
            _entry(f"{what}[{i}]", entry)
    taps = header["taps"]
    if not isinstance(taps, list):
        raise _Bad("'taps' is not a list of recorded tensors (key, port)")
    for j, t in enumerate(taps):
        if not isinstance(t, dict) or not isinstance(t.get("key"), str) or not _count(t.get("port")):
            raise _Bad(f"taps[{j}] is not a recorded tensor (key, port)")
        _entry(f"taps[{j}]", t, name=False)
    for k in ("sample", "seed"):
        if not _count(header[k]):
            raise _Bad(f"{k} is {_short(header[k])}, not a non-negative integer")
    samples = header["samples"]
    if not isinstance(samples, list) or not samples:
        raise _Bad(f"'samples' is {_short(samples)}; it must list at least one recorded input set")
    for n, s in enumerate(samples):
        if not isinstance(s, dict) or not isinstance(s.get("inputs_hash"), str):
            raise _Bad(f"samples[{n}] has no inputs_hash")
        if not isinstance(s.get("prefix", ""), str):
            raise _Bad(f"samples[{n}].prefix is not a string")
        for key, count, of in (("tap_stats", len(taps), "recorded tensor"), ("output_stats", len(model["outputs"]),
                                                                                "output")):
            stats = s.get(key)
            if not isinstance(stats, list) or len(stats) != count:
                raise _Bad(f"samples[{n}].{key} is {_short(stats)}; it must hold one summary per {of} ({count})")
            for j, summary in enumerate(stats):
                _summary(f"samples[{n}].{key}[{j}]", summary)


def _entry(where: str, entry: Any, *, name: bool = True) -> None:
    """An input, output or tap entry: its shape (non-negative integers), dtype and, for inputs and outputs, name."""
    if not isinstance(entry, dict):
        raise _Bad(f"{where} is {_short(entry)}, not an object")
    if name and not isinstance(entry.get("name"), str):
        raise _Bad(f"{where}.name is missing")
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(_count(d) and d < _MAX_DIM for d in shape):
        raise _Bad(f"{where}.shape is {_short(shape)}, not a list of non-negative integers")
    if not isinstance(entry.get("dtype"), str):
        raise _Bad(f"{where}.dtype is missing")


def _summary(where: str, summary: Any) -> None:
    if not isinstance(summary, dict) or any(k not in summary for k in SUMMARY_KEYS):
        raise _Bad(f"{where} is {_short(summary)}; a summary holds {list(SUMMARY_KEYS)}")
    for k in SUMMARY_KEYS:
        value = summary[k]
        if k in _COUNTS:
            if not _count(value):
                raise _Bad(f"{where}.{k} is {_short(value)}, not a non-negative integer")
        elif value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                    or not math.isfinite(float(value))):
            raise _Bad(f"{where}.{k} is {_short(value)}, not a finite number or null")


def check_members(path: pathlib.Path, data: Any, header: dict[str, Any], members: list[list[str]]) -> None:
    """Every member of every sample (`members[n]`: sample n's names without prefix) is there, and holds the bytes
    its ``.npy`` header declares (in mode ``full``, with the recorded shape)."""
    files = set(data.files)
    shapes = _recorded_shapes(header) if header["mode"] == "full" else {}
    for n, s in enumerate(header["samples"]):
        prefix = s.get("prefix", "")
        missing = [prefix + m for m in members[n] if prefix + m not in files]
        if missing:
            raise CaptureError(
                f"The capture '{path}' is incomplete or corrupted: {len(missing)} member(s) missing, e.g. "
                f"{missing[:3]}."
            )
        for m in members[n]:
            # A merged file's samples may have other shapes than the first, which the header's entries describe.
            _member(path, data.zip, prefix + m, shapes.get(m) if not prefix else None)


def _recorded_shapes(header: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    model = header["model"]
    shapes = {f"input/{i}": tuple(e["shape"]) for i, e in enumerate(model["inputs"])}
    shapes.update({f"o/{i}": tuple(e["shape"]) for i, e in enumerate(model["outputs"])})
    shapes.update({f"t/{j}": tuple(t["shape"]) for j, t in enumerate(header["taps"])})
    return shapes


def _member(path: pathlib.Path, archive: Any, name: str, shape: tuple[int, ...] | None) -> None:
    try:
        info = archive.getinfo(name + ".npy")
        with archive.open(info) as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            declared, _, dtype = read(f, max_header_size=10_000)
            start = f.tell()
    except zipfile.BadZipFile:
        # A small member is read to its end with its header, so its CRC is checked here: it is corrupted, and
        # reading it says so (`Capture.read`). Nothing was allocated for it: numpy reads that far first too.
        return
    except (KeyError, ValueError, OSError, EOFError, NotImplementedError) as err:  # NotImplementedError: an unknown compression
        raise CaptureError(f"The capture '{path}' is corrupted: the header of member '{name}' cannot be read "
                           f"({err}).") from err
    count = math.prod(int(d) for d in declared)
    needed = count * dtype.itemsize
    held = info.file_size - start
    if dtype.hasobject or needed > held:
        what = "Python objects" if dtype.hasobject else f"{needed:,} bytes"
        raise CaptureError(
            f"The capture '{path}' is corrupted: member '{name}' declares {count:,} {dtype} value(s) of shape "
            f"{list(declared)} ({what}) but holds {max(held, 0):,} bytes. Copy the file again, or record it again."
        )
    if shape is not None and tuple(declared) != shape:
        raise CaptureError(f"The capture '{path}' is corrupted: member '{name}' has shape {list(declared)}, but the "
                           f"header records {list(shape)}.")


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
