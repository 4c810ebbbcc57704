"""Fusion groups of a compiled model, as taps: which tensors leave a kernel the plugin fused.

`fusion_boundaries` reads the target's runtime graph (`bisect_ov.model.runtime`) and returns the tensors that
leave one of its fusion groups, and what each such tap stands for. Exposing only those keeps the plain run's
fusions, so the instrumented compile runs the same kernels: the default capture strategy of `bisect()`
(`bisect_ov.search.strategies`) and the first pass of a recorded run (`bisect_ov.capture.write`) both use it.

Assumptions: the runtime graph names the user's ops in each layer's ``originalLayersNames``; ops it does not
name were folded or eliminated by the plugin. Works on graphs, a node matching and a runtime graph only: no
device, no session.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Mapping

from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.match import Match
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap

__all__ = ["fusion_boundaries", "unmeasured_ancestors", "int8_internal", "KernelTensors", "kernel_tensors"]


def fusion_boundaries(graph: ModelGraph, target_graph: ModelGraph, match: Match, target_runtime: RuntimeGraph
                      ) -> tuple[list[Tap], dict[str, tuple[str, ...]]]:
    """Taps at the boundaries of the target's fusion groups, and what each tap covers (reference keys).

    A member's tensor is a boundary when some reader lies outside its group (or is a model output). Boundaries
    that another group reads as a post-op operand are not tapped (that would break the other group's fusion),
    nor are nodes the runtime graph does not mention (folded or eliminated by the plugin). A tap's group is every
    candidate upstream of it reached without crossing another tap: its fusion partners and the unnamed ops.
    When the target exposes no runtime graph, every candidate is a boundary.

    Parameters
    ----------
    graph, target_graph
        The reference model's graph and the target's (the same object when one model runs on both sides).
    match
        Pairs of reference and target taps (`bisect_ov.model.match`).
    target_runtime
        The runtime graph of the untouched target compile: its layers are the fusion groups.
    """
    groups_by_member: dict[str, tuple[str, ...]] = {}
    for layer in target_runtime.layers:
        if not layer.is_compute:
            continue
        members = tuple(n for n in layer.original_names if n in target_graph and target_graph[n].is_candidate)
        for m in members:
            groups_by_member.setdefault(m, members)
    if not groups_by_member:
        return [r for r, _ in match.pairs], {}
    head = {g: min(g, key=lambda k: target_graph[k].index) for g in set(groups_by_member.values())}
    taps: list[Tap] = []
    for ref_tap, target_tap in match.pairs:
        group = groups_by_member.get(target_tap.key)
        if group is None:
            continue
        readers = target_graph.consumers(target_tap.key)
        if all(r in group for r in readers):
            continue
        if any(target_graph[r].kind == "result" for r in readers):
            taps.append(ref_tap)  # already a model output: exposing it changes nothing
            continue
        # A tensor another kernel reads as a post-op operand (the residual of a Conv+Add+Relu group) must keep
        # a single reader, or the plugin drops that fusion (measured: one such tap on ResNet-50 in bf16 took
        # the final-output error from 1.7e-2 to 9.6e-3). Such tensors are not tapped.
        if any(len(g) > 1 and r != head[g] for r in readers for g in [groups_by_member.get(r)] if g):
            continue
        taps.append(ref_tap)
    # What each tap stands for: its fusion group, and ops the plugin folded in without naming them.
    tapped = {t.key for t in taps}
    groups = {key: tuple(sorted(unmeasured_ancestors(graph, key, tapped) - {key}, key=lambda k: graph[k].index))
              for key in tapped}
    return taps, groups


def unmeasured_ancestors(graph: ModelGraph, key: str, measured: set[str]) -> set[str]:
    """`key` and the candidates upstream of it reached without crossing a measured node."""
    seen, stack = {key}, [key]
    while stack:
        for producer, _ in graph.data_inputs(stack.pop()):
            if producer not in seen and producer not in measured and graph[producer].is_candidate:
                seen.add(producer)
                stack.append(producer)
    return seen


INT8 = frozenset({"i8", "u8", "I8", "U8"})
_LPT_OPS = frozenset({"Convolution", "GroupConvolution", "MatMul", "ConvolutionBackpropData"})


def int8_internal(target_graph: ModelGraph, target_runtime: RuntimeGraph) -> set[str]:
    """Target ops whose output must not be exposed in a quantized twin: it lives inside an int8 computation.

    * ops inside an int8 kernel whose every reader is in that kernel too (a Convolution's accumulator before
      its bias, ReLU and requantizing FakeQuantize): exposing it makes the CPU plugin split the kernel, and its
      low-precision transformations then produce other values (measured on an NNCF int8 ResNet-50: tapping
      the raw Convolution outputs took the final output 140-210% away from the untapped run, tapping the
      kernels' outputs 5%);
    * Convolutions and MatMuls reading an activation FakeQuantize: their raw output is an int8 product whose
      dequantization the plugin moves past it; exposing it also changed what later tensors read (on an NNCF
      int8 MobileNetV3, tapping an SE block's reducing Convolution made the quantized ReLU after it read as
      zeros).

    Such ops are not tapped; their error is seen at the next exposed tensor (the kernel's output).
    """
    internal: set[str] = {n.key for n in target_graph.candidates() if n.op_type in _LPT_OPS and any(
        target_graph[k].op_type == "FakeQuantize" and target_graph[k].kind == "compute" for k, _ in n.inputs)
        and not any(target_graph[r].kind == "result" for r in target_graph.consumers(n.key))}
    for layer in target_runtime.layers:
        if not layer.is_compute or layer.runtime_precision not in INT8:
            continue
        members = {n for n in layer.original_names if n in target_graph}
        for m in members:
            readers = target_graph.consumers(m)
            if readers and all(r in members for r in readers):
                internal.add(m)
    return internal


# Ops that only move or select values: an unnamed one holds the values of its input, stored or not.
_TRANSPARENT = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Transpose", "Broadcast", "StridedSlice", "Slice",
                          "Gather", "Tile"})


@dataclass(frozen=True)
class KernelTensors:
    """Which node tensors exist only inside a kernel of the untouched target, and what each kernel stores.

    ``inside``: node key -> the name of the runtime layer (the fused kernel) inside which its tensor exists,
    never stored; ``outputs``: layer name -> the keys of the nodes whose tensors that kernel stores (its
    outputs, read by other kernels or returned). Keys are the reference model's (`kernel_tensors` maps a twin's
    through the match). Empty when the target exposes no runtime graph.
    """

    inside: Mapping[str, str] = field(default_factory=dict)
    outputs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def kernel_of(self, key: str) -> str | None:
        """The kernel inside which `key`'s tensor exists only; None when the target stored it (or nothing is known)."""
        return self.inside.get(key)

    def computed_by(self, key: str) -> str | None:
        """The kernel that made `key`'s tensor: the one it exists only inside, else the one that stores it; None when
        nothing is known."""
        inside = self.inside.get(key)
        return inside if inside is not None else self._stored_by.get(key)

    def only_inside(self, layer: str) -> tuple[str, ...]:
        """The keys whose tensors exist only inside kernel `layer`."""
        return self._held.get(layer, ())

    @functools.cached_property
    def _stored_by(self) -> dict[str, str]:
        return {k: layer for layer, keys in self.outputs.items() for k in keys}

    @functools.cached_property
    def _held(self) -> dict[str, tuple[str, ...]]:
        held: dict[str, list[str]] = {}
        for key, layer in self.inside.items():
            held.setdefault(layer, []).append(key)
        return {layer: tuple(keys) for layer, keys in held.items()}


def kernel_tensors(target_graph: ModelGraph, target_runtime: RuntimeGraph, match: Match | None = None) -> KernelTensors:
    """Whether the untouched target stored each node's tensor, from its runtime graph.

    Each compute layer runs the user's ops its ``originalLayersNames`` lists; ops no layer names were folded
    into a kernel without being named (the CPU plugin's ``RMS`` layer names only the op it was built from,
    not ``x*x``, the mean or the square root; a Convolution merged with its BatchNorm is named after a new op).
    Such an op belongs to the kernel that reads it: the layer owning all its readers (walked in reverse
    topological order, so chains of unnamed ops join the kernel they feed). A node's tensor exists only inside
    its kernel when every reader belongs to that kernel too and no model output reads it; otherwise the kernel
    stores it. Unnamed ops that only move values (a Reshape, a Transpose) hold their input's values and share
    its status. Assumptions and limits: an op the plugin eliminated (a multiply by ones) reads as folded into
    the kernel that reads it; an unnamed op whose readers lie in several kernels is taken as stored (unknown).

    Parameters
    ----------
    target_graph
        The target model's graph.
    target_runtime
        The runtime graph of the untouched target compile.
    match
        Pairs of reference and target taps, to key the answer by the reference's nodes; None: one model.
    """
    layer_of: dict[str, str] = {}
    for runtime_layer in target_runtime.layers:
        if not runtime_layer.is_compute:
            continue
        for name in runtime_layer.original_names:
            if name in target_graph and target_graph[name].is_candidate:
                layer_of.setdefault(name, runtime_layer.name)
    if not layer_of:
        return KernelTensors()
    named = set(target_runtime.by_original)
    candidates = target_graph.candidates()
    for node in reversed(candidates):
        if node.key in layer_of or node.key in named or node.name in named:
            continue
        readers = target_graph.consumers(node.key)
        owners = {layer_of.get(r, "") for r in readers}
        owner = owners.pop() if len(owners) == 1 else ""
        if owner and not any(target_graph[r].kind == "result" for r in readers):
            layer_of[node.key] = owner
    inside: dict[str, str] = {}
    for node in candidates:  # topological: a transparent op's producer is decided before it
        layer = layer_of.get(node.key)
        if layer is None:
            continue
        data = target_graph.data_inputs(node.key)
        if node.key not in named and node.name not in named and node.op_type in _TRANSPARENT and len(data) == 1:
            if data[0][0] in inside and inside[data[0][0]] == layer:
                inside[node.key] = layer
            continue
        readers = target_graph.consumers(node.key)
        if readers and all(layer_of.get(r) == layer for r in readers):
            inside[node.key] = layer
    outputs: dict[str, list[str]] = {}
    for key, layer in layer_of.items():
        if key not in inside:
            outputs.setdefault(layer, []).append(key)
    ref_of = {t.key: r.key for r, t in match.pairs} if match is not None else None

    def ref(key: str) -> str | None:
        return key if ref_of is None else ref_of.get(key)

    by_index = {layer: sorted(keys, key=lambda k: target_graph[k].index) for layer, keys in outputs.items()}
    return KernelTensors(
        inside={r: layer for key, layer in inside.items() if (r := ref(key)) is not None},
        outputs={layer: tuple(r for k in keys if (r := ref(k)) is not None) for layer, keys in by_index.items()},
    )
