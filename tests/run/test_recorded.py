"""Recorded runs: capture on one machine (here: one process), play back as `ref=`/`target=` of `bisect()`."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import onnx
import pytest

import bisect_ov
from bisect_ov import bisect, inject_fault
from bisect_ov.capture import format as recorded
from bisect_ov.capture.device import RecordedDevice, SampledDevice, plan_recorded, sampled_like
from bisect_ov.capture.format import (
    CPU_FLAGS,
    SCHEMA_VERSION,
    inputs_hash,
    sample_array,
    sample_positions,
    tensor_summary,
)
from bisect_ov.capture.read import load_capture, merge_captures
from bisect_ov.capture.write import record
from bisect_ov.core.errors import CaptureError, DeviceError, InputError
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.taps import Tap, default_taps, tap_model
from bisect_ov.run.devices import Device, make_device
from bisect_ov.run.inputs import prepare_inputs
from bisect_ov.zoo import synthetic
from tests.conftest import tiny_chain, unnamed_onnx


@pytest.fixture
def chain_capture(tmp_path) -> tuple[object, pathlib.Path]:
    model = tiny_chain()
    return model, record(model, "CPU:f32", path=tmp_path / "chain.npz")


def _live_taps(model, inputs):
    """Every candidate tensor of `model` from one live CPU:f32 compile, by tap."""
    graph = ModelGraph(model)
    tapped = tap_model(graph, default_taps(graph))
    out = make_device("CPU:f32").compile(tapped.model, taps=tapped.added_outputs).infer(inputs, share_outputs=False)
    return {tap: out[i] for tap, i in zip(tapped.taps, tapped.tap_outputs)}


# ----- capture and load ---------------------------------------------------------------------------------------


def test_round_trip_header_and_tensors(chain_capture):
    model, path = chain_capture
    cap = load_capture(path)
    h = cap.header
    assert h["schema_version"] == SCHEMA_VERSION and h["format"] == "bisect_ov.capture"
    assert h["bisect_ov_version"] == bisect_ov.__version__
    import openvino as ov

    assert h["openvino_version"] == ov.get_version()
    assert cap.structure_hash == ModelGraph(model).structure_hash()
    assert cap.model_label == "tiny_chain"
    assert h["device"]["spec"] == "CPU:f32" and h["device"]["role"] == "target"
    assert cap.device_info.precision == "f32" and cap.device_info.full_name
    if sys.platform.startswith("linux"):
        assert set(h["host"]["cpu_flags"]) <= set(CPU_FLAGS)
    assert "hostname" not in json.dumps(h) and os.uname().nodename not in json.dumps(h["host"])
    # The recorded kernels, keyed by the user's names.
    assert "mm0" in h["runtime"]["nodes"] and h["runtime"]["nodes"]["mm0"]["kernel"]
    assert cap.runtime.layer_of("mm0") is not None
    assert cap.mode == "full" and cap.sample_size == 4096
    assert [str(t) for t in cap.taps] == [f"{k}{i}" for i in range(4) for k in ("mm", "tanh")]
    first = h["taps"][0]
    assert (first["key"], first["port"], first["op_type"], first["shape"], first["dtype"]) == ("mm0", 0, "MatMul", [1, 8], "f32")
    inputs = prepare_inputs(model, None, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(cap.inputs, inputs))
    assert h["inputs_hash"] == inputs_hash(cap.input_names, inputs) == cap.samples[0]["inputs_hash"]
    live = _live_taps(model, inputs)
    for tap in cap.taps:
        np.testing.assert_array_equal(cap.tensor(tap.key, tap.port), live[tap])
    s = cap.stats("tanh1")
    ref = live[Tap("tanh1")]
    assert s["numel"] == 8 and s["nan"] == s["inf"] == 0
    assert s["min"] == pytest.approx(float(ref.min())) and s["max"] == pytest.approx(float(ref.max()))
    assert s["mean"] == pytest.approx(float(ref.mean()), rel=1e-6) and s["std"] == pytest.approx(float(ref.std()), rel=1e-5)
    plain = make_device("CPU:f32").compile(model).infer(inputs)
    np.testing.assert_array_equal(cap.outputs[0], plain[0])


def test_fusion_boundaries_recorded_in_their_own_pass(tmp_path):
    """Tensors leaving a fusion group come from compiles that keep the plain run's fusions."""
    from bisect_ov.model.fusion import fusion_boundaries
    from bisect_ov.model.match import identity_match

    model = synthetic.conv_bn_net()
    cap = load_capture(record(model, "CPU:f32", path=tmp_path / "c.npz"))
    graph = ModelGraph(model)
    boundaries = {str(t) for t in fusion_boundaries(graph, graph, identity_match(graph), cap.runtime)[0]}
    assert 0 < cap.header["passes"]["fusion"] == len(boundaries) < len(cap.taps)
    assert {t["key"] for t in cap.header["taps"] if t["pass"] == "fusion"} == boundaries
    assert cap.header["compiles"] == 3
    emulated = load_capture(record(tiny_chain(), "EMU:f16", path=tmp_path / "e.npz"))
    assert emulated.header["passes"] == {"fusion": 0, "full": 8}  # its runtime graph is the f32 rewrite's


