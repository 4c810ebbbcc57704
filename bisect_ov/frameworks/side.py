"""The framework-side device: a framework's run of the whole model, played back as a `Device`.

A `FrameworkSide` (`bisect_ov.frameworks.torch_side.Torch`, `bisect_ov.frameworks.ort_side.ORT`) knows how to
run its framework and how to find, for the walked OpenVINO graph, which framework value each node's tensor
is (its *address*: an aten call of the eager run, an ONNX tensor name). `FrameworkSide.bind(graph, arrays)`
runs the framework once on `arrays`, matches, checks that its outputs are the model's, runs it a second time
and checks that it gives the same outputs (a side that does not, dropout in training mode or a random op, would
have its own noise blamed on the other side), and returns a `BoundSide`: the `Device` the comparison uses.
`BoundSide.provides` tells the pipeline which tensors it has, so only those are compared; `BoundSide.record`
says what matched and what did not.

A bound side compiles a (tapped) model into a `FrameworkCompiled`, whose `infer` runs the framework and
returns the values at the model's outputs, in the model's output order, as a recorded run does
(`bisect_ov.capture.device`). It cannot run pieces of the model fed with other values (`can_run_pieces` is
False): partitioned runs need OpenVINO on both sides. The last input set's values are cached, so the several
compiles of one measurement run the framework once.

Assumes a side is bound to the model it compiles: the model (or a copy of it with outputs added), walked by
`ModelGraph` in the same topological order.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

import numpy as np
import openvino as ov

from bisect_ov.core.errors import DeviceError, InputError
from bisect_ov.core.records import DeviceInfo, FrameworkMatch
from bisect_ov.model.graph import ModelGraph, ops_by_name
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap
from bisect_ov.run.device_base import Device, infer_each

__all__ = ["FrameworkSide", "Binding", "BoundSide", "FrameworkCompiled", "DTYPES", "static_shapes", "inputs_key",
           "covered_by_consumers"]

DTYPES = ("f32", "f64")
REPEATABLE = 1e-6  # the most two runs of a side on the same inputs may differ by (relative L2) and count as the same


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise InputError(f"A framework side runs in 'f32' or 'f64' (float64, the exact side of truth='f64'); got {dtype!r}.")
    return dtype


@dataclass(frozen=True)
class Binding:
    """What matching found: the framework address of each matched tensor and of each model output."""

    sources: dict[Tap, Hashable]
    kinds: dict[Tap, str]  # how each was found: aten, module, export, tensor
    covered: frozenset[str]  # node keys compared directly or through their call's output
    outputs: tuple[Hashable, ...]  # one address per model output, in output order
    note: str = ""  # what the side wants the reader to know (how it ran, what it could not match)
    order: tuple[Any, ...] = field(default=())  # the side's own check that a later run ran the same way


class FrameworkSide(Device):
    """A framework that runs the whole model (see the module docstring). Subclasses implement `_bind`, `_run`
    and `with_dtype`; `bind` makes the device a comparison uses."""

    framework = "framework"
    recorded = False

    def __init__(self, dtype: str = "f32", *, name: str | None = None):
        self.dtype = check_dtype(dtype)
        if name is not None and not (isinstance(name, str) and name.strip()):
            raise InputError(f"A framework side's name must be a non-empty str (how the report labels it); got {name!r:.60}.")
        self.name = name or self.framework

    @property
    def activation_precision(self) -> str:
        return self.dtype

    @property
    def can_run_pieces(self) -> bool:
        return False

    def with_dtype(self, dtype: str) -> "FrameworkSide":  # pragma: no cover - every side overrides it
        """The same framework and model in another dtype (the float64 side of ``truth="f64"``)."""
        raise NotImplementedError

    def describe(self) -> str:
        """The framework and what it runs, for the report (``PyTorch 2.14.1 eager, ViTModel``)."""
        return self.framework

    def bind(self, graph: ModelGraph, arrays: Sequence[np.ndarray]) -> "BoundSide":
        """Run once on `arrays`, match to `graph` and check the outputs: the device the comparison uses.

        Raises
        ------
        InputError
            The framework's outputs do not correspond to the model's (count, shape), it rejects the inputs, or it
            gives other outputs for the same inputs in a second run.
        """
        arrays = list(arrays)
        binding, outputs = self._bind(graph, arrays)
        again = self._run(arrays, list(binding.outputs), binding)
        for i, (first, address) in enumerate(zip(outputs, binding.outputs)):
            change = _change(np.asarray(first), np.asarray(again[address]))
            if change > REPEATABLE:
                raise InputError(
                    f"The {self.framework} side '{self.name}' gives other outputs for the same inputs in a second run "
                    f"(output {i} moved by {change:.1e}, relative): something in it is random, so its own noise would "
                    f"be blamed on the other side. {self._unrepeatable_hint()}")
        return BoundSide(self, graph, binding)

    def _bind(self, graph: ModelGraph, arrays: list[np.ndarray]) -> tuple[Binding, list[np.ndarray]]:  # pragma: no cover
        """The binding and the outputs of the run that made it, in the model's output order."""
        raise NotImplementedError

    def _unrepeatable_hint(self) -> str:
        """What to do about a side whose two runs differ (see `bind`)."""
        return "Make its random ops deterministic (seed them, or remove them), then compare again."

    def _run(self, arrays: list[np.ndarray], addresses: Sequence[Hashable], binding: Binding) -> dict[Hashable, np.ndarray]:
        """The values at `addresses` for `arrays` (numpy, in the side's dtype)."""
        raise NotImplementedError  # pragma: no cover

    def _compile(self, model: ov.Model, taps: tuple[int, ...], fed: tuple[int, ...] = ()):
        raise InputError(f"The {self.framework} side '{self.name}' must be bound to the model first "
                         "(FrameworkSide.bind(graph, inputs)); bisect() does it.")


