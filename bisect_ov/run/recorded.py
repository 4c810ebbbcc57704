"""Recorded runs, the on-disk side: capture a model's tensors on one machine into one portable file.

One process cannot hold two CPU generations. `capture` runs a model on a device of machine A, exposes every
candidate tensor and writes everything into ONE portable ``.npz`` file; on machine B,
`bisect_ov.run.playback.RecordedDevice` plays that run back as the ``ref=`` or ``target=`` of `bisect()`:

>>> capture("model.xml", "CPU", path="epyc.npz")                             # doctest: +SKIP  (machine A)
>>> bisect("model.xml", ref=RecordedDevice("epyc.npz"), target="CPU")         # doctest: +SKIP  (machine B)

This module writes and reads the file (`capture`, `Capture`, `load_capture`, `merge_captures`) and holds the
helpers both machines must compute identically (`sample_positions`, `sample_array`, `inputs_hash`,
`tensor_summary`, `playback_hash`, `host_info`). Playing a capture back as a device lives in
`bisect_ov.run.playback`, which imports from here; this module never imports it.

What is recorded: the plain run's outputs (no taps), then the tensors that leave one of the device's fusion
groups (read from the plain compile's runtime graph, as `bisect()`'s default strategy picks them), in
compiles that keep the plain run's fusions, then every other candidate tensor (fusions broken, as with
``strategy="full"``); each tensor once, from the first of those passes that holds it (``taps[j]["pass"]``).
Measured on ResNet-50 in bf16, the fusion pass makes the recorded run give the same per-node errors as the
live device under the default strategy; taken from the full pass alone they were off by -19% to +30%.

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
compared with a live device needs the live side sampled at the same positions (`bisect_ov.run.playback`:
``SampledDevice(make_device(...), capture.sample_size, capture.seed)`` or `sampled_like`). Errors are then
estimated from the sample; exact integer checks need ``mode="full"``.

Devices: `capture` builds its device with ``make_device(device, config, role="target")``, so it runs as asked:
plain ``CPU`` is the plugin's default (bf16 on CPUs with AVX512_BF16 or AMX); write ``CPU:f32`` for an f32
run. Recording in the ``ref`` role would force f32 and hide exactly the behaviour the capture is for.

Writing streams one tensor at a time into a temporary file in the target folder, renamed over `path` only
when complete (`os.replace`): memory stays bounded by one compile's taps (`max_tap_bytes`), and a failure
leaves no partial file and never destroys an existing one.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import pathlib
import platform
import re
import tempfile
import threading
import time
import zipfile
import zlib
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import openvino as ov

from bisect_ov.errors import CaptureError, InputError
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.load import load_model, model_label
from bisect_ov.model.runtime import RuntimeGraph, RuntimeLayer
from bisect_ov.model.taps import Tap, default_taps, plan_chunks, tap_model
from bisect_ov.run.devices import Device, DeviceInfo, make_device, shared_core
from bisect_ov.run.inputs import prepare_inputs

__all__ = [
    "SCHEMA_VERSION", "CPU_FLAGS", "capture", "load_capture", "Capture", "merge_captures", "sample_positions",
    "sample_array", "inputs_hash", "tensor_summary", "host_info", "playback_hash",
]

FORMAT = "bisect_ov.capture"
SCHEMA_VERSION = 1
MODES = ("full", "stats")
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8", "avx512_fp16", "avx_vnni")
HEADER = "__header__"
_CHUNK = 1 << 20  # elements per chunk of the summary statistics
_READ_ERRORS = (zipfile.BadZipFile, zlib.error, ValueError, OSError, EOFError, KeyError, RuntimeError)


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
    return _positions(size, _check_sample(sample), _check_seed(seed))


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
    return np.ascontiguousarray(array).reshape(-1)[sample_positions(array.shape, sample, seed)]


def inputs_hash(names: Sequence[str], arrays: Sequence[np.ndarray]) -> str:
    """sha256 (hex) over each input's name, shape, dtype and bytes, in order."""
    if len(names) != len(arrays):
        raise InputError(f"inputs_hash: {len(names)} names for {len(arrays)} arrays.")
    h = hashlib.sha256()
    for name, array in zip(names, arrays):
        a = np.ascontiguousarray(array)
        h.update(f"{name}|{list(a.shape)}|{a.dtype.str}|".encode())
        h.update(memoryview(a).cast("B") if a.size else b"")
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
    low = high = None
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
    return {"min": low, "max": high, "mean": mean, "std": float(np.sqrt(max(m2 / n, 0.0))),
            "absmax": max(abs(low), abs(high)), "nan": nan, "inf": inf, "numel": int(flat.size)}


