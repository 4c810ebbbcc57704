"""Integer exactness: which ops have an exact integer answer, what it is, and how far each device is from it.

Some computations are integer-valued by construction: an int8 convolution whose output is converted to
int32, a MatMul of quantised codes, a sum of counts. OpenVINO plugins usually run them in floating point
(f32 on CPU, bf16 or f16 elsewhere), so a large enough reduction is rounded or saturates: a 1x1
convolution over 11,111 channels with inputs and weights all 127 should give 127*127*11111 = 179,209,319,
but f32 gives 179,207,392, bf16 179,306,496 and an f16 device saturates at 65,504. `exact_result`
recomputes such an op exactly, in int64, from the node's actual input values; `check_exact` compares the two
devices' outputs with it, and `ExactCheck.describe` says in one sentence who is off and by how much.

Here: over a walked graph, which Conv/MatMul nodes have an exact integer answer (`exact_candidates`) and
checking one of them (`check_node`). The recomputation is `bisect_ov.analysis.exact_ops` (its assumptions
are listed there), the comparison `bisect_ov.analysis.exact_check`; their public names are importable from
here too.

Assumed: `graph` is a `bisect_ov.model.graph.ModelGraph` (``candidates``, nodes with ``op_type``, ``kind``
and ``inputs``, ``constant_value`` and ``attributes``); only Convolution, GroupConvolution and MatMul are checked
(`EXACT_OPS`), as the ops whose long reductions a plugin runs in floating point.
"""

from __future__ import annotations

import numpy as np

from bisect_ov.analysis.exact_check import ExactCheck, check_exact
from bisect_ov.analysis.exact_ops import SUPPORTED_OPS, exact_result, integer_valued

__all__ = [
    "SUPPORTED_OPS",
    "ExactCheck",
    "check_exact",
    "exact_result",
    "integer_valued",
    "EXACT_OPS",
    "exact_candidates",
    "check_node",
]


# --------------------------------------------------------------------------------------------------------
# Over a walked graph: which nodes have an exact integer answer, and checking one.
# --------------------------------------------------------------------------------------------------------
EXACT_OPS = ("Convolution", "GroupConvolution", "MatMul")


def exact_candidates(graph) -> list[str]:
    """Conv/MatMul nodes of `graph` (a `ModelGraph`) that compute on integers: integer-valued constant operands,
    and data operands of an integer type or converted from one. Their result has an exact integer answer."""
    found = []
    for node in graph.candidates():
        if node.op_type not in EXACT_OPS:
            continue
        integer = True
        for key, port in node.inputs:
            producer = graph[key]
            if producer.kind == "constant":
                integer = integer_valued(graph.constant_value(key))
            elif not producer.outputs[port].is_float:
                continue
            elif producer.op_type == "Convert":
                source, source_port = producer.inputs[0]
                integer = not graph[source].outputs[source_port].is_float
            else:
                integer = False
            if not integer:
                break
        if integer:
            found.append(node.key)
    return found


def check_node(graph, key: str, input_value, ref: np.ndarray, target: np.ndarray) -> ExactCheck | None:
    """Compare a Conv/MatMul node's two results with its exact int64 result, or None when it has none.

    `input_value(producer_key, port)` gives the reference's value of a non-constant input, or None when it is
    not known (the check is then skipped).
    """
    node = graph[key]
    if node.op_type not in EXACT_OPS:
        return None
    inputs = []
    for producer_key, port in node.inputs:
        if graph[producer_key].kind == "constant":
            inputs.append(graph.constant_value(producer_key))
            continue
        value = input_value(producer_key, port)
        if value is None:
            return None
        inputs.append(value)
    exact = exact_result(node.op_type, graph.attributes(key), inputs)
    return None if exact is None else check_exact(exact, ref, target)
