"""Devices: where a model is compiled and run, behind one small protocol.

A `Device` turns an `ov.Model` into a `Compiled` that runs inputs to a list of output arrays (`infer`, or
`infer_many` for many input sets), and says what it really ran with (`DeviceInfo`: device, precision read
back from the plugin, kernels). `Device.compile` checks its argument and calls `_compile`, which subclasses
override (the Polygraphy runner pattern). A device declares what it can do as attributes, read before
compiling: `activation_precision` (the precision it stores activations in), `can_run_pieces` (pieces of a
model fed with other values: local errors, partitioned runs), `emulated`, `recorded` and `sampled`.
`Compiled` is a protocol: `OpenVINOCompiled` here, the recorded-run one in `bisect_ov.capture.device`.

Device names accepted by `make_device`:

* any OpenVINO device: ``CPU``, ``GPU``, ``GPU.1``, ``NPU``, ``AUTO:GPU,CPU`` ...;
* a precision variant: ``CPU:f32``, ``CPU:bf16``, ``CPU:f16``, ``GPU:f32``, ``CPU:accuracy`` (sets
  ``INFERENCE_PRECISION_HINT`` or ``EXECUTION_MODE_HINT``);
* an emulated low-precision device that runs on the CPU anywhere: ``EMU:f16``, ``EMU:bf16``, and
  ``EMU:f16-acc`` / ``EMU:bf16-acc`` where reductions also accumulate in the low precision.

* a recorded run: ``capture:<path>`` or a path ending in ``.npz`` (registered by `bisect_ov.capture`).

Names resolve through a registry (`register_device`): each entry recognises a form of name and builds the
device. The OpenVINO and emulated forms are built in; other modules add theirs on import (the recorded-run
device does), so this module imports none of them.

The reference role gets f32 unless the user chose a precision: on CPUs with AVX512_BF16 or AMX the CPU
plugin otherwise runs bf16 silently.
"""

from __future__ import annotations

import logging
from collections import abc
from dataclasses import replace
from typing import Any, Callable, Protocol, Sequence

import numpy as np
import openvino as ov

from bisect_ov.core.errors import DeviceError, InputError, first_line
from bisect_ov.core.records import DeviceInfo  # re-exported: its home is the records module
from bisect_ov.model.runtime import RuntimeGraph, read_runtime_graph

__all__ = ["cpu_supports_bf16", "DeviceInfo", "Compiled", "OpenVINOCompiled", "Device", "OpenVINODevice", "EmulatedDevice",
           "make_device", "register_device", "available_devices", "capabilities", "infer_each"]

PRECISION_SUFFIXES = {"f32": "f32", "fp32": "f32", "bf16": "bf16", "f16": "f16", "fp16": "f16"}
_PRECISION_KEYS = ("INFERENCE_PRECISION_HINT", "EXECUTION_MODE_HINT")
log = logging.getLogger(__name__)
_core: ov.Core | None = None


def shared_core() -> ov.Core:
    """One `ov.Core` per process: creating it loads plugins, which is slow."""
    global _core
    if _core is None:
        _core = ov.Core()
    return _core


def available_devices() -> list[str]:
    return list(shared_core().available_devices)


def cpu_supports_bf16() -> bool:
    """True when the OpenVINO CPU plugin can run bf16 here (AVX512_BF16 or AMX): its capabilities list BF16.

    On such CPUs plain ``CPU`` runs bf16 by default; elsewhere ``CPU:bf16`` falls back to f32.
    """
    return "BF16" in capabilities("CPU")


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
    """`infer_many` one input set at a time: for devices without parallel requests (recorded runs)."""
    return [[np.array(a) for a in compiled.infer(arrays, share_outputs=False)] for arrays in inputs]


