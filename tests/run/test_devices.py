import numpy as np
import pytest

from bisect_ov.errors import DeviceError, InputError
from bisect_ov.run.devices import EmulatedDevice, OpenVINODevice, make_device
from tests.conftest import needs_bf16, tiny_chain


def test_unknown_device_lists_available():
    with pytest.raises(InputError, match=r"Unknown device 'TPU'. Available: \['CPU'"):
        make_device("TPU")


def test_reference_gets_f32_unless_chosen():
    assert make_device("CPU", role="ref").config["INFERENCE_PRECISION_HINT"] == "f32"
    assert "INFERENCE_PRECISION_HINT" not in make_device("CPU", role="target").config
    assert make_device("CPU", {"EXECUTION_MODE_HINT": "ACCURACY"}, role="ref").config == {"EXECUTION_MODE_HINT": "ACCURACY"}
    assert make_device("CPU:bf16", role="ref").config["INFERENCE_PRECISION_HINT"] == "bf16"
    assert make_device("CPU:accuracy").config["EXECUTION_MODE_HINT"] == "ACCURACY"


def test_name_parsing():
    assert isinstance(make_device("EMU:f16"), EmulatedDevice)
    assert make_device("EMU:bf16-acc").reductions
    with pytest.raises(InputError, match="Unknown precision 'f8'"):
        make_device("CPU:f8")
    with pytest.raises(InputError, match="Unknown emulated device"):
        make_device("EMU:f8")


def test_f32_device_reports_what_it_ran():
    compiled = make_device("CPU:f32").compile(tiny_chain())
    assert compiled.info.precision == "f32" and compiled.info.note == ""
    out = compiled.infer([np.ones((1, 8), np.float32)])
    assert out[0].shape == (1, 8)
    assert compiled.runtime.layers  # the CPU plugin exposes its runtime graph


def test_infer_failure_is_a_device_error():
    compiled = make_device("CPU:f32").compile(tiny_chain())
    with pytest.raises(DeviceError, match="Inference failed"):
        compiled.infer([np.ones((3, 3), np.float32)])


@needs_bf16
def test_f16_on_a_bf16_cpu_is_reported_as_bf16():
    info = make_device("CPU:f16").compile(tiny_chain()).info
    assert info.precision == "bf16" and "asked for f16" in info.note


@needs_bf16
def test_default_cpu_target_runs_bf16_here():
    info = OpenVINODevice("CPU").compile(tiny_chain()).info
    assert info.precision == "bf16" and info.precision_counts.get("bf16", 0) > 0
