"""The OpenVINO plugin device: `OpenVINODevice` compiles with a property dict, `OpenVINOCompiled` runs.

`OpenVINODevice` predicts the precision it will store activations in (`activation_precision`, from the
``INFERENCE_PRECISION_HINT`` and ``EXECUTION_MODE_HINT`` properties and the CPU's capabilities), gives
exposed outputs and fed inputs that precision, compiles, and reads back what the plugin really ran with
(`DeviceInfo`: the plugin's precision hint, the runtime graph's layer precisions). For ``AUTO:``, ``HETERO:``
and ``MULTI:`` it reads which device really ran (``EXECUTION_DEVICES``) and with which properties
(``DEVICE_PROPERTIES``); when that is one device, taps and pieces compile on it with those properties
(`OpenVINODevice.runs_on`), so they compute what the plain run computed. `OpenVINOCompiled` runs
one input set (`infer`) or many through an infer queue (`infer_many`), resetting a stateful model's
variables before each run. numpy has no bfloat16: bf16 outputs are handed over as float16-labelled bits,
widened to float32 when read (`bf16_to_f32`, `kept_outputs`). One `ov.Core` serves the process
(`shared_core`).

Assumed: the OpenVINO runtime is installed; properties are passed to ``compile_model`` as strings, numbers or
booleans (anything else as its string); a plugin that does not report a property is taken not to have it.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import replace
from typing import Any, Mapping, Sequence

import numpy as np
import openvino as ov

from bisect_ov.core.errors import DeviceError, InputError, first_line, raise_if_interrupted
from bisect_ov.core.records import DeviceInfo
from bisect_ov.model.runtime import RuntimeGraph, read_runtime_graph
from bisect_ov.run.bf16 import Widened, as_input, bf16_to_f32
from bisect_ov.run.compressed import DYNAMIC_QUANTIZATION, compressed_weights, quantizing
from bisect_ov.run.device_base import Device

__all__ = ["PRECISION_SUFFIXES", "VIRTUAL_DEVICES", "SNIPPETS", "CACHE_PRECISION", "GENERATED_LAYER", "OpenVINOCompiled",
           "OpenVINODevice", "available_devices", "capabilities", "cpu_supports_bf16", "listed_devices", "shared_core",
           "supports_property"]

PRECISION_SUFFIXES = {"f32": "f32", "fp32": "f32", "bf16": "bf16", "f16": "f16", "fp16": "f16"}
VIRTUAL_DEVICES = ("AUTO", "HETERO", "MULTI")
# The properties of the device that really ran (read back from an AUTO/HETERO/MULTI compile) that decide what it
# computes; taps and pieces compile with them.
RUNNING_PROPERTIES = ("INFERENCE_PRECISION_HINT", "EXECUTION_MODE_HINT", "PERFORMANCE_HINT", "INFERENCE_NUM_THREADS",
                      "DYNAMIC_QUANTIZATION_GROUP_SIZE", "KV_CACHE_PRECISION", "KEY_CACHE_PRECISION",
                      "VALUE_CACHE_PRECISION", "CPU_DENORMALS_OPTIMIZATION", "CPU_SPARSE_WEIGHTS_DECOMPRESSION_RATE")
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

    def another(self) -> "OpenVINOCompiled":
        """The same compile with an infer request of its own: its runs leave this one's output views alone."""
        return OpenVINOCompiled(self.compiled, self.info, self.runtime)

    def infer(self, inputs: Sequence[np.ndarray], *, share_outputs: bool = True) -> list[np.ndarray]:
        """Run once. With `share_outputs`, arrays are views valid until the next call (no output copies).

        Raises
        ------
        DeviceError
            When the plugin fails to run.
        """
        inputs = [as_input(a, t) for a, t in zip(inputs, self._input_types)]
        try:
            if self._stateful:
                self._request.reset_state()
            result = self._request.infer(inputs, share_outputs=share_outputs)
        except Exception as err:
            raise_if_interrupted(err)
            raise DeviceError(f"Inference failed on {self.info.name}: {first_line(err)}") from err
        arrays = [result[i] for i in range(self.n_outputs)]
        if share_outputs and self._bf16:
            # Views: each bf16 output is widened to float32 when read, so a run with many bf16 taps does not
            # hold a float32 copy of all of them at once (they are compared one by one).
            return Widened(arrays, self._bf16)  # type: ignore[return-value]
        return [bf16_to_f32(a) if i in self._bf16 else a for i, a in enumerate(arrays)]

    def step(self, inputs: Sequence[np.ndarray], states: Mapping[str, np.ndarray] | None
             ) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
        """One call of a stateful model as a pipeline makes it, its variables set first to `states` (by variable
        id; the plugin keeps them in its own precision, as between its own calls), or reset (None: the first
        call of a sequence, whose variables the model initialises itself): the outputs and each variable's value
        after the call (copies). `infer` instead starts every run from the reset state.

        Raises
        ------
        DeviceError
            When the plugin fails to run, or a variable of the model has no value in `states`.
        """
        try:
            if states is None:
                self._request.reset_state()
            else:
                variables = self._request.query_state()
                missing = [v.name for v in variables if v.name not in states]
                if missing:
                    raise DeviceError(f"No value for the variable(s) {missing} of the model run on {self.info.name}.")
                for variable in variables:
                    variable.state = ov.Tensor(np.asarray(states[variable.name], order="C"))
            result = self._request.infer([as_input(a, t) for a, t in zip(inputs, self._input_types)],
                                         share_outputs=False)
            after = {v.name: np.array(v.state.data) for v in self._request.query_state()}
        except DeviceError:
            raise
        except Exception as err:
            raise_if_interrupted(err)
            raise DeviceError(f"Inference failed on {self.info.name}: {first_line(err)}") from err
        outputs = [result[i] for i in range(self.n_outputs)]
        return [bf16_to_f32(a) if i in self._bf16 else a for i, a in enumerate(outputs)], after

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
                queue.start_async([as_input(a, t) for a, t in zip(arrays, self._input_types)], userdata=index)
            queue.wait_all()
        except Exception as err:
            raise_if_interrupted(err)
            raise DeviceError(f"Inference failed on {self.info.name}: {first_line(err)}") from err
        return results  # type: ignore[return-value]


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
        self.virtual = device.split(":")[0].upper() in VIRTUAL_DEVICES
        # What an AUTO/HETERO/MULTI plain compile really ran on: (device, properties), read back once.
        self._ran: tuple[str, dict[str, Any]] | None = None
        # An f32 reference (`bisect_ov.run.devices.make_device`): compressed weights' matrix products run without
        # the int8 activations the CPU gives them at any precision (`DYNAMIC_QUANTIZATION` 0, `compressed_weights`).
        self.exact_weights = False

    @property
    def runs_on(self) -> tuple[str, dict[str, Any]]:
        """The device and properties taps and pieces compile with.

        For an ``AUTO:``/``HETERO:``/``MULTI:`` device: the one device its plain compile ran on, with the
        properties read back from it (`RUNNING_PROPERTIES`); before any plain compile, the one device its name
        lists, with the properties given for it. Otherwise (a plain device, several devices) itself: the plugin
        then decides again for each compile.
        """
        if not self.virtual:
            return self.device, self.config
        if self._ran is not None:
            return self._ran
        listed = listed_devices(self.device, self.config)
        if len(listed) == 1 and listed[0].split(":")[0].upper() not in VIRTUAL_DEVICES:
            return listed[0], _own_properties(listed[0], self.config)
        return self.device, self.config

    def repro_side(self, info: DeviceInfo, role: str) -> dict:
        """Its device name and properties; a subclass that compiles otherwise is refused unless it says how."""
        if type(self)._compile is not OpenVINODevice._compile:
            return super().repro_side(info, role)
        config = {**self.config, **({DYNAMIC_QUANTIZATION: "0"} if info.config.get(DYNAMIC_QUANTIZATION) == "0" else {})}
        return {"device": self.device, "config": {str(k): str(v) for k, v in config.items()}}

    @property
    def honours_precision_marks(self) -> bool:
        return self.runs_on[0].split(".")[0] in ("GPU", "NPU")

    def with_activation_scale(self, factor: float) -> "OpenVINODevice | None":
        """This device with ``ACTIVATIONS_SCALE_FACTOR`` set, when its plugin lists the property (the GPU's does,
        the CPU's does not)."""
        from bisect_ov.model.scaling import SCALE_FACTOR_PROPERTY

        device = self.runs_on[0]
        if not supports_property(device, SCALE_FACTOR_PROPERTY):
            return None
        return OpenVINODevice(self.device, {**self.config, SCALE_FACTOR_PROPERTY: _factor_text(factor)},
                              name=f"{self.name} ({SCALE_FACTOR_PROPERTY}={_factor_text(factor)})")

    def with_cache_precision(self, precision: str) -> "OpenVINODevice | None":
        """This device keeping a stateful model's KV cache in `precision` (``KV_CACHE_PRECISION``), when its plugin
        lists the property."""
        if self.virtual or not supports_property(self.runs_on[0], CACHE_PRECISION):
            return None  # AUTO/HETERO/MULTI would need the setting per device; none is tried there
        return self._with_setting(CACHE_PRECISION, precision)

    def without_generated_kernels(self) -> "OpenVINODevice | None":
        """This device with ``SNIPPETS_MODE=DISABLE`` when it is the CPU plugin (whose supported properties do not
        list the setting, though it takes it): no kernel generated for a fused subgraph, the plugin's ordinary
        kernels for its ops instead."""
        device, config = self.runs_on
        if self.virtual or device.split(".")[0].upper() != "CPU" or config.get(SNIPPETS[0]) == SNIPPETS[1]:
            return None  # AUTO/HETERO/MULTI would need the setting per device; none is tried there
        return self._with_setting(*SNIPPETS)

    def without_activation_quantization(self) -> "OpenVINODevice | None":
        """This device with ``DYNAMIC_QUANTIZATION_GROUP_SIZE=0`` (`bisect_ov.run.compressed`) when its plugin lists
        the property and it is not set to 0 already: compressed-weight matrix products computed from the
        activations as they are, not quantized to int8."""
        device, config = self.runs_on
        if (self.virtual or str(config.get(DYNAMIC_QUANTIZATION)) == "0"
                or not supports_property(device, DYNAMIC_QUANTIZATION)):
            return None  # AUTO/HETERO/MULTI would need the setting per device; none is tried there
        return self._with_setting(DYNAMIC_QUANTIZATION, "0")

    def _with_setting(self, key: str, value: str) -> "OpenVINODevice":
        """This device with the compile property `key` set to `value`, named so. A copy, so that a subclass (a
        device that wraps the plugin) stays itself with the setting."""
        changed = copy.copy(self)
        changed.config = {**self.config, key: value}
        changed.name = f"{self.name} ({key}={value})"
        changed._ran = None
        return changed

    @property
    def activation_precision(self) -> str:
        """The precision this device will store activations in, predicted before compiling."""
        device, config = self.runs_on
        return _predicted_precision(device, config)

    def _compile(self, model: ov.Model, taps: tuple[int, ...] = (), fed: tuple[int, ...] = (), *,
                 extra: dict[str, str] | None = None) -> OpenVINOCompiled:
        """`extra`: properties added to this compile's only (a subclass's retry)."""
        core = shared_core()
        device, config = self.runs_on if (taps or fed) else (self.device, self.config)
        if extra:
            config = {**config, **extra}
        exact = self.exact_weights and DYNAMIC_QUANTIZATION not in config and compressed_weights(model)
        if exact:
            config = {**config, DYNAMIC_QUANTIZATION: "0"}
        if taps or fed:
            model = _type_taps(model, taps, self.activation_precision, fed)
        try:
            compiled = core.compile_model(model, device, config)
        except Exception as err:
            raise_if_interrupted(err)
            raise DeviceError(
                f"Compiling for {self.name} with {config or 'default properties'} failed: {first_line(err)}"
            ) from err
        runtime = read_runtime_graph(compiled)
        if self.virtual and device == self.device:
            ran = _ran_on(compiled)
            if ran is not None and self._ran is None:
                self._ran = (ran[0], {**_own_properties(ran[0], self.config), **ran[1]})
        info = self._info(compiled, runtime, device=device)
        if exact:
            info = replace(info, config={**info.config, DYNAMIC_QUANTIZATION: "0"}, note="; ".join(filter(None, (
                info.note, "compressed weights' matrix products in f32, activations not quantized"))))
        elif not (taps or fed or self.exact_weights or self.emulated) and (group := quantizing(compiled, model, self.runs_on[0])):
            info = replace(info, activation_groups=group, note="; ".join(filter(None, (
                info.note, f"activations of compressed-weight matrix products quantized to int8 in groups of {group} "
                f"(the plugin's {DYNAMIC_QUANTIZATION}; 0 turns it off)"))))
        try:  # the infer request is made here: a plugin that compiles a graph it cannot run fails at this point
            return OpenVINOCompiled(compiled, info, runtime)
        except Exception as err:
            raise_if_interrupted(err)
            raise DeviceError(f"Compiling for {self.name} with {config or 'default properties'} failed when its "
                              f"infer request was made: {first_line(err)}") from err

    def _info(self, compiled: ov.CompiledModel, runtime: RuntimeGraph, *, emulated: bool = False,
              device: str | None = None) -> DeviceInfo:
        if self.virtual:
            return self._virtual_info(compiled, runtime, device or self.device)
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
            weights=runtime.weight_precision() if used == "f32" else None, openvino_version=ov.get_version(),
        )

    def _virtual_info(self, compiled: ov.CompiledModel, runtime: RuntimeGraph, device: str) -> DeviceInfo:
        """`DeviceInfo` of an AUTO/HETERO/MULTI device: the devices that really ran and the precision they used."""
        if device == self.device:
            executed = _execution_devices(compiled)
            ran = _ran_on(compiled)
            hint = _type_name(ran[1]["INFERENCE_PRECISION_HINT"]) if ran and "INFERENCE_PRECISION_HINT" in ran[1] else None
        else:  # a tapped compile or a piece on the device the plain run ran on
            executed, hint = (device,), _read_precision_hint(compiled)
        seen = runtime.dominant_precision()
        used = hint or seen or "unknown"
        requested = _own_properties(executed[0], self.config).get("INFERENCE_PRECISION_HINT") if executed else None
        requested = PRECISION_SUFFIXES.get(str(requested).lower(), str(requested)) if requested else None
        where = ", ".join(executed) or "devices it does not report"
        if len(executed) == 1:
            note = (f"{self.device} ran the model on {where} in {used}; taps and pieces compile on {where} with the "
                    "properties it ran with")
        else:
            note = (f"{self.device} ran the model on {where}; taps and pieces compile on {self.device}, which may place "
                    "them differently")
        if requested and hint and requested != hint:
            note += f" (asked for {requested})"
        try:
            full = str(shared_core().get_property(executed[0], "FULL_DEVICE_NAME")) if len(executed) == 1 else ""
        except Exception as err:
            log.debug("No FULL_DEVICE_NAME for %s: %s", executed[0], first_line(err))
            full = ""
        return DeviceInfo(
            name=self.name, device=self.device, full_name=full, precision=used, requested_precision=requested,
            config=dict(self.config), note=note, precision_counts=runtime.precision_counts(),
            weights=runtime.weight_precision() if used == "f32" else None, execution_devices=tuple(executed),
            openvino_version=ov.get_version(),
        )