def host_info() -> dict[str, Any]:
    """OS, machine, CPU model and the int8/bf16/f16-relevant CPU flags (Linux); never the host name."""
    info: dict[str, Any] = {"system": platform.system(), "release": platform.release(), "machine": platform.machine(),
                            "python": platform.python_version(), "numpy": np.__version__}
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if info["system"] == "Linux" and cpuinfo.is_file():
        flags: set[str] = set()
        try:
            for line in cpuinfo.read_text(errors="replace").splitlines():
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and "cpu_model" not in info:
                    info["cpu_model"] = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
        except OSError:
            pass
        info["cpu_flags"] = [f for f in CPU_FLAGS if f in flags]
    else:
        info["processor"] = platform.processor()
    return info


def _check_sample(sample: Any) -> int:
    if isinstance(sample, bool) or not isinstance(sample, (int, np.integer)) or sample < 1:
        raise InputError(f"sample must be a positive integer (values kept per tensor in stats mode); got {sample!r}.")
    return int(sample)


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"seed must be a non-negative integer; got {seed!r}.")
    return int(seed)


def playback_hash(graph: ModelGraph) -> str:
    """`ModelGraph.structure_hash` that also ignores names of the form ``<OpType>_<n>``.

    OpenVINO makes such names up for ops nobody named (they change with every build), and `ov.Model.clone`
    pins them as friendly names, so `ModelGraph` no longer sees them as made up in the tapped clones bisect
    compiles: their `structure_hash` differs from the original's. Ops, user-given names, edges by position,
    shapes and element types still all count.
    """
    h = hashlib.sha256()
    for n in graph:
        made_up = n.auto_named or re.fullmatch(re.escape(n.op_type) + r"_\d+", n.name) is not None
        name = "" if made_up else n.key
        edges = [(graph[k].index, port) for k, port in n.inputs]
        h.update(f"{n.index}|{n.op_type}|{name}|{edges}|".encode())
        h.update("|".join(f"{t.partial_shape}:{t.dtype}" for t in n.outputs).encode())
    return h.hexdigest()[:16]


def _input_names(model: ov.Model) -> list[str]:
    """A stable name per parameter: its first tensor name, its user-given friendly name, or its position."""
    names = []
    for i, param in enumerate(model.get_parameters()):
        tensor_names = sorted(param.output(0).get_names())
        friendly = param.get_friendly_name()
        names.append(tensor_names[0] if tensor_names else friendly if friendly != param.get_name() else f"#{i}")
    return names


# ------------------------------------------------------------------------------------------------------------
# Writing
# ------------------------------------------------------------------------------------------------------------


class _NpzWriter:
    """Streams arrays into a temporary ``.npz`` beside `path`; `os.replace` over `path` only on success."""

    def __init__(self, path: pathlib.Path):
        self.path = path
        folder = path.parent
        if not folder.is_dir():
            raise CaptureError(f"Cannot write the capture '{path}': the folder '{folder}' does not exist.")
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        except OSError as err:
            raise CaptureError(f"Cannot write the capture '{path}': {err}") from err
        self.tmp = pathlib.Path(tmp)
        self._file = os.fdopen(fd, "w+b")
        self._zip = zipfile.ZipFile(self._file, "w", zipfile.ZIP_STORED, allowZip64=True)
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

    def __enter__(self) -> "_NpzWriter":
        return self

    def __exit__(self, kind, value, tb) -> None:
        ok = kind is None
        try:
            self._zip.close()
            if ok:
                self._file.flush()
                os.fsync(self._file.fileno())
        except BaseException:
            ok = False
            raise
        finally:
            self._file.close()
            if not ok:
                self.tmp.unlink(missing_ok=True)
        if not ok:
            return  # the exception goes on
        try:
            # mkstemp makes the file private (0600); a capture is meant to be copied and shared.
            mode = self.path.stat().st_mode & 0o777 if self.path.exists() else 0o644
            os.chmod(self.tmp, mode)
            os.replace(self.tmp, self.path)
        except OSError as err:
            self.tmp.unlink(missing_ok=True)
            raise CaptureError(f"Cannot write the capture '{self.path}': {err}") from err


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


