"""Real network topologies from the `onnx` wheel, with seeded random weights.

The `onnx` package ships "light" copies of classic model-zoo networks under `onnx/backend/test/data/light/`
(ResNet-50, SqueezeNet, ShuffleNet, DenseNet-121, Inception v1/v2, VGG-19, ZFNet-512, AlexNet). The graphs
are the real ones, the weights are not: every large weight is made at run time by a `ConstantOfShape` node
that fills it with 0.02. With all weights equal the outputs are degenerate and f32 and bf16 agree exactly, so
the files are no use for finding precision divergences as they stand.

This module turns them into usable test and benchmark models:

* Each `ConstantOfShape` weight becomes a seeded random initializer of the same name and shape. Its values
  follow the op and input slot that reads it (looking through `Reshape`, `Unsqueeze` and other view ops):
  Conv/ConvTranspose/Gemm/MatMul weights are He normal (std = sqrt(2 / fan_in)); their biases, BatchNorm
  biases and means, and Caffe-style `Add` biases are small and centred on 0; BatchNorm and Caffe-style `Mul`
  scales are near 1; BatchNorm variances are positive.
* The few small initializers the files kept from the trained networks (some biases and BatchNorm parameters)
  are redrawn the same way. Trained statistics next to random weights are wrong by orders of magnitude
  (ShuffleNet's first BatchNorm has running variances of 1e-13 and less, a gain of about 300).
* BatchNorm running variances are then calibrated: one forward pass of the ONNX reference evaluator on a
  seeded standard-normal input sets each to the mean square of what that BatchNorm sees (one value per
  layer, see `_calibrating_batchnorm` for why not per channel), so every BatchNorm brings its layer back to
  unit size as a trained one would. Without this, a BatchNorm with random statistics does not normalise, each
  residual `Sum` doubles the activations' variance and ResNet-50's softmax ends up exactly one-hot.

Nothing else changes: node names, tensor names, attributes, the inputs fed and the outputs, IR and opset
versions stay as in the file. The `ConstantOfShape` nodes and the shape tensors only they used are gone; under
IR 3, which lists every initializer among the graph inputs too, each weight's entry takes its shape's place.

Assumptions: the installed `onnx` wheel holds the `light` folder (it has since onnx 1.2); the networks take one
image input of batch 1 in their own shape ([1, 3, 224, 224]); inputs are drawn like the calibration input
(standard normal), for which every output is finite, varied and in a sane range, and f32 and bf16 differ by
0.4 to 5 % (relative L2) on OpenVINO's CPU plugin. Weights are random, so the predictions mean nothing.
`load_light_onnx` needs onnx and numpy alone; only `load_light_model` needs OpenVINO.
"""

from __future__ import annotations

import logging
import pathlib
import tempfile
import zlib
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
import openvino as ov
from numpy.lib.stride_tricks import sliding_window_view
from onnx import helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from bisect_ov.core.errors import InputError

log = logging.getLogger(__name__)

__all__ = ["LIGHT_MODELS", "light_model_path", "load_light_onnx", "load_light_model", "save_light_onnx"]

# Short name -> file in the light folder. Only those the installed wheel holds end up in LIGHT_MODELS.
_FILES = {
    "resnet50": "light_resnet50.onnx",
    "squeezenet": "light_squeezenet.onnx",
    "shufflenet": "light_shufflenet.onnx",
    "densenet121": "light_densenet121.onnx",
    "inception_v1": "light_inception_v1.onnx",
    "inception_v2": "light_inception_v2.onnx",
    "vgg19": "light_vgg19.onnx",
    "zfnet512": "light_zfnet512.onnx",
    "bvlc_alexnet": "light_bvlc_alexnet.onnx",
}

# Ops that only re-view a weight: its role is decided by whoever reads their output.
_VIEW_OPS = frozenset({"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Transpose", "Identity", "Cast"})

# Spread of the "small around 0" and "around 1" draws: large enough that no two channels are alike, small
# enough that BatchNorm and the Caffe scale layers stay close to identity and He scaling holds.
_BIAS_STD = 0.05
_SCALE_STD = 0.1

# Pooling attributes the fast calibration pools implement; any other makes calibration use the reference ones.
_FAST_POOL_ATTRIBUTES = frozenset({"kernel_shape", "pads", "strides", "count_include_pad"})