class OpenVINOCompiled:
    """A model compiled by an OpenVINO plugin (`Compiled`)."""

    def __init__(self, compiled: ov.CompiledModel, info: DeviceInfo, runtime: RuntimeGraph):
        self.compiled = compiled
        self.info = info
        self.runtime = runtime
        self._request = compiled.create_infer_request()
        self.n_outputs = len(compiled.outputs)
        # numpy has no bfloat16: OpenVINO hands bf16 outputs over as float16-labelled bits.
        self._bf16 = {i for i, out in enumerate(compiled.outputs) if out.get_element_type() == ov.Type.bf16}
        self._input_types = [inp.get_element_type() for inp in compiled.inputs]
        # A stateful model (ReadValue/Assign) is run with its variables reset: every run starts from the
        # same state, so runs compare and repeat.
        self._stateful = bool(self._request.query_state())

    def infer(self, inputs: Sequence[np.ndarray], *, share_outputs: bool = True) -> list[np.ndarray]:
        """Run once. With `share_outputs`, arrays are views valid until the next call (no output copies).

        Raises
        ------
        DeviceError
            When the plugin fails to run.
        """
        inputs = [_as_input(a, t) for a, t in zip(inputs, self._input_types)]
        try:
            if self._stateful:
                self._request.reset_state()
            result = self._request.infer(inputs, share_outputs=share_outputs)
        except Exception as err:
            raise DeviceError(f"Inference failed on {self.info.name}: {first_line(err)}") from err
        arrays = [result[i] for i in range(self.n_outputs)]
        if share_outputs and self._bf16:
            # Views: each bf16 output is widened to float32 when read, so a run with many bf16 taps does not
            # hold a float32 copy of all of them at once (they are compared one by one).
            return _Widened(arrays, self._bf16)  # type: ignore[return-value]
        return [bf16_to_f32(a) if i in self._bf16 else a for i, a in enumerate(arrays)]

    def infer_many(self, inputs: Sequence[Sequence[np.ndarray]], *, jobs: int = 2) -> list[list[np.ndarray]]:
        """Every input set through an asynchronous infer queue of `jobs` requests; outputs copied out.

        Raises
        ------
        DeviceError
            When the plugin fails to run one of them.
        """
        results: list[list[np.ndarray] | None] = [None] * len(inputs)

        def done(request, index: int) -> None:
            outs = []
            for i in range(self.n_outputs):
                data = request.get_output_tensor(i).data
                outs.append(bf16_to_f32(data) if i in self._bf16 else np.array(data))
            results[index] = outs

        try:
            queue = ov.AsyncInferQueue(self.compiled, max(1, int(jobs)))
            queue.set_callback(done)
            for index, arrays in enumerate(inputs):
                queue.start_async([_as_input(a, t) for a, t in zip(arrays, self._input_types)], userdata=index)
            queue.wait_all()
        except Exception as err:
            raise DeviceError(f"Inference failed on {self.info.name}: {first_line(err)}") from err
        return results  # type: ignore[return-value]


class _Widened(abc.Sequence):
    """Outputs whose bf16 members (float16-labelled bits) read as float32, converted on each access."""

    def __init__(self, arrays: list[np.ndarray], bf16: set[int]):
        self._arrays, self._bf16 = arrays, bf16

    def __len__(self) -> int:
        return len(self._arrays)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self._arrays)))]
        index = range(len(self._arrays))[index]
        array = self._arrays[index]
        return bf16_to_f32(array) if index in self._bf16 else array


