"""The model as a networkx graph in topological order.

`ModelGraph` walks `ov.Model.get_ordered_ops()` once and keeps, for each op, what the rest of the package
needs: its friendly name (the user's name), op type, topological index, the tensors it produces (tensor names,
which survive conversion from ONNX, shapes, element types), the tensors it reads, and its role:

* ``parameter``, ``constant``, ``result``: never culprits, never tapped;
* ``static``: ops whose value does not depend on the inputs' *values* (constant folding, ShapeOf chains);
* ``compute``: everything else, the candidates.

Nodes are keyed by friendly name; duplicates (allowed by OpenVINO) get ``#2``, ``#3`` suffixes in order.
Positions in `get_ordered_ops()` are stable under `ov.Model.clone()`, which is how rewrites find the same op
in a copy (`ModelGraph.ops_of`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import networkx as nx
import numpy as np
import openvino as ov

from bisect_ov.core.errors import InputError

__all__ = ["TensorInfo", "NodeInfo", "ModelGraph", "element_dtype", "ops_by_name", "walk", "weight_bytes"]

SHAPE_PRODUCERS = frozenset({"ShapeOf"})
"""Ops whose output is a shape, not data: what they compute depends on shapes only."""
LAYOUT_OPS = frozenset({"ShapeOf", "Reshape", "Squeeze", "Unsqueeze", "Concat", "Gather", "Range", "Broadcast",
                        "StridedSlice"})
"""Ops that compute, move or reshape shapes and indices: listed nowhere as value-changing ops of a twin."""
_NEVER_CULPRIT = {"Parameter": "parameter", "Constant": "constant", "Result": "result"}


@dataclass(frozen=True)
class TensorInfo:
    """One output tensor of an op."""

    port: int
    names: tuple[str, ...]
    shape: tuple[int, ...] | None  # None when any dimension is dynamic
    partial_shape: str
    dtype: str  # OpenVINO element type name: f32, f16, bf16, i32, u8, boolean, ...

    @property
    def is_float(self) -> bool:
        return self.dtype in ("f64", "f32", "f16", "bf16", "f8e4m3", "f8e5m2")

    @property
    def nbytes(self) -> int | None:
        if self.shape is None:
            return None
        size = np.dtype(element_dtype(self.dtype)).itemsize if self.dtype != "boolean" else 1
        return int(np.prod(self.shape, dtype=np.int64)) * size


@dataclass(frozen=True)
class NodeInfo:
    """What the package knows about one op of the user's model."""

    key: str
    name: str
    op_type: str
    index: int
    kind: str
    outputs: tuple[TensorInfo, ...]
    inputs: tuple[tuple[str, int], ...]  # (producer key, producer output port) per input slot
    reduction_length: int = 1
    input_shapes: tuple[tuple[int, ...] | None, ...] = field(default=())
    auto_named: bool = False  # OpenVINO made the name up (e.g. "Constant_123"): it differs run to run

    @property
    def is_candidate(self) -> bool:
        return self.kind == "compute"


def walk(key: str, step: Callable[[str], Iterable[str]], *, stop: Callable[[str], bool] | None = None,
         include_self: bool = True) -> set[str]:
    """Keys reached from `key` by `step` (a node's producers or consumers), never entering a node for which
    `stop(key)` is true."""
    seen, stack = {key}, [key]
    while stack:
        for nxt in step(stack.pop()):
            if nxt not in seen and (stop is None or not stop(nxt)):
                seen.add(nxt)
                stack.append(nxt)
    return seen if include_self else seen - {key}


def ops_by_name(model: ov.Model) -> dict[str, list]:
    """Friendly name -> the ops of `model` that carry it, in topological order (a copy of a walked model, where
    positions may have moved: a reshape folds shape subgraphs). A name held by several ops maps to all of them,
    so that a caller can refuse to guess."""
    found: dict[str, list] = {}
    for op in model.get_ordered_ops():
        found.setdefault(op.get_friendly_name(), []).append(op)
    return found


def weight_bytes(model: ov.Model) -> int:
    """Bytes of the model's constants (its weights, as stored)."""
    return sum(op.get_byte_size() for op in model.get_ops() if op.get_type_name() == "Constant")