def light_model_path() -> pathlib.Path:
    """Return the folder of the `onnx` wheel that holds the light model files.

    Returns
    -------
    pathlib.Path
        ``<site-packages>/onnx/backend/test/data/light``; it may be missing from a stripped-down install.
    """
    return pathlib.Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


LIGHT_MODELS: tuple[str, ...] = tuple(name for name, file in _FILES.items() if (light_model_path() / file).is_file())
"""Short names of the light models in the installed `onnx` wheel, e.g. ``"squeezenet"``, ``"resnet50"``."""


def load_light_onnx(name: str, seed: int = 0) -> onnx.ModelProto:
    """Load a light model with seeded random weights, as ONNX.

    Parameters
    ----------
    name
        One of `LIGHT_MODELS`.
    seed
        Non-negative seed of the weights (and of the BatchNorm calibration input): the same seed gives the
        same model, byte for byte; each weight depends only on the seed and its own name.

    Returns
    -------
    onnx.ModelProto
        The model with every weight random and every `ConstantOfShape` weight turned into an initializer of
        the same name; nodes, tensor names and attributes otherwise as in the file.

    Raises
    ------
    InputError
        `name` is not one of `LIGHT_MODELS`, or `seed` is not a non-negative integer.
    """
    path = _model_file(name)
    seed = _check_seed(seed)
    model = onnx.load(str(path))
    drawn = _randomise_weights(model, seed)
    _calibrate_batchnorm(model, drawn, seed)
    return model


def load_light_model(name: str, seed: int = 0) -> ov.Model:
    """Load a light model with seeded random weights, as an `openvino.Model`.

    Parameters
    ----------
    name
        One of `LIGHT_MODELS`.
    seed
        Seed of the weights, as in `load_light_onnx`.

    Returns
    -------
    openvino.Model
        The model of `load_light_onnx`, converted by `openvino.convert_model`; input and output tensor names
        are the ONNX ones and the friendly name is ``light_<name>``.

    Raises
    ------
    InputError
        `name` is not one of `LIGHT_MODELS`, `seed` is invalid, or OpenVINO cannot convert the model.
    """
    proto = load_light_onnx(name, seed)
    # convert_model takes a path, not a ModelProto. It is preferred to Core.read_model because it also folds
    # the shape subgraphs the ONNX frontend builds around every bias (SqueezeNet: 150 ops instead of 389).
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / f"light_{name}.onnx"
        onnx.save(proto, str(path))
        try:
            model = ov.convert_model(str(path))
        except Exception as err:  # convert_model raises many unrelated types
            raise InputError(
                f"OpenVINO {ov.get_version()} cannot convert the light model {name!r}: {err}. "
                f"Try another of: {', '.join(LIGHT_MODELS)}."
            ) from err
    model.set_friendly_name(f"light_{name}")
    return model


def save_light_onnx(name: str, path: str | pathlib.Path, seed: int = 0) -> pathlib.Path:
    """Write a light model with seeded random weights to an ``.onnx`` file.

    Parameters
    ----------
    name
        One of `LIGHT_MODELS`.
    path
        File to write; its folder must exist. VGG-19 takes about 550 MB.
    seed
        Seed of the weights, as in `load_light_onnx`.

    Returns
    -------
    pathlib.Path
        `path`, as a `pathlib.Path`.

    Raises
    ------
    InputError
        `name` is not one of `LIGHT_MODELS`, or `seed` is invalid.
    """
    model = load_light_onnx(name, seed)
    path = pathlib.Path(path)
    onnx.save(model, str(path))
    return path


def _model_file(name: str) -> pathlib.Path:
    if name not in LIGHT_MODELS:
        available = ", ".join(LIGHT_MODELS) or f"none (the installed onnx has no '{light_model_path()}')"
        raise InputError(f"Unknown light model {name!r}. Available: {available}.")
    return light_model_path() / _FILES[name]


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"The seed must be a non-negative integer, not {seed!r}.")
    return int(seed)


def _rng(seed: int, label: str) -> np.random.Generator:
    # One stream per tensor, keyed by its name: a weight's values do not depend on the order the graph
    # lists its nodes in, nor on how many other weights were drawn before it.
    return np.random.default_rng([seed, zlib.crc32(label.encode())])


# --- weights -------------------------------------------------------------------------------------------------


