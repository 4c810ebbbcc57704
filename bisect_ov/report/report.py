"""The result of a bisect run: frozen records of statistics (no tensors), and their JSON form.

`Report` holds one `NodeResult` per compared node (topological order), the final outputs' errors, the first
divergence(s) and the culprit ranking, what each side ran with (`DeviceInfo`), the experiments' records
(`Fix`, `Delegation`, `CurvePoint`, `Fidelity`, `Noise`, `SamplesSummary` from `bisect_ov.core.records`), timings
and settings. `to_dict`/`from_dict` round-trip exactly through `bisect_ov.core.codec`, driven by the fields;
`save`/`load` write JSON with a ``schema_version``. Non-finite floats are written as the strings ``"Infinity"``,
``"-Infinity"`` and ``"NaN"`` (the protobuf JSON mapping's spelling) so that any JSON reader takes the file;
the spelling of older files (``"inf"``) and bare ``NaN`` tokens still load. The run's settings and costs are records too
(`ToleranceInfo`, `RunOptions`, `InputInfo`, `StageCost`), and so is each reason a node diverged (`Cause`, in
`NodeResult.diagnosis`; `NodeResult.causes` gives their sentences).

Assumptions: nothing here imports OpenVINO, so reading a saved report needs numpy only. Tensors kept with
``bisect(..., keep=[...])`` are passed at construction and never saved. Older schema versions are brought to
this one by `bisect_ov.report.upgrade` before decoding.
"""

from __future__ import annotations

import functools
import json
import math
import os
import pathlib
import re
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from bisect_ov.analysis.diagnosis import kernel_difference
from bisect_ov.core import codec
from bisect_ov.core.errors import InputError
from bisect_ov.core.fileio import refuse_overlaps, write_text_atomic
from bisect_ov.core.records import (
    Clamp,
    CurvePoint,
    Delegation,
    DeviceInfo,
    Fidelity,
    Fix,
    FrameworkMatch,
    InputInfo,
    KernelSetting,
    LayerSensitivity,
    Noise,
    Repro,
    RunOptions,
    SamplesSummary,
    ScaleFactor,
    StageCost,
    Step,
    ToleranceInfo,
    Truth,
)
from bisect_ov.report.numbers import fmt as _fmt
from bisect_ov.report.remedies import Remedy, rank
from bisect_ov.report.results import NodeResult, OutputResult
from bisect_ov.report.upgrade import SCHEMA_VERSION, upgrade
from bisect_ov.report.validate import check_references

__all__ = ["NodeResult", "OutputResult", "Report", "SCHEMA_VERSION"]


