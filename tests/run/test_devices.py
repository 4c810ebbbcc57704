import numpy as np
import pytest

from bisect_ov import bisect
from bisect_ov.core.errors import DeviceError, InputError
from bisect_ov.run import openvino_device
from bisect_ov.run.devices import EmulatedDevice, OpenVINODevice, make_device
from tests.conftest import cpu_bf16_precision, cpu_default_precision, cpu_f16_precision, needs_bf16, tiny_chain


def test_unknown_device_lists_available():
    with pytest.raises(InputError, match=r"Unknown device 'TPU'. Available: \['CPU'"):
        make_device("TPU")


def test_a_device_that_is_no_name_is_named_by_its_type_not_its_repr():
    big = np.zeros(600)  # its repr is kilobytes
    with pytest.raises(InputError) as caught:
        make_device(big, role="ref")
    message = str(caught.value)
    assert "The ref device must be a device name such as 'CPU'" in message and "numpy.ndarray" in message
    assert len(message) < 200 and "0., 0." not in message
    with pytest.raises(InputError, match="The target device .* got an object of type object. Available"):
        make_device(object())
    with pytest.raises(InputError, match="got an empty name"):
        make_device("  ")


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


def test_cpu_f16_is_reported_as_what_the_plugin_ran():
    """f16 on a CPU with AVX512_FP16/AMX_FP16; elsewhere the plugin falls back (bf16, or f32) and the device
    info says that f16 was asked for."""
    ran = cpu_f16_precision()
    info = make_device("CPU:f16").compile(tiny_chain()).info
    assert info.precision == ran and info.requested_precision == "f16"
    if ran == "f16":
        assert "asked for" not in info.note, info.note
    else:
        assert f"asked for f16; the plugin ran {ran}" in info.note


def test_default_cpu_target_runs_the_plugins_default_precision():
    default = cpu_default_precision()
    info = OpenVINODevice("CPU").compile(tiny_chain()).info
    assert info.precision == default and info.precision_counts.get(default, 0) > 0


# ----- the device protocol ------------------------------------------------------------------------------------


def test_devices_declare_their_capabilities(tmp_path):
    from bisect_ov.capture import RecordedDevice, SampledDevice, record

    f32, emu = make_device("CPU:f32"), make_device("EMU:f16")
    assert (f32.activation_precision, f32.can_run_pieces, f32.emulated, f32.recorded) == ("f32", True, False, False)
    assert (emu.activation_precision, emu.can_run_pieces, emu.emulated, emu.recorded) == ("f32", True, True, False)
    recorded = make_device(f"capture:{record(tiny_chain(), 'CPU:f32', path=tmp_path / 'c.npz')}")
    assert isinstance(recorded, RecordedDevice)
    assert (recorded.activation_precision, recorded.can_run_pieces, recorded.emulated, recorded.recorded) == ("", False, False, True)
    sampled = SampledDevice("EMU:f16", 16)
    assert (sampled.can_run_pieces, sampled.emulated, sampled.sampled) == (False, True, True)


def test_activation_precision_is_predicted_before_compiling():
    assert make_device("CPU", role="target").activation_precision == cpu_default_precision()
    assert make_device("CPU:f16").activation_precision == cpu_f16_precision()
    assert make_device("CPU:accuracy").activation_precision == "f32"
    assert make_device("CPU:f32").activation_precision == "f32"


@pytest.mark.parametrize("caps, f16, bf16", [(["FP32", "BF16", "FP16", "INT8"], "f16", "bf16"),
                                            (["FP32", "BF16", "INT8"], "bf16", "bf16"),
                                            (["FP32", "FP16"], "f16", "f32"),
                                            (["FP32", "INT8"], "f32", "f32"), ([], "f32", "f32")])
def test_cpu_precision_prediction_reads_the_capabilities(monkeypatch, caps, f16, bf16):
    """Every branch, whatever this CPU has: the prediction follows OPTIMIZATION_CAPABILITIES (a CPU without
    BF16 runs ``CPU:bf16`` in f32, and its taps must not be rounded to bf16)."""
    monkeypatch.setattr(openvino_device, "capabilities", lambda device: list(caps))
    assert (cpu_f16_precision(caps), cpu_bf16_precision(caps)) == (f16, bf16)
    assert make_device("CPU:f16").activation_precision == make_device("CPU:fp16").activation_precision == f16
    assert make_device("CPU", {"INFERENCE_PRECISION_HINT": "bf16"}).activation_precision == bf16
    assert make_device("CPU:bf16").activation_precision == bf16
    assert make_device("CPU:f16", {"EXECUTION_MODE_HINT": "ACCURACY"}).activation_precision == "f32"
    assert make_device("CPU:f32").activation_precision == "f32"


def test_cpu_bf16_is_reported_as_what_the_plugin_ran_and_its_taps_hold_it():
    ran = cpu_bf16_precision()
    device = make_device("CPU:bf16")
    assert device.activation_precision == ran
    report = bisect(tiny_chain(), "CPU:f32", device, progress=False)
    assert report.target.precision == ran
    if ran == "f32":  # the plugin's fallback: the taps hold f32 values, not bf16-rounded ones
        assert "asked for bf16; the plugin ran f32" in report.target.note
        assert max(n.error for n in report.nodes) < 1e-6, report.to_text()


