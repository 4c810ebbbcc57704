"""Recorded runs, the reading side: open, check and merge capture files written by `bisect_ov.capture.write.capture`.

`load_capture` opens a capture (checking format, schema version, header and members) as a `Capture`, which
reads the recorded inputs, outputs, tensors and statistics of one recorded input set at a time;
`merge_captures` combines captures of one model on one device, recorded with different inputs, into one file.
The file format is described in `bisect_ov.capture.format`.

Assumptions: the format constants (`FORMAT`, `SCHEMA_VERSION`, `MODES`, `HEADER`) and the writer
(`NpzWriter`, `header_array`) come from `bisect_ov.capture.format`. A file is checked when it is opened
(`load_capture`, through `bisect_ov.capture.schema`): every header field a reader relies on is there with the
right type, and every member holds the bytes its header declares, so a malformed file is refused with a
`CaptureError` instead of failing (or allocating what it claims) later. Files are read with ``np.load(path, allow_pickle=False)``;
reads of one open file are serialized by a
lock shared between the `Capture.select` views of it.
"""

from __future__ import annotations

import json
import os
import pathlib
import threading
import zipfile
import zlib
from typing import Any, Iterable

import numpy as np

from bisect_ov.capture.format import FORMAT, HEADER, MODES, SCHEMA_VERSION, NpzWriter, header_array, runtime_from_header
from bisect_ov.capture.schema import check_header, check_members
from bisect_ov.core import codec
from bisect_ov.core.errors import CaptureError
from bisect_ov.core.fileio import refuse_overlaps
from bisect_ov.core.records import DeviceInfo
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap

__all__ = ["Capture", "load_capture", "merge_captures"]

# NotImplementedError: zipfile's answer to a compression method or flag it does not know, which one flipped byte in
# the zip directory can make.
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, KeyError, RuntimeError, NotImplementedError)


# ------------------------------------------------------------------------------------------------------------
# Reading
# ------------------------------------------------------------------------------------------------------------


