"""Recorded runs, the on-disk side: capture a model's tensors on one machine into one portable file.

One process cannot hold two CPU generations. `capture` runs a model on a device of machine A, exposes every
candidate tensor and writes everything into ONE portable ``.npz`` file; on machine B,
`bisect_ov.run.playback.RecordedDevice` plays that run back as the ``ref=`` or ``target=`` of `bisect()`:

>>> capture("model.xml", "CPU", path="epyc.npz")                             # doctest: +SKIP  (machine A)
>>> bisect("model.xml", ref=RecordedDevice("epyc.npz"), target="CPU")         # doctest: +SKIP  (machine B)

This module writes the file (`capture`, and the streaming writer `_NpzWriter`) and holds the format's
constants and the helpers both machines must compute identically (`sample_positions`, `sample_array`,
`inputs_hash`, `tensor_summary`, `playback_hash`, `host_info`). Reading and merging files (`Capture`,
`load_capture`, `merge_captures`) lives in `bisect_ov.run.capture_reader`, and playing a capture back as a
device in `bisect_ov.run.playback`; both import from here, and this module imports neither.

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
import tempfile
import time
import zipfile
from typing import Any, Mapping, Sequence

import numpy as np
import openvino as ov

from bisect_ov.errors import CaptureError, InputError
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.load import load_model, model_label
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap, default_taps, plan_chunks, tap_model
from bisect_ov.run.devices import Device, make_device, shared_core
from bisect_ov.run.inputs import prepare_inputs

__all__ = [
    "SCHEMA_VERSION", "CPU_FLAGS", "capture", "sample_positions", "sample_array", "inputs_hash", "tensor_summary", "host_info", "playback_hash",
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
    """The hash a recorded run is checked against: `ModelGraph.structure_hash`, which ignores the names
    OpenVINO makes up (they differ between the original and the tapped clones bisect compiles)."""
    return graph.structure_hash()


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