def _header_array(header: dict[str, Any]) -> np.ndarray:
    # UTF-8 bytes ('S' dtype): a quarter of the size of numpy's UCS-4 str arrays.
    return np.array(json.dumps(header, default=_json_default, allow_nan=False).encode("utf-8"))


def _tensor_entry(graph: ModelGraph, tap: Tap, array: np.ndarray) -> dict[str, Any]:
    node = graph[tap.key]
    info = node.outputs[tap.port]
    return {"key": tap.key, "port": tap.port, "name": node.name, "op_type": node.op_type, "names": list(info.names),
            "shape": [int(d) for d in array.shape], "dtype": info.dtype, "stored_dtype": str(array.dtype)}


# ------------------------------------------------------------------------------------------------------------
# capture
# ------------------------------------------------------------------------------------------------------------


def capture(
    model: Any,
    device: str | Device = "CPU",
    inputs: Any = None,
    path: str | os.PathLike = "capture.npz",
    *,
    config: Mapping[str, Any] | None = None,
    mode: str = "full",
    sample: int = 4096,
    seed: int = 0,
    max_tap_bytes: int | None = 512 << 20,
    progress: bool = False,
) -> pathlib.Path:
    """Run `model` on `device` with every candidate tensor exposed, and record it all into one ``.npz`` file.

    Parameters
    ----------
    model
        Anything `bisect_ov.model.load.load_model` takes.
    device
        A device name as for `bisect()` (``CPU``, ``CPU:f32``, ``GPU``, ``EMU:f16``) or a `Device`. Built with
        ``role="target"``: the device runs exactly as asked (plain ``CPU`` is the plugin's default precision,
        bf16 on CPUs with AVX512_BF16/AMX); ask for ``CPU:f32`` to record an f32 run.
    inputs
        As for `bisect()`: None (random, from `seed`), a dict, a list, an array or a ``.npz``/``.npy`` path.
        They are stored in the capture, and `RecordedDevice` refuses other inputs.
    path
        Where to write; an existing file is replaced only once the new one is complete.
    config
        Properties for `compile_model`, merged over those of the device name.
    mode
        ``full``: every tensor; ``stats``: `sample` values per tensor at `sample_positions` plus summary
        statistics.
    sample, seed
        Values kept per tensor in ``stats`` mode, and the seed of their positions (and of random inputs).
    max_tap_bytes
        Most bytes of exposed tensors per compile, as in `bisect()`; more taps mean more compiles.
    progress
        Show a progress bar over the tensors.

    Returns
    -------
    pathlib.Path
        The written file.

    Raises
    ------
    InputError
        Bad model, inputs, device name or option (`CaptureError` when the file cannot be written).
    DeviceError
        Compiling or running failed.
    """
    from tqdm.auto import tqdm

    from bisect_ov import __version__

    if mode not in MODES:
        raise InputError(f"Unknown capture mode '{mode}'. Use 'full' (every tensor) or 'stats' (samples and statistics).")
    sample = _check_sample(sample)
    seed = _check_seed(seed)
    path = pathlib.Path(path)
    if path.is_dir():
        raise CaptureError(f"Cannot write the capture to '{path}': it is a folder. Pass a file name such as '{path / 'capture.npz'}'.")
    clock: dict[str, float] = {}
    start = time.perf_counter()
    ov_model = load_model(model)
    graph = ModelGraph(ov_model)
    dev = make_device(device, dict(config or {}), role="target")
    arrays = prepare_inputs(ov_model, inputs, seed=seed)
    names = _input_names(ov_model)
    specs = ov_model.get_parameters()
    taps = default_taps(graph)
    tap_index = {tap: i for i, tap in enumerate(taps)}
    sampled = mode == "stats"

    def keep(array: np.ndarray) -> np.ndarray:
        return sample_array(array, sample, seed) if sampled else array

    tap_entries: list[dict[str, Any] | None] = [None] * len(taps)
    tap_stats: list[dict[str, Any] | None] = [None] * len(taps)
    clock["load"] = time.perf_counter() - start
    with _NpzWriter(path) as out:
        for i, a in enumerate(arrays):
            out.add(f"input/{i}", a)
        t0 = time.perf_counter()
        plain = dev.compile(ov_model)
        info, runtime = plain.info, plain.runtime
        outputs = plain.infer(arrays, share_outputs=False)
        del plain
        output_entries, output_stats = [], []
        for i, (result, array) in enumerate(zip(graph.results(), outputs)):
            key, port = result.inputs[0]
            output_entries.append({"index": i, "name": result.name, "producer": [key, port],
                                   "shape": [int(d) for d in np.shape(array)], "dtype": graph[key].outputs[port].dtype,
                                   "stored_dtype": str(np.asarray(array).dtype)})
            output_stats.append(tensor_summary(array))
            out.add(f"o/{i}", keep(array))
        del outputs
        clock["plain run"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        # Tensors that leave a fusion group first, in compiles that keep the plain run's fusions; then the rest.
        boundaries = set() if info.emulated else set(_fusion_taps(graph, runtime))
        passes = [("fusion", [t for t in taps if t in boundaries]), ("full", [t for t in taps if t not in boundaries])]
        chunks = [(name, c) for name, group in passes for c in plan_chunks(graph, group, max_tap_bytes) if c]
        with tqdm(total=len(taps), desc="capture", unit="tensor", disable=not progress, leave=False) as bar:
            for n, (kind, chunk) in enumerate(chunks):
                if len(chunks) > 1:
                    bar.set_description(f"capture {n + 1}/{len(chunks)}")
                tapped = tap_model(graph, chunk)
                compiled = dev.compile(tapped.model, taps=tapped.added_outputs)
                result = compiled.infer(arrays)  # views valid until the next infer: written before it
                for tap, index in zip(chunk, tapped.tap_outputs):
                    j = tap_index[tap]
                    array = np.asarray(result[index])
                    tap_entries[j] = {"index": j, **_tensor_entry(graph, tap, array), "pass": kind}
                    tap_stats[j] = tensor_summary(array)
                    out.add(f"{'s' if sampled else 't'}/{j}", keep(array))
                    bar.update(1)
                del compiled, result
        clock["tapped runs"] = time.perf_counter() - t0
        clock["total"] = time.perf_counter() - start
        clock = {k: round(v, 4) for k, v in clock.items()}
        digest = inputs_hash(names, arrays)
        header = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "bisect_ov_version": __version__,
            "openvino_version": ov.get_version(),
            "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "model": {
                "label": model_label(model), "structure_hash": graph.structure_hash(),
                "playback_hash": playback_hash(graph), "n_ops": len(graph),
                "inputs": [{"index": i, "name": nm, "friendly_name": p.get_friendly_name(), "shape": list(a.shape),
                            "dtype": str(a.dtype)} for i, (nm, p, a) in enumerate(zip(names, specs, arrays))],
                "outputs": output_entries,
            },
            "device": {"spec": dev.name, "role": "target", "config": {str(k): str(v) for k, v in (config or {}).items()},
                       "info": info.to_dict(), "capabilities": _capabilities(dev)},
            "host": host_info(),
            "runtime": _runtime_to_header(runtime),
            "mode": mode, "sample": sample, "seed": seed,
            "max_tap_bytes": max_tap_bytes, "compiles": 1 + len(chunks),
            "passes": {name: len(group) for name, group in passes},
            "taps": tap_entries,
            "inputs_hash": digest,
            "samples": [{"index": 0, "prefix": "", "inputs_hash": digest, "source": path.name,
                         "tap_stats": tap_stats, "output_stats": output_stats}],
            "timings": clock,
            "stored_bytes": out.nbytes,
        }
        out.add(HEADER, _header_array(header))
    return path