def _randomise_weights(model: onnx.ModelProto, seed: int) -> set[str]:
    """Replace, in place, the ConstantOfShape weights and the kept trained ones; return the names drawn."""
    graph = model.graph
    # Inference gives the shape each consumer sees (Inception v1 reshapes its classifier weight before Gemm).
    shapes = _inferred_shapes(model)
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
    for node in graph.node:
        for slot, tensor in enumerate(node.input):
            consumers[tensor].append((node, slot))
    uses = Counter(tensor for node in graph.node for tensor in node.input)
    constants = _constant_tensors(graph)
    input_index = {info.name: i for i, info in enumerate(graph.input)}
    # Up to IR 3 every initializer must also be a graph input (the light files are IR 3).
    initializers_are_inputs = model.ir_version < 4

    drawn: set[str] = set()
    dropped_nodes: set[int] = set()
    dropped_tensors: set[str] = set()
    new_initializers: list[onnx.TensorProto] = []
    for position, node in enumerate(graph.node):
        if node.op_type != "ConstantOfShape" or node.input[0] not in constants:
            continue  # a shape computed at run time makes an activation, not a weight
        fill = _fill_value(node)
        if fill.dtype.kind != "f":
            continue  # integer fills are indices or masks
        shape_name, name = node.input[0], node.output[0]
        shape = tuple(int(d) for d in constants[shape_name].ravel())
        op, slot, seen_shape, attrs = _final_consumer(name, shape, consumers, shapes)
        values = _draw(_rng(seed, name), _role(op, slot), op, slot, seen_shape, attrs, fill, shape)
        new_initializers.append(numpy_helper.from_array(values.astype(fill.dtype, copy=False), name))
        drawn.add(name)
        dropped_nodes.add(position)

        info = helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(fill.dtype), shape)
        uses[shape_name] -= 1
        if uses[shape_name] == 0:
            # The shape tensor only fed this node: it goes, and the weight takes its place among the inputs.
            dropped_tensors.add(shape_name)
            if shape_name in input_index:
                graph.input[input_index[shape_name]].CopyFrom(info)
                continue
        if initializers_are_inputs:
            graph.input.append(info)

    for init in graph.initializer:
        values = numpy_helper.to_array(init)
        # Scalars are left alone: a single value is more likely a fixed constant (an input scale, an epsilon)
        # than a learned weight.
        if values.dtype.kind != "f" or values.size <= 1:
            continue
        op, slot, seen_shape, attrs = _final_consumer(init.name, values.shape, consumers, shapes)
        role = _role(op, slot)
        if role is None:
            continue
        redrawn = _draw(_rng(seed, init.name), role, op, slot, seen_shape, attrs, values, values.shape)
        init.CopyFrom(numpy_helper.from_array(redrawn.astype(values.dtype, copy=False), init.name))
        drawn.add(init.name)

    kept_nodes = [
        node
        for position, node in enumerate(graph.node)
        if position not in dropped_nodes and not (node.op_type == "Constant" and node.output[0] in dropped_tensors)
    ]
    kept_initializers = [init for init in graph.initializer if init.name not in dropped_tensors]
    del graph.node[:]
    graph.node.extend(kept_nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept_initializers + new_initializers)
    return drawn


def _role(op: str, slot: int) -> str | None:
    """What a tensor read by input `slot` of `op` is: weight, bias, scale, variance, or None if unknown."""
    if op in ("Conv", "ConvTranspose", "Gemm"):
        return "weight" if slot in (0, 1) else "bias"
    if op == "MatMul":
        return "weight"
    if op == "BatchNormalization":
        return {1: "scale", 2: "bias", 3: "bias", 4: "variance"}.get(slot)
    if op == "Mul":  # Caffe's Scale layer, exported as Unsqueeze + Mul + Unsqueeze + Add after a BatchNorm
        return "scale"
    if op in ("Add", "Sum"):
        return "bias"
    return None


def _draw(
    rng: np.random.Generator,
    role: str | None,
    op: str,
    slot: int,
    seen_shape: tuple[int, ...],
    attrs: dict[str, Any],
    fill: np.ndarray,
    shape: tuple[int, ...],
) -> np.ndarray:
    """Random values of `shape` for a tensor of `role`; `seen_shape` is how `op` sees it, for the fan-in."""
    size = int(np.prod(shape))
    # float32 draws: half the time and memory of float64 for VGG-19's 140 M weights, and what the model stores.
    if role == "weight" and len(seen_shape) >= 2:
        std = np.sqrt(2.0 / _fan_in(op, slot, seen_shape, attrs))
        values = rng.standard_normal(size, dtype=np.float32) * np.float32(std)
    elif role in ("bias", "weight"):  # a 1-D MatMul operand is a vector: treat it as a bias-sized one
        values = rng.standard_normal(size, dtype=np.float32) * np.float32(_BIAS_STD)
    elif role == "scale":
        values = 1 + rng.standard_normal(size, dtype=np.float32) * np.float32(_SCALE_STD)
    elif role == "variance":
        # Replaced by calibration where it applies; positive in any case so BatchNorm stays finite.
        values = rng.uniform(0.5, 1.5, size)
    else:
        # A role we don't know: jitter around the file's own value, which keeps its sign and size.
        values = fill.ravel()[0] * (1 + rng.standard_normal(size) * _SCALE_STD)
    return values.reshape(shape)


