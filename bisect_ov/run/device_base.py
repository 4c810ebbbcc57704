"""The device protocol: a `Device` compiles an `ov.Model` into a `Compiled` that runs inputs to output arrays.

A `Device` says what it can do as attributes, read before compiling (`activation_precision`,
`can_run_pieces`, `emulated`, `recorded`, `sampled`); `Device.compile` checks its argument and calls
`_compile`, which subclasses override (the Polygraphy runner pattern). `Compiled` is a protocol: what a
compile returns, whatever the device (`bisect_ov.run.openvino_device.OpenVINOCompiled`, the recorded-run one
in `bisect_ov.capture.device`). `infer_each` is `infer_many` for devices without parallel requests.

Assumed: inputs and outputs are numpy arrays in the model's input and output order, and a `Compiled` runs one
inference at a time unless it says otherwise (`infer_many`).
"""

from __future__ import annotations

import logging
import time
from typing import Protocol, Sequence

import numpy as np
import openvino as ov

from bisect_ov.core.errors import InputError
from bisect_ov.core.records import DeviceInfo
from bisect_ov.model.runtime import RuntimeGraph

log = logging.getLogger(__name__)

__all__ = ["Compiled", "Device", "infer_each"]


class Compiled(Protocol):
    """A model compiled on a device, ready to run: what every device's `compile` returns.

    Attributes
    ----------
    info : DeviceInfo
        What the device really ran with.
    runtime : RuntimeGraph
        The compiled graph's layers (empty when the device does not expose one).
    n_outputs : int
        Outputs `infer` returns, in the model's output order.
    """

    info: DeviceInfo
    runtime: RuntimeGraph
    n_outputs: int

    def infer(self, inputs: Sequence[np.ndarray], *, share_outputs: bool = True) -> list[np.ndarray]:
        """Run once. With `share_outputs`, arrays may be views valid until the next call."""
        ...

    def infer_many(self, inputs: Sequence[Sequence[np.ndarray]], *, jobs: int = 2) -> list[list[np.ndarray]]:
        """Run every input set; outputs copied out, in the order of `inputs`."""
        ...


def infer_each(compiled: Compiled, inputs: Sequence[Sequence[np.ndarray]]) -> list[list[np.ndarray]]:
    """`infer_many` one input set at a time: for devices without parallel requests (recorded runs). An input set
    the device refuses (`InputError`) is refused with its position among `inputs` (`InputError.position`)."""
    found = []
    for position, arrays in enumerate(inputs):
        try:
            found.append([np.array(a) for a in compiled.infer(arrays, share_outputs=False)])
        except InputError as err:
            err.position = position
            raise
    return found


class Device:
    """A place to compile and run models. Subclasses implement `_compile`.

    Capabilities, read before compiling (subclasses override them):

    * `activation_precision`: the precision activations are stored in (``f32``, ``bf16``, ``f16``); ``""``
      when it does not apply or is unknown;
    * `can_run_pieces`: pieces of a model fed with other values can run (local errors, partitioned runs);
    * `emulated`: the numbers are an emulation on another device; `recorded`: a run played back from a file;
      `sampled`: outputs are samples of the tensors, not whole tensors;
    * `other_implementation`: another framework computes it (PyTorch eager, ONNX Runtime), so its f32 values
      differ from OpenVINO's by summation order however correct both are;
    * `provides(graph)`: the tensors it has values for (None: all of them).
    """

    name: str = "device"
    emulated: bool = False
    recorded: bool = False
    sampled: bool = False
    other_implementation: bool = False
    # Whether an executor's workers can rebuild it (a framework side holds a live session or module: it stays)
    travels: bool = True

    @property
    def activation_precision(self) -> str:
        return ""

    @property
    def can_run_pieces(self) -> bool:
        return not (self.recorded or self.sampled)

    def repro_side(self, info: DeviceInfo, role: str) -> dict:
        """How a reproducer's ``run.py`` rebuilds this side (`bisect_ov.repro.sides`): the device and properties it
        compiles with, as ``repro.json`` entries; `role` is ``reference`` or ``target``.

        Raises
        ------
        InputError
            A device ``run.py`` cannot rebuild with OpenVINO alone (this base: every device class that does not
            say how), with what to reproduce with instead.
        """
        if self.sampled:
            raise InputError(f"The {role} '{info.name}' is sampled (a stats capture): it holds samples of the "
                             "tensors, not the tensors a reproducer needs. Record the capture in full mode.")
        raise InputError(
            f"The {role} is a {type(self).__name__} ('{info.name}'), a device class run.py cannot rebuild with "
            "OpenVINO alone. Reproduce with an OpenVINO device name (CPU, GPU, CPU:bf16, ...) or EMU:f16/EMU:bf16.")

    @property
    def honours_precision_marks(self) -> bool:
        """Whether ops marked to stay in f32 (``disable_fp16_compression``, as a fix's patched model marks them)
        run in f32 here: the GPU and NPU plugins and the emulated devices do, the CPU plugin does not."""
        return False

    def with_activation_scale(self, factor: float) -> "Device | None":
        """This device compiling with the activation scale factor `factor` (``ACTIVATIONS_SCALE_FACTOR``: the
        values between each Convolution/MatMul and the next norm kept `factor` times smaller); None when the
        device has no such setting (the CPU plugin refuses it, a recorded run cannot recompute)."""
        return None

    def with_cache_precision(self, precision: str) -> "Device | None":
        """This device keeping a stateful model's KV cache in `precision` (``KV_CACHE_PRECISION``); None when the
        device has no such setting."""
        return None

    def without_generated_kernels(self) -> "Device | None":
        """This device compiling with its plugin's ordinary kernels where it would generate one for a fused
        subgraph (the CPU plugin's snippets: ``SNIPPETS_MODE=DISABLE``, `bisect_ov.run.openvino_device.SNIPPETS`);
        None when it has no such setting (the GPU, an emulated device, a framework or a recorded run) or already
        uses it."""
        return None

    def without_activation_quantization(self) -> "Device | None":
        """This device computing compressed-weight matrix products from unquantized activations (the plugins'
        ``DYNAMIC_QUANTIZATION_GROUP_SIZE=0``); None when it has no such setting (an emulated device, a framework
        or a recorded run) or already uses it."""
        return None

    def provides(self, graph) -> frozenset | None:
        """The tensors (`Tap`s of `graph`) this device has values for; None: every tensor of the model.

        A framework side (PyTorch, ONNX Runtime) or a recording of one has values only for the nodes its run
        matched: the comparison then compares those alone.
        """
        return None

    def compile(self, model: ov.Model, *, taps: Sequence[int] = (), fed: Sequence[int] = ()) -> Compiled:
        """Compile `model`; `taps` are the indices of outputs added only to observe intermediate tensors, `fed`
        the indices of inputs that stand for activations produced by other ops (pieces of a model).

        A device may give both the element type it stores activations in, so that exposing a tensor does not
        change what it compiles, and a fed value arrives as the device would have stored it
        (see `OpenVINODevice`).
        """
        if not isinstance(model, ov.Model):
            raise InputError(f"Device.compile takes an ov.Model, not {type(model).__name__}.")
        start = time.perf_counter()
        compiled = self._compile(model, tuple(taps), tuple(fed))
        log.debug("Compiled '%s' (%d ops, %d taps, %d fed inputs) for %s in %.2f s.", model.get_friendly_name(),
                  len(model.get_ops()), len(taps), len(fed), self.name, time.perf_counter() - start)
        return compiled

    def _compile(self, model: ov.Model, taps: tuple[int, ...], fed: tuple[int, ...] = ()) -> Compiled:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
