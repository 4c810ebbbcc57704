"""Fault injection: a copy of a model with one node's output perturbed, every name kept.

`inject_fault(model, "block2/conv")` returns a new model in which the tensor produced by ``block2/conv`` is
changed (scaled, offset, noised, saturated, zeroed or made NaN) before any consumer reads it. The perturbing
op takes over the node's friendly name and output tensor names, and the original op is renamed
``<name>/before_fault``, so `bisect(model, target_model=inject_fault(model, name))` compares the faulty value
under the node's own name and must report that node first. Used by the tests; useful to check that a
pipeline would catch a given kind of error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from bisect_ov.core.errors import InputError
from bisect_ov.core.numeric import F16_MAX
from bisect_ov.model.graph import ModelGraph, element_dtype
from bisect_ov.model.load import load_model

__all__ = ["FAULT_KINDS", "inject_fault"]


FAULT_KINDS = {
    "scale": "multiply by (1 + magnitude); magnitude 0.5 by default",
    "offset": "add magnitude; 1.0 by default",
    "noise": "add magnitude * N(0, 1) noise, seeded; 0.1 by default (static shapes only)",
    "saturate": "blow values up and clamp them to +-65504, the f16 limit",
    "zero": "replace the tensor by zeros",
    "nan": "make one element NaN (all of them when the shape is dynamic)",
    "mnoise": "multiply elementwise by (1 + magnitude * N(0, 1)), seeded; 0.2 by default",
    "roffset": "add magnitude times the tensor's own rms (computed in the graph); 0.2 by default",
    "sparse": "multiply a few elements (one in a thousand, at least one; seeded) by (1 + magnitude); 1.0 by default",
    "signflip": "flip the sign of a share `magnitude` of the elements, seeded; 0.05 by default",
}
_DEFAULT_MAGNITUDE = {"scale": 0.5, "offset": 1.0, "noise": 0.1, "mnoise": 0.2, "roffset": 0.2, "sparse": 1.0,
                      "signflip": 0.05}


def inject_fault(
    model: Any,
    node: str | int,
    kind: str = "scale",
    magnitude: float | None = None,
    *,
    port: int = 0,
    seed: int = 0,
) -> ov.Model:
    """Return a copy of `model` whose node `node` produces a wrong value.

    Parameters
    ----------
    model
        Anything `load_model` accepts; it is not modified.
    node
        Friendly name, output tensor name, or topological index of a compute node.
    kind
        One of `FAULT_KINDS`: ``scale``, ``offset``, ``noise``, ``saturate``, ``zero``, ``nan``, ``mnoise``,
        ``roffset``, ``sparse``, ``signflip``.
    magnitude
        Strength of the kinds that take one; their defaults when None. ``scale`` multiplies by
        ``1 + magnitude`` (0.5: x1.5; 0.0 changes nothing), ``sparse`` its elements likewise; ``offset`` adds
        it; the others as `FAULT_KINDS` says.
    port
        Which output of the node to perturb.
    seed
        Seed of the random kinds (``noise``, ``mnoise``, ``sparse``, ``signflip``).

    Returns
    -------
    openvino.Model
        The faulty copy.

    Raises
    ------
    InputError
        Unknown node or kind, or a node that is not a compute node.

    Examples
    --------
    >>> from bisect_ov import bisect, inject_fault          # doctest: +SKIP
    >>> report = bisect(m, "CPU", "CPU", target_model=inject_fault(m, "block2/conv"))  # doctest: +SKIP
    >>> report.first_divergence.name                        # doctest: +SKIP
    'block2/conv'
    """
    if kind not in FAULT_KINDS:
        raise InputError(f"Unknown fault kind '{kind}'. Available: {sorted(FAULT_KINDS)}.")
    source = load_model(model)
    graph = ModelGraph(source)
    info = graph.find(node)
    if not info.is_candidate:
        raise InputError(
            f"Node '{info.name}' is a {info.kind} op ({info.op_type}); faults go on compute nodes, "
            f"e.g. {[n.name for n in graph.candidates()[:5]]}."
        )
    if not 0 <= port < len(info.outputs):
        raise InputError(f"Node '{info.name}' has {len(info.outputs)} output(s); port {port} does not exist.")
    clone = source.clone()
    (op,) = graph.ops_of(clone, [info.key])
    out = op.output(port)
    consumers = list(out.get_target_inputs())
    tensor = info.outputs[port]
    faulty = _perturb(out, tensor.dtype, tensor.shape, kind, magnitude, seed)

    names = set(out.get_names())
    out.get_tensor().set_names(set())
    faulty.get_tensor().set_names(names)
    op.set_friendly_name(f"{info.name}/before_fault")
    faulty.get_node().set_friendly_name(info.name)
    for inp in consumers:
        inp.replace_source_output(faulty)
    clone.validate_nodes_and_infer_types()
    return clone


# Draws for a tensor of dynamic shape come from a seeded table of this many values, repeated as needed: the same
# values on every run and compile (OpenVINO's RandomUniform draws anew at each inference).
_TABLE = 1 << 16


# A dynamic tensor's picks (``sparse``, ``signflip``) are spread over the table so that every tensor has some: the
# first within its first `_FIRST` values, then one in each stretch of the table as long as the share asks.
_FIRST = 16


def _factors(kind: str, m: float, shape: tuple[int, ...], seed: int, *, table: bool = False) -> np.ndarray:
    """The multiplicative factors of the ``mnoise``, ``sparse`` and ``signflip`` kinds for a tensor of `shape`;
    with `table`, for the table a dynamic tensor's values are cut from (`_dynamic_draws`): its picks are
    stratified, one in each stretch of ``1 / share`` values and the first within `_FIRST`, so that a tensor of
    any size run time gives has its share of picks (a uniform draw over the table left about a third of the
    1,024-value tensors without a sparse pick)."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    if kind == "mnoise":
        return 1.0 + m * rng.standard_normal(shape)
    share = 1e-3 if kind == "sparse" else m
    picked = np.zeros(size, dtype=bool)
    if table:
        stretch = max(1, int(round(1 / share)))
        starts = np.arange(0, size, stretch)
        picked[np.minimum(starts + rng.integers(0, stretch, len(starts)), size - 1)] = True
        picked[:stretch] = False
        picked[rng.integers(0, min(_FIRST, stretch, size))] = True
    else:
        count = max(1, size // 1000) if kind == "sparse" else max(1, int(round(m * size)))
        picked[rng.choice(size, size=min(count, size), replace=False)] = True
    return np.where(picked.reshape(shape), 1.0 + m if kind == "sparse" else -1.0, 1.0)


def _dynamic_draws(out, table: np.ndarray, dtype) -> Any:
    """`table` repeated and cut to `out`'s size at run time, in `out`'s shape."""
    shape = ops.shape_of(out)
    size = ops.reduce_prod(shape, ops.constant(np.int64(0)), keep_dims=True)
    repeats = ops.add(ops.divide(size, ops.constant(np.array([_TABLE], np.int64))), ops.constant(np.array([1], np.int64)))
    long = ops.tile(ops.constant(table.astype(dtype)), repeats)
    cut = ops.slice(long, ops.constant(np.array([0], np.int64)), size, ops.constant(np.array([1], np.int64)))
    return ops.reshape(cut, shape, special_zero=False)


def _perturb(out, dtype_name: str, shape, kind: str, magnitude: float | None, seed: int):
    dtype = element_dtype(dtype_name)
    m = _DEFAULT_MAGNITUDE.get(kind, 0.0) if magnitude is None else float(magnitude)
    is_int = np.issubdtype(dtype, np.integer) or dtype == np.bool_
    if dtype == np.bool_:
        raise InputError("Faults on boolean tensors are not supported; choose a numeric node.")

    def const(value) -> Any:
        return ops.constant(np.asarray(value, dtype=dtype), dtype=out.get_element_type())

    if kind == "scale":
        factor = max(2, int(round(1 + m))) if is_int else 1.0 + m
        return ops.multiply(out, const(factor)).output(0)
    if kind == "offset":
        return ops.add(out, const(max(1, int(round(m))) if is_int else m)).output(0)
    if kind == "zero":
        return ops.multiply(out, const(0)).output(0)
    if kind == "saturate":
        if is_int:
            info = np.iinfo(dtype)
            return ops.clamp(ops.multiply(out, const(1 << 20)), float(info.min), float(info.max)).output(0)
        return ops.clamp(ops.multiply(out, const(1e6)), -F16_MAX, F16_MAX).output(0)
    if is_int:
        raise InputError(f"Fault kind '{kind}' needs a floating-point tensor; this one is {dtype_name}.")
    if kind == "roffset":
        axes = ops.range(ops.constant(np.int64(0)), ops.squeeze(ops.shape_of(ops.shape_of(out)), ops.constant(0)),
                         ops.constant(np.int64(1)), "i64")
        squares = ops.multiply(out, out)
        rms = ops.sqrt(ops.reduce_mean(squares, axes, keep_dims=False))
        return ops.add(out, ops.multiply(rms, const(m))).output(0)
    if kind in ("mnoise", "sparse", "signflip") and shape is None:
        return ops.multiply(out, _dynamic_draws(out, _factors(kind, m, (_TABLE,), seed, table=True), dtype)).output(0)
    if kind in ("mnoise", "sparse", "signflip"):
        return ops.multiply(out, const(_factors(kind, m, tuple(shape), seed))).output(0)
    if kind == "noise":
        if shape is None:
            # A dynamic tensor (a stateful LLM's, whose cache length is known only at run time): the same seeded
            # draws, cut from a table to the tensor's size at run time.
            table = np.random.default_rng(seed).standard_normal(_TABLE) * m
            return ops.add(out, _dynamic_draws(out, table, dtype)).output(0)
        noise = np.random.default_rng(seed).standard_normal(shape) * m
        return ops.add(out, const(noise)).output(0)
    # kind == "nan": one NaN element, so the test sees exactly where NaN starts.
    if shape is None:
        return ops.add(out, const(np.nan)).output(0)
    mask = np.zeros(shape, dtype=dtype)
    mask.reshape(-1)[0] = np.nan
    return ops.add(out, const(mask)).output(0)