def _fan_in(op: str, slot: int, shape: tuple[int, ...], attrs: dict[str, Any]) -> int:
    if op == "Conv":  # [out, in / groups, *kernel]
        return max(1, int(np.prod(shape[1:])))
    if op == "ConvTranspose":  # [in, out / groups, *kernel]
        return max(1, int(shape[0] * np.prod(shape[2:])))
    if op == "Gemm":  # B is [K, N] (transposed: [N, K]); A is [M, K] (transposed: [K, M])
        transposed = bool(attrs.get("transB" if slot == 1 else "transA", 0))
        return shape[1] if transposed == (slot == 1) else shape[0]
    return shape[-2] if slot == 1 else shape[-1]  # MatMul: [..., K, N] on the right, [..., M, K] on the left


def _final_consumer(
    tensor: str,
    shape: tuple[int, ...],
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]],
    shapes: dict[str, tuple[int, ...]],
) -> tuple[str, int, tuple[int, ...], dict[str, Any]]:
    """(op type, input slot, shape it sees, attributes) of the first op that uses a weight, past view ops."""
    seen_shape = tuple(shape)
    for _ in range(16):  # view chains are one or two ops long; the bound only guards against odd graphs
        users = consumers.get(tensor)
        if not users:
            return "", 0, seen_shape, {}
        node, slot = users[0]
        if node.op_type in _VIEW_OPS and slot == 0:
            tensor = node.output[0]
            viewed = shapes.get(tensor)
            if viewed is not None and int(np.prod(viewed)) == int(np.prod(shape)):
                seen_shape = viewed
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        return node.op_type, slot, seen_shape, attrs
    return "", 0, seen_shape, {}


def _inferred_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception as err:  # inference only refines fan-ins; without it each weight's own shape is used
        log.info("ONNX shape inference failed (%s); weights are scaled by their own shapes.", err)
        return {}
    shapes = {}
    for info in list(inferred.graph.value_info) + list(inferred.graph.output):
        dims = info.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[info.name] = tuple(d.dim_value for d in dims)
    return shapes


