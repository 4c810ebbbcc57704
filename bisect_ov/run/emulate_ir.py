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

Checked bit for bit against `bisect_ov.run.lowp.round_array` (tests/run/test_emulate_ir.py).

Accumulation in the low precision (the ``-acc`` devices, `bisect_ov.run.lowp`'s lane model) is written for
Softmax, ReduceSum and ReduceMean of static shape: the reduced values, padded with zeros to whole lanes, are
split into ``steps x lanes``; a ``Loop`` adds one row of lanes per iteration, rounding after each add; the
lanes are then combined by the same pairwise tree, each add rounded. The max and the division of a softmax,
and a mean's division, are rounded as `lowp` rounds them. ``exp`` is OpenVINO's, which can differ from numpy's
in the last float32 bit (then, rarely, by one low-precision ulp). MVN, MatMul and ScaledDotProductAttention
accumulating in the low precision have no opset form here: `saveable_emulation` refuses them.
"""

from __future__ import annotations

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from bisect_ov.core.errors import InputError
from bisect_ov.run import pyops
from bisect_ov.run.emulate import emulate_precision

__all__ = ["SAVEABLE_REDUCTIONS", "lane_sum_ops", "round_ops", "saveable_emulation"]

SAVEABLE_REDUCTIONS = frozenset({"Softmax", "ReduceSum", "ReduceMean"})

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


def _i64(values) -> ov.Output:
    return ops.constant(np.array(values, np.int64)).output(0)


def _lane_sum_last(x: ov.Output, n: int, lanes: int, precision: str) -> ov.Output:
    """`lowp`'s lane sum of `x` ([B, n], f32, static) over its last axis: [B, 1]."""
    def rounded(node) -> ov.Output:
        return round_ops(node.output(0), precision, f"{node.get_friendly_name()}/round")

    if n > lanes:
        steps = -(-n // lanes)
        if steps * lanes > n:
            x = ops.pad(x, _i64([0, 0]), _i64([0, steps * lanes - n]), "constant", np.float32(0)).output(0)
        chunks = ops.transpose(ops.reshape(x, _i64([0, steps, lanes]), special_zero=True), _i64([1, 0, 2]))
        first = ops.squeeze(ops.slice(chunks, _i64([0]), _i64([1]), _i64([1])), _i64([0])).output(0)
        acc = first
        if steps > 1:
            acc_in = ops.parameter(ov.PartialShape([-1, lanes]), np.float32)
            row_in = ops.parameter(ov.PartialShape([1, -1, lanes]), np.float32)
            summed = ops.add(acc_in, ops.squeeze(row_in, _i64([0])))
            acc_out = ops.result(rounded(summed))
            go_on = ops.result(ops.constant(np.array(True)))
            loop = ops.loop(ops.constant(np.int64(steps - 1)), ops.constant(np.array(True)))
            loop.set_function(ov.Model([acc_out, go_on], [acc_in, row_in], "lane_steps"))
            loop.set_special_body_ports([-1, 1])
            loop.set_sliced_input(row_in, ops.slice(chunks, _i64([1]), _i64([steps]), _i64([1])).output(0), 0, 1, 1, -1, 0)
            loop.set_merged_input(acc_in, first, acc_out.output(0))
            acc = loop.get_iter_value(acc_out.output(0), -1)
        width = lanes
    else:
        acc, width = x, n
    while width > 1:  # the pairwise tree: lane j + lane j + width // 2, an odd last one waiting
        half = width // 2
        low = ops.slice(acc, _i64([0]), _i64([half]), _i64([1]), _i64([1]))
        high = ops.slice(acc, _i64([half]), _i64([2 * half]), _i64([1]), _i64([1]))
        level = rounded(ops.add(low, high))
        if width % 2:
            level = ops.concat([level, ops.slice(acc, _i64([2 * half]), _i64([width]), _i64([1]), _i64([1]))], 1).output(0)
        acc, width = level, half + width % 2
    return acc


def lane_sum_ops(x: ov.Output, axes, lanes: int, precision: str) -> ov.Output:
    """`bisect_ov.run.lowp.lane_sum` in opset ops: the sum of `x` over `axes`, kept with length 1.

    Raises
    ------
    InputError
        `x` has a dynamic shape.
    """
    shape = x.get_partial_shape()
    if not shape.is_static:
        raise InputError(f"An emulated low-precision reduction over a tensor of dynamic shape {shape} has no opset "
                         "form here.")
    dims = [d.get_length() for d in shape]
    axes = sorted(int(a) % len(dims) for a in axes)
    others = [i for i in range(len(dims)) if i not in axes]
    n = int(np.prod([dims[a] for a in axes], dtype=np.int64))
    flat = ops.reshape(ops.transpose(x, _i64(others + axes)), _i64([-1, n]), special_zero=False)
    total = _lane_sum_last(flat.output(0), n, lanes, precision)
    return ops.reshape(total, _i64([1 if i in axes else d for i, d in enumerate(dims)]), special_zero=False).output(0)


def _accumulation(node, precision: str) -> ov.Output:
    """The opset form of an `EmulatedAccumulation` (`lowp.softmax` / `lowp.reduce`)."""
    kind, params, lanes = node.kind, node.params, node.lanes

    def r(value) -> ov.Output:
        return round_ops(value.output(0) if hasattr(value, "output") else value, precision,
                         f"{node.get_friendly_name()}/round")

    x = node.input_value(0)
    if kind == "Softmax":
        axis = params["axis"]
        shifted = r(ops.subtract(x, ops.reduce_max(x, _i64([axis]), True)))
        e = r(ops.exp(shifted))
        return r(ops.divide(e, lane_sum_ops(e, [axis], lanes, precision)))
    total = lane_sum_ops(x, params["axes"], lanes, precision)
    if kind == "ReduceMean":
        dims = [d.get_length() for d in x.get_partial_shape()]
        count = float(np.prod([dims[a % len(dims)] for a in params["axes"]]))
        total = r(ops.divide(total, ops.constant(np.float32(count))))
    return total if params["keep_dims"] else ops.squeeze(total, _i64(sorted(params["axes"]))).output(0)


def saveable_emulation(model: ov.Model, precision: str, *, reductions: bool = False, lanes: int = 16) -> ov.Model:
    """`emulate_precision(model, precision, reductions=..., lanes=...)` holding only opset ops: it saves as IR
    and runs without bisect_ov. Compile it on the CPU with ``INFERENCE_PRECISION_HINT`` f32.

    Raises
    ------
    InputError
        An unknown precision; with `reductions`, an MVN, MatMul or ScaledDotProductAttention that accumulates
        in the low precision, or a reduction of dynamic shape (no opset form here).
    """
    with pyops.collecting() as made:  # replaced below: nothing runs them (`bisect_ov.run.pyops`)
        try:
            emulated = emulate_precision(model, precision, reductions=reductions, lanes=lanes)
            for node in list(emulated.get_ordered_ops()):
                kind = node.get_type_name()
                if kind == "EmulatedAccumulation":
                    if node.kind not in SAVEABLE_REDUCTIONS:
                        raise InputError(
                            f"'{node.get_friendly_name()}' ({node.kind}) accumulates in {precision} with a Python kernel that "
                            f"has no opset form here (only {sorted(SAVEABLE_REDUCTIONS)} do), so it cannot be saved.")
                    rounded = _accumulation(node, precision)
                elif kind == "EmulatedRound":
                    rounded = round_ops(node.input_value(0), precision, node.get_friendly_name())
                else:
                    continue
                out = node.output(0)
                names = out.get_names()
                for target in list(out.get_target_inputs()):
                    target.replace_source_output(rounded)
                rounded.get_tensor().set_names(names)
        finally:
            pyops.release(made)
    emulated.validate_nodes_and_infer_types()
    return emulated
