"""The capture file format: constants, header, and the helpers both machines must compute identically.

A capture is written by `bisect_ov.capture.write.capture` on machine A and read by
`bisect_ov.capture.read.load_capture` (played back by `bisect_ov.capture.device.RecordedDevice`) on machine B.
Both sides use this module: the format's constants (`FORMAT`, `SCHEMA_VERSION`, `MODES`, `HEADER`), the
sampling, hashing and summary helpers (`sample_positions`, `sample_array`, `inputs_hash`, `tensor_summary`,
`playback_hash`, `input_names`, `host_info`), the option checks (`check_sample`, `check_seed`), the runtime
graph's header form (`runtime_to_header`, `runtime_from_header`) and the streaming writer (`NpzWriter`,
`header_array`).

The file
--------
A plain ``.npz`` (a zip of ``.npy`` members) that ``np.load(path, allow_pickle=False)`` reads:

* ``__header__``: a 0-d string array (UTF-8 bytes) holding a JSON object: ``format`` (``bisect_ov.capture``),
  ``schema_version``, the bisect_ov, OpenVINO and numpy versions, the model (label,
  `ModelGraph.structure_hash`, `playback_hash`, inputs, outputs), the device (the name asked for, the config,
  the role ``target``, `DeviceInfo.to_dict` with the full device name and the precision really used, the
  plugin's optimization capabilities), the host (OS,
  machine, CPU model and the CPU flags that change int8/bf16/f16 kernels: avx2, avx512f, avx512_vnni,
  avx512_bf16, amx_bf16, amx_int8, avx512_fp16, avx_vnni, those present; no host name), the runtime graph of
  the plain compile (``runtime.layers``, and ``runtime.nodes``: kernel, runtime precision and fusion group
  keyed by the user's friendly names), the taps (key, port, friendly name, op type, tensor names, shape,
  dtype, pass), ``mode``, ``sample``, ``seed``, and ``samples``: per recorded input set its ``inputs_hash``
  (`inputs_hash`: sha256 over names, shapes, dtypes and bytes) and summary statistics of every tap and
  output (min, max, mean, std, absmax over the finite values; nan and inf counts; numel).
* ``input/<i>``: the input arrays, in parameter order (always full).
* ``o/<i>``: the model's outputs from a compile without taps (the plain run).
* ``t/<j>`` (mode ``full``): tap ``j``'s tensor; ``s/<j>`` (mode ``stats``): tap ``j``'s values at
  `sample_positions` (``o/<i>`` then holds the outputs' samples too).
* A merged file (`merge_captures`) holds the same members under ``sample/<n>/`` per input set.

Mode ``stats`` keeps, per tensor, the values at `sample` positions drawn from the flat size by a seeded
generator (`sample_positions`: the same positions on every machine and numpy version for the same size, sample
and seed) plus exact summary statistics: files of a few MB instead of every activation. A stats capture
compared with a live device needs the live side sampled at the same positions (`bisect_ov.capture.device`:
``SampledDevice(make_device(...), capture.sample_size, capture.seed)`` or `sampled_like`). Errors are then
estimated from the sample; exact integer checks need ``mode="full"``.

Assumptions: `sample_positions` depends only on (seed, size, sample) through numpy's fixed PCG64 raw stream, so
every machine and numpy version picks the same positions. Writing goes through `bisect_ov.core.fileio.atomic_file`:
a failed or interrupted write leaves neither a partial file nor a temporary one.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import pathlib
import platform
import zipfile
from contextlib import ExitStack
from typing import Any, Mapping, Sequence

import numpy as np

from bisect_ov.core import checks
from bisect_ov.core.errors import CaptureError, CaptureWriteError, InputError
from bisect_ov.core.fileio import atomic_file
from bisect_ov.core.host import cpu_flags, cpu_model
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.runtime import RuntimeGraph, RuntimeLayer

log = logging.getLogger(__name__)

__all__ = [
    "FORMAT", "SCHEMA_VERSION", "MODES", "CPU_FLAGS", "HEADER", "sample_positions", "sample_array", "inputs_hash",
    "tensor_summary", "host_info", "check_sample", "check_seed", "playback_hash", "weights_hash", "input_names",
    "NpzWriter",
    "header_array", "runtime_to_header", "runtime_from_header",
]

FORMAT = "bisect_ov.capture"
SCHEMA_VERSION = 1
MODES = ("full", "stats")
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "avx512_fp16", "avx_vnni")
HEADER = "__header__"
_CHUNK = 1 << 20  # elements per chunk of the summary statistics


# ------------------------------------------------------------------------------------------------------------
# Sampling, hashing, summaries
# ------------------------------------------------------------------------------------------------------------


def sample_positions(shape: Sequence[int] | int, sample: int, seed: int = 0) -> np.ndarray:
    """Flat positions, sorted, at which a ``stats`` capture keeps a tensor's values.

    Parameters
    ----------
    shape
        The tensor's shape (or its flat size); only the flat size matters.
    sample
        How many positions; every position (``arange(size)``) when the tensor is not larger.
    seed
        Non-negative seed; positions depend only on (seed, size, sample).

    Returns
    -------
    numpy.ndarray
        int64 positions, distinct and sorted (read-only).

    Notes
    -----
    Drawn from `numpy.random.PCG64` seeded by ``SeedSequence([seed, size])`` through ``random_raw`` (whose
    stream numpy keeps fixed across versions and platforms), taken modulo the size, first occurrences kept:
    the same positions on every machine. A live tensor compared against a stats capture must be sampled with
    the same `sample` and `seed` (`sample_array`, `SampledDevice`).
    """
    size = int(np.prod(shape, dtype=np.int64)) if not isinstance(shape, (int, np.integer)) else int(shape)
    return _positions(size, check_sample(sample), check_seed(seed))


@functools.lru_cache(maxsize=256)
def _positions(size: int, sample: int, seed: int) -> np.ndarray:
    if sample >= size:
        positions = np.arange(size, dtype=np.int64)
    else:
        bits = np.random.PCG64(np.random.SeedSequence([seed, size]))
        chosen = np.empty(0, dtype=np.int64)
        while chosen.size < sample:
            raw = bits.random_raw(2 * (sample - chosen.size) + 16)
            drawn = (raw % np.uint64(size)).astype(np.int64)
            merged = np.concatenate([chosen, drawn])
            _, first = np.unique(merged, return_index=True)
            chosen = merged[np.sort(first)][:sample]  # earlier picks first, then new ones in draw order
        positions = np.sort(chosen)
    positions.setflags(write=False)
    return positions


def sample_array(array: np.ndarray, sample: int, seed: int = 0) -> np.ndarray:
    """The values of `array` at `sample_positions(array.shape, sample, seed)`, as a flat array."""
    array = np.asarray(array)
    return np.asarray(array, order="C").reshape(-1)[sample_positions(array.shape, sample, seed)]


def inputs_hash(names: Sequence[str], arrays: Sequence[np.ndarray]) -> str:
    """sha256 (hex) over each input's name, shape, dtype and bytes, in order."""
    if len(names) != len(arrays):
        raise InputError(f"inputs_hash: {len(names)} names for {len(arrays)} arrays.")
    h = hashlib.sha256()
    for name, array in zip(names, arrays):
        a = np.asarray(array, order="C")
        h.update(f"{name}|{list(a.shape)}|{a.dtype.str}|".encode())
        h.update(memoryview(a).cast("B") if a.size else b"")  # type: ignore[arg-type]  # numpy: __buffer__ in 3.12+
    return h.hexdigest()