def test_infer_many_gives_what_infer_gives_one_by_one(tmp_path):
    from bisect_ov.capture import RecordedDevice, record

    model = tiny_chain()
    rng = np.random.default_rng(0)
    samples = [[rng.standard_normal((1, 8)).astype(np.float32)] for _ in range(5)]
    for device in ("CPU:f32", "CPU:bf16", "EMU:f16"):
        compiled = make_device(device).compile(model)
        many = compiled.infer_many(samples, jobs=2)
        assert len(many) == 5
        for arrays, outs in zip(samples, many):
            np.testing.assert_array_equal(outs[0], compiled.infer(arrays, share_outputs=False)[0])
    played = RecordedDevice(record(model, "CPU:f32", samples[0], tmp_path / "c.npz")).compile(model)
    np.testing.assert_array_equal(played.infer_many(samples[:1])[0][0], make_device("CPU:f32").compile(model).infer(samples[0])[0])


def test_registered_device_names_resolve_through_make_device():
    from bisect_ov.run.devices import EmulatedDevice, register_device

    register_device("TESTEMU:", lambda name, config, role: EmulatedDevice("bf16", name=name))
    device = make_device("testemu:anything")
    assert isinstance(device, EmulatedDevice) and device.name == "testemu:anything" and device.precision == "bf16"
    with pytest.raises(InputError, match="prefix or a predicate"):
        register_device(3, lambda *a: None)  # type: ignore[arg-type]


def test_a_recorded_run_takes_no_compile_properties(tmp_path):
    with pytest.raises(InputError, match="takes no compile properties"):
        make_device("capture:x.npz", {"INFERENCE_PRECISION_HINT": "f32"})


def _bf16_tapped_chain():
    """A small chain with every tensor tapped, compiled on the CPU in bf16; its input, and copies of one run."""
    from bisect_ov.model.graph import ModelGraph
    from bisect_ov.model.taps import default_taps, tap_model

    model = tiny_chain(depth=3)
    tapped = tap_model(ModelGraph(model), default_taps(ModelGraph(model)))
    compiled = make_device("CPU:bf16").compile(tapped.model, taps=tapped.added_outputs)
    x = [np.random.default_rng(0).standard_normal((1, 8)).astype(np.float32)]
    copies = [np.array(a) for a in compiled.infer(x, share_outputs=False)]
    return model, tapped, compiled, x, copies


@needs_bf16
def test_bf16_taps_read_as_float32_when_read_and_match_the_copies():
    _, tapped, compiled, x, copies = _bf16_tapped_chain()
    views = compiled.infer(x)
    assert not isinstance(views, list)  # bf16 taps: widened when read, not all at once
    assert len(views) == len(copies) == len(tapped.model.outputs)
    for view, copy in zip(views, copies):
        assert view.dtype == np.float32 and np.array_equal(view, copy)
    assert [np.array_equal(a, b) for a, b in zip(views[1:3], copies[1:3])] == [True, True]
    assert np.array_equal(views[-1], copies[-1])


@needs_bf16
def test_kept_outputs_hold_bf16_taps_as_bits_at_half_the_bytes_past_the_compile():
    import gc

    from bisect_ov.run.devices import bf16_to_f32, kept_outputs

    model, _, compiled, x, copies = _bf16_tapped_chain()
    kept, bf16 = kept_outputs(compiled.infer(x))
    del compiled  # the kept arrays outlive the compile, through another compile's run
    gc.collect()
    again = make_device("CPU:bf16").compile(model)
    again.infer([np.zeros((1, 8), np.float32)])
    assert bf16 and bf16 == {i for i, a in enumerate(kept) if a.dtype == np.float16}
    for i, (held, copy) in enumerate(zip(kept, copies)):
        if i in bf16:
            assert held.nbytes * 2 == copy.nbytes and np.array_equal(bf16_to_f32(held), copy)
        else:
            assert np.array_equal(held, copy)
    f32 = make_device("CPU:f32").compile(model)
    plain, none = kept_outputs(f32.infer(x))
    assert none == frozenset() and plain[0].dtype == np.float32


def test_a_compile_interrupted_inside_a_python_op_raises_keyboard_interrupt(monkeypatch):
    """OpenVINO calls the emulated ops' Python methods while it compiles; a Ctrl-C there comes back from C++ as
    a RuntimeError whose text is 'KeyboardInterrupt: ...'. It must reach the caller as the interrupt it is (not
    a DeviceError that a fallback could swallow)."""
    import os
    import signal
    import threading

    from bisect_ov.run import emulate

    real = emulate.EmulatedRound.clone_with_new_inputs
    calls = []

    def interrupting(self, new_inputs):
        calls.append(1)
        if len(calls) == 2 and threading.current_thread() is threading.main_thread():
            os.kill(os.getpid(), signal.SIGINT)
        return real(self, new_inputs)

    monkeypatch.setattr(emulate.EmulatedRound, "clone_with_new_inputs", interrupting)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, whatever runs the tests
    try:
        with pytest.raises(KeyboardInterrupt) as caught:
            make_device("EMU:f16").compile(tiny_chain())
    finally:
        signal.signal(signal.SIGINT, previous)
    assert isinstance(caught.value.__cause__, RuntimeError) and "KeyboardInterrupt" in str(caught.value.__cause__)
    assert len(calls) >= 2


