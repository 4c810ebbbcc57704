"""Real network topologies from the `onnx` wheel, with seeded random weights.

The `onnx` package ships the "light" versions of classic ONNX model-zoo networks under
`onnx/backend/test/data/light/` (ResNet-50, SqueezeNet, ShuffleNet, DenseNet-121, Inception v1/v2, VGG-19,
ZFNet-512, AlexNet). They have the real graphs but no real weights: every large weight is produced at run time
by a `ConstantOfShape` node that fills it with 0.02. With every weight equal, every output is degenerate and
f32 and bf16 agree exactly, so the files are useless as they stand for finding precision divergences.

This module replaces each `ConstantOfShape`-produced weight by a seeded random initializer of the same name
and shape, chosen from the op and input slot that consumes it (looking through `Reshape`, `Unsqueeze` and
similar view ops):

* Conv / ConvTranspose / Gemm / MatMul weights: He normal, std = sqrt(2 / fan_in);
* their biases, BatchNorm biases and means, Caffe-style `Add` biases: small values around 0;
* BatchNorm scales and Caffe-style `Mul` scales: around 1; BatchNorm variances: positive, around 1.

Everything else (node names, tensor names, the small real initializers the files keep, the IR and opset
versions) is left as it is. The result is a real topology with non-degenerate outputs whose f32 and bf16
results differ measurably, for tests, examples and benchmarks.

Assumptions: the `onnx` wheel holds the `light` folder (it has since onnx 1.2); the models take one image
input of batch 1 in their own shape ([1, 3, 224, 224]), and feeding standard-normal data gives outputs in a
sane range. Weights are random, so the predictions mean nothing.
"""

from __future__ import annotations

import pathlib
import tempfile
from collections import defaultdict

import numpy as np
import onnx
import openvino as ov
from onnx import numpy_helper, shape_inference

from bisect_ov.errors import InputError

__all__ = ["LIGHT_MODELS", "light_model_path", "load_light_onnx", "load_light_model", "save_light_onnx"]

# Short name -> file in the light folder. Only those present in the installed wheel end up in LIGHT_MODELS.
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

# Ops that only re-view a weight; the weight's role is decided by whoever consumes their output.
_VIEW_OPS = frozenset({"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Transpose", "Identity", "Cast"})

# Spread of the "small around 0" and "around 1" draws. Small enough that BatchNorm stays close to identity
# (so He scaling keeps activations in range), large enough that no two channels are alike.
_BIAS_STD = 0.05
_SCALE_STD = 0.1


def light_model_path() -> pathlib.Path:
    """Return the folder of the `onnx` wheel that holds the light model files.

    Returns
    -------
    pathlib.Path
        `<site-packages>/onnx/backend/test/data/light`; it may be missing in a stripped-down install.
    """
    return pathlib.Path(onnx.__file__).resolve().parent / "backend" / "test" / "data" / "light"


LIGHT_MODELS: tuple[str, ...] = tuple(name for name, file in _FILES.items() if (light_model_path() / file).is_file())
"""Short names of the light models available in the installed `onnx` wheel, e.g. ``"squeezenet"``."""


def load_light_onnx(name: str, seed: int = 0) -> onnx.ModelProto:
    """Load a light model with every constant-filled weight replaced by seeded random values.

    Parameters
    ----------
    name
        One of `LIGHT_MODELS`.
    seed
        Seed of the random weights: the same seed gives the same model, byte for byte.

    Returns
    -------
    onnx.ModelProto
        The model, with each `ConstantOfShape` weight turned into an initializer of the same name; no other
        node, tensor or attribute changes.

    Raises
    ------
    InputError
        `name` is not one of `LIGHT_MODELS`.
    """
    model = onnx.load(str(_model_file(name)))
    _randomise_weights(model, np.random.default_rng(seed))
    return model