def element_dtype(type_name: str) -> np.dtype:
    """numpy dtype for an OpenVINO element type name (bf16 and f16 read back as float32 and float16)."""
    table = {
        "f64": np.float64, "f32": np.float32, "f16": np.float16, "bf16": np.float32,
        "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8,
        "u64": np.uint64, "u32": np.uint32, "u16": np.uint16, "u8": np.uint8, "u1": np.uint8,
        "boolean": np.bool_,
    }
    return np.dtype(table.get(type_name, np.float32))


class ModelGraph:
    """An `ov.Model` as a `networkx.DiGraph` whose nodes are op keys in topological order.

    Parameters
    ----------
    model
        The model to walk; it is only read.

    Examples
    --------
    >>> from bisect_ov.zoo.synthetic import chain  # doctest: +SKIP
    >>> g = ModelGraph(chain())                   # doctest: +SKIP
    >>> [n.name for n in g.candidates()][:2]      # doctest: +SKIP
    """

    def __init__(self, model: ov.Model):
        self.model = model
        self.graph = nx.DiGraph()
        self._nodes: dict[str, NodeInfo] = {}
        self._order: list[str] = []
        self._by_tensor_name: dict[str, tuple[str, int]] = {}
        self._by_friendly: dict[str, list[str]] = {}
        self._key_of_name: dict[str, str] = {}
        self._build(model.get_ordered_ops())
        # Compiled models hand outputs over in the model's output order, not in topological order.
        self._result_order = [self._key_of_name[r.get_name()] for r in model.get_results()]
        position = {p.get_name(): i for i, p in enumerate(model.get_parameters())}
        # Inputs are fed in get_parameters() order, which need not be the topological order.
        self.parameter_position: dict[str, int] = {
            key: position[op.get_name()] for key, op in zip(self._order, model.get_ordered_ops())
            if op.get_type_name() == "Parameter" and op.get_name() in position
        }

    # ----- construction -------------------------------------------------------------------------------
    def _build(self, ops: list) -> None:
        runtime_name_key = self._key_of_name  # get_name() is unique within one model
        # Generated keys (``name#2``) must not collide with any op's real name, whatever names the model uses.
        self._taken = {op.get_friendly_name() for op in ops}
        data_dependent: dict[tuple[str, int], bool] = {}
        for index, op in enumerate(ops):
            friendly = op.get_friendly_name()
            key = self._unique_key(friendly)
            runtime_name_key[op.get_name()] = key
            op_type = op.get_type_name()
            inputs = []
            for inp in op.inputs():
                src = inp.get_source_output()
                inputs.append((runtime_name_key[src.get_node().get_name()], src.get_index()))
            outputs = tuple(_tensor_info(out) for out in op.outputs())
            kind = _NEVER_CULPRIT.get(op_type)
            if kind is None:
                # An op carries data when any input does; ShapeOf's result depends on shapes only.
                carries = op_type not in SHAPE_PRODUCERS and any(data_dependent.get(i, False) for i in inputs)
                kind = "compute" if carries else "static"
            for port in range(len(outputs)):
                data_dependent[(key, port)] = kind in ("compute", "parameter")
            info = NodeInfo(
                key=key, name=friendly, op_type=op_type, index=index, kind=kind, outputs=outputs,
                inputs=tuple(inputs), reduction_length=_reduction_length(op),
                input_shapes=tuple(_static_shape(inp.get_partial_shape()) for inp in op.inputs()),
                auto_named=_made_up(friendly, op),
            )
            self._nodes[key] = info
            self._order.append(key)
            self.graph.add_node(key, info=info)
            for slot, (src_key, port) in enumerate(inputs):
                if self.graph.has_edge(src_key, key):
                    self.graph.edges[src_key, key]["ports"].append((port, slot))
                else:
                    self.graph.add_edge(src_key, key, ports=[(port, slot)])
            for t in outputs:
                for name in t.names:
                    self._by_tensor_name.setdefault(name, (key, t.port))

    def _unique_key(self, friendly: str) -> str:
        """The friendly name for its first op, ``name#2``, ``name#3`` ... for repeats, skipping any key that is
        some op's real name or already in use."""
        seen = self._by_friendly.setdefault(friendly, [])
        key, n = friendly, len(seen) + 1
        if seen:
            while key in self._nodes or key in self._taken:  # the friendly name itself is taken
                key = f"{friendly}#{n}"
                n += 1
        seen.append(key)
        return key

    # ----- lookup -------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[NodeInfo]:
        return (self._nodes[k] for k in self._order)

    def __contains__(self, key: object) -> bool:
        return key in self._nodes

    def __getitem__(self, key: str) -> NodeInfo:
        return self._nodes[key]

    @property
    def order(self) -> list[str]:
        """Node keys in topological order."""
        return list(self._order)

    def candidates(self) -> list[NodeInfo]:
        """Compute nodes (possible culprits) in topological order."""
        return [n for n in self if n.is_candidate]

    def parameters(self) -> list[NodeInfo]:
        return [n for n in self if n.kind == "parameter"]

    def results(self) -> list[NodeInfo]:
        """The Result nodes in the model's output order: the order compiled outputs come in."""
        return [self._nodes[k] for k in self._result_order]

    def output_name(self, result_key: str) -> str:
        """The user's name for a model output: the Result's own name when someone gave it one, else the name of
        the tensor it reads, else its producer's name (OpenVINO's made-up Result names mean nothing to users)."""
        result = self._nodes[result_key]
        if not result.auto_named:
            return result.name
        producer_key, port = result.inputs[0]
        producer = self._nodes[producer_key]
        # OpenVINO also gives the tensor the made-up Result name; that one is not the user's either.
        names = [n for n in producer.outputs[port].names if n != result.name]
        return names[0] if names else producer.name

    def find(self, name: str | int) -> NodeInfo:
        """Look a node up by key, friendly name, output tensor name, or topological index.

        Raises
        ------
        InputError
            When nothing matches; the message suggests close names.
        """
        if isinstance(name, (int, np.integer)):
            if not 0 <= int(name) < len(self._order):
                raise InputError(f"Node index {name} is out of range: the model has {len(self._order)} ops (0..{len(self._order) - 1}).")
            return self._nodes[self._order[int(name)]]
        if name in self._nodes:
            return self._nodes[name]
        if name in self._by_tensor_name:
            return self._nodes[self._by_tensor_name[name][0]]
        close = [k for k in self._order if name.lower() in k.lower()][:8]
        hint = f" Similar names: {close}." if close else ""
        raise InputError(f"No node named '{name}' in the model (friendly names and tensor names were searched).{hint}")

    def lookup_tensor(self, name: str) -> tuple[str, int] | None:
        """(node key, output port) of the tensor with this name, or None."""
        return self._by_tensor_name.get(name)

    def consumers(self, key: str) -> list[str]:
        return sorted(self.graph.successors(key), key=lambda k: self._nodes[k].index)

    def producers(self, key: str) -> list[str]:
        return sorted(self.graph.predecessors(key), key=lambda k: self._nodes[k].index)

    def data_inputs(self, key: str) -> list[tuple[str, int]]:
        """(producer key, port) of the inputs that carry data (not constants or shape computations)."""
        return [(k, p) for k, p in self._nodes[key].inputs if self._nodes[k].kind in ("compute", "parameter")]

    def upstream(self, key: str, *, stop: Callable[[str], bool] | None = None, data_only: bool = True,
                 include_self: bool = True) -> set[str]:
        """Keys reached from `key` by walking to producers (its data inputs, or all inputs with
        ``data_only=False``), never entering a node for which `stop(key)` is true."""
        return self._walk(key, stop, include_self,
                          (lambda k: [p for p, _ in self.data_inputs(k)]) if data_only else self.producers)

    def downstream(self, key: str, *, stop: Callable[[str], bool] | None = None, include_self: bool = True) -> set[str]:
        """Keys reached from `key` by walking to consumers, never entering a node for which `stop` is true."""
        return self._walk(key, stop, include_self, self.consumers)

    def _walk(self, key: str, stop: Callable[[str], bool] | None, include_self: bool,
              step: Callable[[str], Iterable[str]]) -> set[str]:
        return walk(key, step, stop=stop, include_self=include_self)

    def constant_value(self, key: str) -> np.ndarray:
        """The data of a Constant node."""
        if self._nodes[key].kind != "constant":
            raise InputError(f"'{self._nodes[key].name}' is a {self._nodes[key].op_type}, not a Constant.")
        (op,) = self.ops_of(self.model, [key])
        return np.asarray(op.get_data())

    def attributes(self, key: str) -> dict:
        """The op's attributes (as OpenVINO gives them)."""
        (op,) = self.ops_of(self.model, [key])
        return dict(op.get_attributes())

    def ops_of(self, model: ov.Model, keys: Iterable[str]) -> list:
        """The ops of `model` (a clone of this graph's model) at the positions of `keys`."""
        ops = model.get_ordered_ops()
        if len(ops) != len(self._order):
            raise InputError("The model is not a clone of the walked model: op counts differ.")
        return [ops[self._nodes[k].index] for k in keys]

    def structure_hash(self) -> str:
        """A hash of op types, user-given names, edges, shapes and element types: equal for the same structure."""
        h = hashlib.sha256()
        for n in self:
            # Made-up names change every time a model is built; edges by position do not.
            name = "" if n.auto_named else n.key
            edges = [(self._nodes[k].index, port) for k, port in n.inputs]
            h.update(f"{n.index}|{n.op_type}|{name}|{edges}|".encode())
            h.update("|".join(f"{t.partial_shape}:{t.dtype}" for t in n.outputs).encode())
        return h.hexdigest()[:16]