def listed_devices(device: str, config: dict[str, Any] | None = None) -> list[str]:
    """The devices an ``AUTO:``/``HETERO:``/``MULTI:`` name (or its ``MULTI_DEVICE_PRIORITIES``) lists, in order,
    without request counts (``GPU(4)`` is ``GPU``); empty for a bare ``AUTO``."""
    _, _, listed = device.partition(":")
    if not listed:
        listed = str((config or {}).get("MULTI_DEVICE_PRIORITIES", ""))
    return [name.split("(")[0].strip() for name in listed.split(",") if name.strip()]


def _own_properties(device: str, config: dict[str, Any]) -> dict[str, Any]:
    """Of a virtual device's `config`, what `device` itself accepts, with its entry of ``DEVICE_PROPERTIES``."""
    try:
        supported = set(shared_core().get_property(device.split(".")[0], "SUPPORTED_PROPERTIES"))
    except Exception as err:
        log.debug("%s does not list its supported properties (%s).", device, first_line(err))
        supported = set()
    own = {k: v for k, v in config.items() if k in supported and k != "DEVICE_PROPERTIES"}
    given = config.get("DEVICE_PROPERTIES")
    if isinstance(given, dict) and isinstance(given.get(device), dict):
        own.update({str(k): _prop_str(v) for k, v in given[device].items()})
    return own


