"""What a quantized twin adds to its model: NNCF's quantizers, recognised and attributed to the ops they serve.

NNCF leaves two kinds of ops in a twin (``nncf.quantize``, ``nncf.compress_weights``), and ``ov.save_model``
a third:

* **activation quantizers**: a ``FakeQuantize`` reading a data tensor, named ``<producer>/fq_output_<n>``;
  its ``levels`` attribute gives the bit width (256 levels: 8 bits);
* **weight quantizers**: the constant chain in front of an op's weight input. Either a ``FakeQuantize`` on the
  weight constant, or a decompression subgraph: a low-bit constant (u8, i8, u4, i4, nf4) -> ``Convert`` ->
  ``Subtract`` (zero point, asymmetric modes) -> ``Multiply`` (scale) [-> ``Reshape`` when the scales are
  grouped: the weight is stored as [out, groups, group size]] -> ``Convert`` to f32;
* **f16 weights**: a ``Convert`` of an f16 constant to f32 (``ov.save_model``'s default).

`find_quantization(graph)` returns, for every compute op of the twin that reads quantized data or weights, a
`Quantization` record: the precision of its weights, the group size (per channel: the reduction length),
the bit width of the activation quantizers on its inputs, and the twin's ops that make it up. The ops are
keyed by the twin's node keys.

Assumptions: a weight is an input reached only through constant-only ops; scales have one value per group
(or per output channel), so the group size is the last dimension of the grouped weight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from bisect_ov.model.graph import ModelGraph

__all__ = ["Quantization", "find_quantization", "activation_quantizers", "is_weight_quantizer", "WEIGHT_BITS"]

WEIGHT_BITS = {"u8": 8, "i8": 8, "u4": 4, "i4": 4, "nf4": 4, "f8e4m3": 8, "f8e5m2": 8, "u2": 2, "u1": 1}
"""Bit width of the constant types weight compression stores; f16 weights are recorded as such, not here."""


@dataclass(frozen=True)
class Quantization:
    """How one op of a twin is quantized; every field empty or None where it is not."""

    weight_type: str | None = None  # element type the weights are stored in: i4, u8, f16, ... (None: f32)
    weight_bits: int | None = None  # None for float weights
    group_size: int | None = None  # values sharing one scale (per channel: the reduction length)
    symmetric: bool = True  # no zero point
    activation_bits: int | None = None  # bits of the FakeQuantize on its data inputs (None: not quantized)
    ops: tuple[str, ...] = ()  # the twin's ops that make up this quantization (keys)
    # One scale per output channel (True), one for the whole tensor (False), or groups of `group_size` (None)
    per_channel: bool | None = None

    def describe(self) -> str:
        """``int4 weights (group 16, symmetric)``, ``int8 activations``, ``f16 weights``."""
        parts = []
        if self.weight_type == "f16" or self.weight_type == "bf16":
            parts.append(f"{self.weight_type} weights")
        elif self.weight_bits is not None:
            kind = "symmetric" if self.symmetric else "asymmetric"
            group = ("per channel" if self.per_channel else "per tensor" if self.per_channel is False
                     else f"group {self.group_size}" if self.group_size else "per channel")
            parts.append(f"int{self.weight_bits} weights ({self.weight_type}, {group}, {kind})")
        if self.activation_bits is not None:
            parts.append(f"int{self.activation_bits} activations")
        return ", ".join(parts) or "not quantized"

    @property
    def lowers_precision(self) -> bool:
        """True when something is stored in fewer than 16 bits (what a tolerance must allow for)."""
        return self.weight_bits is not None or self.activation_bits is not None


def activation_quantizers(graph: ModelGraph) -> dict[str, list[str]]:
    """For each data tensor's producer key, the FakeQuantize ops that read it (their keys), in order."""
    found: dict[str, list[str]] = {}
    for node in graph:
        if node.op_type == "FakeQuantize" and node.kind == "compute" and node.inputs:
            found.setdefault(node.inputs[0][0], []).append(node.key)
    return found


def _levels_bits(graph: ModelGraph, key: str) -> int:
    levels = int(graph.attributes(key).get("levels", 256))
    return max(1, math.ceil(math.log2(max(2, levels))))


