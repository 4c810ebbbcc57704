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

This module is where users import the models from; they are built in `bisect_ov.zoo.shapes` (the generic
graph shapes), `bisect_ov.zoo.user_cases` (the models of the users' cases) and, with the helper they share,
`bisect_ov.zoo.graph_builder`. Here: the inputs (`sample_inputs`, `INPUT_RANGES`) and the registry.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import openvino as ov

from bisect_ov.core.errors import InputError
from bisect_ov.zoo.shapes import attention_block, chain, conv_bn_net, diamond, multi_io
from bisect_ov.zoo.user_cases import (
    demo,
    elementwise_model,
    face_resnet,
    fp32_and_int8,
    int_conv,
    int_conv_input,
    softmax_model,
)

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