def test_file_is_a_plain_npz_without_pickle(chain_capture):
    _, path = chain_capture
    with np.load(path, allow_pickle=False) as data:
        header = json.loads(data["__header__"][()].decode())
        assert header["schema_version"] == SCHEMA_VERSION
        assert {"input/0", "o/0", "t/0", "t/7"} <= set(data.files)
        assert data["t/0"].dtype == np.float32


def test_capture_defaults_to_what_the_device_runs(tmp_path):
    """role="target": plain CPU runs the plugin's default precision, not the f32 a reference would get."""
    path = record(tiny_chain(), "CPU", path=tmp_path / "c.npz")
    default = make_device("CPU", role="target").compile(tiny_chain()).info.precision
    assert load_capture(path).device_info.precision == default
    assert "INFERENCE_PRECISION_HINT" not in load_capture(path).header["device"]["info"]["config"]


def test_bad_options(tmp_path):
    with pytest.raises(InputError, match="Unknown capture mode"):
        record(tiny_chain(), "CPU:f32", path=tmp_path / "x.npz", mode="half")
    with pytest.raises(InputError, match="sample must be a positive integer"):
        record(tiny_chain(), "CPU:f32", path=tmp_path / "x.npz", mode="stats", sample=0)
    with pytest.raises(CaptureError, match="is a folder"):
        record(tiny_chain(), "CPU:f32", path=tmp_path)
    with pytest.raises(CaptureError, match="does not exist"):
        record(tiny_chain(), "CPU:f32", path=tmp_path / "missing" / "x.npz")
    assert list(tmp_path.iterdir()) == []


# ----- bad files ----------------------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(CaptureError, match="Capture file not found"):
        load_capture(tmp_path / "nope.npz")


def test_truncated_file(chain_capture, tmp_path):
    _, path = chain_capture
    data = path.read_bytes()
    cut = tmp_path / "cut.npz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(CaptureError, match="not a readable capture: not an .npz file, or truncated or corrupted"):
        load_capture(cut)
    short = tmp_path / "short.npz"
    short.write_bytes(data[:-10])
    with pytest.raises(CaptureError, match="truncated or corrupted"):
        load_capture(short)


def test_random_bytes(tmp_path):
    path = tmp_path / "noise.npz"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(CaptureError, match="not a readable capture"):
        load_capture(path)


def test_corrupted_member_is_a_capture_error(chain_capture, tmp_path):
    _, path = chain_capture
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("t/3.npy")
        start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data = bytearray(path.read_bytes())
    data[start + info.file_size - 4] ^= 0xFF  # a value byte of t/3: the CRC no longer matches
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(data))
    cap = load_capture(bad)
    with pytest.raises(CaptureError, match="is corrupted: reading 't/3' failed"):
        cap.tensor("tanh1")


def _rewrite(path: pathlib.Path, out: pathlib.Path, header=None, drop=(), raw_header=None) -> pathlib.Path:
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files if k not in drop and k != "__header__"}
        if raw_header is not None:
            arrays["__header__"] = raw_header
        elif header is not None:
            arrays["__header__"] = np.array(json.dumps(header).encode())
    np.savez(out, **arrays)
    return out


def test_header_problems(chain_capture, tmp_path):
    _, path = chain_capture
    header = load_capture(path).header
    with pytest.raises(CaptureError, match="has no __header__: it is an .npz file, but not a capture"):
        load_capture(_rewrite(path, tmp_path / "a.npz"))
    with pytest.raises(CaptureError, match="header is not valid JSON"):
        load_capture(_rewrite(path, tmp_path / "b.npz", raw_header=np.array(b"{not json")))
    with pytest.raises(CaptureError, match="not a bisect_ov capture"):
        load_capture(_rewrite(path, tmp_path / "c.npz", header={"hello": 1}))
    with pytest.raises(CaptureError, match=r"incomplete or corrupted: 1 member\(s\) missing, e.g. \['input/0'\]"):
        load_capture(_rewrite(path, tmp_path / "d.npz", header=header, drop=("input/0",)))
    broken = dict(header, taps=[{"port": 0}])
    with pytest.raises(CaptureError, match="header is malformed"):
        load_capture(_rewrite(path, tmp_path / "e.npz", header=broken))
    plain = tmp_path / "plain.npz"
    np.savez(plain, x=np.ones(3))
    with pytest.raises(CaptureError, match="no __header__"):
        load_capture(plain)
    single = tmp_path / "single.npy"
    np.save(single, np.ones(3))
    with pytest.raises(CaptureError, match="single .npy array"):
        load_capture(single)


