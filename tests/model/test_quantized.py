"""NNCF's quantizers recognised in a twin built in code: weight decompression (i4 grouped, u8 with zero point),
f16 weight Converts and activation FakeQuantize, each the quantization of the node it serves."""

from __future__ import annotations

import numpy as np
import openvino as ov
from openvino import opset13 as ops

from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.match import match_nodes
from bisect_ov.model.runtime import RuntimeLayer

RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((32, 64)).astype(np.float32)  # [out, in]: MatMul with transpose_b
W2 = RNG.standard_normal((16, 32)).astype(np.float32)


def _named(node, name):
    node.set_friendly_name(name)
    return node


def _fp32() -> ov.Model:
    x = ops.parameter([1, 64], np.float32, name="x")
    mm1 = _named(ops.matmul(x, ops.constant(W1), False, True), "mm1")
    act = _named(ops.relu(mm1), "act")
    mm2 = _named(ops.matmul(act, ops.constant(W2), False, True), "mm2")
    return ov.Model([ops.result(mm2)], [x], "tiny")


def _int4_grouped(w: np.ndarray, group: int):
    """i4 symmetric with one scale per `group` inputs: Convert -> Multiply -> Reshape -> Convert, as NNCF does."""
    out, k = w.shape
    g = w.reshape(out, k // group, group)
    scale = np.abs(g).max(axis=2, keepdims=True) / 7
    q = np.clip(np.round(g / scale), -8, 7)
    c = ops.constant(q.astype(np.int8), dtype=ov.Type.i4)
    deq = ops.multiply(ops.convert(c, ov.Type.f16), ops.constant(scale.astype(np.float16)))
    return ops.convert(ops.reshape(deq, ops.constant(np.array([out, k], np.int64)), False), ov.Type.f32)


def _u8_asym(w: np.ndarray):
    lo, hi = w.min(axis=1, keepdims=True), w.max(axis=1, keepdims=True)
    scale = (hi - lo) / 255
    zero = np.round(-lo / scale)
    q = np.clip(np.round(w / scale) + zero, 0, 255)
    c = ops.constant(q.astype(np.uint8))
    sub = ops.subtract(ops.convert(c, ov.Type.f16), ops.convert(ops.constant(zero.astype(np.uint8)), ov.Type.f16))
    return ops.convert(ops.multiply(sub, ops.constant(scale.astype(np.float16))), ov.Type.f32)


def _twin() -> ov.Model:
    x = ops.parameter([1, 64], np.float32, name="x")
    mm1 = _named(ops.matmul(x, _int4_grouped(W1, 16), False, True), "mm1")
    act = _named(ops.relu(mm1), "act")
    fq = _named(ops.fake_quantize(act, ops.constant(np.float32(0)), ops.constant(np.float32(8)),
                                  ops.constant(np.float32(0)), ops.constant(np.float32(8)), 256), "act/fq_output_0")
    mm2 = _named(ops.matmul(fq, _u8_asym(W2), False, True), "mm2")
    return ov.Model([ops.result(mm2)], [x], "tiny-twin")


def test_nncf_ops_are_the_twins_quantization_not_unmatched():
    ref, twin = ModelGraph(_fp32()), ModelGraph(_twin())
    match = match_nodes(ref, twin)
    assert match.unmatched_ref == () and match.unmatched_target == ()
    assert match.coverage(ref) == 1.0
    q1, q2 = match.quantized["mm1"], match.quantized["mm2"]
    assert (q1.weight_type, q1.weight_bits, q1.group_size, q1.symmetric) == ("i4", 4, 16, True)
    assert (q2.weight_type, q2.weight_bits, q2.group_size, q2.symmetric) == ("u8", 8, 32, False)
    assert q2.activation_bits == 8 and "act/fq_output_0" in q2.ops
    assert q1.describe() == "int4 weights (i4, group 16, symmetric)"
    # Per channel, as NNCF says it (its group was printed as the reduction length, "group 32")
    assert q2.describe() == "int8 weights (u8, per channel, asymmetric), int8 activations"
    # 'act' is compared after its quantizer, the tensor the twin's readers see.
    compared = {r.key: t.key for r, t in match.pairs}
    assert compared["act"] == "act/fq_output_0" and compared["mm1"] == "mm1"
    assert dict(match.ops)["act"] == "act"


def test_f16_weights_are_recorded_as_such():
    ref = ModelGraph(_fp32())
    x = ops.parameter([1, 64], np.float32, name="x")
    w = ops.convert(ops.constant(W1.astype(np.float16)), ov.Type.f32)
    mm1 = _named(ops.matmul(x, w, False, True), "mm1")
    act = _named(ops.relu(mm1), "act")
    mm2 = _named(ops.matmul(act, ops.constant(W2), False, True), "mm2")
    twin = ModelGraph(ov.Model([ops.result(mm2)], [x], "f16"))
    match = match_nodes(ref, twin)
    assert match.unmatched_target == ()
    q = match.quantized["mm1"]
    assert q.weight_type == "f16" and q.weight_bits is None and not q.lowers_precision


def test_kernel_suffix_tells_the_arithmetic_from_the_stored_weights():
    fc = RuntimeLayer("fc", "FullyConnected", ("mm1",), "f16", ("f32",), "undef_f32", 1)
    bf16 = RuntimeLayer("fc", "FullyConnected", ("mm1",), "bf16", ("bf16",), "brgemm_avx512_bf16", 1)
    assert (fc.arithmetic_precision, fc.stored_weights) == ("f32", "f16")
    assert (bf16.arithmetic_precision, bf16.stored_weights) == ("bf16", None)
