"""A clamp after a node: the patched model a user applies when a node's values leave the target's range.

OpenVINO's own CPU fix for an f16 fully connected output that overflowed before a residual addition was a clamp
there: the values stay finite (at most the bound) instead of becoming inf, and what follows (an addition, a
normalization, a Softmax) sees a large finite value instead of inf or NaN. `clamp_after` writes that fix as a
copy of the model with a ``Clamp(-bound, bound)`` between each named node's floating outputs and their
consumers; the tensor names stay on the clamped value, so the outputs the user reads are the same.

A clamp changes values only where they exceed the bound: on values the reference itself keeps within it the
patched model computes what the untouched one does.
"""

from __future__ import annotations

import math
from typing import Mapping

import openvino as ov
from openvino import opset13 as ops

from bisect_ov.core.errors import InputError
from bisect_ov.model.graph import ops_by_name

__all__ = ["clamp_after"]


def clamp_after(model: ov.Model, bounds: Mapping[str, float]) -> ov.Model:
    """A copy of `model` with each floating output of the nodes in `bounds` (by friendly name) clamped to
    ``[-bound, bound]``.

    Raises
    ------
    InputError
        A name that is no node of `model`, a node without floating outputs, or a bound that is not a positive
        finite number.
    """
    for name, bound in bounds.items():
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound) or bound <= 0:
            raise InputError(f"A clamp bound must be a positive finite number; got {bound!r} for '{name}'.")
    clone = model.clone()
    by_name = ops_by_name(clone)
    missing = [n for n in bounds if n not in by_name]
    if missing:
        raise InputError(f"No node named {missing[:3]} in the model; clamps go after nodes the report names.")
    repeated = [n for n in bounds if len(by_name[n]) > 1]
    if repeated:
        raise InputError(f"Several nodes are named {repeated[:3]}: a clamp after one of them would be a guess.")
    for name, bound in bounds.items():
        (op,) = by_name[name]
        outputs = [out for out in op.outputs() if out.get_element_type().is_real()]
        if not outputs:
            raise InputError(f"Node '{name}' has no floating output to clamp.")
        for out in outputs:
            consumers = list(out.get_target_inputs())
            clamped = ops.clamp(out, -float(bound), float(bound))
            clamped.set_friendly_name(f"{name}/clamp")
            names = set(out.get_names())
            out.get_tensor().set_names(set())
            clamped.output(0).get_tensor().set_names(names)
            for inp in consumers:
                inp.replace_source_output(clamped.output(0))
    clone.validate_nodes_and_infer_types()
    return clone