def load_light_model(name: str, seed: int = 0) -> ov.Model:
    """Load a light model with seeded random weights as an `openvino.Model`.

    Parameters
    ----------
    name
        One of `LIGHT_MODELS`.
    seed
        Seed of the random weights, as in `load_light_onnx`.

    Returns
    -------
    openvino.Model
        The converted model; its input and output tensor names are the ONNX ones.

    Raises
    ------
    InputError
        `name` is not one of `LIGHT_MODELS`.
    """
    proto = load_light_onnx(name, seed)
    # Through a temporary file: the ONNX frontend reads a path the same way core.read_model does, which
    # keeps tensor names as the rest of bisect_ov sees them for a user's .onnx file.
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / f"{name}.onnx"
        onnx.save(proto, str(path))
        model = ov.convert_model(str(path))
    model.set_friendly_name(f"light_{name}")
    return model


def save_light_onnx(name: str, path: str | pathlib.Path, seed: int = 0) -> pathlib.Path:
    """Write a light model with seeded random weights to an `.onnx` file.

    Parameters
    ----------
    name
        One of `LIGHT_MODELS`.
    path
        File to write; its parent folder must exist.
    seed
        Seed of the random weights, as in `load_light_onnx`.

    Returns
    -------
    pathlib.Path
        `path`, as a `pathlib.Path`.

    Raises
    ------
    InputError
        `name` is not one of `LIGHT_MODELS`.
    """
    proto = load_light_onnx(name, seed)
    path = pathlib.Path(path)
    onnx.save(proto, str(path))
    return path


def _model_file(name: str) -> pathlib.Path:
    if name not in LIGHT_MODELS:
        available = ", ".join(LIGHT_MODELS) or "none (the installed onnx wheel has no light models)"
        raise InputError(f"Unknown light model '{name}'. Available: {available}.")
    return light_model_path() / _FILES[name]


def _randomise_weights(model: onnx.ModelProto, rng: np.random.Generator) -> None:
    """Replace, in place, each ConstantOfShape with a constant shape by a random initializer."""
    graph = model.graph
    # Shape inference gives the shape each consumer sees (a weight may be reshaped before a Gemm).
    shapes = _inferred_shapes(model)
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
    for node in graph.node:
        for slot, tensor in enumerate(node.input):
            consumers[tensor].append((node, slot))
    constants = _constant_tensors(graph)
    # Up to IR 3 every initializer must also be a graph input (later IRs allow but don't require it).
    inits_are_inputs = model.ir_version < 4

    for node in [n for n in graph.node if n.op_type == "ConstantOfShape"]:
        shape_name = node.input[0]
        if shape_name not in constants:
            continue  # a shape computed at run time: not a weight
        shape = tuple(int(d) for d in constants[shape_name].ravel())
        fill = _fill_value(node)
        op, slot, view_shape, attrs = _final_consumer(node.output[0], shape, consumers, shapes)
        values = _draw(rng, op, slot, view_shape, attrs, fill).reshape(shape).astype(fill.dtype, copy=False)
        weight = numpy_helper.from_array(values, node.output[0])

        graph.node.remove(node)
        graph.initializer.append(weight)
        if inits_are_inputs:
            graph.input.append(onnx.helper.make_tensor_value_info(weight.name, weight.data_type, shape))
        # The shape tensor was only there to feed this node; drop it if nothing else reads it.
        consumers[shape_name] = [(n, s) for n, s in consumers[shape_name] if n is not node]
        if not consumers[shape_name] and shape_name not in {o.name for o in graph.output}:
            _remove_constant(graph, shape_name)