class Capture:
    """A capture file opened for reading (see the module docstring); `load_capture` makes one.

    Attributes
    ----------
    path : pathlib.Path
    header : dict
        The JSON header.
    mode : str
        ``full`` or ``stats``.
    taps : list[Tap]
        The recorded tensors, in topological order.
    samples : list[dict]
        One entry per recorded input set (several after `merge_captures`): ``index``, ``inputs_hash``,
        ``source``. Reads (`inputs`, `outputs`, `tensor`) use the `current` one.
    """

    def __init__(self, path: pathlib.Path, data: Any, header: dict[str, Any], *, current: int = 0,
                 _lock: threading.Lock | None = None):
        self.path = path
        self._data = data
        self.header = header
        self.current = current
        self._lock = _lock or threading.Lock()
        self._tap_index = {Tap(t["key"], int(t["port"])): i for i, t in enumerate(header["taps"])}
        # A node whose name OpenVINO made up is found by its place in the graph: the name changes with each load.
        self._made_up = {(int(t["at"]), int(t["port"])): i for i, t in enumerate(header["taps"]) if t.get("made_up")}

    # ----- what it holds ----------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return self.header["mode"]

    @property
    def sample_size(self) -> int:
        return int(self.header["sample"])

    @property
    def seed(self) -> int:
        return int(self.header["seed"])

    @property
    def taps(self) -> list[Tap]:
        return list(self._tap_index)

    @property
    def samples(self) -> list[dict[str, Any]]:
        return [{"index": s["index"], "inputs_hash": s["inputs_hash"], "source": s.get("source", "")}
                for s in self.header["samples"]]

    @property
    def structure_hash(self) -> str:
        return self.header["model"]["structure_hash"]

    @property
    def playback_hash(self) -> str:
        """The hash `RecordedDevice` checks models against (`playback_hash`)."""
        return self.header["model"]["playback_hash"]

    @property
    def model_label(self) -> str:
        return self.header["model"]["label"]

    @property
    def input_names(self) -> list[str]:
        return [i["name"] for i in self.header["model"]["inputs"]]

    @property
    def inputs_hash(self) -> str:
        return self.header["samples"][self.current]["inputs_hash"]

    @property
    def device_info(self) -> DeviceInfo:
        """What the recording device ran with (its own name, not ``capture:...``)."""
        return codec.from_dict(DeviceInfo, self.header["device"]["info"])

    @property
    def runtime(self) -> RuntimeGraph:
        return runtime_from_header(self.header.get("runtime"))

    @property
    def inputs(self) -> list[np.ndarray]:
        """The recorded input arrays of the current sample, in parameter order."""
        return [self.read(f"input/{i}") for i in range(len(self.header["model"]["inputs"]))]

    @property
    def outputs(self) -> list[np.ndarray]:
        """The plain run's outputs (samples of them in ``stats`` mode)."""
        return [self.read(f"o/{i}") for i in range(len(self.header["model"]["outputs"]))]

    def has(self, key: str, port: int = 0) -> bool:
        return Tap(key, port) in self._tap_index

    def locate(self, node: Any, port: int = 0) -> int | None:
        """Position among the recorded taps of output `port` of `node` (a `ModelGraph` node of the model played
        back, whose structure is the recorded one): by its key, or by its place for a name OpenVINO made up."""
        found = self._tap_index.get(Tap(node.key, int(port)))
        return found if found is not None or not node.auto_named else self._made_up.get((node.index, int(port)))

    @property
    def tap_signature(self) -> list[tuple[Any, int]]:
        """The recorded tensors as (key, port), a made-up name as its place: equal for two loads of one model."""
        return [(f"#{t['at']}" if t.get("made_up") else t["key"], t["port"]) for t in self.header["taps"]]

    def tap_info(self, key: str, port: int = 0) -> dict[str, Any]:
        return self.header["taps"][self.index_of(key, port)]

    def tensor(self, key: str, port: int = 0) -> np.ndarray:
        """The recorded tensor (mode ``full``) or its sample (mode ``stats``) of output `port` of node `key`."""
        return self.read(self.member(self.index_of(key, port)))

    def stats(self, key: str, port: int = 0) -> dict[str, Any]:
        """Summary statistics of the full tensor (min, max, mean, std, absmax, nan, inf, numel)."""
        return self.header["samples"][self.current]["tap_stats"][self.index_of(key, port)]

    def select(self, sample: int) -> "Capture":
        """The same file, reading the recorded input set number `sample`."""
        if not 0 <= int(sample) < len(self.header["samples"]):
            raise CaptureError(f"The capture '{self.path.name}' holds {len(self.header['samples'])} sample(s) "
                               f"(0..{len(self.header['samples']) - 1}); got sample {sample}.")
        return Capture(self.path, self._data, self.header, current=int(sample), _lock=self._lock)

    def find_sample(self, digest: str) -> int | None:
        """Index of the sample recorded with inputs of this `inputs_hash`, or None."""
        for i, s in enumerate(self.header["samples"]):
            if s["inputs_hash"] == digest:
                return i
        return None

    def close(self) -> None:
        self._data.close()

    def __enter__(self) -> "Capture":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        dev = self.header["device"]
        return (f"Capture({self.path.name!r}: {self.model_label} on {dev['spec']} "
                f"({dev['info'].get('full_name') or dev['info'].get('device')}), {self.mode}, "
                f"{len(self._tap_index)} tensors, {len(self.header['samples'])} sample(s))")

    # ----- members of the file, for the device and merging --------------------------------------------
    def index_of(self, key: str, port: int = 0) -> int:
        """Position of the tensor of output `port` of node `key` among the recorded taps."""
        try:
            return self._tap_index[Tap(key, int(port))]
        except KeyError:
            raise CaptureError(
                f"The capture '{self.path.name}' holds no tensor for '{Tap(key, int(port))}' "
                f"({len(self._tap_index)} recorded tensors)."
            ) from None

    def member(self, index: int) -> str:
        """The member name (without a sample prefix) of recorded tap number `index`."""
        return f"{'s' if self.mode == 'stats' else 't'}/{index}"

    def _prefix(self, sample: int | None = None) -> str:
        return self.header["samples"][self.current if sample is None else sample].get("prefix", "")

    def read(self, name: str, sample: int | None = None) -> np.ndarray:
        """The array of member `name` (``input/0``, ``o/0``, ``t/3``) of the current sample (or of `sample`)."""
        full = self._prefix(sample) + name
        with self._lock:
            try:
                return self._data[full]
            except KeyError:
                raise CaptureError(f"The capture '{self.path}' is incomplete: it lacks '{full}'.") from None
            except _READ_ERRORS as err:
                raise CaptureError(f"The capture '{self.path}' is corrupted: reading '{full}' failed ({err}).") from err

    def members(self, sample: int) -> list[str]:
        """Every member name of one sample, without its prefix."""
        model = self.header["model"]
        kind = "s" if self.mode == "stats" else "t"
        return ([f"input/{i}" for i in range(len(model["inputs"]))] + [f"o/{i}" for i in range(len(model["outputs"]))]
                + [f"{kind}/{i}" for i in range(len(self.header["taps"]))])


