"""A twin's unit fed a reference value of another shape is not run (it would fail inside OpenVINO): found first."""

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from bisect_ov.experiments.local import _misfit
from bisect_ov.model.partition import Extracted
from bisect_ov.model.taps import Tap


def _piece(shape):
    p = ops.parameter(shape, np.float32, name="fed")
    return Extracted(ov.Model([ops.relu(p).output(0)], [p]), (Tap("a", 0),), (), (Tap("b", 0),))


def test_a_fed_value_of_another_shape_is_found_before_the_run():
    piece = _piece([1, 4, 16, 4])
    assert _misfit(piece, {Tap("a", 0): np.zeros((1, 4, 16, 4), np.float32)}) is None
    assert _misfit(piece, {Tap("a", 0): np.zeros((1, 4, 16, 16), np.float32)}) == (Tap("a", 0), "[1,4,16,4]", (1, 4, 16, 16))
    assert _misfit(piece, {Tap("a", 0): np.zeros((4, 16, 4), np.float32)}) is not None
    assert _misfit(_piece(ov.PartialShape([1, -1, 16, 4])), {Tap("a", 0): np.zeros((1, 9, 16, 4), np.float32)}) is None


def test_a_unit_the_target_cannot_run_alone_is_left_out_and_the_others_are_measured():
    # The CPU plugin refuses some pieces of ONNX exports it runs whole ("contains empty child edge"): the job
    # goes on, that unit's local error unknown, the others' measured.
    from bisect_ov import bisect
    from bisect_ov.core.errors import DeviceError
    from bisect_ov.run.emulated_device import EmulatedDevice
    from tests.conftest import tiny_chain

    class RefusesPieces(EmulatedDevice):
        def _compile(self, model, taps=(), fed=(), *, extra=None):
            names = {op.get_friendly_name() for op in model.get_ops()}
            whole = "tanh3" in names and "mm0" in names and len(model.outputs) >= 1 and "x" in names
            if "mm1" in names and not whole:  # a piece of the model that holds mm1
                raise DeviceError("Compiling failed when its infer request was made: contains empty child edge")
            return super()._compile(model, taps, fed, extra=extra)

    report = bisect(tiny_chain(), "CPU:f32", RefusesPieces("f16", name="EMU:f16 refusing pieces"), impact=0,
                    noise=False, progress=False, tolerance=1e-6)
    local = {n.name: n.local_error for n in report.nodes}
    assert local["mm1"] is None and any(v is not None for k, v in local.items() if k != "mm1"), local
