"""Generic graph shapes built in code: a chain, a diamond, several inputs and outputs, an attention block and a
conv/BatchNorm classifier.

Each builder returns a fresh float32 `openvino.Model` with static shapes, deterministic for its ``seed``, built
with `bisect_ov.zoo.graph_builder.Net` (unique friendly names, tensors named after their ops). The shapes test
how a search walks a graph (one path, paths that meet, several outputs, fused patterns), not a user's model:
their inputs are meant to be in [-1, 1]. Users import them from `bisect_ov.zoo.synthetic`.
"""

from __future__ import annotations

import math

import numpy as np
import openvino as ov
from openvino import Node, opset1
from openvino import opset13 as ops

from bisect_ov.core.errors import InputError
from bisect_ov.zoo.graph_builder import Net, check_positive

__all__ = ["attention_block", "chain", "conv_bn_net", "diamond", "multi_io"]


def chain(depth: int = 8, width: int = 16, *, seed: int = 0) -> ov.Model:
    """A single chain of dense layers with varied activations.

    Parameters
    ----------
    depth
        Number of layers.
    width
        Features per layer; the input is [1, width] and so is the output.
    seed
        Seeds the weights.

    Returns
    -------
    openvino.Model
        ``input -> layer0 -> ... -> layer{depth-1} -> output``. Layer ``i`` is a MatMul ("layer{i}/matmul")
        plus bias Add ("layer{i}/add"), then, cycling with ``i % 4``:

        0. Relu ("layer{i}/relu");
        1. Tanh ("layer{i}/tanh");
        2. Sigmoid, Subtract 0.5, Multiply by 4 ("layer{i}/sigmoid", "layer{i}/center", "layer{i}/rescale");
        3. Clamp to [-3, 2], Exp, Subtract 1 ("layer{i}/clamp", "layer{i}/exp", "layer{i}/expm1").

        Every node is on the one path from input to output, so the first divergent node is unambiguous.
        Exp amplifies relative error and Sigmoid/Tanh saturate, so errors grow and shrink along the chain.
    """
    check_positive(depth=depth, width=width)
    g = Net(seed)
    inp = g.param("input", [1, width])
    x = inp
    for i in range(depth):
        p = f"layer{i}"
        kind = i % 4
        x = g.linear(p, x, width, width, gain=math.sqrt(2.0) if kind == 0 else 1.0)
        if kind == 0:
            x = g.name(ops.relu(x), f"{p}/relu")
        elif kind == 1:
            x = g.name(ops.tanh(x), f"{p}/tanh")
        elif kind == 2:
            # Centre and rescale the sigmoid so the next layer sees a zero-mean, unit-ish signal.
            x = g.name(ops.sigmoid(x), f"{p}/sigmoid")
            x = g.binary(ops.subtract, f"{p}/center", x, 0.5, "value")
            x = g.binary(ops.multiply, f"{p}/rescale", x, 4.0, "value")
        else:
            # Clamp first: it bounds Exp (e^2 < 8), as a real model's guard would.
            x = g.name(ops.clamp(x, -3.0, 2.0), f"{p}/clamp")
            x = g.name(ops.exp(x), f"{p}/exp")
            x = g.binary(ops.subtract, f"{p}/expm1", x, 1.0, "value")
    return g.model("chain", {"output": x}, [inp])


def diamond(*, seed: int = 0) -> ov.Model:
    """A stem, two parallel branches joined by Add, then a residual block.

    Parameters
    ----------
    seed
        Seeds the weights.

    Returns
    -------
    openvino.Model
        Input [1, 3, 16, 16]; output [1, 8, 16, 16].

        * stem: "stem/conv" (3x3, 3 -> 8 channels), "stem/relu";
        * branch a: "branch_a/conv" (3x3), "branch_a/relu";
        * branch b: "branch_b/conv" (1x1), "branch_b/sigmoid";
        * "join/add" = branch a + branch b: the node where two paths meet, so a divergence at "join/add"
          must be traced into both branches;
        * residual block: "block/conv1", "block/relu", "block/conv2" (damped), "block/add" = join + f(join),
          then "block/out_relu" feeding the output.
    """
    g = Net(seed)
    inp = g.param("input", [1, 3, 16, 16])
    stem = g.name(ops.relu(g.conv("stem/conv", inp, 3, 8)), "stem/relu")
    a = g.name(ops.relu(g.conv("branch_a/conv", stem, 8, 8)), "branch_a/relu")
    b = g.name(ops.sigmoid(g.conv("branch_b/conv", stem, 8, 8, k=1, gain=1.0)), "branch_b/sigmoid")
    join = g.name(ops.add(a, b), "join/add")
    f = g.name(ops.relu(g.conv("block/conv1", join, 8, 8)), "block/relu")
    f = g.conv("block/conv2", f, 8, 8, gain=0.5)  # damped residual branch
    out = g.name(ops.add(join, f), "block/add")
    out = g.name(ops.relu(out), "block/out_relu")
    return g.model("diamond", {"output": out}, [inp])