def _execution_devices(compiled: ov.CompiledModel) -> tuple[str, ...]:
    try:
        return tuple(str(d) for d in compiled.get_property("EXECUTION_DEVICES"))
    except Exception as err:
        log.debug("The compiled model does not report EXECUTION_DEVICES (%s).", first_line(err))
        return ()


def _ran_on(compiled: ov.CompiledModel) -> tuple[str, dict[str, Any]] | None:
    """The one device an AUTO/HETERO/MULTI compile ran on and the `RUNNING_PROPERTIES` it ran with (None when
    it ran on several, or does not say)."""
    executed = _execution_devices(compiled)
    if len(executed) != 1:
        return None
    device = executed[0]
    try:
        properties = compiled.get_property("DEVICE_PROPERTIES")
        own = properties.get(device) or properties.get(device.split(".")[0]) or {}
    except Exception as err:
        log.debug("The compiled model does not report DEVICE_PROPERTIES (%s).", first_line(err))
        own = {}
    return device, {k: _property_value(own[k]) for k in RUNNING_PROPERTIES if k in own}


def _property_value(value: Any) -> Any:
    """A read-back property as `compile_model` takes it: a type by its name, an enum by its name."""
    if hasattr(value, "get_type_name"):
        return value.get_type_name()
    if hasattr(value, "name") and not isinstance(value, (str, int, float, bool)):
        return str(value.name)
    return _prop_str(value)


