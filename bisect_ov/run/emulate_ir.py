"""An emulated low-precision model that can be saved as IR and run by OpenVINO alone (no bisect_ov).

`saveable_emulation(model, precision)` is `bisect_ov.run.emulate.emulate_precision` with every Python rounding
op (`EmulatedRound`) replaced by OpenVINO arithmetic that rounds the same way, so the result holds only opset
ops: ``ov.save_model`` writes it, and any OpenVINO compiles it on the CPU in f32. A reproducer for an emulated
target (`bisect_ov.repro`) ships such a model.

The rounding, in f32 arithmetic (Veltkamp's split): ``p = x * (2**s + 1); hi = p - (p - x)`` keeps the upper
``24 - s`` bits of the significand, rounded to nearest, so ``s = 13`` gives f16's 11 bits and ``s = 16`` bf16's 8.
The CPU plugin in f32 does not reassociate it (a ``Convert`` pair, by contrast, is optimised away). Around it:

* f16: values under 2**-14 in magnitude (f16 subnormals) are rounded to a multiple of 2**-24
  (``Round(x * 2**24, half_to_even) * 2**-24``), and ``|x| >= 65520`` becomes +-inf;
* bf16: values beyond 2**100 are split after scaling by 2**-64 (exact) so that ``p`` cannot overflow, and
  infinities pass unchanged.

Checked bit for bit against `bisect_ov.run.lowp.round_array` (tests/run/test_emulate_ir.py). Accumulation in
the low precision (the ``-acc`` devices' reductions) runs numpy kernels that have no opset form here:
`saveable_emulation` refuses a model that holds them.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from bisect_ov.core.errors import InputError
from bisect_ov.run.emulate import emulate_precision

__all__ = ["round_ops", "saveable_emulation"]

_SPLIT = {"f16": 2.0 ** 13 + 1, "bf16": 2.0 ** 16 + 1}


class _Named:
    """Names every op it makes ``<prefix>/<n>``: saved models then read the same whenever they are written
    (OpenVINO's own names come from a process-wide counter)."""

    def __init__(self, prefix: str):
        self.prefix, self.n = prefix, 0

    def __call__(self, node):
        node.set_friendly_name(f"{self.prefix}/{self.n}")
        self.n += 1
        return node

    def c(self, value: float) -> ov.Output:
        return self(ops.constant(np.float32(value))).output(0)


def round_ops(x: ov.Output, precision: str, name: str = "round") -> ov.Output:
    """`x` (f32) rounded to `precision` (``f16`` or ``bf16``) with opset arithmetic only; see the module docstring."""
    if precision not in _SPLIT:
        raise InputError(f"round_ops rounds to 'f16' or 'bf16'; got {precision!r}.")
    n = _Named(name)
    magnitude = n(ops.abs(x))
    if precision == "bf16":
        huge = n(ops.greater_equal(magnitude, n.c(2.0 ** 100)))
        x_in = n(ops.select(huge, n(ops.multiply(x, n.c(2.0 ** -64))), x)).output(0)
    else:
        x_in = x
    p = n(ops.multiply(x_in, n.c(_SPLIT[precision])))
    hi = n(ops.subtract(p, n(ops.subtract(p, x_in)))).output(0)
    if precision == "bf16":
        hi = n(ops.select(huge, n(ops.multiply(hi, n.c(2.0 ** 64))), hi)).output(0)
        out = ops.select(n(ops.is_inf(x)), x, hi)
    else:
        sub = n(ops.multiply(n(ops.round(n(ops.multiply(x, n.c(2.0 ** 24))), "half_to_even")), n.c(2.0 ** -24)))
        hi = n(ops.select(n(ops.less(magnitude, n.c(2.0 ** -14))), sub, hi)).output(0)
        out = ops.select(n(ops.greater_equal(magnitude, n.c(65520.0))), n(ops.multiply(n(ops.sign(x)), n.c(np.inf))), hi)
    out.set_friendly_name(name)
    return out.output(0)


def saveable_emulation(model: ov.Model, precision: str) -> ov.Model:
    """`emulate_precision(model, precision)` holding only opset ops: it saves as IR and runs without bisect_ov.

    Compile the result on the CPU with ``INFERENCE_PRECISION_HINT`` f32, as the emulated device does.

    Raises
    ------
    InputError
        An unknown precision.
    """
    emulated = emulate_precision(model, precision)
    for node in list(emulated.get_ordered_ops()):
        kind = node.get_type_name()
        if kind == "EmulatedAccumulation":  # pragma: no cover - emulate_precision was asked for no reductions
            raise InputError("An emulated low-precision accumulation has no opset form: it cannot be saved.")
        if kind != "EmulatedRound":
            continue
        source = node.input_value(0)
        out = node.output(0)
        rounded = round_ops(source, precision, node.get_friendly_name())
        names = out.get_names()
        for target in list(out.get_target_inputs()):
            target.replace_source_output(rounded)
        rounded.get_tensor().set_names(names)
    emulated.validate_nodes_and_infer_types()
    return emulated