def _change(first: np.ndarray, second: np.ndarray) -> float:
    """||second - first|| / ||first||, over the finite values; inf where NaN/Inf moved or shapes differ."""
    if first.shape != second.shape:
        return float("inf")
    a, b = first.astype(np.float64, copy=False).ravel(), second.astype(np.float64, copy=False).ravel()
    finite = np.isfinite(a)
    if not np.array_equal(finite, np.isfinite(b)) or not np.array_equal(a[~finite], b[~finite], equal_nan=True):
        return float("inf")
    diff = float(np.linalg.norm(b[finite] - a[finite]))
    scale = float(np.linalg.norm(a[finite]))
    return diff / scale if scale else (float("inf") if diff else 0.0)


def check_outputs(graph: ModelGraph, framework: str, shapes: Sequence[tuple[int, ...]],
                  model_shapes: dict[Tap, tuple[int, ...]], what: str) -> None:
    """Refuse a framework run whose outputs are not the model's: another count or other shapes."""
    results = graph.results()
    if len(shapes) != len(results):
        raise InputError(
            f"The {what} gives {len(shapes)} output(s) but the OpenVINO model has {len(results)} "
            f"({', '.join(graph.output_name(r.key) for r in results)}): they are not the same model. Pass the "
            f"{framework} model the OpenVINO model was converted from, or convert it again (model=None).")
    for i, (result, shape) in enumerate(zip(results, shapes)):
        expected = model_shapes.get(Tap(*result.inputs[0]))
        if expected is not None and tuple(expected) != tuple(shape):
            raise InputError(
                f"Output {i} ('{graph.output_name(result.key)}') has shape {list(shape)} in the {what} but "
                f"{list(expected)} in the OpenVINO model for the same inputs: they are not the same model, or the "
                "outputs come in another order. Pass the model the OpenVINO model was converted from.")