def _fusion_taps(graph: ModelGraph, runtime: RuntimeGraph) -> list[Tap]:
    """The tensors that leave one of the device's fusion groups (`bisect_ov.strategies.fusion_boundaries`).

    Exposing only those keeps the plain run's fusions, so their values are what `bisect()`'s default strategy
    would read live. Empty when the runtime graph names no groups (or the strategy code is unavailable).
    """
    from types import SimpleNamespace

    from bisect_ov.model.match import identity_match

    try:
        from bisect_ov.strategies import fusion_boundaries

        view = SimpleNamespace(graph=graph, target_graph=graph, match=identity_match(graph), target_runtime=runtime)
        taps, _ = fusion_boundaries(view)
    except Exception:  # the strategy's internals changed: every tensor is then taken from the full pass
        return []
    return [] if not any(layer.is_compute for layer in runtime.layers) else list(taps)


def _capabilities(dev: Device) -> list[str]:
    base = getattr(dev, "device", "")
    if not base:
        return []
    try:
        return [str(c) for c in shared_core().get_property(base.split(":")[0].split(",")[0], "OPTIMIZATION_CAPABILITIES")]
    except Exception:
        return []


def _runtime_to_header(runtime: RuntimeGraph) -> dict[str, Any]:
    nodes: dict[str, dict[str, Any]] = {}
    for name, layer in runtime.by_original.items():
        if layer.is_compute:
            nodes[name] = {"layer": layer.name, "layer_type": layer.layer_type, "kernel": layer.primitive_type,
                           "precision": layer.runtime_precision, "fused": list(layer.original_names)}
    return {"layers": [layer.to_dict() for layer in runtime.layers], "nodes": nodes}