def multi_io(*, seed: int = 0) -> ov.Model:
    """Two inputs of different shapes, mixed by Concat, two outputs.

    Parameters
    ----------
    seed
        Seeds the weights.

    Returns
    -------
    openvino.Model
        Inputs "input_a" [1, 8] and "input_b" [1, 4].

        * "a/matmul", "a/add", "a/relu" on input_a; "b/matmul", "b/add", "b/tanh" on input_b;
        * "mix/concat" -> [1, 12], "mix/matmul", "mix/add", "mix/relu";
        * result "output_a" [1, 6]: "head_a/matmul", "head_a/add", "head_a/sigmoid";
        * result "output_b" [1, 3]: "head_b/matmul", "head_b/add", "head_b/softmax".

        Both outputs depend on both inputs through "mix/concat".
    """
    g = Net(seed)
    in_a = g.param("input_a", [1, 8])
    in_b = g.param("input_b", [1, 4])
    a = g.name(ops.relu(g.linear("a", in_a, 8, 8)), "a/relu")
    b = g.name(ops.tanh(g.linear("b", in_b, 4, 4, gain=1.0)), "b/tanh")
    mix = g.name(ops.concat([a, b], 1), "mix/concat")
    mix = g.name(ops.relu(g.linear("mix", mix, 12, 12)), "mix/relu")
    out_a = g.name(ops.sigmoid(g.linear("head_a", mix, 12, 6, gain=1.0)), "head_a/sigmoid")
    out_b = g.name(ops.softmax(g.linear("head_b", mix, 12, 3, gain=1.0), 1), "head_b/softmax")
    return g.model("multi_io", {"output_a": out_a, "output_b": out_b}, [in_a, in_b])


def attention_block(seq: int = 16, dim: int = 32, heads: int = 2, *, seed: int = 0) -> ov.Model:
    """A pre-norm transformer encoder block.

    Parameters
    ----------
    seq, dim
        The input is [1, seq, dim]; so is the output.
    heads
        Attention heads; must divide `dim`.
    seed
        Seeds the weights.

    Returns
    -------
    openvino.Model
        * "ln1/...": LayerNorm built by hand ("ln1/mean", "ln1/sub", "ln1/sq", "ln1/var", "ln1/add_eps",
          "ln1/sqrt", "ln1/div", "ln1/scale", "ln1/shift"), the pattern converters emit for LayerNorm;
        * "attn/q", "attn/k", "attn/v": MatMul + bias ("attn/q/matmul", "attn/q/add"), each split into heads
          by "attn/q/reshape" and "attn/q/transpose" to [1, heads, seq, dim / heads];
        * "attn/scores" = Q K^T (MatMul with transpose_b), "attn/scale" (* 1/sqrt(dim/heads)),
          "attn/softmax": the classic low-precision hot spot (large logits, exp);
        * "attn/context" = softmax V, merged back by "attn/merge/transpose", "attn/merge/reshape";
        * "attn/out" projection (damped), "attn/residual" Add;
        * "ln2/mvn" (MVN op) with "ln2/scale", "ln2/shift";
        * MLP "mlp/fc1" (dim -> 4 dim), "mlp/gelu" (erf), "mlp/fc2" (damped), "mlp/residual" Add.
    """
    check_positive(seq=seq, dim=dim, heads=heads)
    if dim % heads:
        raise InputError(f"heads ({heads}) must divide dim ({dim})")
    hd = dim // heads
    g = Net(seed)
    inp = g.param("input", [1, seq, dim])

    # LayerNorm from primitives.
    mean = g.reduce_mean("ln1/mean", inp, [-1])
    d = g.name(ops.subtract(inp, mean), "ln1/sub")
    sq = g.name(ops.multiply(d, d), "ln1/sq")
    var = g.reduce_mean("ln1/var", sq, [-1])
    var = g.binary(ops.add, "ln1/add_eps", var, 1e-5, "eps")
    std = g.name(ops.sqrt(var), "ln1/sqrt")
    h = g.name(ops.divide(d, std), "ln1/div")
    h = g.binary(ops.multiply, "ln1/scale", h, 1.0 + g.small([dim], 0.1), "gamma")
    h = g.binary(ops.add, "ln1/shift", h, g.small([dim]), "beta")

    def split_heads(name: str) -> Node:
        t = g.linear(f"attn/{name}", h, dim, dim, gain=1.0)
        t = g.name(
            ops.reshape(t, g.const(f"attn/{name}/reshape/shape", [1, seq, heads, hd], np.int64), False),
            f"attn/{name}/reshape",
        )
        order = g.const(f"attn/{name}/transpose/order", [0, 2, 1, 3], np.int64)
        return g.name(ops.transpose(t, order), f"attn/{name}/transpose")

    q, k, v = split_heads("q"), split_heads("k"), split_heads("v")
    scores = g.name(ops.matmul(q, k, False, True), "attn/scores")
    scores = g.binary(ops.multiply, "attn/scale", scores, 1.0 / math.sqrt(hd), "value")
    probs = g.name(ops.softmax(scores, -1), "attn/softmax")
    ctx = g.name(ops.matmul(probs, v, False, False), "attn/context")
    ctx = g.name(
        ops.transpose(ctx, g.const("attn/merge/transpose/order", [0, 2, 1, 3], np.int64)), "attn/merge/transpose"
    )
    ctx = g.name(
        ops.reshape(ctx, g.const("attn/merge/reshape/shape", [1, seq, dim], np.int64), False), "attn/merge/reshape"
    )
    out = g.linear("attn/out", ctx, dim, dim, gain=0.5)
    x = g.name(ops.add(inp, out), "attn/residual")

    # Second norm as a single MVN op, the form OpenVINO fuses LayerNorm into.
    h = g.name(ops.mvn(x, g.const("ln2/mvn/axes", [-1], np.int64), True, 1e-5, "inside_sqrt"), "ln2/mvn")
    h = g.binary(ops.multiply, "ln2/scale", h, 1.0 + g.small([dim], 0.1), "gamma")
    h = g.binary(ops.add, "ln2/shift", h, g.small([dim]), "beta")
    h = g.linear("mlp/fc1", h, dim, 4 * dim)
    h = g.name(ops.gelu(h, "erf"), "mlp/gelu")
    h = g.linear("mlp/fc2", h, 4 * dim, dim, gain=0.5)
    x = g.name(ops.add(x, h), "mlp/residual")
    return g.model("attention_block", {"output": x}, [inp])


