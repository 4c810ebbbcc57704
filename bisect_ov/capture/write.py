"""Recorded runs, the writing side: capture a model's tensors on one machine into one portable file.

One process cannot hold two CPU generations. `capture` runs a model on a device of machine A, exposes every
candidate tensor and writes everything into ONE portable ``.npz`` file; on machine B,
`bisect_ov.capture.device.RecordedDevice` plays that run back as the ``ref=`` or ``target=`` of `bisect()`:

>>> record("model.xml", "CPU", path="epyc.npz")                             # doctest: +SKIP
>>> bisect("model.xml", ref=RecordedDevice("epyc.npz"), target="CPU")         # doctest: +SKIP

This module writes the file (`capture`); the format's constants and the helpers both machines compute
identically live in `bisect_ov.capture.format`, reading and merging (`Capture`, `load_capture`,
`merge_captures`) in `bisect_ov.capture.read`, and playing a capture back as a device in
`bisect_ov.capture.device`.

What is recorded: the plain run's outputs (no taps), then the tensors that leave one of the device's fusion
groups (read from the plain compile's runtime graph, as `bisect()`'s default strategy picks them), in
compiles that keep the plain run's fusions, then every other candidate tensor (fusions broken, as with
``strategy="full"``); each tensor once, from the first of those passes that holds it (``taps[j]["pass"]``).
Measured on ResNet-50 in bf16, the fusion pass makes the recorded run give the same per-node errors as the
live device under the default strategy; taken from the full pass alone they were off by -19% to +30%.

The file format is described in `bisect_ov.capture.format`.

Devices: `capture` builds its device with ``make_device(device, config, role="capture")``, so it runs as asked:
plain ``CPU`` is the plugin's default (bf16 on CPUs with AVX512_BF16 or AMX); write ``CPU:f32`` for an f32
run, which, as a reference's, computes compressed weights' matrix products without int8 activations (give
``DYNAMIC_QUANTIZATION_GROUP_SIZE`` in `config` to record the plugin's default). Recording in the ``ref`` role
would force f32 and hide exactly the behaviour the capture is for.

Writing streams one tensor at a time into a temporary file in the target folder, renamed over `path` only
when complete (`os.replace`): memory stays bounded by one compile's taps (`max_tap_bytes`), and a failure
leaves no partial file and never destroys an existing one.
"""

from __future__ import annotations

import datetime
import os
import pathlib
import time
from typing import Any, Mapping

import numpy as np
import openvino as ov

from bisect_ov.capture.format import (
    FORMAT,
    HEADER,
    MODES,
    SCHEMA_VERSION,
    NpzWriter,
    check_sample,
    check_seed,
    header_array,
    host_info,
    input_names,
    inputs_hash,
    playback_hash,
    runtime_to_header,
    sample_array,
    tensor_summary,
    weights_hash,
)
from bisect_ov.core import codec
from bisect_ov.core.checks import check_config, check_flag, check_tap_bytes
from bisect_ov.core.errors import CaptureError, InputError
from bisect_ov.core.fileio import labelled_files, refuse_overlaps
from bisect_ov.frameworks.resolve import framework_side, plain_inputs
from bisect_ov.frameworks.side import FrameworkSide
from bisect_ov.model.fusion import fusion_boundaries
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.load import load_model, model_label
from bisect_ov.model.match import identity_match
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.state import is_stateful
from bisect_ov.model.taps import Tap, default_taps, plan_chunks, tap_model, tensor_sizes
from bisect_ov.run.devices import Device, OpenVINODevice, capabilities, make_device
from bisect_ov.run.inputs import prepare_inputs

__all__ = ["record"]


def _tensor_entry(graph: ModelGraph, tap: Tap, array: np.ndarray) -> dict[str, Any]:
    node = graph[tap.key]
    info = node.outputs[tap.port]
    # "at" and "made_up": where a node with a name OpenVINO made up sits (that name changes from load to load).
    return {"key": tap.key, "port": tap.port, "name": node.name, "op_type": node.op_type, "names": list(info.names),
            "shape": [int(d) for d in array.shape], "dtype": info.dtype, "stored_dtype": str(array.dtype),
            "at": node.index, "made_up": node.auto_named}


# ------------------------------------------------------------------------------------------------------------
# capture
# ------------------------------------------------------------------------------------------------------------


