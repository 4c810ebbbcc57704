"""Recorded runs: capture a model's tensors on one machine into one portable file, and play it back on another.

* `bisect_ov.capture.format`: the file format's constants, header helpers and streaming writer;
* `bisect_ov.capture.write`: `record`, which records a run into a capture file;
* `bisect_ov.capture.read`: `load_capture`, `merge_captures` and `Capture`, which read files;
* `bisect_ov.capture.device`: `RecordedDevice` (a capture as the ``ref=`` or ``target=`` of `bisect()`),
  `SampledDevice` and `plan_recorded`. Importing this package registers the ``capture:`` device names.

Data flows one way: format <- write, format <- read <- device; none of them imports the orchestration
modules (`bisect_ov.pipeline`, `bisect_ov.engine`).
"""

from bisect_ov.capture.device import RecordedDevice, RecordedPlan, SampledDevice, plan_recorded, sampled_like
from bisect_ov.capture.read import Capture, load_capture, merge_captures
from bisect_ov.capture.write import record

__all__ = ["record", "load_capture", "merge_captures", "Capture", "RecordedDevice", "SampledDevice", "sampled_like",
           "RecordedPlan", "plan_recorded"]
