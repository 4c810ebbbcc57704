"""Devices: where a model is compiled and run, behind one small protocol.

A `Device` turns an `ov.Model` into a `Compiled` that runs inputs to a list of output arrays (`infer`, or
`infer_many` for many input sets), and says what it really ran with (`DeviceInfo`: device, precision read
back from the plugin, kernels). `Device.compile` checks its argument and calls `_compile`, which subclasses
override (the Polygraphy runner pattern). A device declares what it can do as attributes, read before
compiling: `activation_precision` (the precision it stores activations in), `can_run_pieces` (pieces of a
model fed with other values: local errors, partitioned runs), `emulated`, `recorded` and `sampled`.
`Compiled` is a protocol: `OpenVINOCompiled`, the recorded-run one in `bisect_ov.capture.device`.

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

This module is the registry of names (`make_device`, `register_device`) and where the device names are
imported from; the devices live in `bisect_ov.run.device_base` (the protocol), `bisect_ov.run.openvino_device`
and `bisect_ov.run.emulated_device`.
"""

from __future__ import annotations

from typing import Any, Callable

from bisect_ov.core.errors import InputError
from bisect_ov.core.records import DeviceInfo  # re-exported: its home is the records module
from bisect_ov.run.bf16 import bf16_to_f32, kept_outputs
from bisect_ov.run.compressed import DYNAMIC_QUANTIZATION
from bisect_ov.run.device_base import Compiled, Device, infer_each
from bisect_ov.run.emulated_device import EmulatedDevice
from bisect_ov.run.openvino_device import (
    PRECISION_SUFFIXES,
    VIRTUAL_DEVICES,
    OpenVINOCompiled,
    OpenVINODevice,
    available_devices,
    capabilities,
    cpu_supports_bf16,
    listed_devices,
    shared_core,
    supports_property,
)

__all__ = ["cpu_supports_bf16", "DeviceInfo", "Compiled", "OpenVINOCompiled", "Device", "OpenVINODevice", "EmulatedDevice",
           "make_device", "register_device", "available_devices", "capabilities", "infer_each", "bf16_to_f32",
           "kept_outputs", "shared_core", "PRECISION_SUFFIXES"]

_PRECISION_KEYS = ("INFERENCE_PRECISION_HINT", "EXECUTION_MODE_HINT")


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
        ``ref``, ``target`` or ``capture`` (a target whose f32 run is exact as a reference's). The reference gets
        ``INFERENCE_PRECISION_HINT=f32`` when neither the name nor `config` chooses a precision and the device
        supports the property; an f32 reference (or capture) computes compressed weights' matrix products without
        int8 activations (``DYNAMIC_QUANTIZATION_GROUP_SIZE=0`` on models that hold such weights) unless `config`
        sets that property.

    Raises
    ------
    InputError
        Unknown device (the message lists the available ones) or precision suffix.
    """
    if isinstance(spec, Device):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        kind = type(spec)
        # The type, not the object: a repr can be kilobytes (an array passed by mistake) or say nothing useful.
        got = "an empty name" if isinstance(spec, str) else \
            f"an object of type {kind.__qualname__}" if kind.__module__ == "builtins" else \
            f"an object of type {kind.__module__}.{kind.__qualname__}"
        raise InputError(f"The {role} device must be a device name such as 'CPU' or 'GPU', or a Device; got {got}. "
                         f"Available: {available_devices()}.")
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
    if lanes and int(lanes) < 1:
        raise InputError(f"Unknown emulated device '{spec}': EMU:{precision}-accN takes N >= 1 parallel partial sums "
                         f"(EMU:{precision}-acc1: one sequential accumulator).")
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
    # AUTO/HETERO/MULTI do not list the property themselves but hand it to the device they run on.
    listed = listed_devices(device, merged) if device.split(":")[0].upper() in VIRTUAL_DEVICES else [device]
    if (role == "ref" and not any(k in merged for k in _PRECISION_KEYS) and listed
            and all(supports_property(d, "INFERENCE_PRECISION_HINT") for d in listed)):
        merged["INFERENCE_PRECISION_HINT"] = "f32"
    made = OpenVINODevice(device, merged, name=spec)
    # An f32 reference, and a capture's f32 run (a reference for another machine), computes compressed weights'
    # matrix products in f32 (`OpenVINODevice.exact_weights`), unless the user sets the property.
    f32 = PRECISION_SUFFIXES.get(str(made.config.get("INFERENCE_PRECISION_HINT", "")).lower()) == "f32"
    made.exact_weights = (role in ("ref", "capture") and f32 and DYNAMIC_QUANTIZATION not in merged and bool(listed)
                          and all(supports_property(d, DYNAMIC_QUANTIZATION) for d in listed))
    return made


register_device(lambda name: True, _openvino_device)  # the fallback: any other name is an OpenVINO device
register_device(lambda name: name.partition(":")[0].upper() in ("EMU", "EMULATED"), _emulated_device)