@dataclass(frozen=True)
class Report:
    """What `bisect` found. Read `first_divergence` and `culprits`; print `to_text()`.

    Examples
    --------
    >>> report = bisect(model, "CPU", "CPU:bf16")      # doctest: +SKIP
    >>> report.first_divergence.name                   # doctest: +SKIP
    'inorm/sub'
    >>> report.save("report.json"); Report.load("report.json") == report  # doctest: +SKIP
    True
    """

    model: str
    ref: DeviceInfo
    target: DeviceInfo
    nodes: tuple[NodeResult, ...]
    outputs: tuple[OutputResult, ...]
    metric: str
    tolerance: ToleranceInfo
    first_keys: tuple[str, ...] = field(default=(), metadata={"json": "first_divergence"})
    ranking: tuple[str, ...] = ()
    model_hash: str = ""
    target_model: str | None = None
    unmatched: dict[str, list[str]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    compiles: dict[str, int] = field(default_factory=dict)
    # Per pipeline stage (open, plain, measure, score, experiments, ...), in the order they ran.
    costs: dict[str, StageCost] = field(default_factory=dict)
    # The options the run resolved to (what could not run was switched off; see the notes); None in reports
    # saved before the options were recorded.
    options: RunOptions | None = None
    strategy: str = "full"
    inputs: tuple[InputInfo, ...] = ()
    openvino_version: str = ""
    notes: tuple[str, ...] = ()
    fidelity: Fidelity | None = None
    noise: Noise | None = None
    fix: Fix | None = None
    # With fix=True against an f16 target that overflows: the smallest activation scale factor that solves it.
    scale_factor: ScaleFactor | None = None
    # With fix=True against an f16 target that diverges: clamps after the nodes whose values leave f16's range.
    clamp: Clamp | None = None
    # Against an f32 target with generated kernels (the CPU's snippets) whose outputs diverge: the untouched model
    # compiled without them (SNIPPETS_MODE=DISABLE), run whole.
    kernel_setting: KernelSetting | None = None
    delegation: Delegation | None = None
    curve: tuple[CurvePoint, ...] = ()
    samples: SamplesSummary | None = None
    # Share of the model's compute nodes compared, directly or inside a fused group the target ran as one kernel.
    coverage: float | None = None
    # A quantized twin's layers, the most harmful first (bisect(..., sensitivity=True)).
    sensitivity: tuple[LayerSensitivity, ...] = ()
    # Generation steps of a stateful LLM (`bisect(..., steps=N)`): step 0 is the prefill.
    steps: tuple[Step, ...] = ()
    examined_step: int | None = None  # the step whose inputs the node results are measured on
    # Framework sides (PyTorch eager, ONNX Runtime): what each matched of the model, and what it did not.
    frameworks: tuple[FrameworkMatch, ...] = ()
    # Both sides against a float64 run (truth="f64"): who is right.
    truth: Truth | None = None
    schema_version: int = SCHEMA_VERSION
    # (reference, target) arrays by node key, from bisect(..., keep=[...]): in memory only, never saved.
    kept_tensors: Mapping[str, tuple[Any, Any]] = field(default_factory=dict, compare=False, repr=False,
                                                         metadata={"json": False})
    # What `repro` needs of the run (a `bisect_ov.repro.ReproSource`): in memory only; None when loaded from JSON.
    repro_source: Any = field(default=None, compare=False, repr=False, metadata={"json": False})
    # The files the run read, as (what, path) (the model, its weights, the inputs, a replayed capture): in memory
    # only; `save`, `save_html` and `to_model_explorer` refuse to write over them, as the command line does.
    reads: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False, metadata={"json": False})

    # ----- questions a user asks ----------------------------------------------------------------------
    @property
    def diverges(self) -> bool:
        """True when any node, final output or generation step is over its tolerance."""
        return bool(self.ranking) or any(o.diverged for o in self.outputs) or any(s.diverged for s in self.steps)

    def ignored_scope(self) -> list[str]:
        """The fix's nodes as ``nncf.IgnoredScope(names=...)`` takes them: the model's op names.

        Quantizing the model again with this scope keeps those layers in higher precision; the fix's
        ``error_after`` is what the partitioned run measured with exactly those layers left unquantized.
        Empty when no fix was searched (``fix=True``) or none was needed.

        Examples
        --------
        >>> import nncf                                                        # doctest: +SKIP
        >>> nncf.compress_weights(model, ..., ignored_scope=nncf.IgnoredScope(names=report.ignored_scope()))  # doctest: +SKIP
        """
        if self.fix is None:
            return []
        index = self._index()
        # Keys are friendly names; a repeated name gets a generated ``#<n>`` suffix, which NNCF does not know.
        return [index[k].name if k in index else re.sub(r"#\d+$", "", k) for k in self.fix.on_reference]

    @property
    def openvino_versions(self) -> dict[str, str]:
        """The OpenVINO version and build each side ran: ``{"reference": ..., "target": ...}`` when they differ,
        else ``{"both": ...}`` (empty when the report does not say)."""
        ref, target = self.ref.openvino_version, self.target.openvino_version
        if ref and target and ref != target:
            return {"reference": ref, "target": target}
        one = ref or target or self.openvino_version
        return {"both": one} if one else {}

    @property
    def f16_target(self) -> bool:
        """Whether the target ran f16 (real or emulated): then each node's `NodeResult.f16_headroom` says how close
        its values come to overflowing, and the report lists the closest (`headroom`)."""
        return self.target.precision == "f16"

    def headroom(self, below: float | None = None) -> list[NodeResult]:
        """The compared nodes with floating outputs, the least f16 headroom first (those that cross the f16 range
        and those within 2x of it come first, even when every output stays finite: a norm can hide an
        overflow); with `below`, only those whose headroom is under it (``report.headroom(1.0)``: within 2x).

        Examples
        --------
        >>> [(n.name, round(n.f16_headroom, 1)) for n in report.headroom(1.0)]   # doctest: +SKIP
        [('encoder.block.1.layer.1.DenseReluDense.wo', -0.6), ...]
        """
        nodes = [n for n in self.nodes if not math.isnan(n.f16_headroom)]
        if below is not None:
            nodes = [n for n in nodes if n.f16_headroom < below]
        return sorted(nodes, key=lambda n: (n.f16_headroom, n.index))

    def remedies(self) -> list[Remedy]:
        """The remedies the fix search tried (scale factor, clamps, f32 island), those that solve first, then by
        measured latency; `Remedy.too_slow` past ``max_fix_slowdown`` (`bisect_ov.report.remedies`)."""
        return rank(self)

    @property
    def first_divergences(self) -> tuple[NodeResult, ...]:
        """Every node where error starts (several when independent branches start diverging)."""
        return tuple(self.node(k) for k in self.first_keys)

    @property
    def first_divergence(self) -> NodeResult | None:
        """The earliest node where error starts; None when nothing diverges."""
        firsts = self.first_divergences
        return min(firsts, key=lambda n: n.index) if firsts else None

    @property
    def culprits(self) -> list[NodeResult]:
        """Diverged nodes, ranked: first divergences, other sources and amplifiers, then those that inherit."""
        return [self.node(k) for k in self.ranking]

    def node(self, name: str | int) -> NodeResult:
        """A compared node by key, friendly name, the label the report prints, output tensor name, topological
        index, or a name prefix as `nodes_in` takes it (``model.layers.3.self_attn``, ``block1``: the node under
        it furthest over its tolerance)."""
        index = self._index()
        if isinstance(name, int):
            for n in self.nodes:
                if n.index == name:
                    return n
            raise InputError(f"No compared node has topological index {name}.")
        if isinstance(name, str) and name.startswith("#") and name[1:].isdigit():  # an index as the text prints it
            return self.node(int(name[1:]))
        if name in index:
            shared = [n for n in self.nodes if n.name == name] if index[name].name == name else []
            if len(shared) > 1:  # the model gives several ops this name: which one is not for us to guess
                listed = ", ".join(f"'{n.label}' ({n.op_type}, #{n.index})" for n in shared[:6])
                raise InputError(f"{len(shared)} compared nodes are named '{name}': {listed}"
                                 f"{f' and {len(shared) - 6} more' if len(shared) > 6 else ''}. Give one's label with its number "
                                 f"('{shared[1].label}') or its index ('#{shared[0].index}').")
            return index[name]
        for n in self.nodes:
            if name in n.tensor_names:
                return n
        by_module = self.nodes_in(name)
        if by_module:
            return max(by_module, key=lambda n: (n.error / n.tolerance if n.tolerance else n.error, -n.index))
        holders = [n.name for n in self.nodes if name in n.group]
        if holders:
            raise InputError(
                f"'{name}' was not measured on its own: the target fused it into the kernel that ends at "
                f"'{holders[0]}'. Run with strategy='full' to measure every node."
            )
        close = [n.name for n in self.nodes if name.lower() in n.name.lower()][:8]
        raise InputError(f"No compared node named '{name}'." + (f" Similar: {close}." if close else ""))

    def nodes_in(self, prefix: str) -> list[NodeResult]:
        """Compared nodes under a name prefix, in topological order: a PyTorch module path
        (``model.layers.3.self_attn``, from traced op names) or any name's leading part up to a ``/`` or ``.``
        (``inorm`` for ``inorm/sub``, ``/layer1`` or ``layer1`` for ONNX's ``/layer1/conv/Conv``)."""
        from bisect_ov.analysis.names import under

        return [n for n in self.nodes if under(n.name, prefix)]

    def by_layer(self) -> dict[str, list[NodeResult]]:
        """Culprits grouped by the repeated block (``model.layers.3``), else their PyTorch module path (``model.norm``),
        else their name's pattern."""
        from bisect_ov.analysis.names import layer_of, parse_name, pattern

        groups: dict[str, list[NodeResult]] = {}
        for n in self.culprits:
            parsed = parse_name(n.name)  # outside the repeated blocks, a PyTorch module by its path (model.norm)
            groups.setdefault(layer_of(n.name) or (parsed.module if parsed is not None and parsed.module else None)
                              or pattern(n.name), []).append(n)
        return groups

    def __iter__(self) -> Iterator[NodeResult]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)

    def _index(self) -> dict[str, NodeResult]:
        return self._by_name

    @functools.cached_property
    def _by_name(self) -> dict[str, NodeResult]:
        """Nodes by key, then by friendly name: a cache of `nodes`, not state (equality ignores it)."""
        index = {n.key: n for n in self.nodes}
        for n in self.nodes:
            index.setdefault(n.name, n)
        for n in self.nodes:  # the name as the report prints it (module path and operation)
            index.setdefault(n.label, n)
        return index

    # ----- rendering ----------------------------------------------------------------------------------
    def __repr__(self) -> str:
        from bisect_ov.report.text import printable  # names from the model may hold terminal escapes

        head = f"Report({self.ref.label} -> {self.target.label}, {len(self.nodes)} node{'s' * (len(self.nodes) != 1)}, "
        first = self.first_divergence
        if first is not None:
            return printable(head + f"first divergence '{first.name}' {self.metric}={_fmt(first.error)})")
        if self.diverges:
            worst = max(self.outputs, key=lambda o: o.error, default=None)
            return printable(head + f"diverges without a single source; worst output "
                             f"{self.metric}={_fmt(worst.error if worst else math.nan)})")
        return printable(head + "no divergence)")

    def to_text(self, top: int = 10, width: int = 120, *, costs: bool = False) -> str:
        """The report as a terminal-readable page: verdict, final outputs, ranked culprits, run facts (the run's
        cost in one line; `costs`: its timings, compiles and cost per stage)."""
        from bisect_ov.report.text import render_text

        return render_text(self, top=top, width=width, costs=costs)

    def _repr_html_(self) -> str:
        from bisect_ov.report.html import render_fragment

        return render_fragment(self)

    def save_html(self, path: str | os.PathLike, **kwargs: Any) -> pathlib.Path:
        """Write a standalone HTML page (one file, no network, plots embedded when matplotlib is installed)."""
        from bisect_ov.report.html import save_html

        self._refuse_reads("the HTML page", path)
        return save_html(self, path, **kwargs)

    def to_dataframe(self):
        """One row per compared node with every metric and the runtime info (needs pandas)."""
        from bisect_ov.report.export import to_dataframe

        return to_dataframe(self)

    def to_model_explorer(self, path: str | os.PathLike | None = None, **kwargs: Any) -> dict:
        """Node data for Google Model Explorer: per-node errors keyed by node id (pass model= for an ONNX file)."""
        from bisect_ov.report.export import to_model_explorer

        self._refuse_reads("the node data", path)
        return to_model_explorer(self, path, **kwargs)

    def plot_errors(self, ax=None):
        """Error along the topological order, with tolerances and culprits marked (needs matplotlib)."""
        from bisect_ov.report.plots import plot_errors

        return plot_errors(self, ax)

    def plot_headroom(self, ax=None):
        """Each node's f16 headroom along the topological order, the nodes within 2x of 65,504 marked (needs
        matplotlib)."""
        from bisect_ov.report.plots import plot_headroom

        return plot_headroom(self, ax)

    def plot_neighbourhood(self, name: str, *, radius: int = 1):
        """The graph around a node, coloured by error (needs matplotlib)."""
        from bisect_ov.report.plots import plot_neighbourhood

        return plot_neighbourhood(self, name, radius=radius)

    # ----- exploring ----------------------------------------------------------------------------------
    def tensors(self, name: str | int):
        """The (reference, target) arrays of a node kept with ``bisect(..., keep=[name])``.

        Raises
        ------
        InputError
            When the node's tensors were not kept (the message says how to keep them).
        """
        node = self.node(name)
        kept = self.kept_tensors
        if node.key not in kept:
            raise InputError(
                f"The tensors of '{node.name}' were not kept. Run bisect(..., keep=[{node.name!r}]) (or "
                f"keep='culprits'); reports loaded from JSON hold statistics only."
            )
        return kept[node.key]

    def repro(self, folder: str | os.PathLike, *, node: str | None = None, anonymize: bool = False,
              overwrite: bool = False, **options: Any) -> Repro:
        """Write a reproducer of the first divergence (or `node`) into `folder`, verified: the smallest piece of
        the model that still shows it, with a ``run.py`` needing only OpenVINO and numpy (docs/repro.md).
        ``anonymize=True`` replaces its weights and names, kept only if it still reproduces; options:
        ``factor`` (2), ``max_nodes`` (48), ``seed``, each checked by name. `overwrite` replaces only an earlier
        reproducer (a folder holding its ``repro.json``), keeping the other files in it; the folder is built
        beside the destination and renamed into place. Returns the `Repro` record.

        Raises
        ------
        InputError
            A report loaded from JSON (statistics only: re-run), nothing diverging, an option of the wrong type,
            a non-empty folder without `overwrite` (with it, one that holds no earlier reproducer), an unwritable
            one, a side run.py cannot rebuild, no piece that reproduces.
        """
        if self.repro_source is None:
            raise InputError(
                "This report holds statistics only (loaded from JSON, or built by hand), not the model, devices and "
                "tensors a reproducer needs. Re-run the comparison and call repro on the report it returns: "
                f"bisect(model, ref={self.ref.name!r}, target={self.target.name!r}, ...).repro(folder), or "
                f"bisect-ov repro MODEL --ref {self.ref.name} --target {self.target.name} -o FOLDER.")
        return self.repro_source.write(self, folder, node=node, anonymize=anonymize, overwrite=overwrite, **options)

    def plot_values(self, name: str | int):
        """Reference against target values of a kept node: scatter and histogram of the difference."""
        from bisect_ov.report.plots import plot_values

        ref, target = self.tensors(name)
        return plot_values(ref, target, title=self.node(name).name)

    def inputs_of(self, name: str | int) -> list[NodeResult]:
        """The compared nodes that feed `name` (their errors are what it inherited)."""
        node = self.node(name)
        index = self._index()
        return [index[k] for k in node.inputs if k in index]

    @property
    def same_precision(self) -> bool:
        """Whether both sides ran one precision (f32 against f32): then what differs is how they compute, not in
        what."""
        return self.ref.precision == self.target.precision

    @property
    def kernel_differences(self) -> list[NodeResult]:
        """Nodes that ran differently on the two sides although nothing asked for it (see `kernel_difference`)."""
        return [n for n in self.nodes if kernel_difference(n.runtime, self.same_precision)]

    def consumers_of(self, name: str | int) -> list[NodeResult]:
        """The compared nodes that read `name`."""
        key = self.node(name).key
        return [n for n in self.nodes if key in n.inputs]

    # ----- serialisation ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (`bisect_ov.core.codec`): non-finite floats as ``"Infinity"``/``"-Infinity"``/``"NaN"``."""
        return codec.to_dict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Report":
        """The report of `to_dict` (or of an older schema version's JSON).

        Raises
        ------
        InputError
            A schema version that is not a positive integer or is newer than this bisect_ov reads; a missing
            key or a value of the wrong type (the message names the field); two nodes with one key, or a first
            divergence, ranked culprit or fix that names no node of ``nodes``.
        """
        if not isinstance(d, Mapping):
            raise InputError(f"A report is a JSON object; got {type(d).__name__}.")
        version = d.get("schema_version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise InputError(
                f"The report's schema version is {version!r}; it must be a positive integer (this bisect_ov writes "
                f"{SCHEMA_VERSION}). The file is not a report saved by bisect_ov, or it was edited."
            )
        if version > SCHEMA_VERSION:
            raise InputError(
                f"Report schema version {version} is not supported by this bisect_ov (reads up to {SCHEMA_VERSION}). "
                "Upgrade bisect_ov to read it."
            )
        return check_references(codec.from_dict(cls, upgrade(d, version), where="report"))

    def save(self, path: str | os.PathLike) -> pathlib.Path:
        """Write the report as JSON (atomically: a temporary file renamed into place; the umask applies).

        Raises
        ------
        InputError
            The path is a file the run read (the model, its weights, an input), the folder is missing or not
            writable, the path is a folder, or the disk is full; an existing file is then left as it was.
        """
        self._refuse_reads("the report", path)
        return write_text_atomic(path, self.to_json())

    def _refuse_reads(self, what: str, path: str | os.PathLike | None) -> None:
        """Refuse to write `what` over a file the run read (`reads`)."""
        if path is not None:
            refuse_overlaps([(what, path)], self.reads)

    def to_json(self) -> str:
        """The text `save` writes: strict JSON (non-finite numbers as strings, see `to_dict`)."""
        return json.dumps(self.to_dict(), indent=1, allow_nan=False)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Report":
        """Read a report written by `save`.

        Raises
        ------
        InputError
            Missing or unreadable file, not JSON, not a report, or a malformed one (see `from_dict`).
        """
        path = pathlib.Path(path)
        if path.is_dir():
            raise InputError(f"'{path}' is a folder: pass the report's JSON file (saved by report.save or --json).")
        if not path.is_file():
            raise InputError(f"Report file not found: '{path}'.")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except RecursionError as err:
            raise InputError(f"'{path}' is nested too deeply to be a bisect_ov JSON report.") from err
        except (OSError, ValueError) as err:
            raise InputError(f"'{path}' is not a readable bisect_ov JSON report: {err}") from err
        if not isinstance(data, dict) or "nodes" not in data:
            raise InputError(f"'{path}' is JSON but not a bisect_ov report (no 'nodes').")
        try:
            return cls.from_dict(data)
        except InputError as err:
            raise InputError(f"'{path}' is not a valid bisect_ov report: {err}") from err

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Report):
            return NotImplemented
        return self.to_dict() == other.to_dict()  # encoded: NaN equals NaN, kept tensors are ignored

    __hash__ = None  # type: ignore[assignment]