def _constant_tensors(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Integer tensors known without running the graph (initializers, Constant outputs): shape candidates."""
    values = {}
    for init in graph.initializer:
        if helper.tensor_dtype_to_np_dtype(init.data_type).kind in "iu":
            values[init.name] = numpy_helper.to_array(init)
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attr.t)
                elif attr.name in ("value_ints", "value_int"):
                    values[node.output[0]] = np.array(helper.get_attribute_value(attr), dtype=np.int64)
    return values


def _fill_value(node: onnx.NodeProto) -> np.ndarray:
    for attr in node.attribute:
        if attr.name == "value":
            return numpy_helper.to_array(attr.t)
    return np.zeros(1, dtype=np.float32)  # the operator's documented default


# --- BatchNorm calibration -----------------------------------------------------------------------------------


def _calibrate_batchnorm(model: onnx.ModelProto, drawn: set[str], seed: int) -> None:
    """Set, in place, each drawn BatchNorm variance to the mean square its input has on a seeded input."""
    graph = model.graph
    uses = Counter(tensor for node in graph.node for tensor in node.input)
    # Only variances we drew, and read by this BatchNorm alone: a shared one would get several answers.
    targets = {
        node.input[4]
        for node in graph.node
        if node.op_type == "BatchNormalization"
        and len(node.input) == 5
        and node.input[4] in drawn
        and uses[node.input[4]] == 1
    }
    if not targets:
        return
    variances: dict[str, float] = {}
    new_ops = [_calibrating_batchnorm(targets, variances)]
    if all(_fast_pool_applies(node) for node in graph.node if node.op_type in ("MaxPool", "AveragePool")):
        new_ops += _fast_pools()
    evaluator = ReferenceEvaluator(model, new_ops=new_ops)

    initialized = {init.name for init in graph.initializer}
    rng = _rng(seed, "batchnorm calibration input")
    feeds = {}
    for info in graph.input:
        if info.name in initialized:
            continue
        tensor_type = info.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in tensor_type.shape.dim]
        feeds[info.name] = rng.standard_normal(shape).astype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
    evaluator.run(None, feeds)

    for init in graph.initializer:
        if init.name in variances:
            old = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array(np.full(old.shape, variances[init.name], old.dtype), init.name))


def _calibrating_batchnorm(targets: set[str], variances: dict[str, float]) -> type[OpRun]:
    """A reference BatchNormalization that first sets its variance to its input's mean square, and records it.

    One value for the whole layer, not one per channel: a per-channel variance lifts every nearly dead channel
    to full scale, and with random weights that makes the network chaotic (a 1e-3 change of the input grows
    40-fold through ResNet-50, and so would every bf16 rounding). A layer-wide one only rescales, as He
    scaling intends, and the BatchNorm scales drawn around 1 still tell the channels apart.
    """

    class BatchNormalization(OpRun):  # the class name is the op type the evaluator replaces
        op_domain = ""

        def _run(self, x, scale, bias, mean, var, epsilon=None, **_unused):
            name = self.onnx_node.input[4]
            if name in targets:
                # Three significant digits: the last bits of a numpy convolution depend on the BLAS build and
                # thread count, and must not make the same seed give different files on different machines.
                mean_square = float(f"{np.square(x, dtype=np.float64).mean():.3g}")
                # An all-zero input (a dead layer) has nothing to rescale: leave the BatchNorm a near-identity.
                variances[name] = mean_square if mean_square > 0 else 1.0
                var = np.full_like(var, variances[name])
            eps = 1e-5 if epsilon is None else epsilon
            channel = (-1,) + (1,) * (x.ndim - 2)
            y = scale.reshape(channel) * (x - mean.reshape(channel)) / np.sqrt(var.reshape(channel) + eps)
            return ((y + bias.reshape(channel)).astype(x.dtype),)

    return BatchNormalization


def _fast_pool_applies(node: onnx.NodeProto) -> bool:
    return len(node.output) == 1 and {a.name for a in node.attribute} <= _FAST_POOL_ATTRIBUTES


def _fast_pools() -> list[type[OpRun]]:
    """Reference MaxPool and AveragePool for explicit pads, strides and kernels, without Python loops.

    The reference evaluator's own pools loop in Python: 10 s for Inception v2's padded 3x3 average pools,
    against milliseconds for windows over a padded view, with the same numbers.
    """

    class MaxPool(OpRun):  # the class name is the op type the evaluator replaces
        op_domain = ""

        def _run(self, x, kernel_shape=None, strides=None, pads=None, **_unused):
            return (_pool(x, kernel_shape, strides, pads, maximum=True, count_include_pad=False),)

    class AveragePool(OpRun):
        op_domain = ""

        def _run(self, x, kernel_shape=None, strides=None, pads=None, count_include_pad=0, **_unused):
            return (_pool(x, kernel_shape, strides, pads, maximum=False, count_include_pad=bool(count_include_pad)),)

    return [MaxPool, AveragePool]


def _pool(
    x: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int] | None,
    pads: Sequence[int] | None,
    maximum: bool,
    count_include_pad: bool,
) -> np.ndarray:
    rank = len(kernel)
    strides = list(strides or [1] * rank)
    pads = list(pads or [0] * (2 * rank))  # ONNX order: all begins, then all ends
    width = [(0, 0), (0, 0)] + list(zip(pads[:rank], pads[rank:]))
    spatial = tuple(range(2, 2 + rank))
    step = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
    window_axes = tuple(range(-rank, 0))
    padded = np.pad(x, width, constant_values=-np.inf if maximum else 0)
    windows = sliding_window_view(padded, tuple(kernel), axis=spatial)[step]
    if maximum:
        return windows.max(axis=window_axes)
    total = windows.sum(axis=window_axes)
    if count_include_pad:
        return (total / np.prod(kernel)).astype(x.dtype)
    # Without count_include_pad a border window averages only the values inside the image.
    inside = np.pad(np.ones((1, 1) + x.shape[2:], dtype=x.dtype), width)
    counts = sliding_window_view(inside, tuple(kernel), axis=spatial)[step].sum(axis=window_axes)
    return (total / counts).astype(x.dtype)