def record(
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
        ``role="capture"``: the device runs exactly as asked (plain ``CPU`` is the plugin's default precision,
        bf16 on CPUs with AVX512_BF16/AMX); ask for ``CPU:f32`` to record an f32 run (exact as a reference's).
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
        Most bytes of exposed tensors per compile (a positive integer; None: no limit), as in `bisect()`; more
        taps mean more compiles.
    progress
        Show a progress bar over the tensors.

    Returns
    -------
    pathlib.Path
        The written file.

    Raises
    ------
    InputError
        Bad model, inputs, device name or option, checked as `bisect()` checks its options before anything
        runs (`CaptureError` when the file cannot be written).
    DeviceError
        Compiling or running failed.
    """
    from tqdm.auto import tqdm

    from bisect_ov import __version__

    if not isinstance(mode, str) or mode not in MODES:
        raise InputError(f"Unknown capture mode {mode!r}. Use 'full' (every tensor) or 'stats' (samples and statistics).")
    sample = check_sample(sample)
    seed = check_seed(seed)
    config = check_config("config", config)
    max_tap_bytes = check_tap_bytes("max_tap_bytes", max_tap_bytes, auto=False)
    progress = check_flag("progress", progress)
    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"path must be a file name (str or os.PathLike) for the capture; got {type(path).__name__}.")
    path = pathlib.Path(path)
    if path.is_dir():
        raise CaptureError(f"Cannot write the capture to '{path}': it is a folder. Pass a file name such as '{path / 'capture.npz'}'.")
    refuse_overlaps([("the capture", path)], [*labelled_files("the model", model), *labelled_files("the inputs", inputs)])
    clock: dict[str, float] = {}
    start = time.perf_counter()
    ov_model = load_model(model)
    if is_stateful(ov_model):
        raise InputError(f"'{model_label(model)}' is stateful (its KV cache lives in variables): a capture records "
                         "models without variables only. Compare it live (bisect-ov MODEL --ref ... --target ...), "
                         "or record the stateless export (optimum-intel: export with stateful=False).")
    graph = ModelGraph(ov_model)
    side = framework_side(device, model)  # "ORT" names ONNX Runtime on an ONNX file, as in bisect()
    dev = side if side is not None else make_device(device, dict(config or {}), role="capture")
    arrays = prepare_inputs(ov_model, plain_inputs(inputs), seed=seed)
    if isinstance(dev, FrameworkSide):  # PyTorch or ONNX Runtime: matched to the model, its matched tensors recorded
        dev = dev.bind(graph, arrays)
    provided = dev.provides(graph)
    names = input_names(ov_model)
    specs = ov_model.get_parameters()
    taps = [t for t in default_taps(graph) if provided is None or t in provided]
    tap_index = {tap: i for i, tap in enumerate(taps)}
    sampled = mode == "stats"

    def keep(array: np.ndarray) -> np.ndarray:
        return sample_array(array, sample, seed) if sampled else array

    tap_entries: list[dict[str, Any] | None] = [None] * len(taps)
    tap_stats: list[dict[str, Any] | None] = [None] * len(taps)
    clock["load"] = time.perf_counter() - start
    with NpzWriter(path) as out:
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
        # Sized for these inputs: a dynamic-shape export has no static sizes, and would be recorded in one compile.
        sizes = tensor_sizes(graph, arrays) if max_tap_bytes is not None else {}
        chunks = [(name, c) for name, group in passes
                  for c in plan_chunks(graph, group, max_tap_bytes, sizes or None) if c]
        with tqdm(total=len(taps), desc="capture", unit="tensor", disable=not progress, leave=False) as bar:
            for n, (kind, chunk) in enumerate(chunks):
                if len(chunks) > 1:
                    bar.set_description(f"capture {n + 1}/{len(chunks)}")
                tapped = tap_model(graph, chunk)
                compiled = dev.compile(tapped.model, taps=tapped.added_outputs)
                tap_values = compiled.infer(arrays)  # views valid until the next infer: written before it
                for tap, index in zip(chunk, tapped.tap_outputs):
                    j = tap_index[tap]
                    array = np.asarray(tap_values[index])
                    tap_entries[j] = {"index": j, **_tensor_entry(graph, tap, array), "pass": kind}
                    tap_stats[j] = tensor_summary(array)
                    out.add(f"{'s' if sampled else 't'}/{j}", keep(array))
                    bar.update(1)
                del compiled, tap_values
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
                "playback_hash": playback_hash(graph), "weights_hash": weights_hash(ov_model), "n_ops": len(graph),
                "inputs": [{"index": i, "name": nm, "friendly_name": p.get_friendly_name(), "shape": list(a.shape),
                            "dtype": str(a.dtype)} for i, (nm, p, a) in enumerate(zip(names, specs, arrays))],
                "outputs": output_entries,
            },
            "device": {"spec": dev.name, "role": "target", "config": {str(k): str(v) for k, v in (config or {}).items()},
                       "info": codec.to_dict(info), "capabilities": _capabilities(dev),
                       # A framework side has values for its matched tensors only: playing back provides those.
                       "provides_only_recorded": provided is not None},
            "host": host_info(),
            "runtime": runtime_to_header(runtime),
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
        out.add(HEADER, header_array(header))
    return path


def _fusion_taps(graph: ModelGraph, runtime: RuntimeGraph) -> list[Tap]:
    """The tensors that leave one of the device's fusion groups (`bisect_ov.model.fusion.fusion_boundaries`).

    Exposing only those keeps the plain run's fusions, so their values are what `bisect()`'s default strategy
    would read live. Empty when the runtime graph names no compute layers.
    """
    if not any(layer.is_compute for layer in runtime.layers):
        return []
    taps, _ = fusion_boundaries(graph, graph, identity_match(graph), runtime)
    return list(taps)


def _capabilities(dev: Device) -> list[str]:
    """The plugin's optimization capabilities (``FP32``, ``BF16``, ``INT8`` ...) of an OpenVINO device."""
    return [str(c) for c in capabilities(dev.device)] if isinstance(dev, OpenVINODevice) else []