def kept_outputs(outputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], frozenset[int]]:
    """Copies of `outputs` (as `Compiled.infer(..., share_outputs=True)` returns them) that outlive the next run
    and the compile: bf16 outputs stay bf16 bits (float16-labelled, half the bytes of float32; read them with
    `bf16_to_f32`). Returns the copies and the positions of those bf16 ones."""
    if isinstance(outputs, _Widened):
        return [np.array(a) for a in outputs._arrays], frozenset(outputs._bf16)
    return [np.array(a) for a in outputs], frozenset()


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _as_input(array: np.ndarray, element: ov.Type):
    """Float data for an input typed bf16 or f16 (activations handed over in the device's precision)."""
    if element == ov.Type.f16 and array.dtype != np.float16:
        return np.asarray(array, dtype=np.float16)
    if element != ov.Type.bf16:
        return array
    x = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    bits = ((x + 0x7FFF + ((x >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    bits[np.isnan(array)] = 0x7FC0
    tensor = ov.Tensor(ov.Type.bf16, list(array.shape))
    tensor.data.view(np.uint16)[...] = bits
    return tensor


class Device:
    """A place to compile and run models. Subclasses implement `_compile`.

    Capabilities, read before compiling (subclasses override them):

    * `activation_precision`: the precision activations are stored in (``f32``, ``bf16``, ``f16``); ``""``
      when it does not apply or is unknown;
    * `can_run_pieces`: pieces of a model fed with other values can run (local errors, partitioned runs);
    * `emulated`: the numbers are an emulation on another device; `recorded`: a run played back from a file;
      `sampled`: outputs are samples of the tensors, not whole tensors.
    """

    name: str = "device"
    emulated: bool = False
    recorded: bool = False
    sampled: bool = False

    @property
    def activation_precision(self) -> str:
        return ""

    @property
    def can_run_pieces(self) -> bool:
        return not (self.recorded or self.sampled)

    def compile(self, model: ov.Model, *, taps: Sequence[int] = (), fed: Sequence[int] = ()) -> Compiled:
        """Compile `model`; `taps` are the indices of outputs added only to observe intermediate tensors, `fed`
        the indices of inputs that stand for activations produced by other ops (pieces of a model).

        A device may give both the element type it stores activations in, so that exposing a tensor does not
        change what it compiles, and a fed value arrives as the device would have stored it
        (see `OpenVINODevice`).
        """
        if not isinstance(model, ov.Model):
            raise InputError(f"Device.compile takes an ov.Model, not {type(model).__name__}.")
        return self._compile(model, tuple(taps), tuple(fed))

    def _compile(self, model: ov.Model, taps: tuple[int, ...], fed: tuple[int, ...] = ()) -> Compiled:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class OpenVINODevice(Device):
    """An OpenVINO plugin device with a property dict.

    Parameters
    ----------
    device
        OpenVINO device name, e.g. ``CPU`` or ``GPU.1``.
    config
        Properties for `compile_model`.
    name
        Name shown in reports (what the user typed, e.g. ``CPU:bf16``).
    """

    def __init__(self, device: str, config: dict[str, Any] | None = None, *, name: str | None = None):
        _check_device(device)
        self.device = device
        self.config = {str(k): _prop_str(v) for k, v in (config or {}).items()}
        self.name = name or device

    @property
    def activation_precision(self) -> str:
        """The precision this device will store activations in, predicted before compiling."""
        config = {k.upper(): str(v) for k, v in self.config.items()}
        if config.get("EXECUTION_MODE_HINT", "").upper() == "ACCURACY":
            return "f32"
        asked = config.get("INFERENCE_PRECISION_HINT")
        if asked is None:
            try:
                asked = _type_name(shared_core().get_property(self.device, "INFERENCE_PRECISION_HINT"))
            except Exception as err:
                log.info("%s does not report INFERENCE_PRECISION_HINT (%s); taps stay f32.", self.device, first_line(err))
                return "f32"
        asked = PRECISION_SUFFIXES.get(str(asked).lower(), str(asked).lower())
        if asked == "f16" and self.device.startswith("CPU"):
            # The CPU runs f16 only with AVX512_FP16/AMX_FP16; otherwise it silently takes bf16, or f32.
            caps = capabilities(self.device)
            if "FP16" not in caps:
                return "bf16" if "BF16" in caps else "f32"
        return asked

    def _compile(self, model: ov.Model, taps: tuple[int, ...] = (), fed: tuple[int, ...] = ()) -> OpenVINOCompiled:
        core = shared_core()
        if taps or fed:
            model = _type_taps(model, taps, self.activation_precision, fed)
        try:
            compiled = core.compile_model(model, self.device, self.config)
        except Exception as err:
            raise DeviceError(
                f"Compiling for {self.name} with {self.config or 'default properties'} failed: {first_line(err)}"
            ) from err
        runtime = read_runtime_graph(compiled)
        return OpenVINOCompiled(compiled, self._info(compiled, runtime), runtime)

    def _info(self, compiled: ov.CompiledModel, runtime: RuntimeGraph, *, emulated: bool = False) -> DeviceInfo:
        hint = _read_precision_hint(compiled)
        counts = runtime.precision_counts()
        # The plugin's own read-back is authoritative (the CPU reports bf16 when f16 was asked for); the
        # runtime graph speaks for plugins that do not report the property.
        used = hint or runtime.dominant_precision() or "unknown"
        requested = self.config.get("INFERENCE_PRECISION_HINT")
        requested = PRECISION_SUFFIXES.get(requested.lower(), requested) if requested else None
        note = ""
        seen = runtime.dominant_precision()
        if requested and hint and requested != hint:
            note = f"asked for {requested}; the plugin ran {hint}"
        elif seen and hint and seen != hint and seen in PRECISION_SUFFIXES.values():
            note = f"the plugin reports {hint}; most compute layers ran {seen}"
        try:
            full = str(shared_core().get_property(self.device.split(":")[0].split(",")[0], "FULL_DEVICE_NAME"))
        except Exception as err:
            log.debug("No FULL_DEVICE_NAME for %s: %s", self.device, first_line(err))
            full = ""
        return DeviceInfo(
            name=self.name, device=self.device, full_name=full, precision=used, requested_precision=requested,
            config=dict(self.config), emulated=emulated, note=note, precision_counts=counts,
            weights=runtime.weight_precision() if used == "f32" else None,
        )


class EmulatedDevice(OpenVINODevice):
    """A low-precision device emulated on the CPU in f32: see `bisect_ov.run.emulate`.

    Every floating activation (and weight) is rounded to `precision` at each op boundary; with
    `reductions`, Softmax, ReduceSum, ReduceMean, MVN, MatMul and ScaledDotProductAttention also accumulate
    in the low precision over `lanes` partial sums. Real GPU or NPU kernels differ in fusion and
    accumulation order: the report marks results of this device as emulated.

    The model is emulated inside `compile`, so callers hand over and get back plain models and arrays; the
    emulated model holds Python custom ops and is never saved or handed on. Those ops run numpy under the
    GIL: infer requests of one emulated compile running in parallel threads share one interpreter.
    """

    emulated = True

    def __init__(self, precision: str = "f16", *, reductions: bool = False, lanes: int = 16, name: str | None = None):
        if precision not in ("f16", "bf16"):
            raise InputError(f"Emulated precision '{precision}' is not supported. Use 'f16' or 'bf16'.")
        if not isinstance(lanes, int) or lanes < 1:
            raise InputError(f"lanes must be a positive integer (parallel partial sums of a reduction); got {lanes!r}.")
        default = f"EMU:{precision}" + (f"-acc{lanes if lanes != 16 else ''}" if reductions else "")
        super().__init__("CPU", {"INFERENCE_PRECISION_HINT": "f32"}, name=name or default)
        self.precision = precision
        self.reductions = reductions
        self.lanes = lanes

    def _compile(self, model: ov.Model, taps: tuple[int, ...] = (), fed: tuple[int, ...] = ()) -> OpenVINOCompiled:
        from bisect_ov.run.emulate import emulate_precision  # the rewrite is heavy to import only when used

        emulated = emulate_precision(model, self.precision, reductions=self.reductions, lanes=self.lanes)
        # Runs in f32 and rounds at every boundary itself: tap outputs stay f32.
        compiled = super()._compile(emulated)
        acc = (f"reductions accumulate in {self.precision} over {self.lanes} lane(s)" if self.reductions
               else "ops accumulate in f32")
        compiled.info = replace(
            compiled.info, precision=self.precision, requested_precision=self.precision, emulated=True,
            note=f"emulated on the CPU: values rounded to {self.precision} between ops; {acc}",
            precision_counts={},
        )
        return compiled


DeviceFactory = Callable[[str, dict[str, Any], str], Device]
_REGISTRY: list[tuple[Callable[[str], bool], DeviceFactory]] = []


def register_device(match: str | Callable[[str], bool], factory: DeviceFactory) -> None:
    """Teach `make_device` a form of device name.

    Parameters
    ----------
    match
        A prefix such as ``"EMU:"`` (compared without case), or a predicate on the stripped name.
    factory
        ``factory(name, config, role) -> Device``; it raises `InputError` for a name of its form it cannot
        build. Entries registered later are tried first, so a registration can refine a built-in form.

    Examples
    --------
    >>> register_device("MYDEV:", lambda name, config, role: EmulatedDevice("f16", name=name))  # doctest: +SKIP
    """
    if isinstance(match, str):
        prefix = match.lower()
        predicate: Callable[[str], bool] = lambda name: name.lower().startswith(prefix)  # noqa: E731
    elif callable(match):
        predicate = match
    else:
        raise InputError(f"register_device takes a name prefix or a predicate; got {match!r}.")
    _REGISTRY.insert(0, (predicate, factory))


def make_device(spec: str | Device, config: dict[str, Any] | None = None, *, role: str = "target") -> Device:
    """Build a `Device` from a name such as ``CPU``, ``GPU.1``, ``CPU:bf16`` or ``EMU:f16``.

    Parameters
    ----------
    spec
        Device name (see the module docstring) or a ready `Device`, returned as is.
    config
        Properties for `compile_model`; merged over those a precision suffix sets.
    role
        ``ref`` or ``target``. The reference gets ``INFERENCE_PRECISION_HINT=f32`` when neither the name nor
        `config` chooses a precision and the device supports the property.

    Raises
    ------
    InputError
        Unknown device (the message lists the available ones) or precision suffix.
    """
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"A device is a name such as 'CPU' or 'GPU'; got {spec!r}. Available: {available_devices()}.")
    spec = spec.strip()
    for predicate, factory in _REGISTRY:
        if predicate(spec):
            return factory(spec, dict(config or {}), role)
    raise InputError(f"Unknown device '{spec}'. Available: {available_devices()}.")  # pragma: no cover (OpenVINO matches all)


def _emulated_device(spec: str, config: dict[str, Any], role: str) -> Device:
    """``EMU:f16``, ``EMU:bf16``, ``EMU:f16-acc``, ``EMU:f16-accN``.

    An emulated device compiles on the CPU in f32 with settings of its own: compile properties would be
    silently ignored (or would break the emulation, which must run in f32), so they are refused.
    """
    if config:
        raise InputError(
            f"The emulated device '{spec}' takes no compile properties; got {dict(config)}. It always runs on the "
            "CPU in f32 and rounds to its precision itself: choose the precision in the name (EMU:f16, EMU:bf16, "
            "EMU:f16-acc), or pass the properties to a real device (target='GPU', target_config={...})."
        )
    _, _, suffix = spec.partition(":")
    precision, _, acc = suffix.lower().partition("-")
    lanes = acc[3:] if acc.startswith("acc") else None
    if precision not in ("f16", "bf16") or (acc and (lanes is None or (lanes and not lanes.isdigit()))):
        raise InputError(
            f"Unknown emulated device '{spec}'. Use EMU:f16, EMU:bf16, EMU:f16-acc, EMU:bf16-acc, "
            "or EMU:f16-accN for N parallel partial sums (EMU:f16-acc1: one sequential accumulator)."
        )
    return EmulatedDevice(precision, reductions=bool(acc), lanes=int(lanes) if lanes else 16, name=spec)


def _openvino_device(spec: str, config: dict[str, Any], role: str) -> Device:
    """An OpenVINO device name, with an optional precision suffix (``CPU:bf16``, ``GPU:accuracy``)."""
    base, _, suffix = spec.partition(":")
    merged: dict[str, Any] = {}
    if suffix and base.upper() not in ("AUTO", "HETERO", "MULTI", "BATCH"):
        key = suffix.lower()
        if key == "accuracy":
            merged["EXECUTION_MODE_HINT"] = "ACCURACY"
        elif key in PRECISION_SUFFIXES:
            merged["INFERENCE_PRECISION_HINT"] = PRECISION_SUFFIXES[key]
        else:
            raise InputError(f"Unknown precision '{suffix}' in '{spec}'. Use one of: f32, bf16, f16, accuracy.")
        device = base
    else:
        device = spec
    merged.update(config)
    if role == "ref" and not any(k in merged for k in _PRECISION_KEYS) and _supports(device, "INFERENCE_PRECISION_HINT"):
        merged["INFERENCE_PRECISION_HINT"] = "f32"
    return OpenVINODevice(device, merged, name=spec)


register_device(lambda name: True, _openvino_device)  # the fallback: any other name is an OpenVINO device
register_device(lambda name: name.partition(":")[0].upper() in ("EMU", "EMULATED"), _emulated_device)


def _check_device(device: str) -> None:
    available = available_devices()
    head = device.split(":")[0]
    if head in ("AUTO", "HETERO", "MULTI", "BATCH"):
        return
    if device in available or any(a.split(".")[0] == device for a in available):
        return
    raise InputError(
        f"Unknown device '{device}'. Available: {available}. "
        "Pass a device name from ov.Core().available_devices, or an emulated one such as 'EMU:f16'."
    )


def _supports(device: str, prop: str) -> bool:
    try:
        return prop in shared_core().get_property(device, "SUPPORTED_PROPERTIES")
    except Exception as err:
        log.debug("%s does not list its supported properties (%s); assuming it lacks %s.", device, first_line(err), prop)
        return False


def _read_precision_hint(compiled: ov.CompiledModel) -> str | None:
    try:
        return _type_name(compiled.get_property("INFERENCE_PRECISION_HINT"))
    except Exception as err:
        log.debug("The compiled model does not report INFERENCE_PRECISION_HINT (%s); the runtime graph speaks "
                  "for it.", first_line(err))
        return None


def _type_name(value: Any) -> str:
    name = value.get_type_name() if hasattr(value, "get_type_name") else str(value)
    return {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(name, name)


def capabilities(device: str) -> list[str]:
    """The plugin's ``OPTIMIZATION_CAPABILITIES`` of an OpenVINO device (``FP32``, ``BF16``, ``INT8`` ...);
    empty when the device does not report them."""
    device = device.split(":")[0].split(",")[0]
    try:
        return list(shared_core().get_property(device, "OPTIMIZATION_CAPABILITIES"))
    except Exception as err:
        log.debug("%s reports no OPTIMIZATION_CAPABILITIES (%s).", device, first_line(err))
        return []


def _type_taps(model: ov.Model, taps: tuple[int, ...], precision: str, fed: tuple[int, ...] = ()) -> ov.Model:
    """Give f32 tap outputs the device's activation precision.

    Measured on the CPU plugin in bf16: an extra f32 output makes the plugin compute the ops between it and
    the nearest Convolution/MatMul in f32 (it keeps the graph's tail before an f32 output in f32), which
    hid a cancellation error entirely (0.3% instead of 12%). Outputs typed in the inference precision do not
    trigger that, and hold exactly the values the device stored. Likewise `fed` inputs (activations handed to
    a piece of the model) arrive in that precision, as the producing op would have stored them: an f32 input
    would let the plugin compute an elementwise op in f32 that in the whole model reads a bf16 tensor.
    """
    if precision not in ("bf16", "f16"):
        return model
    from openvino.preprocess import PrePostProcessor

    element = ov.Type.bf16 if precision == "bf16" else ov.Type.f16
    ppp = PrePostProcessor(model)
    changed = False
    for index in taps:
        if model.outputs[index].get_element_type() == ov.Type.f32:
            ppp.output(index).tensor().set_element_type(element)
            changed = True
    for index in fed:
        if model.inputs[index].get_element_type() == ov.Type.f32:
            ppp.input(index).tensor().set_element_type(element)
            changed = True
    return ppp.build() if changed else model


def _prop_str(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool)) else str(value)