def tensor_summary(array: np.ndarray) -> dict[str, Any]:
    """min, max, mean, std, absmax over the finite values (None when there are none); nan, inf, numel.

    Computed in float64, in chunks (Chan's parallel update for the variance), so large tensors need no
    float64 copy.
    """
    flat = np.asarray(array).reshape(-1)
    floating = np.issubdtype(flat.dtype, np.floating)
    n = 0
    mean = m2 = 0.0
    low: float | None = None
    high: float | None = None
    nan = inf = 0
    for start in range(0, flat.size, _CHUNK):
        part = flat[start:start + _CHUNK]
        if floating:
            finite = np.isfinite(part)
            if not finite.all():
                nan += int(np.isnan(part).sum())
                inf += int(np.isinf(part).sum())
                part = part[finite]
        if part.size == 0:
            continue
        x = part.astype(np.float64)
        k = x.size
        part_mean = float(x.mean())
        part_m2 = float(((x - part_mean) ** 2).sum())
        delta = part_mean - mean
        total = n + k
        mean += delta * k / total
        m2 += part_m2 + delta * delta * n * k / total
        n = total
        lo, hi = float(x.min()), float(x.max())
        low = lo if low is None else min(low, lo)
        high = hi if high is None else max(high, hi)
    if n == 0:
        return {"min": None, "max": None, "mean": None, "std": None, "absmax": None, "nan": nan, "inf": inf,
                "numel": int(flat.size)}
    assert low is not None and high is not None  # set by every non-empty chunk, and n > 0
    return {"min": low, "max": high, "mean": mean, "std": float(np.sqrt(max(m2 / n, 0.0))),
            "absmax": max(abs(low), abs(high)), "nan": nan, "inf": inf, "numel": int(flat.size)}