def _made_up(friendly: str, op) -> bool:
    """OpenVINO names ops nobody named ``<OpType>_<n>``; the number changes with every build, and
    `ov.Model.clone` pins such names as friendly names, so the form counts, not just equality with get_name()."""
    if friendly == op.get_name() or re.fullmatch(re.escape(op.get_type_name()) + r"_\d+", friendly) is not None:
        return True
    # IR serialisation names an unnamed Result after what it reads: ``<producer>/sink_port_<n>``.
    return op.get_type_name() == "Result" and re.fullmatch(r".+/sink_port_\d+", friendly) is not None


def _tensor_info(out) -> TensorInfo:
    pshape = out.get_partial_shape()
    return TensorInfo(
        port=out.get_index(),
        names=tuple(sorted(out.get_names())),
        shape=_static_shape(pshape),
        partial_shape=str(pshape),
        dtype=out.get_element_type().get_type_name(),
    )


def _static_shape(pshape) -> tuple[int, ...] | None:
    if pshape.rank.is_dynamic or not pshape.is_static:
        return None
    return tuple(int(d.get_length()) for d in pshape)


def _const_vector(op, port: int) -> list[int] | None:
    if op.get_input_size() <= port:
        return None
    src = op.input_value(port).get_node()
    if src.get_type_name() != "Constant":
        return None
    return [int(v) for v in np.asarray(src.get_data()).reshape(-1)]