def load_capture(path: str | os.PathLike | Capture) -> Capture:
    """Open a capture written by `capture` or `merge_captures`.

    Raises
    ------
    CaptureError
        Missing file; not an ``.npz``, truncated or corrupted; no or unreadable header; a schema newer than
        this bisect_ov reads; members missing.
    """
    if isinstance(path, Capture):
        return path
    path = pathlib.Path(path)
    if not path.exists():
        raise CaptureError(f"Capture file not found: '{path}'. The current directory is '{os.getcwd()}'.")
    if not path.is_file():
        raise CaptureError(f"'{path}' is not a file: pass the .npz written by bisect_ov.capture.")
    try:
        data = np.load(path, allow_pickle=False)
    except _READ_ERRORS as err:
        raise CaptureError(
            f"'{path}' is not a readable capture: not an .npz file, or truncated or corrupted ({err}). "
            "Copy the file again, or record it again with bisect_ov.capture."
        ) from err
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise CaptureError(f"'{path}' holds a single .npy array, not a capture (.npz written by bisect_ov.capture).")
    try:
        header = _read_header(path, data)
        try:
            probe = Capture(path, data, header)
            check_members(path, data, header, [probe.members(n) for n in range(len(header["samples"]))])
        except CaptureError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
            raise CaptureError(f"The capture '{path}' is corrupted: its header is malformed "
                               f"({type(err).__name__}: {err}).") from err
    except BaseException:
        data.close()
        raise
    return Capture(path, data, header)


def _read_header(path: pathlib.Path, data: Any) -> dict[str, Any]:
    if HEADER not in data.files:
        raise CaptureError(f"'{path}' has no {HEADER}: it is an .npz file, but not a capture written by bisect_ov.")
    try:
        raw = data[HEADER]
    except _READ_ERRORS as err:
        raise CaptureError(f"The capture '{path}' is corrupted: its header cannot be read ({err}).") from err
    try:
        if raw.shape != () or raw.dtype.kind not in "SU":
            raise ValueError(f"a {raw.dtype} array of shape {raw.shape}, not a string")
        text = raw[()]
        header = json.loads(text.decode("utf-8") if isinstance(text, bytes) else str(text))
    except (ValueError, TypeError) as err:
        raise CaptureError(f"The capture '{path}' is corrupted: its header is not valid JSON ({err}).") from err
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CaptureError(f"'{path}' is not a bisect_ov capture: its header has no format '{FORMAT}'.")
    version = header.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise CaptureError(f"The capture '{path}' is corrupted: its schema_version is {version!r}.")
    if version > SCHEMA_VERSION:
        raise CaptureError(
            f"The capture '{path}' was written by a newer bisect_ov ({header.get('bisect_ov_version', '?')}, schema "
            f"version {version}); this one reads schema versions up to {SCHEMA_VERSION}. Upgrade bisect_ov."
        )
    missing = [k for k in ("model", "device", "taps", "mode", "sample", "seed", "samples") if k not in header]
    if missing:
        raise CaptureError(f"The capture '{path}' is corrupted: its header lacks {missing}.")
    if header["mode"] not in MODES:
        raise CaptureError(f"The capture '{path}' has an unknown mode {header['mode']!r}; this bisect_ov reads {list(MODES)}.")
    check_header(path, header)
    return header


