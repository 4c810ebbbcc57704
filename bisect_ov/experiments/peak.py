"""A remedy's peak memory, measured in a fresh process: how far the process's peak resident set grows to compile a
model on a device and run it, after the model and its inputs are read.

    peak_memory(device, model, inputs) -> float | None     # MB, or None where it cannot be measured

The parent writes the model (IR, weights as they are), the inputs (``.npz``) and the device (pickled, as the many-
samples executors ship devices) to a temporary folder and runs ``python -m bisect_ov.experiments.peak FOLDER``
(a subprocess, not `multiprocessing`: a spawned child would import the user's script again). The child reads
them, resets its peak resident set to the current one (Linux's ``/proc/self/clear_refs``; elsewhere the
high-water mark ``ru_maxrss`` is used as it stands, which the imports' own peak can hide), compiles, runs two
inferences and prints how far the peak grew. The
same measurement of the untouched model gives the figure to compare with. Not measured (None) without the
`resource` module (Windows) or when the child fails; the reason goes to the log.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import pickle
import subprocess
import sys
import tempfile
from typing import Any, Sequence

import numpy as np

log = logging.getLogger(__name__)

__all__ = ["peak_memory"]

TIMEOUT = 600  # seconds: a compile of a large model on a slow device stays well within


def peak_memory(device: Any, model: Any, inputs: Sequence[np.ndarray]) -> float | None:
    """MB by which a fresh process's peak resident memory grows to compile `model` on `device` and run it twice on
    `inputs` (see the module docstring); None when it cannot be measured."""
    try:
        import resource  # noqa: F401 - only its presence is checked here
    except ImportError:
        log.info("Peak memory not measured: no `resource` module on this platform.")
        return None
    import openvino as ov

    with tempfile.TemporaryDirectory(prefix="bisect_ov_peak_") as tmp:
        folder = pathlib.Path(tmp)
        try:
            (folder / "device.pkl").write_bytes(pickle.dumps(device))
        except (pickle.PicklingError, TypeError, AttributeError) as err:
            log.info("Peak memory not measured: the device does not pickle (%s).", err)
            return None
        ov.save_model(model, str(folder / "model.xml"), compress_to_fp16=False)
        np.savez(folder / "inputs.npz", *[np.asarray(a) for a in inputs])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            done = subprocess.run([sys.executable, "-m", "bisect_ov.experiments.peak", str(folder)], env=env,
                                  capture_output=True, text=True, timeout=TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            log.info("Peak memory not measured: %s", err)
            return None
        if done.returncode != 0:
            log.info("Peak memory not measured: the child process failed: %s", done.stderr.strip()[-500:])
            return None
        return float(json.loads(done.stdout.strip().splitlines()[-1])["mb"])


def _child(folder: pathlib.Path) -> float:
    """In the fresh process: the peak resident memory's growth, in MB, over compile and two inferences."""
    import resource

    import openvino as ov

    device = pickle.loads((folder / "device.pkl").read_bytes())
    model = ov.Core().read_model(str(folder / "model.xml"))
    with np.load(folder / "inputs.npz", allow_pickle=False) as data:
        inputs = [data[f"arr_{i}"] for i in range(len(data.files))]
    if _reset_peak():  # Linux: the peak is reset to the current resident set, so imports' peaks do not hide it
        before, peak = _status_kb("VmRSS") * 1024, lambda: _status_kb("VmHWM") * 1024
    else:
        unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KB elsewhere
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit
        peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit  # noqa: E731
    compiled = device.compile(model)
    compiled.infer(inputs)
    compiled.infer(inputs)
    return max(peak() - before, 0) / 2**20


def _reset_peak() -> bool:
    """Reset this process's peak resident set to its current one (Linux >= 4.0: ``clear_refs``); False elsewhere."""
    try:
        pathlib.Path("/proc/self/clear_refs").write_text("5")
        return _status_kb("VmHWM") >= 0
    except OSError:
        return False


def _status_kb(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (VmRSS: resident now; VmHWM: its peak)."""
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"no {field} in /proc/self/status")


if __name__ == "__main__":
    print(json.dumps({"mb": _child(pathlib.Path(sys.argv[1]))}))