def covered_by_consumers(graph: ModelGraph, matched: set[str]) -> frozenset[str]:
    """Unmatched compute nodes whose every value ends up in one matched node (through unmatched ones only): the
    pieces OpenVINO split one framework op into (a Conv's ``WithoutBiases`` before its bias Add, a layer norm's
    MVN before its scale), compared through that node."""
    owner: dict[str, str | None] = {}
    for key in reversed(graph.order):
        node = graph[key]
        if not node.is_candidate or key in matched:
            continue
        # A ShapeOf reads only the shape (an ONNX Conv's bias is reshaped to the output's rank through one).
        readers = [c for c in graph.consumers(key) if graph[c].op_type != "ShapeOf"]
        found = {c if c in matched else owner.get(c) for c in readers}
        owner[key] = found.pop() if len(found) == 1 else None
    return frozenset(k for k, v in owner.items() if v is not None)


def static_shapes(graph: ModelGraph, arrays: Sequence[np.ndarray]) -> dict[Tap, tuple[int, ...]]:
    """Every tensor's shape for inputs `arrays` (a clone reshaped to them); only static ones."""
    clone = graph.model.clone()
    try:
        clone.reshape({p.output(0): ov.PartialShape([int(d) for d in np.shape(a)])
                       for p, a in zip(clone.get_parameters(), arrays)})
    except Exception:  # noqa: BLE001 - a model whose shapes do not follow its inputs alone: its own shapes
        clone = graph.model
    shapes: dict[Tap, tuple[int, ...]] = {}
    # Each op found by its friendly name: reshaping can change the op count (shape subgraphs fold) and so the
    # positions; a name the clone repeats is left out rather than guessed.
    by_name = ops_by_name(clone)
    for key in graph.order:
        found = by_name.get(graph[key].name, [])
        if len(found) != 1:
            continue
        op = found[0]
        for port, out in enumerate(op.outputs()):
            ps = out.get_partial_shape()
            if ps.is_static:
                shapes[Tap(key, port)] = tuple(int(d) for d in ps.to_shape())
    return shapes


