from bisect_ov import bisect, inject_fault
from bisect_ov.capture.device import RecordedDevice
from bisect_ov.capture.write import record
from bisect_ov.cli import main
from bisect_ov.zoo import synthetic


def test_stats_defaults(tmp_path):
    model = synthetic.conv_bn_net()
    inputs = synthetic.sample_inputs(model, seed=1)
    path = record(model, "CPU:f32", inputs, tmp_path / "s.npz", mode="stats", sample=256)
    r = bisect(model, ref=RecordedDevice(path), target="CPU:f32", target_model=inject_fault(model, "res/conv_b"), progress=False)
    assert r.first_divergence.name == "res/conv_b"
    assert any("stats capture" in n for n in r.notes), r.notes

def test_stats_integer_conv(tmp_path):
    model = synthetic.int_conv(channels=300)
    x = synthetic.int_conv_input(channels=300)
    path = record(model, "CPU:f32", [x], tmp_path / "s.npz", mode="stats", sample=16)
    r = bisect(model, ref=RecordedDevice(path), target="EMU:f16", progress=False)
    assert r.first_divergence.name == "conv"

def test_full_integer_conv(tmp_path):
    model = synthetic.int_conv(channels=300)
    x = synthetic.int_conv_input(channels=300)
    path = record(model, "CPU:f32", [x], tmp_path / "f.npz")
    r = bisect(model, ref=RecordedDevice(path), target="EMU:f16", progress=False)
    live = bisect(model, ref="CPU:f32", target="EMU:f16", inputs=[x], impact=0, progress=False)
    assert r.first_keys == live.first_keys
    assert any("computes on integers" in n for n in r.notes)

def test_target_recorded_twin_inputs_none(tmp_path):
    model = synthetic.chain()
    faulty = inject_fault(model, "layer5/tanh")
    path = record(faulty, "CPU:f32", synthetic.sample_inputs(faulty, seed=3), tmp_path / "t.npz")
    r = bisect(model, ref="CPU:f32", target=RecordedDevice(path), target_model=faulty, progress=False)
    assert r.first_divergence.name == "layer5/tanh"

def test_cli(tmp_path, capsys):
    import openvino as ov
    xml = tmp_path / "chain.xml"
    ov.save_model(synthetic.chain(), str(xml))
    out = tmp_path / "a.npz"
    assert main(["capture", str(xml), "-o", str(out), "--device", "CPU:f32", "-q"]) == 0
    assert f"--ref capture:{out}" in capsys.readouterr().out
    assert main([str(xml), "--ref", f"capture:{out}", "--target", "CPU:f32", "-q"]) == 0
    assert main([str(xml), "--ref", str(out), "--target", "EMU:f16", "-q", "--tolerance", "1e-5"]) == 1
    assert main([str(xml), "--ref", str(tmp_path / "missing.npz"), "--target", "CPU:f32", "-q"]) == 2
    assert "Capture file not found" in capsys.readouterr().err


def test_a_stateful_model_is_refused_by_name_not_a_compile_failure(tmp_path):
    """Recording compiled the stateful model with taps, which the plugin refuses ("Incorrect output port number
    for node Assign_..."), and said so as a device failure."""
    import numpy as np
    import openvino as ov
    import openvino.opset13 as ops
    import pytest
    from openvino.op.util import Variable, VariableInfo

    from bisect_ov import InputError

    x = ops.parameter([1, 4], np.float32, name="x")
    info = VariableInfo()
    info.data_shape, info.data_type, info.variable_id = ov.PartialShape([1, 4]), ov.Type.f32, "cache"
    var = Variable(info)
    read = ops.read_value(ops.constant(np.zeros((1, 4), np.float32)), var)
    total = ops.add(read, x)
    model = ov.Model([ops.result(total)], [ops.assign(total, var)], [x], "stateful")
    with pytest.raises(InputError, match="is stateful.*records models without variables only"):
        record(model, "CPU:f32", None, tmp_path / "c.npz")
    assert not (tmp_path / "c.npz").exists()


def test_onnx_runtime_is_recorded_by_its_name_as_bisect_takes_it(tmp_path):
    """record(model, "ORT") said "Unknown device 'ORT'" though bisect() takes the name (ORT(path) worked)."""
    import onnx
    import pytest

    pytest.importorskip("onnxruntime")
    from tests.model.test_load import _onnx_model

    path = tmp_path / "m.onnx"
    onnx.save(_onnx_model(), path)
    capture = record(str(path), "ORT", None, tmp_path / "ort.npz")
    replayed = bisect(str(path), f"capture:{capture}", "CPU:f32", progress=False)
    live = bisect(str(path), "ORT", "CPU:f32", progress=False)
    assert replayed.ref.name.startswith("capture:") and [n.error for n in replayed.nodes] == [n.error for n in live.nodes]
