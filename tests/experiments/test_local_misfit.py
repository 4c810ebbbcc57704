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
