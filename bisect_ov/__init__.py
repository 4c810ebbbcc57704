"""bisect_ov: find where a neural network's numbers go wrong between two devices or precisions.

The front door is `bisect(model, ref="CPU", target="GPU")`, which returns a `Report`. The building blocks
(graph walking, taps, devices, metrics, tolerances, scoring, fault injection, recorded runs) are public for
people who need them.

Names are imported when first used (a module `__getattr__`): ``from bisect_ov import Report`` reads a saved
report with numpy alone, where OpenVINO is not installed; ``bisect``, the devices and the model tools import
OpenVINO when they are asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "bisect": "bisect_ov.pipeline.api",
    "bisect_pipeline": "bisect_ov.components.api",
    "Report": "bisect_ov.report.report",
    "PipelineReport": "bisect_ov.report.pipeline",
    "NodeResult": "bisect_ov.report.results",
    "OutputResult": "bisect_ov.report.results",
    "inject_fault": "bisect_ov.model.inject",
    "clamp_after": "bisect_ov.model.clamping",
    "FAULT_KINDS": "bisect_ov.model.inject",
    "load_model": "bisect_ov.model.load",
    "ModelGraph": "bisect_ov.model.graph",
    "NodeInfo": "bisect_ov.model.graph",
    "Tap": "bisect_ov.model.taps",
    "tap_model": "bisect_ov.model.taps",
    "Device": "bisect_ov.run.devices",
    "DeviceInfo": "bisect_ov.core.records",
    "OpenVINODevice": "bisect_ov.run.devices",
    "EmulatedDevice": "bisect_ov.run.devices",
    "make_device": "bisect_ov.run.devices",
    "register_device": "bisect_ov.run.devices",
    "prepare_inputs": "bisect_ov.run.inputs",
    "record": "bisect_ov.capture.write",
    "Torch": "bisect_ov.frameworks.torch_side",
    "ORT": "bisect_ov.frameworks.ort_side",
    "load_capture": "bisect_ov.capture.read",
    "merge_captures": "bisect_ov.capture.read",
    "Capture": "bisect_ov.capture.read",
    "RecordedDevice": "bisect_ov.capture.device",
    "Samples": "bisect_ov.samples.sources",
    "RuntimeGraph": "bisect_ov.model.runtime",
    "read_runtime_graph": "bisect_ov.model.runtime",
    "compare": "bisect_ov.analysis.metrics",
    "TensorStats": "bisect_ov.analysis.metrics",
    "METRICS": "bisect_ov.analysis.metrics",
    "Tolerance": "bisect_ov.analysis.tolerance",
    "score_graph": "bisect_ov.analysis.scoring",
    "judge": "bisect_ov.analysis.judge",
    "Evidence": "bisect_ov.analysis.judge",
    "Verdict": "bisect_ov.analysis.judge",
    "Topology": "bisect_ov.analysis.judge",
    "BisectError": "bisect_ov.core.errors",
    "InputError": "bisect_ov.core.errors",
    "DeviceError": "bisect_ov.core.errors",
    "CaptureError": "bisect_ov.core.errors",
    "WriteError": "bisect_ov.core.errors",
}

__all__ = [
    "bisect",
    "bisect_pipeline",
    "Report",
    "PipelineReport",
    "NodeResult",
    "OutputResult",
    "inject_fault",
    "clamp_after",
    "FAULT_KINDS",
    "load_model",
    "ModelGraph",
    "NodeInfo",
    "Tap",
    "tap_model",
    "Device",
    "DeviceInfo",
    "OpenVINODevice",
    "EmulatedDevice",
    "make_device",
    "register_device",
    "prepare_inputs",
    "record",
    "load_capture",
    "merge_captures",
    "Capture",
    "RecordedDevice",
    "Torch",
    "ORT",
    "Samples",
    "RuntimeGraph",
    "read_runtime_graph",
    "compare",
    "TensorStats",
    "METRICS",
    "Tolerance",
    "score_graph",
    "judge",
    "Evidence",
    "Verdict",
    "Topology",
    "BisectError",
    "InputError",
    "DeviceError",
    "CaptureError",
    "WriteError",
    "__version__",
]

# Device names resolve through a registry; recorded runs (``capture:FILE.npz``) register theirs when
# `bisect_ov.capture` is imported, so whatever hands out devices imports it first.
_NEEDS_RECORDED_DEVICES = {"bisect_ov.run.devices", "bisect_ov.pipeline.api"}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bisect_ov' has no attribute {name!r}")
    if module in _NEEDS_RECORDED_DEVICES:
        importlib.import_module("bisect_ov.capture")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # what static checkers and IDEs see; at run time the names above come from `__getattr__`
    from bisect_ov.analysis.judge import Evidence, Topology, Verdict, judge
    from bisect_ov.analysis.metrics import METRICS, TensorStats, compare
    from bisect_ov.analysis.scoring import score_graph
    from bisect_ov.analysis.tolerance import Tolerance
    from bisect_ov.capture.device import RecordedDevice
    from bisect_ov.capture.read import Capture, load_capture, merge_captures
    from bisect_ov.capture.write import record
    from bisect_ov.components.api import bisect_pipeline
    from bisect_ov.core.errors import BisectError, CaptureError, DeviceError, InputError, WriteError
    from bisect_ov.core.records import DeviceInfo
    from bisect_ov.frameworks.ort_side import ORT
    from bisect_ov.frameworks.torch_side import Torch
    from bisect_ov.model.graph import ModelGraph, NodeInfo
    from bisect_ov.model.inject import FAULT_KINDS, inject_fault
    from bisect_ov.model.load import load_model
    from bisect_ov.model.runtime import RuntimeGraph, read_runtime_graph
    from bisect_ov.model.taps import Tap, tap_model
    from bisect_ov.pipeline.api import bisect
    from bisect_ov.report.pipeline import PipelineReport
    from bisect_ov.report.report import NodeResult, OutputResult, Report
    from bisect_ov.run.devices import Device, EmulatedDevice, OpenVINODevice, make_device, register_device
    from bisect_ov.run.inputs import prepare_inputs
    from bisect_ov.samples.sources import Samples