def _predicted_precision(device: str, config: dict[str, Any]) -> str:
    """The precision `device` will store activations in with `config`, predicted before compiling."""
    upper = {k.upper(): str(v) for k, v in config.items()}
    if upper.get("EXECUTION_MODE_HINT", "").upper() == "ACCURACY":
        return "f32"
    asked = upper.get("INFERENCE_PRECISION_HINT")
    if asked is None:
        try:
            asked = _type_name(shared_core().get_property(device, "INFERENCE_PRECISION_HINT"))
        except Exception as err:
            log.info("%s does not report INFERENCE_PRECISION_HINT (%s); taps stay f32.", device, first_line(err))
            return "f32"
    asked = PRECISION_SUFFIXES.get(str(asked).lower(), str(asked).lower())
    if asked in ("f16", "bf16") and device.startswith("CPU"):
        # The CPU runs f16 only with AVX512_FP16/AMX_FP16 (its capabilities list FP16), otherwise it silently
        # takes bf16, or f32; and bf16 only with AVX512_BF16/AMX (BF16), otherwise f32.
        caps = capabilities(device)
        if asked == "f16" and "FP16" not in caps:
            return "bf16" if "BF16" in caps else "f32"
        if asked == "bf16" and "BF16" not in caps:
            return "f32"
    return asked


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


def _factor_text(factor: float) -> str:
    """``16`` for 16.0: how the property's value is written."""
    return f"{factor:g}"


# The CPU plugin's switch from the kernels it generates for fused subgraphs (snippets: runtime layers of type
# ``Subgraph``) to its ordinary kernels, and the layer type those kernels have in the runtime graph.
SNIPPETS = ("SNIPPETS_MODE", "DISABLE")
CACHE_PRECISION = "KV_CACHE_PRECISION"  # the precision a plugin keeps a stateful model's KV cache in
GENERATED_LAYER = "Subgraph"


def supports_property(device: str, prop: str) -> bool:
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
    if isinstance(value, ov.Type):  # hints.inference_precision: ov.Type.f32, as OpenVINO's own examples write it
        return value.get_type_name()
    return value if isinstance(value, (str, int, float, bool)) else str(value)
