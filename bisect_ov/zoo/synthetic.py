"""Small OpenVINO models built in code, for tests, examples and ``bisect-ov demo``.

Every builder returns a fresh `openvino.Model`, float32, with static shapes, and is deterministic for its
``seed`` (weights come from ``np.random.default_rng(seed)``). Every op, constants, parameters and results
included, has a unique friendly name that says what it is ("stem/conv", "block2/add", "attn/softmax",
"stem/conv/weight"); every op that produces data also names its output tensor after itself, so a tensor can be
found by name after serialisation or conversion. Weights are He-scaled and residual branches damped, so
activations stay in a sane range through depth and every value stays well inside the f16 range.

Builders of one model each are listed in `BUILDERS`. Besides them:

* `softmax_model`, `elementwise_model`: one op after a parameter (users' case 1);
* `fp32_and_int8`: a MobileNet-like classifier and its FakeQuantize twin (users' case 3);
* `int_conv`, `int_conv_input`: an integer-valued 1x1 convolution whose exact answer is known (users' case 4);
* `sample_inputs`: seeded random inputs in the range a zoo model expects (raw pixels 0..255 for
  `face_resnet` and `demo`, see `INPUT_RANGES`).

`face_resnet` and `demo` contain, on purpose, a hand-built instance norm whose input carries a large constant
offset ("inorm/offset"). In f32 that is harmless; once the offset tensor is stored in f16 or bf16 its
rounding step (0.5..1 in f16, 4..8 in bf16) is as large as or larger than its spread (about 0.5), so
``x - mean`` ("inorm/sub") cancels catastrophically and the model visibly diverges there. Pass
``inorm_offset=0.0`` to build the numerically benign variant.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import openvino as ov
from openvino import Node, opset1
from openvino import opset13 as ops

from bisect_ov.core.errors import InputError

__all__ = [
    "BUILDERS",
    "INPUT_RANGES",
    "attention_block",
    "chain",
    "conv_bn_net",
    "demo",
    "diamond",
    "elementwise_model",
    "face_resnet",
    "fp32_and_int8",
    "int_conv",
    "int_conv_input",
    "multi_io",
    "sample_inputs",
    "softmax_model",
]

# Value range of the inputs each model (by `ov.Model.get_friendly_name()`) is meant to see; others: [-1, 1].
# face_resnet and demo take raw pixels, as the users' real face model does.
INPUT_RANGES: dict[str, tuple[float, float]] = {
    "face_resnet": (0.0, 255.0),
    "demo": (0.0, 255.0),
}
_DEFAULT_RANGE = (-1.0, 1.0)

# Default offset added in front of the instance norm. Around 1000 a bf16 value's rounding step is 4..8 and an
# f16 value's 0.5..1, both as large as the spread (about 0.5) of the tensor being normalised.
_INORM_OFFSET = 1000.0

_INT_CONV_TYPES = {"i8": np.int8, "i32": np.int32, "f32": np.float32}


class _Net:
    """Builds one graph: seeded weights, and names that are checked to be unique.

    All helpers take the full friendly name of the op they create; constants they create are named after
    the op ("<op>/weight", "<op>/gamma", ...). Python scalars and arrays are never passed to an opset
    function directly, since OpenVINO would wrap them in unnamed constants.
    """

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self._names: set[str] = set()

    # -- naming ---------------------------------------------------------------------------------------------

    def name(self, node: Node, name: str) -> Node:
        """Give `node` the friendly name `name` and, unless it is a Constant or Result, tensor names."""
        if name in self._names:
            raise ValueError(f"duplicate op name {name!r} in a zoo model")  # a bug in this module
        self._names.add(name)
        node.set_friendly_name(name)
        if node.get_type_name() not in ("Constant", "Result"):
            for port, out in enumerate(node.outputs()):
                out.get_tensor().set_names({name if port == 0 else f"{name}:{port}"})
        return node

    def param(self, name: str, shape: Sequence[int], dtype: type = np.float32) -> Node:
        return self.name(ops.parameter(list(shape), dtype), name)

    def const(self, name: str, value, dtype: type = np.float32) -> Node:
        return self.name(ops.constant(np.asarray(value, dtype=dtype)), name)

    def model(self, name: str, outputs: dict[str, Node], params: Sequence[Node]) -> ov.Model:
        """Wrap `outputs` (Result name -> producing op) into a validated model called `name`."""
        results = [self.name(ops.result(node), res_name) for res_name, node in outputs.items()]
        model = ov.Model(results, list(params), name)
        model.validate_nodes_and_infer_types()
        return model

    # -- weights --------------------------------------------------------------------------------------------

    def he(self, shape: Sequence[int], fan_in: int, gain: float = math.sqrt(2.0)) -> np.ndarray:
        """Normal weights with std gain / sqrt(fan_in): sqrt(2) keeps variance through a ReLU, 1 is linear."""
        return (self.rng.standard_normal(shape) * gain / math.sqrt(fan_in)).astype(np.float32)

    def small(self, shape: Sequence[int], std: float = 0.05) -> np.ndarray:
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    # -- layers ---------------------------------------------------------------------------------------------

    def binary(self, kind: Callable[..., Node], name: str, x: Node, value, const_suffix: str) -> Node:
        """`kind(x, constant)`, e.g. a Multiply by a scalar; the constant is named "<name>/<const_suffix>"."""
        return self.name(kind(x, self.const(f"{name}/{const_suffix}", value)), name)

    def linear(self, name: str, x: Node, fan_in: int, fan_out: int, gain: float = math.sqrt(2.0)) -> Node:
        """MatMul "<name>/matmul" by [fan_in, fan_out] weights, then bias Add "<name>/add"."""
        w = self.const(f"{name}/weight", self.he([fan_in, fan_out], fan_in, gain))
        mm = self.name(ops.matmul(x, w, False, False), f"{name}/matmul")
        return self.binary(ops.add, f"{name}/add", mm, self.small([fan_out]), "bias")

    def conv(
        self,
        name: str,
        x: Node,
        cin: int,
        cout: int,
        k: int = 3,
        stride: int = 1,
        gain: float = math.sqrt(2.0),
    ) -> Node:
        """k x k Convolution with "same" padding (for odd k), no bias (a BatchNorm usually follows)."""
        w = self.const(f"{name}/weight", self.he([cout, cin, k, k], cin * k * k, gain))
        pad = [k // 2, k // 2]
        return self.name(ops.convolution(x, w, [stride, stride], pad, pad, [1, 1]), name)

    def bn(self, name: str, x: Node, channels: int, gamma_scale: float = 1.0) -> Node:
        """BatchNormInference close to identity; `gamma_scale` < 1 damps a residual branch."""
        r = self.rng
        gamma = self.const(f"{name}/gamma", gamma_scale * (1.0 + 0.1 * r.standard_normal(channels)))
        beta = self.const(f"{name}/beta", 0.05 * r.standard_normal(channels))
        mean = self.const(f"{name}/mean", 0.05 * r.standard_normal(channels))
        var = self.const(f"{name}/var", 1.0 + 0.1 * np.abs(r.standard_normal(channels)))
        return self.name(ops.batch_norm_inference(x, gamma, beta, mean, var, 1e-5), name)

    def prelu(self, name: str, x: Node, channels: int) -> Node:
        slope = 0.25 + 0.05 * self.rng.standard_normal([1, channels, 1, 1])
        return self.name(ops.prelu(x, self.const(f"{name}/slope", slope)), name)

    def reduce_mean(self, name: str, x: Node, axes: Sequence[int], keep_dims: bool = True) -> Node:
        axes_c = self.const(f"{name}/axes", list(axes), np.int64)
        return self.name(ops.reduce_mean(x, axes_c, keep_dims), name)

    def instance_norm(self, prefix: str, x: Node, channels: int, offset: float) -> Node:
        """The hand-built instance norm behind a large offset (see the module docstring).

        offset: "<p>/offset" = x + c (c about `offset`, per channel); mean: "<p>/mean" over H, W;
        "<p>/sub" = x - mean, the cancellation; "<p>/sqdiff" = (x - mean)^2, cancels the same way;
        "<p>/var", "<p>/add_eps", "<p>/sqrt", "<p>/div" = (x - mean) / sqrt(var + eps); then the affine
        "<p>/scale", "<p>/shift".
        """
        c = offset * (1.0 + 0.1 * self.rng.uniform(-1.0, 1.0, [1, channels, 1, 1]))
        x = self.binary(ops.add, f"{prefix}/offset", x, c, "value")
        mean = self.reduce_mean(f"{prefix}/mean", x, [2, 3])
        d = self.name(ops.subtract(x, mean), f"{prefix}/sub")
        sq = self.name(ops.squared_difference(x, mean), f"{prefix}/sqdiff")
        var = self.reduce_mean(f"{prefix}/var", sq, [2, 3])
        var = self.binary(ops.add, f"{prefix}/add_eps", var, 1e-5, "eps")
        std = self.name(ops.sqrt(var), f"{prefix}/sqrt")
        y = self.name(ops.divide(d, std), f"{prefix}/div")
        y = self.binary(ops.multiply, f"{prefix}/scale", y, 1.0 + self.small([1, channels, 1, 1], 0.1), "gamma")
        return self.binary(ops.add, f"{prefix}/shift", y, self.small([1, channels, 1, 1]), "beta")

    def preprocess(self, x: Node) -> Node:
        """Raw pixels 0..255 to [-1, 1], as the users' face model does: x * (1/128) - 1.

        The users' model computes (x - 127.5) * 2^-7; here the Multiply sits right on the raw input so that
        it is the first op to see values up to 255, and the result differs only by a constant (1/256).
        2^-7 is a power of two, so the multiply itself is exact in every float format.
        """
        x = self.binary(ops.multiply, "preprocess/mul", x, 0.0078125, "scale")
        return self.binary(ops.subtract, "preprocess/sub", x, 1.0, "shift")


def _shape(node: Node) -> list[int]:
    return [int(d) for d in node.get_output_shape(0)]


def _check_positive(**values: int) -> None:
    for key, value in values.items():
        if int(value) < 1:
            raise InputError(f"{key} must be a positive integer, got {value!r}")


# ------------------------------------------------------------------------------------------------------------
# Single-model builders
# ------------------------------------------------------------------------------------------------------------


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
    _check_positive(depth=depth, width=width)
    g = _Net(seed)
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
    g = _Net(seed)
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
    g = _Net(seed)
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
    _check_positive(seq=seq, dim=dim, heads=heads)
    if dim % heads:
        raise InputError(f"heads ({heads}) must divide dim ({dim})")
    hd = dim // heads
    g = _Net(seed)
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
    g = _Net(seed)
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


def face_resnet(
    depth: int = 8, width: int = 32, *, seed: int = 0, inorm_offset: float = _INORM_OFFSET
) -> ov.Model:
    """A deep residual face-recognition network in the style of ArcFace's IR-SE backbones.

    Parameters
    ----------
    depth
        Number of residual blocks, spread over up to four stages (two per stage by default).
    width
        Channels of the first stage; each later stage doubles them.
    seed
        Seeds the weights.
    inorm_offset
        Size of the constant added in front of the instance norm ("inorm/offset"). The default makes the
        instance norm cancel catastrophically in f16/bf16; 0.0 makes it benign.

    Returns
    -------
    openvino.Model
        Input "input" [1, 3, 56, 56] of raw pixel values 0..255; output "embedding" [1, 128], unit L2 norm.
        With the defaults it has 135 compute ops (323 ops in all).

        * "preprocess/mul" (x * 2^-7, right on the input), "preprocess/sub" (- 1): raw pixels to [-1, 1];
        * stem: "stem/conv", "stem/bn", "stem/prelu";
        * blocks "block{i}/...": "bn1", "conv1", "bn2", "prelu", "conv2" (stride 2 in the first block of
          stages 2..4), "bn3" (damped), squeeze-excitation "se/pool", "se/fc1", "se/relu", "se/fc2",
          "se/sigmoid", "se/mul", a "shortcut/conv" + "shortcut/bn" where the shape changes, and "add";
        * after the first stage, the instance norm "inorm/...": "inorm/offset" (x + ~`inorm_offset`),
          "inorm/mean", "inorm/sub" (x - mean: where f16/bf16 diverges), "inorm/sqdiff", "inorm/var",
          "inorm/add_eps", "inorm/sqrt", "inorm/div", "inorm/scale", "inorm/shift";
        * head: "head/bn", "head/flatten", "embedding/matmul", "embedding/add", "embedding/bn";
        * L2 normalisation: "l2norm/sq", "l2norm/sum", "l2norm/add_eps", "l2norm/sqrt", "l2norm/div".

        For inputs in [0, 255] every intermediate value stays far below the f16 limit (65504): the
        largest are the pixels themselves and the offset tensor (about `inorm_offset`).
    """
    _check_positive(depth=depth, width=width)
    g = _Net(seed)
    inp = g.param("input", [1, 3, 56, 56])
    x = g.preprocess(inp)
    x = g.prelu("stem/prelu", g.bn("stem/bn", g.conv("stem/conv", x, 3, width), width), width)

    # Blocks per stage, e.g. depth 8 -> [2, 2, 2, 2]; stages left empty by a small depth are skipped.
    per_stage = [len(s) for s in np.array_split(np.arange(depth), 4) if len(s)]
    cin, block = width, 0
    for stage, n_blocks in enumerate(per_stage):
        cout = width * 2**stage
        for j in range(n_blocks):
            stride = 2 if (j == 0 and stage > 0) else 1
            x = _ir_se_block(g, f"block{block}", x, cin, cout, stride)
            cin, block = cout, block + 1
        if stage == 0:
            x = g.instance_norm("inorm", x, cout, inorm_offset)

    x = g.bn("head/bn", x, cin)
    x = g.name(ops.reshape(x, g.const("head/flatten/shape", [1, -1], np.int64), False), "head/flatten")
    features = _shape(x)[1]
    x = g.linear("embedding", x, features, 128, gain=1.0)
    x = g.bn("embedding/bn", x, 128)
    # L2 normalisation by hand (the pattern ONNX exports produce), so each step can be compared.
    sq = g.name(ops.multiply(x, x), "l2norm/sq")
    ss = g.name(ops.reduce_sum(sq, g.const("l2norm/sum/axes", [1], np.int64), True), "l2norm/sum")
    ss = g.binary(ops.add, "l2norm/add_eps", ss, 1e-12, "eps")
    norm = g.name(ops.sqrt(ss), "l2norm/sqrt")
    x = g.name(ops.divide(x, norm), "l2norm/div")
    return g.model("face_resnet", {"embedding": x}, [inp])


def _ir_se_block(g: _Net, p: str, x: Node, cin: int, cout: int, stride: int) -> Node:
    """IR-SE residual block: BN, conv, BN, PReLU, conv(stride), BN, squeeze-excitation, + shortcut."""
    f = g.bn(f"{p}/bn1", x, cin)
    f = g.conv(f"{p}/conv1", f, cin, cout)
    f = g.prelu(f"{p}/prelu", g.bn(f"{p}/bn2", f, cout), cout)
    f = g.conv(f"{p}/conv2", f, cout, cout, stride=stride)
    f = g.bn(f"{p}/bn3", f, cout, gamma_scale=0.3)  # damped so variance grows slowly over depth
    # Squeeze-excitation: channel gates in (0, 1) from the pooled features.
    s = g.reduce_mean(f"{p}/se/pool", f, [2, 3])
    s = g.name(ops.relu(g.conv(f"{p}/se/fc1", s, cout, max(cout // 8, 1), k=1)), f"{p}/se/relu")
    s = g.name(ops.sigmoid(g.conv(f"{p}/se/fc2", s, max(cout // 8, 1), cout, k=1, gain=1.0)), f"{p}/se/sigmoid")
    f = g.name(ops.multiply(f, s), f"{p}/se/mul")
    if stride != 1 or cin != cout:
        x = g.bn(f"{p}/shortcut/bn", g.conv(f"{p}/shortcut/conv", x, cin, cout, k=1, stride=stride, gain=1.0), cout)
    return g.name(ops.add(x, f), f"{p}/add")


def demo(*, seed: int = 0, inorm_offset: float = _INORM_OFFSET) -> ov.Model:
    """The example of ``bisect-ov demo``: a small conv net that diverges at its instance norm in f16/bf16.

    Parameters
    ----------
    seed
        Seeds the weights.
    inorm_offset
        Size of the constant added in front of the instance norm; 0.0 removes the cancellation.

    Returns
    -------
    openvino.Model
        Input "input" [1, 3, 32, 32] of raw pixels 0..255; output "probs" [1, 10]. 35 compute ops.

        * "preprocess/mul" (x * 2^-7 on the raw input), "preprocess/sub";
        * "stem/conv", "stem/bn", "stem/relu";
        * residual block "block1/..." (conv1, bn1, relu1, conv2, bn2, add, relu);
        * instance norm "inorm/...": "inorm/offset" adds about `inorm_offset` to a tensor whose spread is
          about 1, so once it is stored in f16/bf16, "inorm/sub" (x - mean) and "inorm/sqdiff" are mostly
          rounding noise: the first node where a low-precision target visibly diverges;
        * residual block "block2/..." with stride 2 and a 1x1 "block2/shortcut/conv" + "block2/shortcut/bn";
        * head: "head/pool" (ReduceMean), "head/matmul", "head/add", "head/softmax".
    """
    g = _Net(seed)
    inp = g.param("input", [1, 3, 32, 32])
    x = g.preprocess(inp)
    x = g.name(ops.relu(g.bn("stem/bn", g.conv("stem/conv", x, 3, 16), 16)), "stem/relu")
    x = _basic_block(g, "block1", x, 16, 16, 1)
    x = g.instance_norm("inorm", x, 16, inorm_offset)
    x = _basic_block(g, "block2", x, 16, 32, 2)
    x = g.reduce_mean("head/pool", x, [2, 3], keep_dims=False)
    x = g.linear("head", x, 32, 10, gain=1.0)
    x = g.name(ops.softmax(x, 1), "head/softmax")
    return g.model("demo", {"probs": x}, [inp])


def _basic_block(g: _Net, p: str, x: Node, cin: int, cout: int, stride: int) -> Node:
    """ResNet basic block: conv-bn-relu, conv-bn (damped), + shortcut, relu."""
    f = g.name(ops.relu(g.bn(f"{p}/bn1", g.conv(f"{p}/conv1", x, cin, cout, stride=stride), cout)), f"{p}/relu1")
    f = g.bn(f"{p}/bn2", g.conv(f"{p}/conv2", f, cout, cout), cout, gamma_scale=0.5)
    if stride != 1 or cin != cout:
        x = g.bn(f"{p}/shortcut/bn", g.conv(f"{p}/shortcut/conv", x, cin, cout, k=1, stride=stride, gain=1.0), cout)
    return g.name(ops.relu(g.name(ops.add(x, f), f"{p}/add")), f"{p}/relu")


# ------------------------------------------------------------------------------------------------------------
# Case 1: one op after a parameter
# ------------------------------------------------------------------------------------------------------------


def softmax_model(shape: Sequence[int] = (1, 5), axis: int = 1) -> ov.Model:
    """One Softmax ("softmax") on a parameter ("input") of `shape`, along `axis`; result "output"."""
    if not shape or any(int(d) < 1 for d in shape):
        raise InputError(f"shape must be a non-empty sequence of positive sizes, got {shape!r}")
    if not -len(shape) <= axis < len(shape):
        raise InputError(f"axis {axis} is out of range for shape {tuple(shape)}")
    g = _Net(0)
    inp = g.param("input", [int(d) for d in shape])
    x = g.name(ops.softmax(inp, axis), "softmax")
    return g.model("softmax", {"output": x}, [inp])


def elementwise_model(op: str, n: int = 10000) -> ov.Model:
    """One activation `op` ("relu", "sigmoid", "gelu" (erf form) or "tanh"), named `op`, on input [1, n]."""
    _check_positive(n=n)
    makers: dict[str, Callable[[Node], Node]] = {
        "relu": ops.relu,
        "sigmoid": ops.sigmoid,
        "gelu": lambda x: ops.gelu(x, "erf"),
        "tanh": ops.tanh,
    }
    if op not in makers:
        raise InputError(f"unknown elementwise op {op!r}; choose one of {', '.join(makers)}")
    g = _Net(0)
    inp = g.param("input", [1, n])
    x = g.name(makers[op](inp), op)
    return g.model(f"elementwise_{op}", {"output": x}, [inp])


# ------------------------------------------------------------------------------------------------------------
# Case 3: an FP32 model and its int8 (FakeQuantize) twin
# ------------------------------------------------------------------------------------------------------------

# Consumer op name -> (low, high) of the activation that feeds it.
_Ranges = dict[str, tuple[float, float]]


def fp32_and_int8(*, seed: int = 0) -> tuple[ov.Model, ov.Model]:
    """A MobileNet-like FP32 classifier and its int8 twin with FakeQuantize ops.

    Parameters
    ----------
    seed
        Seeds the weights and the calibration inputs.

    Returns
    -------
    tuple of openvino.Model
        ``(fp32, int8)``. Both take "input" [1, 3, 32, 32] (values in [-1, 1]) and give "probs" [1, 10].

        The FP32 graph: "stem/conv" (3x3, stride 2), "stem/add" (bias), "stem/relu"; "block1/dw"
        (depthwise GroupConvolution), "block1/dw_add", "block1/dw_relu", "block1/pw" (1x1 conv),
        "block1/pw_add", "block1/add" (residual); "block2/dw" (stride 2), "block2/dw_add", "block2/dw_relu",
        "block2/pw" (16 -> 32), "block2/pw_add", "block2/relu"; "pool" (ReduceMean);
        "classifier/matmul", "classifier/add"; "softmax".

        The int8 graph is the same graph with the same names and weights, plus, for each consumer C among
        the convolutions and the MatMul, a FakeQuantize (levels=256) "C/fq_in" on its activation input and
        "C/fq_w" on its weights (bounds "C/fq_in/in_low", ...). Activation ranges are the min/max each
        activation takes when the FP32 model runs on CPU in f32 over 8 seeded random calibration inputs;
        weight ranges are symmetric, [-max|w|, max|w|]. The residual path of "block1/add" stays unquantized,
        as only the edges into convolutions and the MatMul are.
    """
    return _mobilenet(seed), _mobilenet(seed, _calibrate(seed))


def _mobilenet(seed: int, ranges: _Ranges | None = None, taps: dict[str, Node] | None = None) -> ov.Model:
    """The FP32 graph, or with activation `ranges` its int8 twin; `taps` collects each consumer's input."""
    g = _Net(seed)

    def fq(consumer: str, kind: str, x: Node, lo: float, hi: float) -> Node:
        p = f"{consumer}/{kind}"
        limits = (("in_low", lo), ("in_high", hi), ("out_low", lo), ("out_high", hi))
        bounds = [g.const(f"{p}/{bound}", value) for bound, value in limits]
        return g.name(ops.fake_quantize(x, *bounds, 256), p)

    def operands(consumer: str, x: Node, w_value: np.ndarray) -> tuple[Node, Node]:
        """The consumer's activation and weight inputs, through FakeQuantize in the int8 twin."""
        # The weight constant is created before any FakeQuantize constants, and those draw nothing from the
        # rng, so both twins get the same weights.
        w = g.const(f"{consumer}/weight", w_value)
        if taps is not None:
            taps[consumer] = x
        if ranges is None:
            return x, w
        a = float(np.abs(w_value).max())
        return fq(consumer, "fq_in", x, *ranges[consumer]), fq(consumer, "fq_w", w, -a, a)

    def conv(name: str, bias: str, x: Node, cin: int, cout: int, k: int, stride: int, depthwise=False) -> Node:
        pad = [k // 2, k // 2]
        if depthwise:  # GroupConvolution weights: [groups, out/group, in/group, k, k]
            x, w = operands(name, x, g.he([cin, 1, 1, k, k], k * k))
            y = ops.group_convolution(x, w, [stride, stride], pad, pad, [1, 1])
        else:
            x, w = operands(name, x, g.he([cout, cin, k, k], cin * k * k))
            y = ops.convolution(x, w, [stride, stride], pad, pad, [1, 1])
        return g.binary(ops.add, bias, g.name(y, name), g.small([1, cout, 1, 1]), "bias")

    inp = g.param("input", [1, 3, 32, 32])
    x = g.name(ops.relu(conv("stem/conv", "stem/add", inp, 3, 16, 3, 2)), "stem/relu")  # -> 16 x 16
    f = g.name(ops.relu(conv("block1/dw", "block1/dw_add", x, 16, 16, 3, 1, True)), "block1/dw_relu")
    f = conv("block1/pw", "block1/pw_add", f, 16, 16, 1, 1)
    x = g.name(ops.add(x, f), "block1/add")
    f = g.name(ops.relu(conv("block2/dw", "block2/dw_add", x, 16, 16, 3, 2, True)), "block2/dw_relu")  # 8 x 8
    x = g.name(ops.relu(conv("block2/pw", "block2/pw_add", f, 16, 32, 1, 1)), "block2/relu")
    x = g.reduce_mean("pool", x, [2, 3], keep_dims=False)
    x, w = operands("classifier/matmul", x, g.he([32, 10], 32, 1.0))
    x = g.name(ops.matmul(x, w, False, False), "classifier/matmul")
    x = g.binary(ops.add, "classifier/add", x, g.small([10]), "bias")
    x = g.name(ops.softmax(x, 1), "softmax")
    return g.model("mobilenet" if ranges is None else "mobilenet_int8", {"probs": x}, [inp])


def _calibrate(seed: int, n_samples: int = 8) -> _Ranges:
    """Min/max of every quantized activation of the FP32 model, run on CPU in f32 over seeded inputs."""
    taps: dict[str, Node] = {}
    model = _mobilenet(seed, None, taps)
    consumers = list(taps)
    model.add_outputs([taps[c].output(0) for c in consumers])
    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    lo = {c: math.inf for c in consumers}
    hi = {c: -math.inf for c in consumers}
    rng = np.random.default_rng([seed, 1])  # its own stream, so calibration never shifts the weights
    for _ in range(n_samples):
        outs = request.infer({0: rng.uniform(-1.0, 1.0, [1, 3, 32, 32]).astype(np.float32)})
        for i, c in enumerate(consumers, start=1):  # output 0 is "probs"; the taps follow in order
            lo[c] = min(lo[c], float(outs[i].min()))
            hi[c] = max(hi[c], float(outs[i].max()))
    return {c: (lo[c], hi[c]) for c in consumers}


# ------------------------------------------------------------------------------------------------------------
# Case 4: an integer-valued convolution with a known exact answer
# ------------------------------------------------------------------------------------------------------------


def int_conv(channels: int = 11111, value: int = 127, input_type: str = "i8") -> ov.Model:
    """A 1x1 convolution of an all-`value` input with all-`value` weights: exact answer value^2 * channels.

    Parameters
    ----------
    channels
        Input channels; the sum runs over them.
    value
        Every weight (and, in `int_conv_input`, every input element).
    input_type
        Element type of the input: "i8", "i32" or "f32".

    Returns
    -------
    openvino.Model
        "input" [1, channels, 1, 1] of `input_type` -> "to_float" (Convert to f32) -> "conv" (1x1
        Convolution to one channel, weights "conv/weight" all = `value`) -> "to_int" (Convert to i32) ->
        result "output" [1, 1, 1, 1].

        With the defaults the exact answer is 127 * 127 * 11111 = 179,209,319. That is above 2^24, so an f32
        accumulator cannot hold it exactly (its step there is 16: CPU f32 gives 179,207,392); stored in bf16
        it is rounded to a multiple of 2^20 (CPU bf16 gives 179,306,496); and it is far above the f16
        maximum (65504), so an f16 result overflows.
    """
    _check_positive(channels=channels)
    dtype = _int_conv_dtype(input_type)
    g = _Net(0)
    inp = g.param("input", [1, channels, 1, 1], dtype)
    x = g.name(ops.convert(inp, np.float32), "to_float")
    w = g.const("conv/weight", np.full([1, channels, 1, 1], value, np.float32))
    x = g.name(ops.convolution(x, w, [1, 1], [0, 0], [0, 0], [1, 1]), "conv")
    x = g.name(ops.convert(x, np.int32), "to_int")
    return g.model("int_conv", {"output": x}, [inp])


def int_conv_input(channels: int = 11111, value: int = 127, input_type: str = "i8") -> np.ndarray:
    """The input of `int_conv`: [1, channels, 1, 1], every element `value`, of `input_type`."""
    _check_positive(channels=channels)
    dtype = _int_conv_dtype(input_type)
    if np.issubdtype(dtype, np.integer) and not np.iinfo(dtype).min <= value <= np.iinfo(dtype).max:
        raise InputError(f"value {value} does not fit in {input_type}")
    return np.full([1, channels, 1, 1], value, dtype)


def _int_conv_dtype(input_type: str) -> type:
    if input_type not in _INT_CONV_TYPES:
        raise InputError(f"unknown input_type {input_type!r}; choose one of {', '.join(_INT_CONV_TYPES)}")
    return _INT_CONV_TYPES[input_type]


# ------------------------------------------------------------------------------------------------------------
# Inputs and registry
# ------------------------------------------------------------------------------------------------------------


def sample_inputs(model: ov.Model, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random inputs for a zoo model, keyed by input name, each of the input's static shape.

    Float inputs are uniform in ``INPUT_RANGES[model.get_friendly_name()]`` (default [-1, 1]); integer inputs are
    uniform integers in [-8, 8] (for `int_conv`, use `int_conv_input` instead).
    """
    lo, hi = INPUT_RANGES.get(model.get_friendly_name(), _DEFAULT_RANGE)
    rng = np.random.default_rng(seed)
    inputs: dict[str, np.ndarray] = {}
    for param in model.get_parameters():
        if param.get_partial_shape().is_dynamic:
            raise InputError(f"input {param.get_friendly_name()!r} has a dynamic shape; give inputs yourself")
        shape = [int(d) for d in param.get_output_shape(0)]
        dtype = param.get_element_type().to_dtype()
        if np.issubdtype(dtype, np.floating):
            arr = rng.uniform(lo, hi, shape).astype(dtype)
        else:
            arr = rng.integers(-8, 9, shape).astype(dtype)
        inputs[param.get_friendly_name()] = arr
    return inputs


BUILDERS: dict[str, Callable[..., ov.Model]] = {
    "chain": chain,
    "diamond": diamond,
    "multi_io": multi_io,
    "attention_block": attention_block,
    "conv_bn_net": conv_bn_net,
    "face_resnet": face_resnet,
    "demo": demo,
}
