"""How each side of a comparison is written into a reproducer: the device and properties ``run.py`` compiles
with, which model file it runs, and what a side that cannot be rebuilt outside bisect_ov is refused with.

A plain OpenVINO device (`OpenVINODevice`) is written as its device name and properties. An emulated device
(``EMU:f16``, ``EMU:bf16``, and the ``-acc`` devices for Softmax, ReduceSum and ReduceMean) is the CPU in f32
running the piece with the rounding and the low-precision accumulation written in opset ops
(`bisect_ov.run.emulate_ir.saveable_emulation`), so the folder runs with OpenVINO alone; on any other device
``run.py`` runs the piece itself. A recorded reference (``capture:``) is written as the device it was
recorded on, not run by default: its recorded values are the expected ones; a framework reference (PyTorch, ONNX
Runtime) likewise, its values in the whole model the expected ones. A recorded, sampled or framework target, an
``-acc`` emulation of MVN, MatMul or attention, and device classes of the user's own are refused:
``run.py`` could not compute what they computed.
"""

from __future__ import annotations

from typing import Any

from bisect_ov.core.records import DeviceInfo
from bisect_ov.run.devices import Device

__all__ = ["side_spec"]


def side_spec(device: Device, info: DeviceInfo, role: str) -> dict[str, Any]:
    """The ``repro.json`` entry of one side (without its model files); `role` is ``reference`` or ``target``.

    Each device says how it is rebuilt (`Device.repro_side`).

    Raises
    ------
    InputError
        A side ``run.py`` cannot rebuild (see the module docstring); the message says what to run instead.
    """
    spec: dict[str, Any] = {"label": info.label, "name": info.name, "precision": info.precision,
                            "full_name": info.full_name, "runnable": True, "emulated": None,
                            "openvino": info.openvino_version}
    return {**spec, **device.repro_side(info, role)}
