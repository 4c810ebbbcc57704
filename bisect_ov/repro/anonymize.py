"""A piece that can be shared without the model: its weights replaced by values of the same shape, dtype and
statistics, its ops renamed.

`anonymized(piece, seed)` returns a copy of a `Piece` in which

* every weight (a floating Constant of two or more values, or an integer one read by a Convert, as int8
  weights are) holds seeded normal values with the original's mean and standard deviation (rounded and clipped
  to the original's range for integers; a constant tensor stays that constant);
* every op is named after its type and position (``subtract_3``), every tensor name is dropped except the
  piece's own, which are exactly ``in<i>``, ``out<i>``, ``model_input<i>`` or ``target_input<i>`` (a model's
  ``outsourced_7`` is dropped), the model is named ``piece`` and the runtime info of the ops and of their inputs
  and outputs (which can hold the names of fused ops) is cleared.

Shape and index constants (read by Reshape, Gather's indices, axes) are kept: they are the piece's structure.
A twin's piece is anonymized with the same replacements for the weights it shares with the model (an injected
fault's copy keeps them all), its own (quantizers, the fault's constants) on their own. Whether the replaced piece still
reproduces is for the caller to check (`bisect_ov.repro.write`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from bisect_ov.repro.piece import Piece, Side

__all__ = ["anonymized", "replaced_weights"]

_KEPT_NAME = re.compile(r"(in|out|model_input|target_input)[0-9]+")


def anonymized(piece: Piece, *, seed: int = 0) -> Piece:
    """`piece` with its weights and names replaced; see the module docstring."""
    rng = np.random.default_rng(seed)
    chosen: dict[tuple, np.ndarray] = {}  # one replacement per distinct weight, shared by the two sides
    ref_model = _anonymized_model(piece.ref.model, rng, chosen)
    ref = replace(piece.ref, model=ref_model)
    target: Side = (replace(piece.target, model=_anonymized_model(piece.target.model, rng, chosen)) if piece.twin
                    else replace(piece.target, model=ref_model))
    return replace(piece, ref=ref, target=target)


def replaced_weights(model: ov.Model) -> list[ov.Node]:
    """The Constants of `model` that `anonymized` replaces (its weights)."""
    found = []
    for node in model.get_ordered_ops():
        if node.get_type_name() != "Constant":
            continue
        out = node.output(0)
        if int(np.prod(list(out.get_shape()), dtype=np.int64)) < 2:
            continue
        element = out.get_element_type()
        readers = [i.get_node().get_type_name() for i in out.get_target_inputs()]
        if element.is_real() or (element.is_integral() and readers and all(r == "Convert" for r in readers)):
            found.append(node)
    return found


def _anonymized_model(model: ov.Model, rng: np.random.Generator, chosen: dict[tuple, np.ndarray]) -> ov.Model:
    """A renamed copy of `model` with its weights replaced; a weight equal to one replaced before (the twin's
    copy of the model's weight) gets the same replacement, so the two sides still compute the same function."""
    clone = model.clone()
    for node in replaced_weights(clone):
        original = np.asarray(node.get_data())
        key = (original.shape, original.dtype.str, hashlib.sha256(original.tobytes()).hexdigest())
        if key not in chosen:
            chosen[key] = _like(original, rng)
        new = ops.constant(chosen[key], node.get_output_element_type(0))
        for target in list(node.output(0).get_target_inputs()):
            target.replace_source_output(new.output(0))
    clone.validate_nodes_and_infer_types()
    for i, node in enumerate(clone.get_ordered_ops()):
        kind = node.get_type_name()
        if kind not in ("Parameter", "Result"):
            node.set_friendly_name(f"{kind.lower()}_{i}")
            for out in node.outputs():
                out.get_tensor().set_names({n for n in out.get_names() if _KEPT_NAME.fullmatch(n)})
        for info in [node.get_rt_info()] + [p.get_rt_info() for p in (*node.inputs(), *node.outputs())]:
            for key in list(info.keys()):
                del info[key]
    clone.set_friendly_name("piece")
    for key in list(clone.get_rt_info().keys()):
        del clone.get_rt_info()[key]
    return clone


def _like(original: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Seeded normal values with `original`'s shape, dtype, mean and standard deviation."""
    values = original.astype(np.float64)
    finite = values[np.isfinite(values)]
    mean = float(finite.mean()) if finite.size else 0.0
    std = float(finite.std()) if finite.size else 0.0
    drawn = rng.normal(mean, std, original.shape) if std > 0 else np.full(original.shape, mean)
    if np.issubdtype(original.dtype, np.integer):
        low, high = (int(finite.min()), int(finite.max())) if finite.size else (0, 0)
        return np.clip(np.rint(drawn), low, high).astype(original.dtype)
    return drawn.astype(original.dtype)
