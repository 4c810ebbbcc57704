"""Framework sides: the model's own framework (PyTorch eager, ONNX Runtime) as the ``ref=``, ``target=`` or
``truth=`` of `bisect()`.

A framework side is a `bisect_ov.run.device_base.Device` that cannot run pieces of the model: it runs the
framework on the whole input and plays its intermediate tensors back, matched to the walked OpenVINO graph's
nodes by the names the conversion gave them (`bisect_ov.frameworks.side`). PyTorch in `torch_side` (matching
in `torch_match`), ONNX Runtime in `ort_side`; `resolve` turns what the user passed (a module, ``"ORT"``, a
side object, ``truth="f64"``) into sides. torch and onnxruntime are imported only when such a side is made.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Torch", "ORT"]


def __getattr__(name: str) -> Any:
    if name == "Torch":
        from bisect_ov.frameworks.torch_side import Torch

        return Torch
    if name == "ORT":
        from bisect_ov.frameworks.ort_side import ORT

        return ORT
    raise AttributeError(f"module 'bisect_ov.frameworks' has no attribute {name!r}")