def conv_bn_net(*, seed: int = 0) -> ov.Model:
    """A small classifier: Conv-BatchNorm-Relu stages, MaxPool, a residual block, pooling, MatMul, Softmax.

    Parameters
    ----------
    seed
        Seeds the weights.

    Returns
    -------
    openvino.Model
        Input [1, 3, 32, 32]; output [1, 10] class probabilities.

        * "conv1/conv", "conv1/bn", "conv1/relu" (3 -> 16), the same for "conv2";
        * "pool1/maxpool" (2x2, stride 2) -> 16x16;
        * residual block "res/conv_a", "res/bn_a", "res/relu_a", "res/conv_b", "res/bn_b" (damped),
          "res/add", "res/relu";
        * "conv3/conv" (stride 2, 16 -> 32), "conv3/bn", "conv3/relu" -> 8x8;
        * "gap/mean" (global average pool as ReduceMean) -> [1, 32];
        * "fc/matmul", "fc/add" -> 10 logits, "softmax".

        Conv + BatchNorm + Relu is the pattern plugins fuse, so a divergence is often reported on the
        convolution even when the fused BatchNorm caused it.
    """
    g = Net(seed)
    inp = g.param("input", [1, 3, 32, 32])

    def cbr(p: str, x: Node, cin: int, cout: int, stride: int = 1) -> Node:
        x = g.bn(f"{p}/bn", g.conv(f"{p}/conv", x, cin, cout, stride=stride), cout)
        return g.name(ops.relu(x), f"{p}/relu")

    x = cbr("conv1", inp, 3, 16)
    x = cbr("conv2", x, 16, 16)
    # opset1 MaxPool: one output (opset8's second, "indices", output would be an i64 tensor to compare).
    x = g.name(opset1.max_pool(x, [2, 2], [0, 0], [0, 0], [2, 2]), "pool1/maxpool")
    f = g.name(ops.relu(g.bn("res/bn_a", g.conv("res/conv_a", x, 16, 16), 16)), "res/relu_a")
    f = g.bn("res/bn_b", g.conv("res/conv_b", f, 16, 16), 16, gamma_scale=0.5)
    x = g.name(ops.relu(g.name(ops.add(x, f), "res/add")), "res/relu")
    x = cbr("conv3", x, 16, 32, stride=2)
    x = g.reduce_mean("gap/mean", x, [2, 3], keep_dims=False)
    x = g.linear("fc", x, 32, 10, gain=1.0)
    x = g.name(ops.softmax(x, 1), "softmax")
    return g.model("conv_bn_net", {"output": x}, [inp])
