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
    "to_dataframe", "to_model_explorer", "DATAFRAME_COLUMNS", "RUNTIME_COLUMNS", "SAMPLE_STATS",
    "ME_ZERO_VALUE", "ME_NONFINITE_VALUE", "ME_COLORS",
]

_STATS = dataclasses.fields(TensorStats)
_STATS_FIELDS = tuple(f.name for f in _STATS)
SAMPLE_STATS = ("mean", "p50", "p90", "max")  # NodeResult.over_samples, in this order
RUNTIME_COLUMNS = ("ref_precision", "ref_kernel", "target_precision", "target_kernel", "fused_with")
# Column -> dtype family: "string" (pandas' StringDtype, missing as <NA>), "float" (float64, missing as NaN),
# "int" (int64), "Int" (nullable Int64), "bool", "boolean" (nullable), "list" (Python lists), "object".
_KINDS: dict[str, str] = {
    "name": "string", "op_type": "string", "index": "int", "role": "string", "rank": "Int", "first": "bool",
    "diverged": "bool", "error": "float", "input_error": "float", "tolerance": "float", "over_tolerance": "float",
    "growth": "float", "local_error": "float", "amplification": "float", "impact": "float",
    **{f"samples_{k}": "float" for k in SAMPLE_STATS},
    "ref_nan": "int", "ref_inf": "int", "target_nan": "int", "target_inf": "int",
    "causes": "list", "shape": "list", "dtype": "list", "n_outputs": "int", "tensor_names": "list",
    "inputs": "list", "group": "list",
    **{f"out_{f.name}": ("object" if f.name == "shape" else "string" if f.type in ("str", str)
                         else "boolean" if f.type in ("bool", bool) else "Int" if f.type in ("int", int) else "float")
       for f in _STATS},
    "ref_precision": "string", "ref_kernel": "string", "target_precision": "string", "target_kernel": "string",
    "fused_with": "list",
}
DATAFRAME_COLUMNS = tuple(_KINDS)
_DTYPES = {"string": "string", "float": "float64", "int": "int64", "Int": "Int64", "bool": "bool",
           "boolean": "boolean"}


def to_dataframe(report: "Report") -> "pd.DataFrame":
    """One row per compared node, indexed by node key, in topological order: every figure the report shows.

    The index is the node key (``df.loc["block1/conv1"]``; friendly names repeat, keys do not). Columns
    (`DATAFRAME_COLUMNS`), each of one dtype whatever the report holds:

    * text, pandas' ``"string"`` dtype (missing values are ``<NA>``): ``name``, ``op_type``, ``role`` (source /
      amplifier / inherits / ok), ``out_dtype``, ``out_note``, and what the runtime graph says ran the node
      (``NodeResult.runtime``): ``ref_precision``, ``ref_kernel``, ``target_precision``, ``target_kernel``;
    * numbers, sortable: ``error``, ``input_error``, ``tolerance``, ``over_tolerance`` (error / tolerance),
      ``growth``, ``local_error`` (the node alone on the target, fed the reference's inputs),
      ``amplification``, ``impact`` (final-output error with only this node on the target),
      ``samples_mean``/``samples_p50``/``samples_p90``/``samples_max`` (error over many samples) as float64,
      ``NaN`` where the experiment did not run (``inf`` and ``nan`` errors stay as they are); ``index``
      (topological), ``n_outputs`` and the NaN/Inf counts summed over the outputs (``ref_nan``, ``ref_inf``,
      ``target_nan``, ``target_inf``) as int64; ``rank`` (culprit rank) as nullable ``Int64``, missing for
      nodes within tolerance; ``first`` (a first divergence) and ``diverged`` as bool;
    * ``out_<field>`` for every `TensorStats` field of the node's first output (``out_max_abs``, ``out_cosine``,
      ``out_sqnr_db``, ``out_mismatches``, ...): float64, nullable ``Int64`` counts, nullable ``boolean``,
      missing for a node without outputs; ``out_shape`` is a tuple (or None);
    * lists (a Python list in every row, empty when there is nothing): ``causes``, ``shape`` (one tuple per
      output), ``dtype`` (one per output), ``tensor_names``, ``inputs`` (producer keys), ``group`` (nodes measured
      only through this one: fused with it or folded in), ``fused_with`` (the other ops the target fused this
      node with). Filter on them with ``df[df.causes.map(len) > 0]`` or ``df.explode("causes")``.

    Examples
    --------
    >>> df = to_dataframe(report)                                   # doctest: +SKIP
    >>> df[df.diverged].sort_values("rank")[["name", "error", "local_error", "impact"]]  # doctest: +SKIP
    """
    try:
        import pandas as pd
    except ImportError as err:
        raise ImportError(
            "to_dataframe needs pandas, which is not installed: pip install bisect_ov[dataframe]"
        ) from err

    rows = [_row(n) for n in report.nodes]
    columns: dict[str, Any] = {}
    for col, kind in _KINDS.items():
        values = [r[col] for r in rows]
        if kind == "float":
            values = [math.nan if v is None else float(v) for v in values]
        if kind in _DTYPES:
            columns[col] = pd.array(values, dtype=_DTYPES[kind])
        else:  # lists and tuples: an object column, never a joined string
            columns[col] = pd.Series(values, dtype=object).array
    index = pd.Index(pd.array([n.key for n in report.nodes], dtype="string"), name="key")
    return pd.DataFrame(columns, index=index, columns=list(DATAFRAME_COLUMNS))


def _row(n: "NodeResult") -> dict[str, Any]:
    counts = n.nan_inf
    ratio = n.error / n.tolerance if n.tolerance else (math.inf if n.error else 0.0)
    row: dict[str, Any] = {
        "name": n.name, "op_type": n.op_type, "index": n.index, "role": n.role, "rank": n.rank,
        "first": bool(n.first), "diverged": n.diverged, "error": n.error, "input_error": n.input_error,
        "tolerance": n.tolerance, "over_tolerance": ratio, "growth": n.growth, "local_error": n.local_error,
        "amplification": n.amplification, "impact": n.impact,
        **{f"samples_{k}": (n.over_samples or {}).get(k) for k in SAMPLE_STATS},
        **counts,
        "causes": list(n.causes), "shape": [tuple(s.shape) if s.shape is not None else None for s in n.outputs],
        "dtype": [s.dtype for s in n.outputs], "n_outputs": len(n.outputs), "tensor_names": list(n.tensor_names),
        "inputs": list(n.inputs), "group": list(n.group or ()),
    }
    first = n.outputs[0] if n.outputs else None
    for f in _STATS_FIELDS:
        value = getattr(first, f) if first is not None else None
        row[f"out_{f}"] = tuple(value) if f == "shape" and value is not None else value
    rt = n.runtime or {}
    ref, target = rt.get("ref") or {}, rt.get("target") or {}
    row["ref_precision"] = ref.get("precision") or None
    row["ref_kernel"] = ref.get("kernel") or None
    row["target_precision"] = target.get("precision") or None
    row["target_kernel"] = target.get("kernel") or None
    row["fused_with"] = [f for f in (target.get("fused") or []) if f != n.name]
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