def test_newer_schema_refused(chain_capture, tmp_path):
    _, path = chain_capture
    header = dict(load_capture(path).header, schema_version=SCHEMA_VERSION + 1, bisect_ov_version="9.0")
    with pytest.raises(CaptureError, match=r"written by a newer bisect_ov \(9.0, schema version 2\).*Upgrade bisect_ov"):
        load_capture(_rewrite(path, tmp_path / "new.npz", header=header))


# ----- atomic writes ------------------------------------------------------------------------------------------


def test_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path, monkeypatch):
    path = record(tiny_chain(), "CPU:f32", path=tmp_path / "c.npz")
    before = path.read_bytes()
    real = np.lib.format.write_array
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise OSError("disk full")
        return real(*args, **kwargs)

    monkeypatch.setattr(np.lib.format, "write_array", failing)
    with pytest.raises(OSError, match="disk full"):
        record(tiny_chain(seed=1), "CPU:f32", path=path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz"]
    # No old file: nothing is left either.
    with pytest.raises(OSError, match="disk full"):
        calls.clear()
        record(tiny_chain(), "CPU:f32", path=tmp_path / "new.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz"]


def test_written_file_is_shareable_and_replaces_atomically(tmp_path, monkeypatch):
    path = record(tiny_chain(), "CPU:f32", path=tmp_path / "c.npz")
    assert path.stat().st_mode & 0o777 == 0o644  # not mkstemp's 0600
    path.chmod(0o640)
    record(tiny_chain(seed=1), "CPU:f32", path=path)
    assert path.stat().st_mode & 0o777 == 0o640  # an existing file keeps its mode

    def no_replace(src, dst):
        raise PermissionError("read-only folder")

    monkeypatch.setattr(os, "replace", no_replace)
    with pytest.raises(CaptureError, match="Cannot write the capture .*read-only folder"):
        record(tiny_chain(), "CPU:f32", path=tmp_path / "d.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz"]


def test_failed_run_leaves_nothing(tmp_path, monkeypatch):
    from bisect_ov.run import devices

    def boom(self, inputs, *, share_outputs=True):
        raise DeviceError("plugin crashed")

    monkeypatch.setattr(devices.OpenVINOCompiled, "infer", boom)
    with pytest.raises(DeviceError, match="plugin crashed"):
        record(tiny_chain(), "CPU:f32", path=tmp_path / "c.npz")
    assert list(tmp_path.iterdir()) == []


# ----- playing back -------------------------------------------------------------------------------------------


def test_recorded_device_returns_the_recorded_outputs(chain_capture):
    model, path = chain_capture
    dev = RecordedDevice(path)
    assert isinstance(dev, Device) and dev.name == "capture:chain.npz"
    cap = dev.capture
    plain = dev.compile(model)
    assert plain.n_outputs == 1
    np.testing.assert_array_equal(plain.infer(dev.inputs)[0], cap.outputs[0])
    assert plain.info.name == "capture:chain.npz" and plain.info.precision == "f32"
    assert plain.info.note.startswith(f"recorded with CPU:f32 on {cap.device_info.full_name}, OpenVINO ")
    assert plain.runtime.layer_of("mm0") is not None
    # Taps in any order, in a clone built the way bisect builds them.
    graph = ModelGraph(model)
    taps = [Tap("tanh2"), Tap("mm0"), Tap("tanh3"), Tap("x")]
    tapped = tap_model(graph, taps)
    compiled = dev.compile(tapped.model, taps=tapped.added_outputs)
    out = compiled.infer(dev.inputs)
    assert compiled.n_outputs == len(tapped.model.outputs) == 4
    np.testing.assert_array_equal(out[tapped.tap_outputs[0]], cap.tensor("tanh2"))
    np.testing.assert_array_equal(out[tapped.tap_outputs[1]], cap.tensor("mm0"))
    np.testing.assert_array_equal(out[tapped.tap_outputs[2]], cap.tensor("tanh3"))
    np.testing.assert_array_equal(out[tapped.tap_outputs[3]], dev.inputs[0])  # a Parameter: the recorded input
    np.testing.assert_array_equal(out[0], cap.tensor("tanh3"))  # the model's own output, from the tapped run


def test_clones_accepted(chain_capture):
    """tiny_chain's Result is unnamed: clone() pins its made-up name, which the hash must still ignore."""
    model, path = chain_capture
    assert ModelGraph(model.clone()).structure_hash() == ModelGraph(model).structure_hash()
    assert recorded.playback_hash(ModelGraph(model.clone())) == load_capture(path).playback_hash
    RecordedDevice(path).compile(model.clone())
    RecordedDevice(path).compile(tiny_chain())


def test_other_model_refused(chain_capture):
    _, path = chain_capture
    other = tiny_chain(depth=3)
    other.set_friendly_name("shorter")
    with pytest.raises(CaptureError, match=r"recorded on model 'tiny_chain' \(structure hash [0-9a-f]{16}\), but the "
                                           r"model given is 'shorter' \(structure hash [0-9a-f]{16}\)"):
        RecordedDevice(path).compile(other)


def test_same_structure_other_weights_refused(chain_capture):
    """The structure hash covers ops, names, edges, shapes and types, not values: a capture of one checkpoint
    replayed against another of the same architecture was accepted, and the first node whose weights differ
    was named as where the device diverges (growth 1e3x). The weights' fingerprint refuses it; the same weights
    in a clone are accepted."""
    model, path = chain_capture
    assert load_capture(path).header["model"]["weights_hash"] == recorded.weights_hash(model)
    with pytest.raises(CaptureError, match=r"recorded on model 'tiny_chain' with other weights than those of "
                                           r"'tiny_chain': the same structure, different values"):
        RecordedDevice(path).compile(tiny_chain(seed=5))
    RecordedDevice(path).compile(model.clone())
    # A capture written before the fingerprint was recorded is checked by structure only, as it was.
    old = load_capture(path)
    del old.header["model"]["weights_hash"]
    RecordedDevice(old).compile(tiny_chain(seed=5))


def test_different_inputs_refused(chain_capture):
    model, path = chain_capture
    compiled = RecordedDevice(path).compile(model)
    with pytest.raises(CaptureError, match="captured with different inputs"):
        compiled.infer(prepare_inputs(model, None, seed=1))
    with pytest.raises(CaptureError, match="captured with 1 input"):
        compiled.infer([])


def test_unrecorded_tap_refused(chain_capture):
    model, path = chain_capture
    graph = ModelGraph(model)
    tapped = tap_model(graph, [Tap("w1")])  # a Constant: never recorded
    with pytest.raises(CaptureError, match=r"holds 8 recorded tensors, but 1 requested tensor\(s\) were not "
                                           r"recorded: \['w1'\].*strategy='full'"):
        RecordedDevice(path).compile(tapped.model, taps=tapped.added_outputs)


def test_recorded_shape_must_fit_the_model(chain_capture, tmp_path):
    model, path = chain_capture
    header = load_capture(path).header
    header["taps"][0]["shape"] = [2, 8]
    # In mode full the member holds the whole tensor: a header that disagrees with it is refused on opening.
    with pytest.raises(CaptureError, match=r"member 't/0' has shape \[1, 8\], but the header records \[2, 8\]"):
        load_capture(_rewrite(path, tmp_path / "t.npz", header=header))
    # In mode stats the members are samples: the recorded shape is checked against the model given.
    stats = record(model, "CPU:f32", path=tmp_path / "stats.npz", mode="stats", sample=4)
    header = load_capture(stats).header
    header["taps"][0]["shape"] = [2, 8]
    tampered = _rewrite(stats, tmp_path / "s.npz", header=header)
    tapped = tap_model(ModelGraph(model), [Tap("mm0")])
    with pytest.raises(CaptureError, match=r"recorded 'mm0' with shape \[2, 8\], but the model given produces \[1,8\]"):
        RecordedDevice(tampered).compile(tapped.model, taps=tapped.added_outputs)


def test_dynamic_shapes(tmp_path):
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([-1, 8], np.float32, name="x")
    w = ops.constant(np.eye(8, dtype=np.float32), name="w")
    y = ops.tanh(ops.matmul(x, w, False, False, name="mm"), name="tanh")
    model = ov.Model([y.output(0)], [x], "dynamic")
    data = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    with pytest.raises(InputError, match="dynamic shape"):
        record(model, "CPU:f32", path=tmp_path / "d.npz")
    cap = load_capture(record(model, "CPU:f32", [data], tmp_path / "d.npz"))
    assert cap.tap_info("tanh")["shape"] == [3, 8]
    out = RecordedDevice(cap).compile(model).infer([data])
    np.testing.assert_allclose(out[0], np.tanh(data), rtol=1e-6)


def test_a_dynamic_shape_model_is_recorded_in_compiles_that_fit_the_budget(tmp_path):
    import openvino as ov

    model = tiny_chain(depth=6)
    model.reshape({model.inputs[0]: ov.PartialShape([-1, 8])})  # a dynamic batch, as exports have
    data = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    whole = load_capture(record(model, "CPU:f32", [data], tmp_path / "w.npz"))
    split = load_capture(record(model, "CPU:f32", [data], tmp_path / "s.npz", max_tap_bytes=3 * 5 * 8 * 4))
    # The plain run, then one compile per pass (fusion boundaries, the rest) without a budget; 12 tensors of
    # 160 bytes in chunks of 3 with it.
    assert whole.header["compiles"] <= 3 < split.header["compiles"]
    assert split.taps == whole.taps
    for tap in whole.taps:
        np.testing.assert_array_equal(split.tensor(tap.key, tap.port), whole.tensor(tap.key, tap.port))


def test_pieces_refused(chain_capture):
    model, path = chain_capture
    with pytest.raises(CaptureError, match="cannot run a piece of the model"):
        RecordedDevice(path)._compile(model, (), (0,))


# ----- stats mode ---------------------------------------------------------------------------------------------


def test_sample_positions_are_fixed():
    a = sample_positions((1, 16, 32, 32), 64, seed=0)
    assert a.dtype == np.int64 and a.size == 64 and np.all(np.diff(a) > 0) and a.max() < 16 * 32 * 32
    assert np.array_equal(a, sample_positions(16 * 32 * 32, 64, 0))  # only the flat size matters
    assert not np.array_equal(a, sample_positions(16 * 32 * 32, 64, 1))
    assert np.array_equal(sample_positions((3, 5), 100), np.arange(15))  # small tensors: every value
    # Pinned: the positions must be the same on every machine and numpy version (PCG64 raw stream).
    assert sample_positions(1000, 5, 0).tolist() == PINNED_POSITIONS
    x = np.arange(16 * 32 * 32, dtype=np.float32).reshape(1, 16, 32, 32)
    np.testing.assert_array_equal(sample_array(x, 64), a.astype(np.float32))
    with pytest.raises(InputError, match="sample must be a positive integer"):
        sample_positions(10, -1)


PINNED_POSITIONS = [75, 272, 704, 808, 863]


def test_stats_mode_holds_samples_and_is_smaller(tmp_path):
    model = synthetic.conv_bn_net()
    inputs = synthetic.sample_inputs(model, seed=1)
    full = load_capture(record(model, "CPU:f32", inputs, tmp_path / "full.npz"))
    stats = load_capture(record(model, "CPU:f32", inputs, tmp_path / "stats.npz", mode="stats", sample=64, seed=3))
    assert stats.mode == "stats" and stats.sample_size == 64 and stats.seed == 3
    with np.load(tmp_path / "stats.npz", allow_pickle=False) as data:
        assert "s/0" in data.files and "t/0" not in data.files
    for tap in full.taps:
        whole = full.tensor(tap.key, tap.port)
        np.testing.assert_array_equal(stats.tensor(tap.key, tap.port), sample_array(whole, 64, 3))
        assert stats.stats(tap.key, tap.port) == pytest.approx(tensor_summary(whole))
        assert stats.tap_info(tap.key, tap.port)["shape"] == list(whole.shape)
    full_size, stats_size = (tmp_path / "full.npz").stat().st_size, (tmp_path / "stats.npz").stat().st_size
    assert stats_size * 10 < full_size, (stats_size, full_size)


def test_tensor_summary_non_finite():
    s = tensor_summary(np.array([1.0, np.nan, -3.0, np.inf, 2.0], np.float32))
    assert (s["min"], s["max"], s["absmax"], s["nan"], s["inf"], s["numel"]) == (-3.0, 2.0, 3.0, 1, 1, 5)
    assert s["mean"] == pytest.approx(0.0) and s["std"] == pytest.approx(np.std([1.0, -3.0, 2.0]))
    assert tensor_summary(np.array([np.nan]))["mean"] is None
    big = np.random.default_rng(0).standard_normal(3_000_000).astype(np.float32) + 1000
    assert tensor_summary(big)["std"] == pytest.approx(float(big.astype(np.float64).std()), rel=1e-9)


def test_stats_capture_against_sampled_live_device(tmp_path):
    model = synthetic.conv_bn_net()
    inputs = synthetic.sample_inputs(model, seed=1)
    path = record(model, "CPU:f32", inputs, tmp_path / "stats.npz", mode="stats", sample=256)
    ref = RecordedDevice(path)
    target = sampled_like("CPU:f32", ref)
    assert isinstance(target, SampledDevice) and target.sample == 256
    # local=False: local errors feed reference values into pieces of the target, which samples cannot be.
    report = bisect(model, ref=ref, target=target, inputs=inputs, target_model=inject_fault(model, "res/conv_b"),
                    local=False, progress=False)
    assert report.first_divergence.name == "res/conv_b"
    assert "256 sampled values per tensor" in report.ref.note
    assert sampled_like("CPU:f32", record(model, "CPU:f32", inputs, tmp_path / "f.npz")).name == "CPU:f32"


# ----- merging ------------------------------------------------------------------------------------------------


def test_merge_captures(tmp_path):
    model = tiny_chain()
    a = record(model, "CPU:f32", None, tmp_path / "a.npz", seed=0)
    b = record(model, "CPU:f32", None, tmp_path / "b.npz", seed=1)
    merged = load_capture(merge_captures([a, b], tmp_path / "ab.npz"))
    one, two = load_capture(a), load_capture(b)
    assert [s["inputs_hash"] for s in merged.samples] == [one.inputs_hash, two.inputs_hash]
    assert [s["source"] for s in merged.samples] == ["a.npz", "b.npz"]
    with np.load(tmp_path / "ab.npz", allow_pickle=False) as data:
        assert {"sample/0/input/0", "sample/1/t/7", "sample/1/o/0"} <= set(data.files)
    second = merged.select(1)
    np.testing.assert_array_equal(second.inputs[0], two.inputs[0])
    np.testing.assert_array_equal(second.tensor("tanh2"), two.tensor("tanh2"))
    assert second.stats("tanh2") == two.stats("tanh2")
    # Played back, the sample is chosen by the inputs given.
    compiled = RecordedDevice(merged).compile(model)
    np.testing.assert_array_equal(compiled.infer(two.inputs)[0], two.outputs[0])
    np.testing.assert_array_equal(compiled.infer(one.inputs)[0], one.outputs[0])
    # Merged files merge again; the same inputs twice do not.
    c = record(model, "CPU:f32", None, tmp_path / "c.npz", seed=2)
    assert len(load_capture(merge_captures([tmp_path / "ab.npz", c], tmp_path / "abc.npz")).samples) == 3
    with pytest.raises(CaptureError, match="has the same inputs as 'a.npz' sample 0"):
        merge_captures([a, tmp_path / "ab.npz"], tmp_path / "bad.npz")


def test_captures_of_one_file_loaded_again_merge_and_play_back(tmp_path):
    # Each load of an ONNX file with unnamed nodes gives them other made-up names (MatMul_12, then MatMul_40):
    # captures recorded in one process refused to merge ("recorded tensors differ, 4 vs 4"), and a capture
    # played back against another load missed its tensors. Such nodes are found by their place in the graph.
    onnx_file = unnamed_onnx(tmp_path / "unnamed.onnx")
    a = record(str(onnx_file), "CPU:f32", None, tmp_path / "a.npz", seed=0)
    b = record(str(onnx_file), "CPU:f32", None, tmp_path / "b.npz", seed=1)
    made_up = [(x["key"], y["key"]) for x, y in zip(load_capture(a).header["taps"], load_capture(b).header["taps"])
               if x["made_up"]]
    assert made_up and all(x != y for x, y in made_up), made_up  # made up again at the second load
    merged = merge_captures([a, b], tmp_path / "ab.npz")
    report = bisect(str(onnx_file), "CPU:f32", f"capture:{merged}", load_capture(b).inputs, strategy="full",
                    local=False, impact=0, noise=False, progress=False)
    assert len(report.nodes) >= 4 and not report.diverges, report.to_text()


def test_merge_refuses_different_models_and_devices(tmp_path):
    a = record(tiny_chain(), "CPU:f32", None, tmp_path / "a.npz", seed=0)
    other = record(tiny_chain(depth=3), "CPU:f32", None, tmp_path / "other.npz", seed=1)
    with pytest.raises(CaptureError, match="Cannot merge 'a.npz' and 'other.npz': their model structure hash differs"):
        merge_captures([a, other], tmp_path / "m.npz")
    emulated = record(tiny_chain(), "EMU:f16", None, tmp_path / "emu.npz", seed=1)
    with pytest.raises(CaptureError, match="their device differs \\('CPU:f32' vs 'EMU:f16'\\)"):
        merge_captures([a, emulated], tmp_path / "m.npz")
    stats = record(tiny_chain(), "CPU:f32", None, tmp_path / "s.npz", seed=1, mode="stats")
    with pytest.raises(CaptureError, match="their mode differs"):
        merge_captures([a, stats], tmp_path / "m.npz")
    assert not (tmp_path / "m.npz").exists()
    # Nor over one of the captures it reads (its sample would live on in the merge, the file would not)
    b = record(tiny_chain(), "CPU:f32", None, tmp_path / "b.npz", seed=1)
    before = a.read_bytes()
    with pytest.raises(CaptureError, match="the merged capture .*a.npz.* is the capture 'a.npz'.*which this run reads"):
        merge_captures([a, b], a)
    assert a.read_bytes() == before


# ----- across processes, through bisect() ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def chain_from_other_process(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("machine_a") / "machine_a.npz"
    _capture_in_subprocess("synthetic.chain()", path)
    return path


@pytest.fixture(scope="module")
def faulty_from_other_process(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("machine_a") / "faulty.npz"
    _capture_in_subprocess("inject_fault(synthetic.chain(), 'layer5/tanh')", path)
    return path


def _capture_in_subprocess(model_code: str, path: pathlib.Path, device: str = "CPU:f32") -> None:
    code = textwrap.dedent(f"""
        from bisect_ov.capture.write import record
        from bisect_ov.model.inject import inject_fault
        from bisect_ov.zoo import synthetic
        record({model_code}, {device!r}, path={str(path)!r})
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300, capture_output=True, text=True)


@pytest.mark.parametrize("strategy", ["auto", "full", "bisection"])
def test_capture_from_another_process_as_reference(chain_from_other_process, strategy):
    path = chain_from_other_process
    model = synthetic.chain()  # rebuilt here: same structure, made-up names differ
    ref = RecordedDevice(path)
    report = bisect(model, ref=ref, target="CPU:f32", target_model=inject_fault(model, "layer2/sigmoid"),
                    strategy=strategy, progress=False)
    assert report.first_divergence.name == "layer2/sigmoid"
    assert report.ref.name == "capture:machine_a.npz" and report.ref.precision == "f32"
    assert report.ref.note.startswith("recorded with CPU:f32 on ")
    assert report.compiles["ref"] >= 2
    # Without a fault both sides agree (same machine here), with the recorded inputs passed explicitly.
    clean = bisect(model, ref=ref, target="CPU:f32", inputs=ref.inputs, strategy=strategy, progress=False)
    assert clean.first_divergence is None


@pytest.mark.parametrize("local", [False, True])  # True: bisect turns local errors off by itself
def test_capture_from_another_process_as_target(faulty_from_other_process, local):
    path = faulty_from_other_process
    model = synthetic.chain()
    report = bisect(model, ref="CPU:f32", target=RecordedDevice(path),
                    target_model=inject_fault(model, "layer5/tanh"), local=local, progress=False)
    assert report.first_divergence.name == "layer5/tanh"
    assert report.target.name == "capture:faulty.npz"


@pytest.fixture(scope="module")
def f16_capture(tmp_path_factory) -> pathlib.Path:
    """Machine A ran the chain in (emulated) f16."""
    return record(synthetic.chain(), "EMU:f16", path=tmp_path_factory.mktemp("a") / "a_f16.npz")


@pytest.mark.parametrize("impact", [0, 3])  # 3: bisect skips partitioned runs with a recorded side
def test_same_model_recorded_reference(f16_capture, impact):
    """The users' case: one model (no target_model), recorded on machine A, run live on machine B."""
    model = synthetic.chain()
    # A tolerance below f16 rounding, so that something diverges in this small model.
    report = bisect(model, ref=RecordedDevice(f16_capture), target="CPU:f32", tolerance=1e-5, impact=impact,
                    noise=False, progress=False)
    assert report.ref.precision == "f16" and report.ref.emulated
    assert report.first_divergence.name == "layer0/matmul"


# ----- what bisect() needs to do with recorded devices (plan_recorded) -----------------------------------------


def test_plan_without_recorded_devices_changes_nothing():
    ref, target = make_device("CPU:f32"), make_device("EMU:f16")
    plan = plan_recorded(ref, target, None)
    assert (plan.ref, plan.target, plan.inputs, plan.local, plan.pieces, plan.exact, plan.notes) == (
        ref, target, None, True, True, True, [])


def test_plan_with_recorded_reference(chain_capture):
    _, path = chain_capture
    ref, target = RecordedDevice(path), make_device("CPU:f32")
    plan = plan_recorded(ref, target, None)
    assert plan.ref is ref and plan.target is target
    assert np.array_equal(plan.inputs[0], ref.inputs[0])
    assert plan.local and not plan.pieces and plan.exact
    assert any("The reference ('chain.npz') is a recorded run" in n for n in plan.notes)
    given = [np.ones((1, 8), np.float32)]
    assert plan_recorded(ref, target, given).inputs is given


def test_plan_with_recorded_target(chain_capture):
    _, path = chain_capture
    plan = plan_recorded(make_device("CPU:f32"), RecordedDevice(path), None, twin=True)
    assert not plan.local and not plan.pieces
    assert list(plan.inputs) == ["x"]  # by input name: the twin's parameters may come in another order


def test_plan_with_stats_capture(tmp_path):
    stats = RecordedDevice(record(tiny_chain(), "CPU:f32", path=tmp_path / "s.npz", mode="stats", sample=3, seed=2))
    plan = plan_recorded(make_device("CPU:f32"), stats, None)
    assert isinstance(plan.ref, SampledDevice) and (plan.ref.sample, plan.ref.seed) == (3, 2)
    assert plan.target is stats and not plan.local and not plan.pieces and not plan.exact
    other = RecordedDevice(record(tiny_chain(), "CPU:f32", path=tmp_path / "o.npz", mode="stats", sample=5))
    with pytest.raises(CaptureError, match="sampled differently"):
        plan_recorded(other, stats, None)
    full = RecordedDevice(record(tiny_chain(), "CPU:f32", path=tmp_path / "f.npz"))
    assert isinstance(plan_recorded(full, stats, None).ref, SampledDevice)


def test_recorded_in_another_process_names_the_same_first_divergence_as_a_direct_run(tmp_path):
    """Machine A records the demo on an f16 device; machine B compares its f32 run with the recording."""
    path = tmp_path / "machine_a_f16.npz"
    code = (
        "from bisect_ov.capture.write import record\n"
        "from bisect_ov.zoo import synthetic\n"
        "m = synthetic.demo()\n"
        f"record(m, 'EMU:f16', synthetic.sample_inputs(m, seed=1), {str(path)!r})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    model = synthetic.demo()
    inputs = synthetic.sample_inputs(model, seed=1)
    direct = bisect(model, "CPU", "EMU:f16", inputs, local=False, impact=0, noise=False, progress=False)
    replayed = bisect(model, "CPU", f"capture:{path}", progress=False)  # inputs come from the recording
    assert {n.name for n in replayed.first_divergences} == {n.name for n in direct.first_divergences}
    assert replayed.first_divergence.name == direct.first_divergence.name == "inorm/sub"
    assert replayed.target.emulated and replayed.target.precision == "f16"
    assert replayed.outputs[0].error == pytest.approx(direct.outputs[0].error, rel=1e-6)


def test_kernels_that_differ_between_recorded_sides_are_listed(tmp_path):
    """Two recordings of one model: nodes that ran another kernel at the same precision are listed."""
    import dataclasses

    from bisect_ov.report.report import kernel_difference

    model = synthetic.conv_bn_net()
    inputs = synthetic.sample_inputs(model, seed=1)
    a = record(model, "CPU:f32", inputs, tmp_path / "a.npz")
    b = record(model, "CPU:accuracy", inputs, tmp_path / "b.npz")
    same = bisect(model, f"capture:{a}", f"capture:{b}", progress=False)
    assert same.nodes and all(n.runtime.get("ref") and n.runtime.get("target") for n in same.nodes)
    assert not same.kernel_differences  # one machine, same kernels: nothing listed
    # Machine B ran one convolution with another ISA's kernel (as AVX2 against AVX-512 VNNI):
    conv = same.nodes[len(same.nodes) // 2]
    other = {**conv.runtime["target"], "kernel": "jit_avx2_f32"}
    changed = dataclasses.replace(conv, runtime={**conv.runtime, "target": other})
    report = dataclasses.replace(same, nodes=tuple(changed if n is conv else n for n in same.nodes))
    assert [n.name for n in report.kernel_differences] == [conv.name]
    assert "Kernels differ between the sides on 1" in report.to_text()
    # f32 against bf16 differs everywhere by design: a different precision is not a finding.
    ran = {"precision": "f32", "kernel": "brgconv_avx512_f32"}
    assert kernel_difference({"ref": ran, "target": {"precision": "bf16", "kernel": "brgconv_avx512_bf16"}}, False) == ""
    assert "ran differently" in kernel_difference({"ref": ran, "target": {"precision": "f32", "kernel": "x"}}, False)


def test_a_sample_the_capture_did_not_record_is_named(tmp_path):
    # Five samples against a capture of the first: the error said "captured with different inputs" and not which.
    model = synthetic.demo()
    rng = np.random.default_rng(0)
    samples = [{"input": rng.random((1, 3, 32, 32)).astype(np.float32)} for _ in range(3)]
    record(model, "CPU:f32", samples[0], tmp_path / "c.npz")
    with pytest.raises(CaptureError, match=r"^Sample #1: The capture 'c.npz' was captured with different inputs"):
        bisect(model, f"capture:{tmp_path / 'c.npz'}", "EMU:f16", bisect_ov.Samples(samples), progress=False,
               budget="fast")


def test_a_merged_capture_given_no_inputs_compares_every_input_set_it_holds(tmp_path):
    # It compared the first set only while the note said "the ones recorded".
    model = tiny_chain()
    sets = [record(model, "CPU:f32", None, tmp_path / f"{i}.npz", seed=i) for i in range(3)]
    merged = merge_captures(sets, tmp_path / "all.npz")
    report = bisect(model, "CPU:f32", f"capture:{merged}", progress=False)
    assert report.samples is not None and report.samples.count == 3, report.to_text()
    assert any("the 3 input sets recorded in 'all.npz'" in n for n in report.notes), report.notes
    one = bisect(model, "CPU:f32", f"capture:{sets[1]}", progress=False)
    assert one.samples is None and any("Inputs: the ones recorded in '1.npz'" in n for n in one.notes), one.notes


def test_a_capture_of_another_model_is_refused_before_its_inputs_are_used(tmp_path):
    # Its recorded inputs were applied first: "Got 1 input array(s) but the model has 2 input(s)".
    capture = record(tiny_chain(), "CPU:f32", None, tmp_path / "chain.npz")
    other = synthetic.demo()
    with pytest.raises(CaptureError, match=r"was recorded on model .* but the model given is .*: they differ"):
        bisect(other, f"capture:{capture}", "CPU:f32", progress=False)
    with pytest.raises(CaptureError, match="they differ"):
        bisect(other, "CPU:f32", f"capture:{capture}", progress=False)
    # A file is named as the user gave it (an ONNX file read as "ov.Model from ONNX")
    onnx_path = tmp_path / "other.onnx"
    onnx.save(onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 8])]),
        opset_imports=[onnx.helper.make_opsetid("", 13)]), onnx_path)
    with pytest.raises(CaptureError, match="but the model given is 'other.onnx'"):
        bisect(str(onnx_path), f"capture:{capture}", "CPU:f32", progress=False)
