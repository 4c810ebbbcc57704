"""What the plugin really executed: the runtime graph of a compiled model.

`compiled.get_runtime_model()` lists executed layers; each layer's rt_info tells its ``layerType``, the user's
ops fused into it (``originalLayersNames``, comma-separated), ``runtimePrecision``, ``outputPrecisions`` and
the kernel (``primitiveType``, e.g. ``brgconv_avx512_bf16``). Reorders the plugin inserted have no original
names. This module turns that into plain records keyed by the user's friendly names. Plugins that expose no
runtime graph (or only part of one) give an empty or partial `RuntimeGraph`; nothing here raises for that.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

__all__ = ["RuntimeLayer", "RuntimeGraph", "read_runtime_graph"]

# Layers that hold data or were inserted by the plugin: no user op ran in them.
_NON_COMPUTE = {"Input", "Output", "Const", "Reorder", "Parameter", "Result", "Constant"}
# Layers that only move data: their precision says nothing about the arithmetic precision.
_DATA_MOVEMENT = _NON_COMPUTE | {
    "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Concatenation", "Split", "Gather", "StridedSlice",
    "Broadcast", "ShapeOf", "Tile", "Pad", "DepthToSpace", "SpaceToDepth", "ShuffleChannels", "Convert",
}


@dataclass(frozen=True)
class RuntimeLayer:
    """One executed layer of the compiled model."""

    name: str
    layer_type: str
    original_names: tuple[str, ...]
    runtime_precision: str
    output_precisions: tuple[str, ...]
    primitive_type: str
    exec_order: int

    @property
    def arithmetic_precision(self) -> str:
        """The precision the kernel computes in: the kernel name's suffix (``undef_f32``, ``brgconv_avx512_bf16``)
        where it names one, else the runtime precision.

        ``runtimePrecision`` can be the precision weights are *stored* in: with f16-compressed weights (what
        ``ov.save_model`` writes by default) an f32 CPU run reports f16 for a FullyConnected whose kernel is
        ``undef_f32`` and whose outputs are f32: f16 storage, f32 arithmetic.
        """
        suffix = self.primitive_type.rsplit("_", 1)[-1].lower() if "_" in self.primitive_type else ""
        if suffix in ("f32", "bf16", "f16", "i8", "u8"):
            return suffix
        return self.runtime_precision

    @property
    def stored_weights(self) -> str | None:
        """The precision weights are stored in when it is not the arithmetic's (f16 weights, f32 kernel)."""
        if self.runtime_precision in ("f16", "bf16") and self.arithmetic_precision == "f32" and \
                all(p == "f32" for p in self.output_precisions):
            return self.runtime_precision
        return None

    @property
    def is_compute(self) -> bool:
        return self.layer_type not in _NON_COMPUTE and bool(self.original_names)

    def to_dict(self) -> dict:
        return {
            "layer": self.name, "layer_type": self.layer_type, "fused": list(self.original_names),
            "precision": self.runtime_precision, "output_precisions": list(self.output_precisions),
            "kernel": self.primitive_type, "exec_order": self.exec_order,
        }


@dataclass(frozen=True)
class RuntimeGraph:
    """The executed layers, and for each of the user's op names the layer that ran it."""

    layers: tuple[RuntimeLayer, ...] = ()
    by_original: dict[str, RuntimeLayer] = field(default_factory=dict)

    def layer_of(self, name: str) -> RuntimeLayer | None:
        return self.by_original.get(name)

    def precision_counts(self) -> dict[str, int]:
        """How many compute layers ran in each precision."""
        return dict(Counter(layer.runtime_precision for layer in self.layers if layer.is_compute))

    def dominant_precision(self) -> str | None:
        """The precision most compute layers ran in; None when the plugin says nothing."""
        counts = Counter(
            layer.arithmetic_precision for layer in self.layers
            if layer.is_compute and layer.layer_type not in _DATA_MOVEMENT
        )
        counts.pop("", None)
        counts.pop("undefined", None)
        # Integer-only layers (indices, shapes) do not speak for the float precision.
        floats = {k: v for k, v in counts.items() if k in ("f32", "f16", "bf16", "f64", "i8", "u8")}
        pick = floats or counts
        return max(pick, key=pick.__getitem__) if pick else None

    def weight_precision(self) -> str | None:
        """The precision weights are stored in where kernels compute in f32 from lower-precision weights."""
        counts = Counter(layer.stored_weights for layer in self.layers if layer.is_compute and layer.stored_weights)
        return max(counts, key=counts.__getitem__) if counts else None

    def fusion_groups(self) -> list[tuple[str, ...]]:
        """The user's op names executed together in one layer, for every compute layer."""
        return [layer.original_names for layer in self.layers if layer.is_compute]


def read_runtime_graph(compiled) -> RuntimeGraph:
    """Read the runtime graph of an `ov.CompiledModel`; empty when the plugin does not provide one."""
    try:
        ops = compiled.get_runtime_model().get_ordered_ops()
    except Exception as err:  # some plugins (and remote/cached models) do not implement it
        log.info("No runtime graph from the compiled model (%s); fusion groups and kernels are unknown.",
                 str(err).splitlines()[0] if str(err) else type(err).__name__)
        return RuntimeGraph()
    layers = []
    by_original: dict[str, RuntimeLayer] = {}
    for op in ops:
        rt = op.get_rt_info()

        def get(key: str, default: str = "", rt=rt) -> str:
            return rt[key].astype(str) if key in rt else default

        originals = tuple(n for n in get("originalLayersNames").split(",") if n)
        order = get("execOrder", "-1")
        layer = RuntimeLayer(
            name=op.get_friendly_name(),
            layer_type=get("layerType", op.get_type_name()),
            original_names=originals,
            runtime_precision=get("runtimePrecision"),
            output_precisions=tuple(p for p in get("outputPrecisions").split(",") if p),
            primitive_type=get("primitiveType"),
            exec_order=int(order) if order.lstrip("-").isdigit() else -1,
        )
        layers.append(layer)
        for name in originals:
            by_original.setdefault(name, layer)
    return RuntimeGraph(tuple(layers), by_original)
