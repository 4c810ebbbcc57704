"""numpy has no bfloat16: OpenVINO hands bf16 tensors over as float16-labelled bits. These read them as float32
(`bf16_to_f32`, `Widened` for a run's outputs read one by one, `kept_outputs` to hold them as bits) and write
float32 data as bf16 or f16 input tensors (`as_input`, rounding to nearest even)."""

from __future__ import annotations

from collections import abc
from typing import Sequence

import numpy as np
import openvino as ov

__all__ = ["Widened", "as_input", "bf16_to_f32", "kept_outputs"]


class Widened(abc.Sequence):
    """Outputs whose bf16 members (float16-labelled bits) read as float32, converted on each access."""

    def __init__(self, arrays: list[np.ndarray], bf16: set[int]):
        self._arrays, self._bf16 = arrays, bf16

    def __len__(self) -> int:
        return len(self._arrays)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self._arrays)))]
        index = range(len(self._arrays))[index]
        array = self._arrays[index]
        return bf16_to_f32(array) if index in self._bf16 else array


def kept_outputs(outputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], frozenset[int]]:
    """The arrays of `outputs` (as `Compiled.infer(..., share_outputs=True)` returns them), kept as they are:
    views that keep their output tensors alive past the compile's release, so they outlive it as long as that
    compile runs nothing more (copying them doubled a streamed segment's outputs at the peak). bf16 outputs
    stay bf16 bits (float16-labelled, half the bytes of float32; read them with `bf16_to_f32`). Returns the
    arrays and the positions of those bf16 ones."""
    if isinstance(outputs, Widened):
        return list(outputs._arrays), frozenset(outputs._bf16)
    return list(outputs), frozenset()


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def as_input(array: np.ndarray, element: ov.Type):
    """Float data for an input typed bf16 or f16 (activations handed over in the device's precision)."""
    if element == ov.Type.f16 and array.dtype != np.float16:
        return np.asarray(array, dtype=np.float16)
    if element != ov.Type.bf16:
        return array
    x = np.asarray(array, dtype=np.float32, order="C").view(np.uint32)
    bits = ((x + 0x7FFF + ((x >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    bits[np.isnan(array)] = 0x7FC0
    tensor = ov.Tensor(ov.Type.bf16, list(array.shape))
    tensor.data.view(np.uint16)[...] = bits
    return tensor