def host_info() -> dict[str, Any]:
    """OS, machine, CPU model and the int8/bf16/f16-relevant CPU flags (Linux); never the host name."""
    info: dict[str, Any] = {"system": platform.system(), "release": platform.release(), "machine": platform.machine(),
                            "python": platform.python_version(), "numpy": np.__version__}
    flags = cpu_flags()
    if info["system"] == "Linux" and flags is not None:
        model = cpu_model()
        if model is not None:
            info["cpu_model"] = model
        info["cpu_flags"] = [f for f in CPU_FLAGS if f in flags]
    else:
        info["processor"] = platform.processor()
    return info


def check_sample(sample: Any) -> int:
    """`sample` as an int, or `InputError` unless it is a positive integer."""
    if not checks.is_integer(sample) or sample < 1:
        raise InputError(f"sample must be a positive integer (values kept per tensor in stats mode); got {sample!r}.")
    return int(sample)


def check_seed(seed: Any) -> int:
    """`seed` as an int, or `InputError` unless it is an integer in [0, 2**32) (as `bisect()`'s seed)."""
    return checks.check_seed("seed", seed)


def playback_hash(graph: ModelGraph) -> str:
    """The hash a recorded run is checked against: `ModelGraph.structure_hash`, which ignores the names
    OpenVINO makes up (they differ between the original and the tapped clones bisect compiles)."""
    return graph.structure_hash()


# Values of each constant a weights fingerprint reads: all of a small one, an even stride through a large one
# (a retrained or other checkpoint changes nearly every weight; reading all of a 7B model's would take minutes).
_WEIGHT_SAMPLE = 4096


