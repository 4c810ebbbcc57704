"""The saveable emulation: opset rounding gives `round_array`'s bits, and an emulated model written as IR runs
without bisect_ov's Python ops and computes what the emulated device computes."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov.core.errors import InputError
from bisect_ov.run.devices import EmulatedDevice
from bisect_ov.run.emulate_ir import round_ops, saveable_emulation
from bisect_ov.run.lowp import round_array
from bisect_ov.zoo import synthetic

F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def _values() -> np.ndarray:
    rng = np.random.default_rng(0)
    spread = rng.standard_normal(20_000) * 10.0 ** rng.integers(-9, 6, 20_000)
    special = [65504, 65519.9, 65520, 1e6, -1e6, 0.0, -0.0, np.nan, np.inf, -np.inf, 6e-5, 6.2e-5, 1e-8, 3e-8,
               2.0 ** -25, 3 * 2.0 ** -25, 3e38, -3e38, 1e35, 2.0 ** 100, 1.5 * 2.0 ** 120]
    ties = 1 + np.arange(600) * 2.0 ** -11  # half-way cases of f16, and of bf16 below them
    return np.concatenate([spread, special, ties, 1 + np.arange(600) * 2.0 ** -8]).astype(np.float32)


@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_opset_rounding_gives_round_array_bit_for_bit(precision):
    values = _values()
    x = ops.parameter([values.size], np.float32)
    compiled = ov.Core().compile_model(ov.Model([round_ops(x.output(0), precision)], [x]), "CPU", F32)
    got, want = compiled([values])[0], round_array(values, precision)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), values[~same][:10]


@pytest.mark.parametrize("precision", ["f16", "bf16"])
def test_a_saved_emulation_computes_what_the_emulated_device_computes(precision, tmp_path):
    model = synthetic.demo()
    x = synthetic.sample_inputs(model, seed=1)
    device = EmulatedDevice(precision).compile(model).infer([x[p.get_any_name()] for p in model.inputs])[0]
    saved = saveable_emulation(model, precision)
    assert not {op.get_type_name() for op in saved.get_ops()} & {"EmulatedRound", "EmulatedAccumulation"}
    ov.save_model(saved, str(tmp_path / "m.xml"), compress_to_fp16=False)
    core = ov.Core()
    again = core.compile_model(core.read_model(str(tmp_path / "m.xml")), "CPU", F32)(x)[0]
    assert np.array_equal(device, again)
    assert not np.array_equal(again, core.compile_model(model, "CPU", F32)(x)[0])  # it did round


@pytest.mark.parametrize(("lanes", "build"), [
    (1, lambda: synthetic.softmax_model((2, 3000), axis=1)),
    (16, lambda: synthetic.softmax_model((2, 3000), axis=1)),
    (16, lambda: _reduce("mean", [2, 40, 37], [1, 2], False)),
    (4, lambda: _reduce("sum", [3, 5], [0], True)),
])
def test_a_saved_low_precision_accumulation_computes_what_the_emulated_device_computes(lanes, build, tmp_path):
    model = build()
    x = np.abs(np.random.default_rng(0).standard_normal([int(d) for d in model.inputs[0].get_shape()])).astype(np.float32)
    device = EmulatedDevice("f16", reductions=True, lanes=lanes).compile(model).infer([x])[0]
    ov.save_model(saveable_emulation(model, "f16", reductions=True, lanes=lanes), str(tmp_path / "m.xml"))
    core = ov.Core()
    again = core.compile_model(core.read_model(str(tmp_path / "m.xml")), "CPU", F32)([x])[0]
    # exp may differ from numpy's in the last f32 bit: then by an f16 ulp or two, rarely (0.1% of the values)
    assert np.allclose(device, again, rtol=2 ** -9, atol=0) and np.mean(device != again) < 0.01


def _reduce(kind: str, shape, axes, keep: bool) -> ov.Model:
    x = ops.parameter(shape, np.float32, name="input")
    op = (ops.reduce_mean if kind == "mean" else ops.reduce_sum)(x, np.array(axes, np.int64), keep)
    return ov.Model([op], [x])


def test_an_accumulating_matmul_has_no_saveable_form():
    x = ops.parameter([2, 64], np.float32)
    model = ov.Model([ops.matmul(x, ops.constant(np.ones([64, 3], np.float32)), False, False, name="mm")], [x])
    with pytest.raises(InputError, match=r"'mm' \(MatMul\) accumulates in f16 with a Python kernel"):
        saveable_emulation(model, "f16", reductions=True)