def _reduction_length(op) -> int:
    """How many values are summed into one output value: rounding error grows with it."""
    kind = op.get_type_name()
    shapes = [_static_shape(i.get_partial_shape()) for i in op.inputs()]
    try:
        if kind == "MatMul" and shapes and shapes[0]:
            transpose_a = bool(op.get_attributes().get("transpose_a", False))
            a = shapes[0]
            return int(a[-2] if transpose_a and len(a) > 1 else a[-1])
        if kind in ("Convolution", "ConvolutionBackpropData", "BinaryConvolution") and len(shapes) > 1 and shapes[1]:
            return int(np.prod(shapes[1][1:]))
        if kind in ("GroupConvolution", "GroupConvolutionBackpropData") and len(shapes) > 1 and shapes[1]:
            return int(np.prod(shapes[1][2:]))
        if kind in ("ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1", "ReduceL2", "MVN", "NormalizeL2") and shapes and shapes[0]:
            axes = _const_vector(op, 1)
            if axes is None and kind == "MVN":  # MVN-1 keeps its axes as an attribute
                across = bool(op.get_attributes().get("across_channels", False))
                axes = list(range(1 if across else 2, len(shapes[0])))
            if axes is not None:
                rank = len(shapes[0])
                return int(np.prod([shapes[0][a % rank] for a in axes])) if axes else 1
            # Axes computed by a subgraph (an ONNX GlobalAveragePool, a ReduceMean over "all but the batch"): each
            # output value reduces as many input values as the input has per output value.
            out = _static_shape(op.get_output_partial_shape(0))
            if kind != "MVN" and out is not None and int(np.prod(out)) > 0:
                return max(1, int(np.prod(shapes[0])) // int(np.prod(out)))
        if kind in ("Softmax", "LogSoftmax") and shapes and shapes[0]:
            axis = int(op.get_attributes().get("axis", -1))
            return int(shapes[0][axis % len(shapes[0])])
        if kind == "AvgPool":
            return int(np.prod(op.get_attributes().get("kernel", [1])))
    except (KeyError, IndexError, TypeError, ValueError):
        return 1
    return 1