def weights_hash(model: Any) -> str:
    """A fingerprint of `model`'s constants (the weights): each one's type, shape and `_WEIGHT_SAMPLE` values at
    an even stride, in graph order. Two checkpoints of one architecture differ here where `playback_hash`,
    which reads the structure only, does not; a constant whose values cannot be read (a packed 4-bit type)
    counts by type and shape."""
    h = hashlib.sha256()
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Constant":
            continue
        out = op.output(0)
        h.update(f"{out.get_element_type().get_type_name()}{out.get_partial_shape()}|".encode())
        try:
            flat = np.asarray(op.get_data()).reshape(-1)
        except Exception:  # noqa: BLE001 - a type numpy cannot view: its type and shape stand for it
            continue
        step = max(1, flat.size // _WEIGHT_SAMPLE)
        h.update(np.asarray(flat[::step][:_WEIGHT_SAMPLE], order="C").tobytes())
    return h.hexdigest()[:16]


def input_names(model: Any) -> list[str]:
    """A stable name per parameter of an `ov.Model`: its first tensor name, its user-given friendly name, or its position."""
    names = []
    for i, param in enumerate(model.get_parameters()):
        tensor_names = sorted(param.output(0).get_names())
        friendly = param.get_friendly_name()
        names.append(tensor_names[0] if tensor_names else friendly if friendly != param.get_name() else f"#{i}")
    return names


# ------------------------------------------------------------------------------------------------------------
# Writing
# ------------------------------------------------------------------------------------------------------------


class NpzWriter:
    """Streams arrays into a temporary ``.npz`` beside `path`, renamed over `path` only on success.

    Use as a context manager; `add` writes one member at a time, so memory holds one array. On any failure
    (an exception in the block, a full disk while closing, SIGTERM) the temporary file is removed and an
    existing file at `path` is left as it was. Failed writes raise `CaptureWriteError` (also an `OSError`).
    """

    def __init__(self, path: pathlib.Path):
        self.path = pathlib.Path(path)
        self._stack = ExitStack()
        self._file = self._stack.enter_context(atomic_file(self.path, "w+b", what="the capture ", error=CaptureWriteError))
        try:
            self._zip = zipfile.ZipFile(self._file, "w", zipfile.ZIP_STORED, allowZip64=True)
        except BaseException:
            self._stack.close()
            raise
        self.names: set[str] = set()
        self.nbytes = 0

    def add(self, name: str, array: np.ndarray) -> None:
        if name in self.names:
            raise CaptureError(f"Internal error: the capture member '{name}' is written twice.")
        self.names.add(name)
        array = np.asanyarray(array)
        with self._zip.open(name + ".npy", "w", force_zip64=True) as member:
            np.lib.format.write_array(member, array, allow_pickle=False)
        self.nbytes += array.nbytes

    def __enter__(self) -> "NpzWriter":
        return self

    def __exit__(self, kind, value, tb) -> bool:
        if kind is None:
            try:
                self._zip.close()  # writes the central directory: may fail on a full disk
            except BaseException as err:
                # The temporary file is removed and the error raised as the writer's own.
                if not self._stack.__exit__(type(err), err, err.__traceback__):
                    raise
                return False
            return bool(self._stack.__exit__(None, None, None))
        try:
            self._zip.close()
        except Exception as err:  # the first error is the one to report; the file is discarded anyway
            log.debug("Closing the discarded capture file failed too: %s", err)
        return bool(self._stack.__exit__(kind, value, tb))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def header_array(header: dict[str, Any]) -> np.ndarray:
    """The header as the 0-d array stored under `HEADER`."""
    # UTF-8 bytes ('S' dtype): a quarter of the size of numpy's UCS-4 str arrays.
    return np.array(json.dumps(header, default=_json_default, allow_nan=False).encode("utf-8"))


def runtime_to_header(runtime: RuntimeGraph) -> dict[str, Any]:
    """The runtime graph as the header stores it: every layer, and the compute layers by the user's op names."""
    nodes: dict[str, dict[str, Any]] = {}
    for name, layer in runtime.by_original.items():
        if layer.is_compute:
            nodes[name] = {"layer": layer.name, "layer_type": layer.layer_type, "kernel": layer.primitive_type,
                           "precision": layer.runtime_precision, "fused": list(layer.original_names)}
    return {"layers": [layer.to_dict() for layer in runtime.layers], "nodes": nodes}


def runtime_from_header(data: Mapping[str, Any] | None) -> RuntimeGraph:
    """The `RuntimeGraph` of a header's ``runtime`` entry (`runtime_to_header`)."""
    layers: list[RuntimeLayer] = []
    by_original: dict[str, RuntimeLayer] = {}
    for d in (data or {}).get("layers", []):
        layer = RuntimeLayer(
            name=str(d.get("layer", "")), layer_type=str(d.get("layer_type", "")),
            original_names=tuple(d.get("fused", ())), runtime_precision=str(d.get("precision", "")),
            output_precisions=tuple(d.get("output_precisions", ())), primitive_type=str(d.get("kernel", "")),
            exec_order=int(d.get("exec_order", -1)),
        )
        layers.append(layer)
        for name in layer.original_names:
            by_original.setdefault(name, layer)
    return RuntimeGraph(tuple(layers), by_original)