def _draw(
    rng: np.random.Generator, op: str, slot: int, shape: tuple[int, ...], attrs: dict, fill: np.ndarray
) -> np.ndarray:
    """Random values for a weight read by input `slot` of `op`, where the op sees it as `shape`."""
    size = int(np.prod(shape))
    if op in ("Conv", "ConvTranspose", "Gemm", "MatMul") and slot < 2 and len(shape) >= 2:
        std = np.sqrt(2.0 / _fan_in(op, slot, shape, attrs))
        return rng.standard_normal(size) * std
    if op in ("Conv", "ConvTranspose", "Gemm") and slot == 2:
        return rng.standard_normal(size) * _BIAS_STD
    if op == "BatchNormalization":
        if slot == 1:  # scale
            return 1.0 + rng.standard_normal(size) * _SCALE_STD
        if slot in (2, 3):  # bias, running mean
            return rng.standard_normal(size) * _BIAS_STD
        if slot == 4:  # running variance: must stay positive
            return rng.uniform(0.5, 1.5, size)
    if op == "Mul":  # Caffe-style channel scale after BatchNorm
        return 1.0 + rng.standard_normal(size) * _SCALE_STD
    if op in ("Add", "Sum", "Sub"):  # Caffe-style channel bias
        return rng.standard_normal(size) * _BIAS_STD
    # A role we don't know: jitter around the file's own fill value, which at least keeps its sign and size.
    return fill.ravel()[0] * (1.0 + rng.standard_normal(size) * _SCALE_STD)


def _fan_in(op: str, slot: int, shape: tuple[int, ...], attrs: dict) -> int:
    if op == "Conv":  # [out, in/groups, *kernel]
        return int(np.prod(shape[1:]))
    if op == "ConvTranspose":  # [in, out/groups, *kernel]: each output sums over in * kernel / stride^d
        return int(shape[0] * np.prod(shape[2:]))
    if op == "Gemm":
        transposed = attrs.get("transB" if slot == 1 else "transA", 0)
        # B is [K, N] or, transposed, [N, K]; A is [M, K] or [K, M].
        if slot == 1:
            return shape[1] if transposed else shape[0]
        return shape[0] if transposed else shape[1]
    return shape[-2] if slot == 1 else shape[-1]  # MatMul: [.., K, N] on the right, [.., M, K] on the left


def _final_consumer(
    tensor: str,
    shape: tuple[int, ...],
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]],
    shapes: dict[str, tuple[int, ...]],
) -> tuple[str, int, tuple[int, ...], dict]:
    """(op type, input slot, shape seen there, attributes) of the op that uses a weight, past view ops."""
    seen_shape = shape
    for _ in range(16):  # view chains are short; the bound only guards against odd graphs
        users = consumers.get(tensor, [])
        if not users:
            return "", 0, seen_shape, {}
        node, slot = users[0]
        if node.op_type in _VIEW_OPS and slot == 0:
            tensor = node.output[0]
            # When inference knows the viewed shape, fan-in must be read from it, not from the original.
            viewed = shapes.get(tensor)
            if viewed is not None and int(np.prod(viewed)) == int(np.prod(shape)):
                seen_shape = viewed
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        return node.op_type, slot, seen_shape, attrs
    return "", 0, seen_shape, {}


def _inferred_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    try:
        inferred = shape_inference.infer_shapes(model)
    except Exception:  # inference is only a help for fan-in; without it the weight's own shape is used
        return {}
    shapes = {}
    for info in list(inferred.graph.value_info) + list(inferred.graph.output):
        dims = info.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[info.name] = tuple(d.dim_value for d in dims)
    return shapes


def _constant_tensors(graph: onnx.GraphProto) -> dict[str, np.ndarray]:
    """Tensors whose value is known without running the graph: initializers and Constant node outputs."""
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attr.t)
    return values


def _fill_value(node: onnx.NodeProto) -> np.ndarray:
    for attr in node.attribute:
        if attr.name == "value":
            return numpy_helper.to_array(attr.t)
    return np.zeros(1, dtype=np.float32)  # the operator's documented default


def _remove_constant(graph: onnx.GraphProto, name: str) -> None:
    for collection in (graph.initializer, graph.input):
        for item in [i for i in collection if i.name == name]:
            collection.remove(item)
    for node in [n for n in graph.node if n.op_type == "Constant" and list(n.output) == [name]]:
        graph.node.remove(node)
