"""From what the user passed to framework sides: a module, ``"ORT"``, a side object, ``truth="f64"``.

`framework_side` turns a ``ref=`` / ``target=`` value into a `FrameworkSide` when it names one (a bare
`torch.nn.Module` or `ExportedProgram` is PyTorch eager in f32; ``"ORT"`` / ``"onnxruntime"`` is ONNX Runtime
on the model's ONNX file), `truth_side` the ``truth=`` option into the float64 side, and `convert_model`
makes the OpenVINO model from the module when ``model=None``. `plain_inputs` gives torch tensors as numpy
arrays, so inputs prepared for the module feed the OpenVINO model too.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Mapping

import numpy as np

from bisect_ov.core.errors import InputError, first_line
from bisect_ov.frameworks.side import FrameworkSide

__all__ = ["framework_side", "truth_side", "convert_model", "plain_inputs", "ORT_NAMES"]

ORT_NAMES = ("ort", "onnxruntime")


def _is_onnx(model: Any) -> bool:
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model).lower().endswith(".onnx")
    return type(model).__name__ == "ModelProto" and type(model).__module__.startswith("onnx")


def framework_side(spec: Any, model: Any) -> FrameworkSide | None:
    """The framework side `spec` names, or None when it is a device name or `Device` of another kind.

    Raises
    ------
    InputError
        ``"ORT"`` for a model that is not an ONNX file.
    """
    from bisect_ov.frameworks.torch_side import Torch, is_torch_module

    if isinstance(spec, FrameworkSide):
        return spec
    if is_torch_module(spec):
        return Torch(spec)
    if isinstance(spec, str):
        base, _, dtype = spec.strip().lower().partition(":")
        if base in ORT_NAMES:
            if not _is_onnx(model):
                raise InputError(f"'{spec}' runs the model's ONNX file in ONNX Runtime: pass the model as an .onnx path "
                                 "(or an onnx.ModelProto), e.g. bisect('model.onnx', ref='ORT', target='CPU').")
            from bisect_ov.frameworks.ort_side import ORT

            return ORT(model, dtype or "f32")
    return None


def truth_side(truth: Any, ref: FrameworkSide | None, target: FrameworkSide | None, model: Any) -> FrameworkSide | None:
    """The float64 side of ``truth=``: a side object as given; ``"f64"`` is the reference's (else the target's)
    framework in float64, else ONNX Runtime on the model's ONNX file cast to float64.

    Raises
    ------
    InputError
        ``"f64"`` with no framework to run in float64.
    """
    if truth is None:
        return None
    side = framework_side(truth, model)
    if side is not None:
        return side
    if truth == "f64":
        for framework in (ref, target):
            if framework is not None:
                return framework.with_dtype("f64")
        if _is_onnx(model):
            from bisect_ov.frameworks.ort_side import ORT

            return ORT(model, "f64")
        raise InputError("truth='f64' runs the model's framework in float64, and neither side is one: pass "
                         "ref=module (or Torch(module)), an .onnx model, or truth=Torch(module, dtype='f64').")
    raise InputError(f"truth must be None, 'f64' or a framework side such as Torch(module, dtype='f64'); got {truth!r}.")


def plain_inputs(inputs: Any) -> Any:
    """`inputs` with torch tensors as numpy arrays (in a list, tuple or dict too); anything else as it is."""
    if hasattr(inputs, "detach") and hasattr(inputs, "numpy"):
        return inputs.detach().cpu().numpy()
    if isinstance(inputs, Mapping):
        return {k: plain_inputs(v) for k, v in inputs.items()}
    if isinstance(inputs, (list, tuple)) and any(hasattr(v, "detach") for v in inputs):
        return [plain_inputs(v) for v in inputs]
    return inputs


def convert_model(side: FrameworkSide | None, inputs: Any) -> Any:
    """``model=None``: the OpenVINO model converted from the PyTorch side's module with `inputs` as example."""
    import openvino as ov

    from bisect_ov.frameworks.torch_side import Torch, import_torch

    if not isinstance(side, Torch):
        raise InputError("model=None converts the PyTorch module given as ref= or target=; neither side is one. "
                         "Pass the model (an ov.Model, a path, or anything ov.convert_model takes).")
    if inputs is None:
        raise InputError("model=None converts the module with ov.convert_model(module, example_input=inputs): "
                         "pass inputs= (arrays or tensors, positional or by name).")
    torch = import_torch()

    def tensor(a):
        return a if isinstance(a, torch.Tensor) else torch.from_numpy(np.array(a))

    example = ({k: tensor(v) for k, v in inputs.items()} if isinstance(inputs, Mapping)
               else tuple(tensor(v) for v in inputs) if isinstance(inputs, (list, tuple)) else tensor(inputs))
    source = side.program if side.program is not None else side.module
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ov.convert_model(source) if side.program is not None else ov.convert_model(source, example_input=example)
    except Exception as err:  # noqa: BLE001 - convert_model raises many unrelated types
        raise InputError(f"ov.convert_model could not convert the module ({type(side.module).__name__}): "
                         f"{first_line(err)}") from err
