"""A `Report` in other tools' formats: a pandas DataFrame, and node data for Google's Model Explorer.

pandas is optional (``pip install bisect_ov[dataframe]``) and imported inside `to_dataframe`; the Model Explorer
export needs nothing beyond the standard library.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
from typing import TYPE_CHECKING, Any

from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.fileio import write_text_atomic

if TYPE_CHECKING:
    import pandas as pd

    from bisect_ov.report.report import NodeResult, Report

__all__ = [
    "to_dataframe", "to_model_explorer", "DATAFRAME_COLUMNS", "RUNTIME_COLUMNS",
    "ME_ZERO_VALUE", "ME_NONFINITE_VALUE", "ME_COLORS",
]

_STATS_FIELDS = tuple(f.name for f in dataclasses.fields(TensorStats))
RUNTIME_COLUMNS = ("ref_precision", "ref_kernel", "target_precision", "target_kernel", "fused_with")
DATAFRAME_COLUMNS = (
    ("name", "key", "op_type", "index", "role", "rank", "first", "error", "input_error", "tolerance", "growth",
     "causes", "shape", "dtype", "n_outputs", "tensor_names", "inputs", "group")
    + tuple(f"out_{f}" for f in _STATS_FIELDS)
    + RUNTIME_COLUMNS
)


def to_dataframe(report: "Report") -> "pd.DataFrame":
    """One row per compared node, in topological order, with its errors, role, statistics and what ran it.

    Columns (`DATAFRAME_COLUMNS`):

    * ``name``, ``key``, ``op_type``, ``index`` (topological index), ``role`` (source / amplifier / inherits /
      ok), ``rank`` (culprit rank, nullable ``Int64``: missing for nodes within tolerance), ``first`` (a first
      divergence), ``error``, ``input_error``, ``tolerance``, ``growth`` (floats; may be ``inf``/``nan``);
    * ``causes``: the node's causes joined with ``"; "`` (``""`` when none);
    * ``shape`` and ``dtype``: every output's shape (``"1x16x32x32"``) and dtype, joined with ``", "``;
      ``n_outputs``; ``tensor_names``, ``inputs`` (producer keys) and ``group`` (nodes measured only through
      this one: fused with it or folded in) joined with ``", "``;
    * ``out_<field>`` for every `TensorStats` field of the node's first output (``out_max_abs``, ``out_cosine``,
      ``out_sqnr_db``, ``out_target_nan``, ...; ``out_shape`` is a tuple);
    * ``ref_precision``, ``ref_kernel``, ``target_precision``, ``target_kernel``: read from the runtime graph
      (``NodeResult.runtime``), and ``fused_with``: the other ops the target fused this node with, joined with
      ``", "``. Missing values in these columns (and in ``out_`` columns of a node without outputs) are None.

    Examples
    --------
    >>> df = to_dataframe(report)                                   # doctest: +SKIP
    >>> df[df.role != "ok"].sort_values("rank")[["name", "error", "growth"]]  # doctest: +SKIP
    """
    try:
        import pandas as pd
    except ImportError as err:
        raise ImportError(
            "to_dataframe needs pandas, which is not installed: pip install bisect_ov[dataframe]"
        ) from err

    rows = [_row(n) for n in report.nodes]
    columns: dict[str, Any] = {}
    for col in DATAFRAME_COLUMNS:
        values = [r[col] for r in rows]
        if col == "rank":
            columns[col] = pd.array(values, dtype="Int64")
        elif col in ("index", "n_outputs"):
            columns[col] = pd.array(values, dtype="int64")
        elif col == "first":
            columns[col] = pd.array(values, dtype="bool")
        elif col in ("error", "input_error", "tolerance", "growth"):
            columns[col] = pd.array(values, dtype="float64")
        elif col in RUNTIME_COLUMNS or any(v is None for v in values):
            # object dtype keeps None as None (pandas' default string dtype would turn it into NaN).
            columns[col] = pd.Series(values, dtype=object)
        else:
            columns[col] = pd.Series(values)
    return pd.DataFrame(columns, columns=list(DATAFRAME_COLUMNS))


def _row(n: "NodeResult") -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": n.name, "key": n.key, "op_type": n.op_type, "index": n.index, "role": n.role, "rank": n.rank,
        "first": bool(n.first), "error": n.error, "input_error": n.input_error, "tolerance": n.tolerance,
        "growth": n.growth, "causes": "; ".join(n.causes),
        "shape": ", ".join("x".join(str(d) for d in s.shape) if s.shape is not None else "?" for s in n.outputs),
        "dtype": ", ".join(s.dtype for s in n.outputs), "n_outputs": len(n.outputs),
        "tensor_names": ", ".join(n.tensor_names), "inputs": ", ".join(n.inputs),
        "group": ", ".join(getattr(n, "group", ()) or ()),
    }
    first = n.outputs[0] if n.outputs else None
    for f in _STATS_FIELDS:
        row[f"out_{f}"] = getattr(first, f) if first is not None else None
    rt = n.runtime or {}
    ref, target = rt.get("ref") or {}, rt.get("target") or {}
    row["ref_precision"] = ref.get("precision") or None
    row["ref_kernel"] = ref.get("kernel") or None
    row["target_precision"] = target.get("precision") or None
    row["target_kernel"] = target.get("kernel") or None
    fused = [f for f in (target.get("fused") or []) if f != n.name]
    row["fused_with"] = ", ".join(fused) if fused else None
    return row


# ----- Model Explorer ---------------------------------------------------------------------------------------------

ME_ZERO_VALUE = -20.0      # log10 value given to exact matches (and errors below 1e-20)
ME_NONFINITE_VALUE = 99.0  # log10 value given to infinite or NaN errors: above any real error
ME_COLORS = {"within": "#81c784", "over": "#ffb74d", "far": "#e57373"}  # green, orange, red


def _me_value(error: float) -> float:
    if error is None or not math.isfinite(error):
        return ME_NONFINITE_VALUE
    if error <= 10 ** ME_ZERO_VALUE:
        return ME_ZERO_VALUE
    return round(math.log10(error), 6)


def _me_color(error: float, tolerance: float) -> str:
    if error is None or not math.isfinite(error) or error > 10 * tolerance:
        return ME_COLORS["far"]
    return ME_COLORS["within"] if error <= tolerance else ME_COLORS["over"]


def to_model_explorer(
    report: "Report", path: str | os.PathLike | None = None, *, graph_id: str | None = None
) -> dict[str, Any]:
    """Node data for Google's Model Explorer, to colour the model's graph by each node's error.

    Load the model in Model Explorer (ONNX through its ONNX adapter), then add this file with "Add per-node
    data". The format is Model Explorer's ``ModelNodeData`` JSON (see ``node_data_builder.py`` in
    google-ai-edge/model-explorer)::

        {
          "<graph id>": {
            "results": {
              "<node id or output tensor name>": {"value": -1.3, "bgColor": "#ffb74d"},
              ...
            },
            "thresholds": [
              {"value": -1.5, "bgColor": "#81c784"},
              {"value": -0.5, "bgColor": "#ffb74d"},
              {"value": 99.0, "bgColor": "#e57373"}
            ]
          }
        }

    * **keys**: every output tensor name of each compared node (Model Explorer matches them against a node's
      output tensor tags; ONNX tensor names survive conversion to OpenVINO) and the node's friendly name (matched
      against node ids), all mapped to the same value. Nodes that were not measured on their own (members of a
      fused group, ``NodeResult.group``) get no entry and stay uncoloured.
    * **value**: ``log10(error)`` under the report's metric, so ``-2`` means an error of 1e-2. Exact matches (and
      errors below 1e-20) are `ME_ZERO_VALUE` (-20); infinite or NaN errors are `ME_NONFINITE_VALUE` (99).
    * **bgColor** per result: the node against its own tolerance: green within it, orange up to 10x over it, red
      beyond or non-finite (`ME_COLORS`). Model Explorer gives a result's own colour precedence over thresholds.
    * **thresholds**, sorted ascending, upper bounds in Model Explorer's sense (a value up to a threshold takes its
      colour): green up to ``log10(T)``, orange up to ``log10(10 T)``, red up to the non-finite sentinel, where
      ``T`` is the median of the nodes' tolerances. They colour the graph the same way for nodes of typical
      tolerance and give Model Explorer its legend.

    Parameters
    ----------
    report
        A `Report`.
    path
        Where to write the JSON (atomically); nothing is written when None.
    graph_id
        The graph's id in Model Explorer: for an ONNX model, its graph name (``onnx.load(p).graph.name``, often
        ``main_graph`` or ``torch_jit`` for PyTorch exports). Defaults to the report's model label without its
        file suffix.

    Returns
    -------
    dict
        The JSON-ready data (only finite numbers).
    """
    results: dict[str, dict[str, Any]] = {}
    worst: dict[str, float] = {}
    for n in report.nodes:
        value = _me_value(n.error)
        entry = {"value": value, "bgColor": _me_color(n.error, n.tolerance)}
        for key in dict.fromkeys((*n.tensor_names, n.name)):
            if key and (key not in worst or value > worst[key]):  # a name shared by two nodes shows the worse one
                worst[key] = value
                results[key] = entry
    tolerances = sorted(n.tolerance for n in report.nodes if n.tolerance is not None and math.isfinite(n.tolerance)
                        and n.tolerance > 0)
    typical = tolerances[len(tolerances) // 2] if tolerances else 1e-6
    thresholds = [
        {"value": round(math.log10(typical), 6), "bgColor": ME_COLORS["within"]},
        {"value": round(math.log10(10 * typical), 6), "bgColor": ME_COLORS["over"]},
        {"value": ME_NONFINITE_VALUE, "bgColor": ME_COLORS["far"]},
    ]
    if graph_id is None:
        graph_id = _default_graph_id(report.model)
    data = {graph_id: {"results": results, "thresholds": thresholds}}
    if path is not None:
        _write_json_atomic(pathlib.Path(path), data)
    return data


def _default_graph_id(label: str) -> str:
    p = pathlib.PurePath(label)
    return p.stem if p.suffix.lower() in (".onnx", ".xml", ".pb", ".tflite", ".pdmodel", ".json") else label


def _write_json_atomic(path: pathlib.Path, data: Any) -> pathlib.Path:
    return write_text_atomic(path, json.dumps(data, indent=1, allow_nan=False))
