"""A `Report` in other tools' formats: a pandas DataFrame, and node data for Google's Model Explorer.

pandas is optional (``pip install pandas``, or the ``dataframe`` extra) and imported inside `to_dataframe`; the Model Explorer
export needs the standard library, and onnx (a dependency) to key the data by an ONNX model's node ids. Assumes
Model Explorer matches node data by node id and that its ONNX adapter names nodes as onnx_ir's NameFixPass does
(checked against the ``model_explorer_onnx`` package in the tests).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
from typing import TYPE_CHECKING, Any

from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.core.errors import InputError
from bisect_ov.core.extras import install_hint
from bisect_ov.core.fileio import write_text_atomic

if TYPE_CHECKING:
    import pandas as pd

    from bisect_ov.report.report import NodeResult, Report

__all__ = [
    "to_dataframe", "to_model_explorer", "onnx_graph_id", "DATAFRAME_COLUMNS", "RUNTIME_COLUMNS", "SAMPLE_STATS",
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
    "diverged": "bool", "error": "float", "input_error": "float", "tolerance": "float", "times_tolerance": "float",
    "growth": "float", "local_error": "float", "amplification": "float", "impact": "float", "f16_headroom": "float",
    **{f"samples_{k}": "float" for k in SAMPLE_STATS}, "n_samples_over_tol": "Int",
    "ref_nan": "int", "ref_inf": "int", "target_nan": "int", "target_inf": "int",
    "causes": "list", "shape": "list", "dtype": "list", "n_outputs": "int", "tensor_names": "list",
    "inputs": "list", "group": "list", "inside_kernel": "string",
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
      amplifier / inherits / absorbed / internal / ok), ``inside_kernel`` (the target's fused kernel the node's
      tensor exists only inside, missing when the target stored it), ``out_dtype``, ``out_note``, and what the
      runtime graph says ran the node
      (``NodeResult.runtime``): ``ref_precision``, ``ref_kernel``, ``target_precision``, ``target_kernel``;
    * numbers, sortable: ``error``, ``input_error``, ``tolerance``, ``times_tolerance`` (error / tolerance, a ratio),
      ``growth``, ``local_error`` (the node alone on the target, fed the reference's inputs),
      ``amplification``, ``impact`` (final-output error with only this node on the target), ``f16_headroom``
      (powers of two the node's reference values stay below 65,504: under 1 within 2x of overflowing f16),
      ``samples_mean``/``samples_p50``/``samples_p90``/``samples_max`` (error over many samples) as float64,
      and ``n_samples_over_tol`` (a count: on how many samples the node is over its tolerance) as nullable ``Int64``,
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
            "to_dataframe needs pandas, which is not installed: " + install_hint("dataframe")
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
        "tolerance": n.tolerance, "times_tolerance": ratio, "growth": n.growth, "local_error": n.local_error,
        "amplification": n.amplification, "impact": n.impact, "f16_headroom": n.f16_headroom,
        **{f"samples_{k}": (n.over_samples or {}).get(k) for k in SAMPLE_STATS},
        "n_samples_over_tol": (n.over_samples or {}).get("over_tolerance"),
        **counts,
        "causes": list(n.causes), "shape": [tuple(s.shape) if s.shape is not None else None for s in n.outputs],
        "dtype": [s.dtype for s in n.outputs], "n_outputs": len(n.outputs), "tensor_names": list(n.tensor_names),
        "inputs": list(n.inputs), "group": list(n.group or ()), "inside_kernel": n.inside_kernel,
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
    report: "Report", path: str | os.PathLike | None = None, *, model: Any = None, graph_id: str | None = None
) -> dict[str, Any]:
    """Node data for Google's Model Explorer, to colour the model's graph by each node's error.

    Open the model in Model Explorer (an ONNX file through the ``model_explorer_onnx`` extension), then load
    this file with "Add per-node data", or start it with both::

        model-explorer model.onnx --extensions=model_explorer_onnx --node_data_paths=nodes.json

    The format is Model Explorer's node data (``GraphNodeData`` in its ``node_data_builder.py``). By default
    the single-graph form, which Model Explorer applies to the graph it shows whatever that graph's id::

        {
          "name": "bisect_ov log10(rel_l2), -2 = 1e-2: CPU/f32 -> CPU/bf16",
          "results": {"<node id>": {"value": -1.3, "bgColor": "#ffb74d"}, ...},
          "thresholds": [
            {"value": -1.5, "bgColor": "#81c784"},
            {"value": -0.5, "bgColor": "#ffb74d"},
            {"value": 99.0, "bgColor": "#e57373"}
          ]
        }

    With `graph_id`, the same data is keyed by it (``{"<graph id>": {...}}``, Model Explorer's
    ``ModelNodeData``), for a model of several graphs.

    * **keys**: Model Explorer matches results against node ids (the ONNX adapter never matches output tensor
      names). With `model`, the ONNX model the report was made from, the keys are that file's node ids as the
      ONNX adapter names them: each compared node is mapped back through its output tensor names (ONNX tensor
      names survive conversion to OpenVINO) to the ONNX node that produces them, so the node feeding a graph
      output (which OpenVINO renames after the output) and unnamed ONNX nodes are coloured too; ops OpenVINO
      split one ONNX node into count for that node, which shows the worst of them. Without `model`, the keys are
      the compared nodes' friendly names (an OpenVINO model's own names). Nodes not measured on their own
      (members of a fused group, ``NodeResult.group``) get no entry and stay uncoloured.
    * **value**: ``log10(error)`` under the report's metric, so ``-2`` means an error of 1e-2; the data's
      name, which Model Explorer shows with the values, says so. Exact matches (and
      errors below 1e-20) are `ME_ZERO_VALUE` (-20); infinite or NaN errors are `ME_NONFINITE_VALUE` (99).
    * **bgColor** per result: the node against its own tolerance: green within it, orange up to 10x over it, red
      beyond or non-finite (`ME_COLORS`). Model Explorer gives a result's own colour precedence over thresholds.
    * **thresholds**, sorted ascending, upper bounds in Model Explorer's sense (a value up to a threshold takes its
      colour): green up to ``log10(T)``, orange up to ``log10(10 T)``, red up to the non-finite sentinel, where
      ``T`` is the median of the nodes' tolerances. They give Model Explorer its legend.

    Parameters
    ----------
    report
        A `Report`.
    path
        Where to write the JSON (atomically); nothing is written when None.
    model
        The ONNX model the report was made from: a path to the ``.onnx`` file or an ``onnx.ModelProto``. None
        keys the data by friendly names.
    graph_id
        Key the data by this graph id (for an ONNX model the adapter uses its graph name,
        ``onnx.load(p).graph.name``: ``main_graph`` for PyTorch exports). None writes the single-graph form.

    Returns
    -------
    dict
        The JSON-ready data (only finite numbers).

    Raises
    ------
    InputError
        `model` is not a readable ONNX model.
    """
    ids = _onnx_node_ids(model) if model is not None else None
    results: dict[str, dict[str, Any]] = {}
    worst: dict[str, float] = {}
    for n in report.nodes:
        value = _me_value(n.error)
        entry = {"value": value, "bgColor": _me_color(n.error, n.tolerance)}
        keys = [n.name] if ids is None else ids.keys_of(n)
        for key in keys:
            if key and (key not in worst or value > worst[key]):  # a node two results map to shows the worse
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
    # The name is what Model Explorer shows over the values: it says they are logarithms.
    graph = {"name": f"bisect_ov log10({report.metric}), -2 = 1e-2: {report.ref.label} -> {report.target.label}",
             "results": results, "thresholds": thresholds}
    data = graph if graph_id is None else {graph_id: graph}
    if path is not None:
        _write_json_atomic(pathlib.Path(path), data)
    return data


class _OnnxIds:
    """The node ids Model Explorer's ONNX adapter gives an ONNX model's main graph, and a way to them.

    The adapter keeps each node's name, names an unnamed node ``node``, ``node_1``, ... and a repeated name
    ``a``, ``a_1``, ... in graph order (onnx_ir's NameFixPass, one counter per base name).
    """

    def __init__(self, graph: Any):
        used: set[str] = set()
        counter: dict[str, int] = {}
        self.by_tensor: dict[str, str] = {}
        self.ids: list[str] = []
        for node in graph.node:
            base = node.name or "node"
            new = base
            while new in used:
                counter[base] = counter.get(base, 0) + 1
                new = f"{base}_{counter[base]}"
            used.add(new)
            self.ids.append(new)
            for out in node.output:
                if out:
                    self.by_tensor.setdefault(out, new)
        self.names = {node.name: i for node, i in zip(graph.node, self.ids, strict=True) if node.name}
        self.graph_name = graph.name  # the adapter keeps an empty name as it is

    def keys_of(self, n: "NodeResult") -> list[str]:
        """The ids of the ONNX nodes a compared node stands for: producers of its tensors, else its name's node."""
        keys = [self.by_tensor[t] for t in n.tensor_names if t in self.by_tensor]
        if not keys and n.name in self.names:
            keys.append(self.names[n.name])
        if not keys:  # an op OpenVINO made from an ONNX node, named '<onnx node>/<part>'
            head = n.name
            while "/" in head and not keys:
                head = head.rsplit("/", 1)[0]
                if head in self.names:
                    keys.append(self.names[head])
        return list(dict.fromkeys(keys))


def _onnx_node_ids(model: Any) -> _OnnxIds:
    import onnx

    if isinstance(model, onnx.ModelProto):
        return _OnnxIds(model.graph)
    if not isinstance(model, (str, os.PathLike)):
        raise InputError(f"model must be the path of the ONNX file or an onnx.ModelProto; got {type(model).__name__}.")
    try:
        proto = onnx.load(os.fspath(model), load_external_data=False)
    except Exception as err:  # onnx raises DecodeError, OSError, ValueError... for what is not a model
        raise InputError(f"Cannot read '{os.fspath(model)}' as an ONNX model: {err}. Pass the .onnx file the "
                         "report was made from.") from err
    return _OnnxIds(proto.graph)


def onnx_graph_id(model: Any) -> str:
    """The id Model Explorer's ONNX adapter gives an ONNX model's main graph: its graph name (which may be empty)."""
    return _onnx_node_ids(model).graph_name


def _write_json_atomic(path: pathlib.Path, data: Any) -> pathlib.Path:
    return write_text_atomic(path, json.dumps(data, indent=1, allow_nan=False))