def _weight_chain(graph: ModelGraph, key: str) -> tuple[list[str], str | None]:
    """The constant-only ops in front of one input (keys) and the constant the weight is stored in.

    The stored weight is the largest constant of a weight type (low-bit or f16) the chain starts from; scales
    and zero points are smaller.
    """
    chain: list[str] = []
    constants: list[str] = []
    stack, seen = [key], set()
    while stack:
        k = stack.pop()
        if k in seen:
            continue
        seen.add(k)
        node = graph[k]
        if node.kind == "constant":
            constants.append(k)
        elif node.kind == "static":
            chain.append(k)
            stack.extend(p for p, _ in node.inputs)
    stored = [k for k in constants if _is_weight_type(graph[k].outputs[0].dtype)]
    size = lambda k: math.prod(graph[k].outputs[0].shape or (0,))  # noqa: E731
    return chain, max(stored, key=size) if stored else None


def is_weight_quantizer(graph: ModelGraph, key: str) -> bool:
    """True for a constant-only op that decompresses or fake-quantizes a stored weight (wherever it is read)."""
    node = graph[key]
    if node.kind != "static":
        return False
    chain, origin = _weight_chain(graph, key)
    if any(graph[k].op_type == "FakeQuantize" for k in chain):
        return True
    return origin is not None and graph[origin].outputs[0].dtype in (*WEIGHT_BITS, "f16", "bf16") and all(
        graph[k].op_type in ("Convert", "Subtract", "Multiply", "Reshape") for k in chain)


def _is_weight_type(dtype: str) -> bool:
    return dtype in WEIGHT_BITS or dtype in ("f16", "bf16")


def _weights(graph: ModelGraph, node_key: str) -> Quantization | None:
    """The quantization of an op's weight input, if one of its inputs is a quantized or f16 constant."""
    node = graph[node_key]
    for producer, _ in node.inputs:
        if graph[producer].kind != "static":
            continue
        chain, origin = _weight_chain(graph, producer)
        if not chain:
            continue
        types = {graph[k].op_type for k in chain}
        fq = [k for k in chain if graph[k].op_type == "FakeQuantize"]
        if fq:
            bounds = graph[fq[0]].inputs[1][0] if len(graph[fq[0]].inputs) > 1 else None
            scales = math.prod(graph[bounds].outputs[0].shape or (1,)) if bounds is not None else 1
            return Quantization("fq", _levels_bits(graph, fq[0]), node.reduction_length or None,
                                True, None, tuple(chain), per_channel=scales > 1)
        if origin is None:
            continue
        dtype = graph[origin].outputs[0].dtype
        if dtype in ("f16", "bf16") and types <= {"Convert"}:
            return Quantization(dtype, None, None, True, None, tuple(chain))
        if dtype not in WEIGHT_BITS:
            continue
        shape = graph[origin].outputs[0].shape
        group: int | None
        grouped = "Reshape" in types and shape is not None and len(shape) >= 3  # [out, groups, group size]
        if grouped and shape is not None:
            group = shape[-1]
        else:
            group = node.reduction_length if node.reduction_length > 1 else (shape[-1] if shape else None)
        return Quantization(dtype, WEIGHT_BITS[dtype], group, "Subtract" not in types, None, tuple(chain),
                            per_channel=None if grouped else True)
    return None


def find_quantization(graph: ModelGraph) -> dict[str, Quantization]:
    """Every compute op of `graph` with quantized (or f16) weights or quantized data inputs, by key.

    The activation quantizers on an op's inputs are counted for that op when their producer is not a compute
    op (a model input); otherwise they are the quantized output of their producer, which is compared there
    (see `bisect_ov.model.match`), and also listed here under the op that reads them, since that is the op
    NNCF's ignored scope removes them for.
    """
    found: dict[str, Quantization] = {}
    for node in graph.candidates():
        if node.op_type == "FakeQuantize":
            continue
        weights = _weights(graph, node.key)
        fq_inputs = [k for k, _ in node.inputs if graph[k].op_type == "FakeQuantize" and graph[k].kind == "compute"]
        bits = max((_levels_bits(graph, k) for k in fq_inputs), default=None)
        if weights is None and bits is None:
            continue
        base = weights or Quantization()
        found[node.key] = replace(base, activation_bits=bits, ops=base.ops + tuple(fq_inputs))
    return found
