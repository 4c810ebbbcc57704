"""NNCF twins of zoo models: int8 quantization and int8/int4 weight compression, as users make them.

* `quantize_int8`: ``nncf.quantize`` (FakeQuantize on activations and weights, the default preset), calibrated
  on generated inputs from the model's own input description (the zoo has no data sets);
* `compress_weights`: ``nncf.compress_weights`` with ``INT8_ASYM`` (per channel) or ``INT4_SYM`` with a group
  size that divides every channel count it compresses (NNCF refuses a group size that does not), all
  ratio-defining layers in int4 (``ratio=1.0``); NNCF keeps the embedding and the LM head in int8 by default.

Both work on an in-memory `ov.Model` (a copy: NNCF changes its input) and return the twin.

Assumptions: nncf is installed (the ``zoo`` extra); imported only when a function runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import openvino as ov

__all__ = ["CALIBRATION_SAMPLES", "compress_weights", "int4_group_size", "quantize_int8"]

CALIBRATION_SAMPLES = 16


def _nncf():
    import nncf

    nncf.set_log_level(logging.ERROR)
    return nncf


def quantize_int8(model: ov.Model, make_inputs: Callable[[int], dict], samples: int = CALIBRATION_SAMPLES,
                  ignored: Sequence[str] = ()) -> ov.Model:
    """``nncf.quantize`` of a copy of `model`, calibrated on ``make_inputs(seed)`` for `samples` seeds.

    `ignored`: op names kept in higher precision (``nncf.IgnoredScope(names=...)``, e.g. a report's
    ``ignored_scope()``).
    """
    nncf = _nncf()
    data = [make_inputs(100 + i) for i in range(samples)]
    scope = nncf.IgnoredScope(names=list(ignored)) if ignored else None
    return nncf.quantize(model.clone(), nncf.Dataset(data), subset_size=samples,
                         **({"ignored_scope": scope} if scope else {}))


def _weight_channels(model: ov.Model) -> dict[str, int]:
    """Friendly name -> input-channel count of every MatMul that reads a constant (NNCF's weights)."""
    channels = {}
    for op in model.get_ops():
        if op.get_type_name() != "MatMul":
            continue
        attrs = op.get_attributes()
        # The reduced dimension of a constant on either side: rows of B (columns if transposed), columns of A.
        for port, axis in ((1, -1 if attrs.get("transpose_b", False) else -2),
                           (0, -2 if attrs.get("transpose_a", False) else -1)):
            shape = op.input(port).get_partial_shape()
            if (_is_weight(op.input_value(port).get_node()) and shape.rank.is_static
                    and shape.rank.get_length() >= 2 and shape[axis].is_static):
                channels[op.get_friendly_name()] = shape[axis].get_length()
                break
    return channels


def int4_group_size(model: ov.Model, preferred: Sequence[int] = (128, 64, 32, 16)) -> int:
    """The largest of `preferred` that divides the input-channel count of every MatMul weight of `model`.

    Constants with fewer channels than the smallest group (the rotary embedding's frequency product reads a
    [.., 1]-shaped constant) are not weights to compress and do not count; `compress_weights` leaves them out.
    """
    channels = [c for c in _weight_channels(model).values() if c >= min(preferred)]
    for size in preferred:
        if all(c % size == 0 for c in channels):
            return size
    from bisect_ov.core.errors import InputError

    raise InputError(f"No group size in {list(preferred)} divides every weight's channel count {sorted(channels)}.")


def _is_weight(node) -> bool:
    """A constant, possibly behind a Convert (f16 weights): what NNCF compresses."""
    while node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    return node.get_type_name() == "Constant"


def compress_weights(model: ov.Model, bits: int = 8, group_size: int | None = None,
                     ignored: Sequence[str] = ()) -> ov.Model:
    """``nncf.compress_weights`` of a copy of `model`: int8 asymmetric per channel, or int4 symmetric grouped.

    `ignored`: op names left uncompressed (``nncf.IgnoredScope(names=...)``, e.g. a report's ``ignored_scope()``).
    """
    nncf = _nncf()
    if bits == 8:
        scope = nncf.IgnoredScope(names=list(ignored)) if ignored else None
        return nncf.compress_weights(model.clone(), mode=nncf.CompressWeightsMode.INT8_ASYM,
                                     **({"ignored_scope": scope} if scope else {}))
    if bits == 4:
        group = group_size or int4_group_size(model)
        # What NNCF's error message asks for: leave out the MatMuls whose channels the group does not divide.
        skip = [name for name, c in _weight_channels(model).items() if c % group] + list(ignored)
        return nncf.compress_weights(model.clone(), mode=nncf.CompressWeightsMode.INT4_SYM, group_size=group,
                                     ratio=1.0, ignored_scope=nncf.IgnoredScope(names=skip) if skip else None)
    from bisect_ov.core.errors import InputError

    raise InputError(f"bits must be 8 or 4; got {bits!r}.")

