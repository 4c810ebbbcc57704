"""The lifetime of the emulation's Python ops (`bisect_ov.run.emulate`): what frees an emulated model.

OpenVINO keeps a Python op alive from C++ (the node holds a reference to its Python object, which holds the
node), so neither is ever freed, and the node holds its inputs, and through them every op and weight above it.
An emulated model's graph, its rounded weights with it, stayed in memory after the model and its compile were
gone: the model's size again at every compile (1.3 GB per compile of a 24-layer BERT), until memory ran out on
a long search or a session in a notebook.

`collecting()` gathers the Python ops made in this thread inside the block: `emulate_precision`'s, and the
copies the plugin makes of them while it compiles. `release(made)` points their inputs at small placeholders,
which frees the graph above them; it is called once nothing runs those ops (the compile is gone, or the
model was rewritten without them). Copies a plugin makes in another thread are not gathered (they stay, as
before).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import openvino as ov
from openvino import opset13 as ops

__all__ = ["collecting", "made", "release"]

_local = threading.local()


def made(op: Any) -> None:
    """Note a Python op just made (called by each op's ``__init__``): the innermost `collecting` block of this
    thread gathers it."""
    gathered = getattr(_local, "made", None)
    if gathered is not None:
        gathered.append(op)


@contextlib.contextmanager
def collecting() -> Iterator[list[Any]]:
    """The Python ops made in this thread inside the block (an enclosing block gathers them too)."""
    gathered: list[Any] = []
    outer = getattr(_local, "made", None)
    _local.made = gathered
    try:
        yield gathered
    finally:
        _local.made = outer
        if outer is not None:
            outer.extend(gathered)


def release(gathered: list[Any]) -> None:
    """Point every input of the ops in `gathered` at a placeholder of its type: what they held above them is
    freed once nothing else holds it. Only for ops that nothing runs any more (their compiles are gone)."""
    for op in gathered:
        for inp in op.inputs():
            inp.replace_source_output(ops.parameter(ov.PartialShape.dynamic(), inp.get_element_type()).output(0))
    gathered.clear()
