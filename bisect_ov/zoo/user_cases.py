"""The zoo models of the users' cases: `demo`, `face_resnet` (case 2), `softmax_model` and `elementwise_model`
(case 1), `fp32_and_int8` with its calibration (case 3), and `int_conv` with `int_conv_input` (case 4).

Each builder returns a fresh `openvino.Model` with static shapes, deterministic for its ``seed``, built with
`bisect_ov.zoo.graph_builder.Net`. `face_resnet` and `demo` take raw pixels (0..255) and contain, on purpose,
an instance norm behind a large constant offset that cancels catastrophically once stored in f16 or bf16 (see
`bisect_ov.zoo.synthetic`). `fp32_and_int8` calibrates its int8 twin by running the FP32 model on the CPU in
f32, so it needs the OpenVINO CPU plugin. Users import these models from `bisect_ov.zoo.synthetic`.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import openvino as ov
from openvino import Node
from openvino import opset13 as ops

from bisect_ov.core.errors import InputError
from bisect_ov.zoo.graph_builder import Net, check_positive, output_shape

__all__ = ["demo", "elementwise_model", "face_resnet", "fp32_and_int8", "int_conv", "int_conv_input", "softmax_model"]

# Default offset added in front of the instance norm. Around 1000 a bf16 value's rounding step is 4..8 and an
# f16 value's 0.5..1, both as large as the spread (about 0.5) of the tensor being normalised.
_INORM_OFFSET = 1000.0

_INT_CONV_TYPES = {"i8": np.int8, "i32": np.int32, "f32": np.float32}


# ------------------------------------------------------------------------------------------------------------
# Case 2 and the demo: residual conv nets on raw pixels with an instance norm behind a large offset
# ------------------------------------------------------------------------------------------------------------


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
    check_positive(depth=depth, width=width)
    g = Net(seed)
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
    features = output_shape(x)[1]
    x = g.linear("embedding", x, features, 128, gain=1.0)
    x = g.bn("embedding/bn", x, 128)
    # L2 normalisation by hand (the pattern ONNX exports produce), so each step can be compared.
    sq = g.name(ops.multiply(x, x), "l2norm/sq")
    ss = g.name(ops.reduce_sum(sq, g.const("l2norm/sum/axes", [1], np.int64), True), "l2norm/sum")
    ss = g.binary(ops.add, "l2norm/add_eps", ss, 1e-12, "eps")
    norm = g.name(ops.sqrt(ss), "l2norm/sqrt")
    x = g.name(ops.divide(x, norm), "l2norm/div")
    return g.model("face_resnet", {"embedding": x}, [inp])


def _ir_se_block(g: Net, p: str, x: Node, cin: int, cout: int, stride: int) -> Node:
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
    g = Net(seed)
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


def _basic_block(g: Net, p: str, x: Node, cin: int, cout: int, stride: int) -> Node:
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
    g = Net(0)
    inp = g.param("input", [int(d) for d in shape])
    x = g.name(ops.softmax(inp, axis), "softmax")
    return g.model("softmax", {"output": x}, [inp])


def elementwise_model(op: str, n: int = 10000) -> ov.Model:
    """One activation `op` ("relu", "sigmoid", "gelu" (erf form) or "tanh"), named `op`, on input [1, n]."""
    check_positive(n=n)
    makers: dict[str, Callable[[Node], Node]] = {
        "relu": ops.relu,
        "sigmoid": ops.sigmoid,
        "gelu": lambda x: ops.gelu(x, "erf"),
        "tanh": ops.tanh,
    }
    if op not in makers:
        raise InputError(f"unknown elementwise op {op!r}; choose one of {', '.join(makers)}")
    g = Net(0)
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
    g = Net(seed)

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
    check_positive(channels=channels)
    dtype = _int_conv_dtype(input_type)
    g = Net(0)
    inp = g.param("input", [1, channels, 1, 1], dtype)
    x = g.name(ops.convert(inp, np.float32), "to_float")
    w = g.const("conv/weight", np.full([1, channels, 1, 1], value, np.float32))
    x = g.name(ops.convolution(x, w, [1, 1], [0, 0], [0, 0], [1, 1]), "conv")
    x = g.name(ops.convert(x, np.int32), "to_int")
    return g.model("int_conv", {"output": x}, [inp])


def int_conv_input(channels: int = 11111, value: int = 127, input_type: str = "i8") -> np.ndarray:
    """The input of `int_conv`: [1, channels, 1, 1], every element `value`, of `input_type`."""
    check_positive(channels=channels)
    dtype = _int_conv_dtype(input_type)
    if np.issubdtype(dtype, np.integer) and not np.iinfo(dtype).min <= value <= np.iinfo(dtype).max:
        raise InputError(f"value {value} does not fit in {input_type}")
    return np.full([1, channels, 1, 1], value, dtype)


def _int_conv_dtype(input_type: str) -> type:
    if input_type not in _INT_CONV_TYPES:
        raise InputError(f"unknown input_type {input_type!r}; choose one of {', '.join(_INT_CONV_TYPES)}")
    return _INT_CONV_TYPES[input_type]