def test_interrupted_reads_the_cause_chain_and_pybind11s_text():
    from bisect_ov.core.errors import interrupted

    assert interrupted(KeyboardInterrupt())
    assert interrupted(RuntimeError("Exception from src/inference/src/cpp/core.cpp:117:\nKeyboardInterrupt: <EMPTY MESSAGE>\n"))
    wrapped = DeviceError("Compiling failed")
    wrapped.__cause__ = RuntimeError("KeyboardInterrupt")
    assert interrupted(wrapped)
    assert not interrupted(RuntimeError("node 'KeyboardInterrupt_3' has no input"))
    assert not interrupted(DeviceError("Inference failed")) and not interrupted(None)


def _int8_weight_matmul():
    """x @ W with W stored as int8 and a per-column scale (the weight-compression pattern NNCF writes)."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    q = rng.integers(-127, 128, (256, 256)).astype(np.int8)
    scale = rng.uniform(0.001, 0.01, (1, 256)).astype(np.float32)
    x = ops.parameter([1, 16, 256], np.float32, name="x")
    weight = ops.multiply(ops.convert(ops.constant(q), ov.Type.f32), ops.constant(scale))
    return ov.Model([ops.matmul(x, weight, False, False).output(0)], [x], "int8_weights"), q.astype(np.float32) * scale


def test_an_f32_reference_does_not_quantize_activations_for_compressed_weights():
    """The CPU quantizes activations to int8 for compressed-weight matrix products even in f32: a reference that
    did carried 5.3e-03 on an int8-weight Llama and named its first projections against EMU:f16."""
    model, weight = _int8_weight_matmul()
    x = np.random.default_rng(1).standard_normal((1, 16, 256)).astype(np.float32)
    exact = x.astype(np.float64) @ weight.astype(np.float64)

    def error(device) -> float:
        out = device._compile(model).infer([x], share_outputs=False)[0]
        return float(np.linalg.norm(out - exact) / np.linalg.norm(exact))

    ref = make_device("CPU:f32", role="ref")
    assert error(ref) < 1e-5
    compiled = ref._compile(model)
    supported = "DYNAMIC_QUANTIZATION_GROUP_SIZE" in openvino_device.shared_core().get_property("CPU", "SUPPORTED_PROPERTIES")
    assert compiled.info.config.get("DYNAMIC_QUANTIZATION_GROUP_SIZE") == ("0" if supported else None)  # said
    assert "DYNAMIC_QUANTIZATION_GROUP_SIZE" not in ref._compile(tiny_chain()).info.config  # no such weights: unchanged
    assert not make_device("CPU:f32", {"DYNAMIC_QUANTIZATION_GROUP_SIZE": "32"}, role="ref").exact_weights
    assert not make_device("CPU:f32", role="target").exact_weights and not make_device("CPU:bf16", role="ref").exact_weights


def test_compressed_weights_are_said_and_every_f32_spelling_or_capture_is_exact():
    """The report said "CPU:f32 ran f32" on both sides while only the reference ran compressed weights' products
    exactly; "FP32", ov.Type.f32 and a capture's "CPU:f32" lost the setting (the capture, used as a reference on
    another machine, then read DIVERGES)."""
    import openvino as ov

    from bisect_ov.run.compressed import quantizing

    model, _ = _int8_weight_matmul()
    ref = make_device("CPU:f32", role="ref")._compile(model)
    target = make_device("CPU:f32", role="target")._compile(model)
    if ref.info.config.get("DYNAMIC_QUANTIZATION_GROUP_SIZE") == "0":
        assert "activations not quantized" in ref.info.note
    group = quantizing(target.compiled, model, "CPU")
    assert ("quantized to int8 in groups of" in target.info.note) == bool(group)
    assert "quantized" not in make_device("CPU:f32", role="target")._compile(tiny_chain()).info.note
    exact = make_device("CPU:f32", role="ref").exact_weights
    for spec, config, role in (("CPU", {"INFERENCE_PRECISION_HINT": "FP32"}, "ref"),
                               ("CPU", {"INFERENCE_PRECISION_HINT": ov.Type.f32}, "ref"), ("CPU:f32", {}, "capture")):
        assert make_device(spec, config, role=role).exact_weights == exact
    assert not make_device("CPU", role="capture").exact_weights  # the plugin's own default, as asked
    assert make_device("CPU", {"INFERENCE_PRECISION_HINT": ov.Type.f32}, role="ref").config["INFERENCE_PRECISION_HINT"] == "f32"
