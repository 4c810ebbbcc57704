"""A graph given by hand, as the judge reads it (`Topology`): for tests, and for callers that keep a graph of their
own. `bisect_ov.model.graph.ModelGraph` offers the same reads of a real model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bisect_ov.model.graph import walk

__all__ = ["Topology"]


class Topology:
    """A graph as the judge reads it, given by hand: nodes in topological order as ``(key, op_type, inputs)``,
    ``op_type`` ``"Parameter"`` for a model input, ``"Constant"`` for weights (no data input) and ``"Result"``
    for an output. `ModelGraph` offers the same reads (iteration, ``[key]``, `data_inputs`, `upstream`,
    `downstream`); this one needs no model, for tests and for callers that keep a graph of their own.

    Examples
    --------
    >>> g = Topology([("x", "Parameter", ()), ("a", "MatMul", ("x",)), ("t", "Transpose", ("a",))])
    >>> g.data_inputs("t")
    [('a', 0)]
    """

    @dataclass(frozen=True)
    class _Port:
        port: int = 0

    @dataclass(frozen=True)
    class _Node:
        key: str
        name: str
        op_type: str
        kind: str
        index: int
        inputs: tuple[tuple[str, int], ...]
        outputs: tuple[Any, ...]

    def __init__(self, nodes: Any) -> None:
        self._nodes: dict[str, Topology._Node] = {}
        self._consumers: dict[str, list[str]] = {}
        for index, (key, op_type, inputs) in enumerate(nodes):
            kind = {"Parameter": "parameter", "Result": "result", "Constant": "constant"}.get(op_type, "compute")
            outputs = () if kind == "result" else (Topology._Port(0),)
            self._nodes[key] = Topology._Node(key, key, op_type, kind, index, tuple((i, 0) for i in inputs), outputs)
            self._consumers[key] = []
            for i in inputs:
                self._consumers[i].append(key)

    def __iter__(self):
        return iter(self._nodes.values())

    def __getitem__(self, key: str) -> Any:
        return self._nodes[key]

    def __contains__(self, key: object) -> bool:
        return key in self._nodes

    def data_inputs(self, key: str) -> list[tuple[str, int]]:
        return [(k, p) for k, p in self._nodes[key].inputs if self._nodes[k].kind != "constant"]

    def upstream(self, key: str, *, stop: Any = None, include_self: bool = True) -> set[str]:
        return self._walk(key, stop, include_self, lambda k: [i for i, _ in self.data_inputs(k)])

    def downstream(self, key: str, *, stop: Any = None, include_self: bool = True) -> set[str]:
        return self._walk(key, stop, include_self, lambda k: self._consumers[k])

    @staticmethod
    def _walk(key: str, stop: Any, include_self: bool, step: Any) -> set[str]:
        return walk(key, step, stop=stop, include_self=include_self)