def _runtime_from_header(data: Mapping[str, Any] | None) -> RuntimeGraph:
    layers, by_original = [], {}
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
        return DeviceInfo.from_dict(self.header["device"]["info"])

    @property
    def runtime(self) -> RuntimeGraph:
        return _runtime_from_header(self.header.get("runtime"))

    @property
    def inputs(self) -> list[np.ndarray]:
        """The recorded input arrays of the current sample, in parameter order."""
        return [self._read(f"input/{i}") for i in range(len(self.header["model"]["inputs"]))]

    @property
    def outputs(self) -> list[np.ndarray]:
        """The plain run's outputs (samples of them in ``stats`` mode)."""
        return [self._read(f"o/{i}") for i in range(len(self.header["model"]["outputs"]))]

    def has(self, key: str, port: int = 0) -> bool:
        return Tap(key, port) in self._tap_index

    def tap_info(self, key: str, port: int = 0) -> dict[str, Any]:
        return self.header["taps"][self._index(key, port)]

    def tensor(self, key: str, port: int = 0) -> np.ndarray:
        """The recorded tensor (mode ``full``) or its sample (mode ``stats``) of output `port` of node `key`."""
        return self._read(self._member(self._index(key, port)))

    def stats(self, key: str, port: int = 0) -> dict[str, Any]:
        """Summary statistics of the full tensor (min, max, mean, std, absmax, nan, inf, numel)."""
        return self.header["samples"][self.current]["tap_stats"][self._index(key, port)]

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

    # ----- internals --------------------------------------------------------------------------------
    def _index(self, key: str, port: int) -> int:
        try:
            return self._tap_index[Tap(key, int(port))]
        except KeyError:
            raise CaptureError(
                f"The capture '{self.path.name}' holds no tensor for '{Tap(key, int(port))}' "
                f"({len(self._tap_index)} recorded tensors)."
            ) from None

    def _member(self, index: int) -> str:
        return f"{'s' if self.mode == 'stats' else 't'}/{index}"

    def _prefix(self, sample: int | None = None) -> str:
        return self.header["samples"][self.current if sample is None else sample].get("prefix", "")

    def _read(self, name: str, sample: int | None = None) -> np.ndarray:
        full = self._prefix(sample) + name
        with self._lock:
            try:
                return self._data[full]
            except KeyError:
                raise CaptureError(f"The capture '{self.path}' is incomplete: it lacks '{full}'.") from None
            except _READ_ERRORS as err:
                raise CaptureError(f"The capture '{self.path}' is corrupted: reading '{full}' failed ({err}).") from err

    def _members(self, sample: int) -> list[str]:
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
        raise CaptureError(f"'{path}' is not a file: pass the .npz written by bisect_ov.run.recorded.capture.")
    try:
        data = np.load(path, allow_pickle=False)
    except _READ_ERRORS as err:
        raise CaptureError(
            f"'{path}' is not a readable capture: not an .npz file, or truncated or corrupted ({err}). "
            "Copy the file again, or record it again with bisect_ov.run.recorded.capture."
        ) from err
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise CaptureError(f"'{path}' holds a single .npy array, not a capture (.npz written by bisect_ov.run.recorded.capture).")
    try:
        header = _read_header(path, data)
        try:
            _check_members(path, data, header)
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
    return header


