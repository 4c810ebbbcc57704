"""The helper every zoo model is built with: seeded weights, unique names, and the layers they share.

`Net` builds one graph. Its assumptions are the zoo's: float32 weights drawn from
``np.random.default_rng(seed)`` in the order the layers are created (so a model is deterministic for its seed,
and adding a draw shifts every later weight), static shapes, channels-first convolutions, and friendly names
given by the caller in full ("stem/conv"). Every op gets a unique friendly name (a duplicate is a bug in the
builder that raised it); every op that produces data, except Constants and Results, also names its output
tensor after itself, so a tensor can be found by name after serialisation or conversion. Weights are
He-scaled so that activations keep their variance through depth.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import openvino as ov
from openvino import Node
from openvino import opset13 as ops

from bisect_ov.core.errors import InputError

__all__ = ["Net", "check_positive", "output_shape"]


class Net:
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
            raise ValueError(f"duplicate op name {name!r} in a zoo model")  # a bug in the model's builder
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
        """The hand-built instance norm behind a large offset (see `bisect_ov.zoo.synthetic`).

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


def output_shape(node: Node) -> list[int]:
    """The static shape of `node`'s first output."""
    return [int(d) for d in node.get_output_shape(0)]


def check_positive(**values: int) -> None:
    """Raise `InputError` naming the first argument that is not a positive integer."""
    for key, value in values.items():
        if int(value) < 1:
            raise InputError(f"{key} must be a positive integer, got {value!r}")
