"""Compressed (int8/int4/...) weights, and the activation quantization the CPU gives their matrix products.

The CPU plugin quantizes the activations of matrix products over compressed weights to int8, in groups of 32, at any
inference precision, on CPUs with integer dot products (``DYNAMIC_QUANTIZATION_GROUP_SIZE``; 0 turns it off): an f32
reference that did carried that error (5.3e-03 on an int8-weight Llama against EMU:f16) and named the first layer's
projections. An f32 reference (`bisect_ov.run.openvino_device.OpenVINODevice.exact_weights`) runs them without it; a
target's report says when it quantizes them.
"""

from __future__ import annotations

from typing import Any

import openvino as ov

from bisect_ov.core.host import cpu_flags

__all__ = ["DYNAMIC_QUANTIZATION", "compressed_weights", "compressed_products", "quantizing", "integer_dot_products"]

DYNAMIC_QUANTIZATION = "DYNAMIC_QUANTIZATION_GROUP_SIZE"
_COMPRESSED = frozenset({"i8", "u8", "i4", "u4", "u3", "u2", "u1", "u6", "nf4", "f4e2m1", "f8e4m3", "f8e5m2", "f8e8m0"})


def compressed_weights(model: ov.Model) -> bool:
    """Whether `model` holds weights stored in a compressed type and converted to a float type where read."""
    return any(_decompresses(op) for op in model.get_ordered_ops())


def _decompresses(op: Any) -> bool:
    """Whether `op` converts a constant stored in a compressed type to a float type."""
    if op.get_type_name() != "Convert" or not op.get_output_element_type(0).is_real():
        return False
    source = op.input_value(0).get_node()
    return source.get_type_name() == "Constant" and source.get_output_element_type(0).get_type_name() in _COMPRESSED


# Ops between a compressed weight and the product reading it (decompression: zero point, scale, regrouping).
_DECOMPRESSION = frozenset({"Convert", "Subtract", "Multiply", "Reshape", "Transpose", "Unsqueeze", "Squeeze"})
_PRODUCTS = frozenset({"MatMul", "Convolution", "GroupConvolution"})


def compressed_products(model: ov.Model) -> tuple[str, ...]:
    """The matrix products (and convolutions) of `model` that read a compressed weight through its decompression
    ops, by name, in topological order."""
    found = []
    for op in model.get_ordered_ops():
        if op.get_type_name() in _PRODUCTS and any(_decompressed(v.get_node()) for v in op.input_values()):
            found.append(op.get_friendly_name())
    return tuple(found)


def _decompressed(node: Any, depth: int = 6) -> bool:
    """Whether `node` computes a float value from a compressed constant with decompression ops only."""
    if _decompresses(node):
        return True
    if node.get_type_name() not in _DECOMPRESSION or depth == 0:
        return False
    return any(_decompressed(value.get_node(), depth - 1) for value in node.input_values())


def quantizing(compiled: Any, model: ov.Model, device: str = "") -> int:
    """The group size the plugin quantizes compressed weights' activations in (0: it does not, or cannot say).

    The CPU plugin reports its group size whether or not its kernels can quantize: they need integer dot products
    (x86 ``avx_vnni`` or ``avx512_vnni``, Arm ``asimddp`` or ``i8mm``). On a CPU known to have none (an AVX2-only
    EPYC computes those products in f32 with the property at 32) it quantizes nothing."""
    try:
        group = int(compiled.get_property(DYNAMIC_QUANTIZATION))
    except Exception:  # noqa: BLE001 - a plugin without the property does not quantize them
        return 0
    if device.split(".")[0] == "CPU" and not integer_dot_products():
        return 0
    return group if group and compressed_weights(model) else 0


_DOT_PRODUCTS = frozenset({"avx_vnni", "avx512_vnni", "asimddp", "i8mm"})


def integer_dot_products() -> bool:
    """Whether this host's CPU has integer dot-product instructions (true where its flags cannot be read)."""
    flags = cpu_flags()
    return flags is None or bool(flags & _DOT_PRODUCTS)