def inputs_key(arrays: Sequence[np.ndarray]) -> str:
    """A digest of input arrays (values, shapes, dtypes): which run a cached value belongs to."""
    h = hashlib.sha1()
    for a in arrays:
        a = np.asarray(a, order="C")
        h.update(f"{a.shape}|{a.dtype}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


class BoundSide(Device):
    """A framework side matched to one walked model: the `Device` a comparison runs (module docstring)."""

    recorded = False
    other_implementation = True
    travels = False  # its session or module lives in this process

    def __init__(self, side: FrameworkSide, graph: ModelGraph, binding: Binding):
        self.side, self.graph, self.binding = side, graph, binding
        self.name = side.name
        self._cache: tuple[str, dict[Hashable, np.ndarray]] | None = None

    @property
    def framework(self) -> str:
        return self.side.framework

    @property
    def dtype(self) -> str:
        return self.side.dtype

    @property
    def activation_precision(self) -> str:
        return self.side.dtype

    @property
    def can_run_pieces(self) -> bool:
        return False

    def provides(self, graph: ModelGraph) -> frozenset[Tap] | None:
        """The tensors this side has a value for (the pipeline compares only those)."""
        return frozenset(self.binding.sources)

    def repro_side(self, info: DeviceInfo, role: str) -> dict:
        """As the reference, not run by ``run.py`` (it needs OpenVINO alone): the framework's values of the piece's
        outputs are the expected ones; as the target, refused: ``run.py`` cannot run the framework on a piece."""
        if role == "target":
            raise InputError(f"The target is {self.side.framework} ('{info.name}'): run.py runs pieces with OpenVINO "
                             "alone, so no reproducer can be verified. Make the framework the reference.")
        return {"device": self.side.framework, "config": {}, "runnable": False,
                "recorded": f"{self.side.framework}, run by bisect_ov"}

    def record(self, role: str) -> FrameworkMatch:
        """What matched, for the report."""
        compute = [n for n in self.graph.candidates()]
        matched = {t.key for t in self.binding.sources}
        covered = matched | set(self.binding.covered)
        kinds: dict[str, int] = {}
        for kind in self.binding.kinds.values():
            kinds[kind] = kinds.get(kind, 0) + 1
        return FrameworkMatch(role, self.side.framework, self.side.dtype, len(compute),
                              len(matched & {n.key for n in compute}), len(covered & {n.key for n in compute}),
                              kinds, tuple(n.name for n in compute if n.key not in covered))

    def info(self) -> DeviceInfo:
        return DeviceInfo(name=self.name, device=self.side.describe(), full_name=self.side.describe(),
                          precision=self.side.dtype, note=self.binding.note)

    def values(self, arrays: Sequence[np.ndarray], addresses: Sequence[Hashable]) -> dict[Hashable, np.ndarray]:
        """The framework's values at `addresses` for `arrays`: run once per input set (the last one is cached)."""
        arrays = list(arrays)
        key = inputs_key(arrays)
        cached = self._cache[1] if self._cache is not None and self._cache[0] == key else {}
        missing = [a for a in dict.fromkeys(addresses) if a not in cached]
        if missing:
            fresh = self.side._run(arrays, list(dict.fromkeys([*cached, *missing])), self.binding)
            cached = {**cached, **fresh}
            self._cache = (key, cached)
        return {a: cached[a] for a in addresses}

    def _compile(self, model: ov.Model, taps: tuple[int, ...], fed: tuple[int, ...] = ()) -> "FrameworkCompiled":
        if fed:
            raise DeviceError(
                f"The {self.side.framework} side '{self.name}' cannot run a piece of the model fed with other "
                "values: it runs the whole model in its framework. Partitioned runs (impact, fix, delegation, "
                "curve) need OpenVINO on both sides.")
        added = set(taps)
        results = model.get_results()
        keep = [r for i, r in enumerate(results) if i not in added]
        view = model if not added else ov.Model(keep, model.get_parameters(), model.get_friendly_name())
        ops = view.get_ordered_ops()
        if len(ops) != len(self.graph.order):
            raise InputError(f"The {self.side.framework} side '{self.name}' was matched to another model "
                             f"({len(self.graph.order)} ops; this one has {len(ops)}).")
        key_of = {op.get_name(): key for key, op in zip(self.graph.order, ops)}
        original = [i for i in range(len(results)) if i not in added]
        addresses: list[Hashable] = []
        missing = []
        for i, out in enumerate(model.outputs):
            if i not in added:
                addresses.append(self.binding.outputs[original.index(i)])
                continue
            producer = out.get_node().input_value(0)
            key = key_of.get(producer.get_node().get_name(), producer.get_node().get_friendly_name())
            tap = Tap(key, producer.get_index())
            if key in self.graph and self.graph[key].kind == "parameter":
                addresses.append(("input", self.graph.parameter_position[key]))
            elif tap in self.binding.sources:
                addresses.append(self.binding.sources[tap])
            else:
                missing.append(str(tap))
        if missing:
            raise InputError(
                f"The {self.side.framework} side '{self.name}' has no value for {len(missing)} requested tensor(s) "
                f"({missing[:5]}{' ...' if len(missing) > 5 else ''}): they matched nothing in its run. Compare "
                "only the tensors it provides (BoundSide.provides).")
        return FrameworkCompiled(self, addresses, self.info())


class FrameworkCompiled:
    """What `BoundSide.compile` returns: a `Compiled` whose `infer` runs the framework."""

    def __init__(self, device: BoundSide, addresses: Sequence[Hashable], info: DeviceInfo):
        self.device = device
        self.addresses = list(addresses)
        self.info = info
        self.runtime = RuntimeGraph()
        self.n_outputs = len(self.addresses)

    def infer(self, inputs: Sequence[np.ndarray], *, share_outputs: bool = True) -> list[np.ndarray]:
        arrays = [np.asarray(a) for a in inputs]
        wanted = [a for a in self.addresses if not (isinstance(a, tuple) and a and a[0] == "input")]
        found = self.device.values(arrays, wanted)
        out = []
        for address in self.addresses:
            if isinstance(address, tuple) and address and address[0] == "input":
                out.append(arrays[address[1]])
            else:
                out.append(found[address])
        return out

    def infer_many(self, inputs: Sequence[Sequence[np.ndarray]], *, jobs: int = 2) -> list[list[np.ndarray]]:
        return infer_each(self, inputs)