# ------------------------------------------------------------------------------------------------------------
# Merging
# ------------------------------------------------------------------------------------------------------------


def merge_captures(paths: Iterable[str | os.PathLike | Capture], out: str | os.PathLike) -> pathlib.Path:
    """Merge captures of one model on one device, recorded with different inputs, into one file.

    Every recorded input set becomes ``sample/<n>/...`` members and an entry of the header's ``samples``
    (its ``inputs_hash``, source file and statistics); `load_capture(out).samples` lists them, and
    `RecordedDevice` plays back the sample whose inputs it is given. Merged files can be merged again.

    Raises
    ------
    CaptureError
        No captures; captures of different models (structure hash, weights), devices (name, full name, precision),
        OpenVINO versions, modes, sample sizes or seeds, or recorded tensors; the same inputs twice.
    """
    captures = [load_capture(p) for p in paths]
    if not captures:
        raise CaptureError("merge_captures needs at least one capture.")
    first = captures[0]
    checks = {
        "model structure hash": lambda c: c.playback_hash,
        "model weights": lambda c: c.header["model"].get("weights_hash"),
        "device": lambda c: c.header["device"]["spec"],
        "device full name": lambda c: c.device_info.full_name,
        "precision": lambda c: c.device_info.precision,
        "OpenVINO version": lambda c: c.header.get("openvino_version"),
        "mode": lambda c: c.mode,
        "sample size": lambda c: c.sample_size if c.mode == "stats" else None,
        "seed": lambda c: c.seed if c.mode == "stats" else None,
        "recorded tensors": lambda c: c.tap_signature,
    }
    for other in captures[1:]:
        for what, get in checks.items():
            a, b = get(first), get(other)
            if a != b:
                shown = (f"{len(a)} vs {len(b)} tensors" if what == "recorded tensors" else f"{a!r} vs {b!r}")
                raise CaptureError(
                    f"Cannot merge '{first.path.name}' and '{other.path.name}': their {what} "
                    f"{'differ' if what.endswith('s') else 'differs'} ({shown}). "
                    "Only captures of the same model on the same device, OpenVINO version and mode merge."
                )
    seen: dict[str, str] = {}
    entries = []
    for cap in captures:
        for n, s in enumerate(cap.header["samples"]):
            where = f"'{cap.path.name}' sample {n}"
            if s["inputs_hash"] in seen:
                raise CaptureError(f"Cannot merge: {where} has the same inputs as {seen[s['inputs_hash']]}.")
            seen[s["inputs_hash"]] = where
            entries.append((cap, n, s))
    out = pathlib.Path(out)
    refuse_overlaps([("the merged capture", out)], [(f"the capture '{c.path.name}'", c.path) for c in captures],
                    error=CaptureError)
    header = json.loads(json.dumps(first.header))
    header["samples"] = []
    header["merged_from"] = [c.path.name for c in captures]
    with NpzWriter(out) as writer:
        for m, (cap, n, s) in enumerate(entries):
            prefix = f"sample/{m}/"
            for member in cap.members(n):
                writer.add(prefix + member, cap.read(member, n))
            entry = {k: v for k, v in s.items() if k not in ("index", "prefix")}
            entry.update({"index": m, "prefix": prefix, "source": s.get("source") or cap.path.name})
            if cap is not first:
                entry["host"] = cap.header.get("host", {})
            header["samples"].append(entry)
        header["inputs_hash"] = header["samples"][0]["inputs_hash"]
        header["stored_bytes"] = writer.nbytes
        writer.add(HEADER, header_array(header))
    return out
