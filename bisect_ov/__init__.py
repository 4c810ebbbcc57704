"""bisect_ov: find where a neural network's numbers go wrong between two devices or precisions.

The front door is `bisect(model, ref="CPU", target="GPU")`, which returns a `Report`. The building blocks
(graph walking, taps, devices, metrics, tolerances, scoring, fault injection) are public for people who need
them.
"""

from bisect_ov.analysis.metrics import METRICS, TensorStats, compare
from bisect_ov.analysis.scoring import score_graph
from bisect_ov.analysis.tolerance import Tolerance
from bisect_ov.api import bisect
from bisect_ov.capture import Capture, RecordedDevice, capture, load_capture, merge_captures
from bisect_ov.errors import BisectError, CaptureError, DeviceError, InputError, WriteError
from bisect_ov.model.graph import ModelGraph, NodeInfo
from bisect_ov.model.inject import FAULT_KINDS, inject_fault
from bisect_ov.model.load import load_model
from bisect_ov.model.runtime import RuntimeGraph, read_runtime_graph
from bisect_ov.model.taps import Tap, tap_model
from bisect_ov.report.report import NodeResult, OutputResult, Report
from bisect_ov.run.devices import Device, DeviceInfo, EmulatedDevice, OpenVINODevice, make_device, register_device
from bisect_ov.run.inputs import prepare_inputs
from bisect_ov.samples import Samples

__version__ = "0.2.0"

__all__ = [
    "bisect",
    "Report",
    "NodeResult",
    "OutputResult",
    "inject_fault",
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
    "capture",
    "load_capture",
    "merge_captures",
    "Capture",
    "RecordedDevice",
    "Samples",
    "RuntimeGraph",
    "read_runtime_graph",
    "compare",
    "TensorStats",
    "METRICS",
    "Tolerance",
    "score_graph",
    "BisectError",
    "InputError",
    "DeviceError",
    "CaptureError",
    "WriteError",
    "__version__",
]