def _check_members(path: pathlib.Path, data: Any, header: dict[str, Any]) -> None:
    files = set(data.files)
    probe = Capture(path, data, header)
    for n, s in enumerate(header["samples"]):
        prefix = s.get("prefix", "")
        missing = [prefix + m for m in probe._members(n) if prefix + m not in files]
        if missing:
            raise CaptureError(
                f"The capture '{path}' is incomplete or corrupted: {len(missing)} member(s) missing, e.g. "
                f"{missing[:3]}."
            )


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
        No captures; captures of different models (structure hash), devices (name, full name, precision),
        OpenVINO versions, modes, sample sizes or seeds, or recorded tensors; the same inputs twice.
    """
    captures = [load_capture(p) for p in paths]
    if not captures:
        raise CaptureError("merge_captures needs at least one capture.")
    first = captures[0]
    checks = {
        "model structure hash": lambda c: c.playback_hash,
        "device": lambda c: c.header["device"]["spec"],
        "device full name": lambda c: c.device_info.full_name,
        "precision": lambda c: c.device_info.precision,
        "OpenVINO version": lambda c: c.header.get("openvino_version"),
        "mode": lambda c: c.mode,
        "sample size": lambda c: c.sample_size if c.mode == "stats" else None,
        "seed": lambda c: c.seed if c.mode == "stats" else None,
        "recorded tensors": lambda c: [(t["key"], t["port"]) for t in c.header["taps"]],
    }
    for other in captures[1:]:
        for what, get in checks.items():
            a, b = get(first), get(other)
            if a != b:
                shown = (f"{len(a)} vs {len(b)} tensors" if what == "recorded tensors" else f"{a!r} vs {b!r}")
                raise CaptureError(
                    f"Cannot merge '{first.path.name}' and '{other.path.name}': their {what} differ ({shown}). "
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
    header = json.loads(json.dumps(first.header))
    header["samples"] = []
    header["merged_from"] = [c.path.name for c in captures]
    with _NpzWriter(out) as writer:
        for m, (cap, n, s) in enumerate(entries):
            prefix = f"sample/{m}/"
            for member in cap._members(n):
                writer.add(prefix + member, cap._read(member, n))
            entry = {k: v for k, v in s.items() if k not in ("index", "prefix")}
            entry.update({"index": m, "prefix": prefix, "source": s.get("source") or cap.path.name})
            if cap is not first:
                entry["host"] = cap.header.get("host", {})
            header["samples"].append(entry)
        header["inputs_hash"] = header["samples"][0]["inputs_hash"]
        header["stored_bytes"] = writer.nbytes
        writer.add(HEADER, _header_array(header))
    return out
