"""Result records: what a run found, as frozen dataclasses of statistics (no tensors, no device handles).

These are the records the report layer shows and saves: what a side ran with (`DeviceInfo`), the verified
fix and the other remedies (`Fix`, `ScaleFactor`, `Clamp`, `KernelSetting`, kept in `bisect_ov.core.remedies`),
the shortest delegated range (`Delegation`), one point of the contribution curve
(`CurvePoint`), the fidelity check (`Fidelity`), the target-against-itself noise floor (`Noise`), the
summary of many samples (`SamplesSummary`), one reason a node diverged (`Cause`), and the run's settings and
costs: the tolerance model (`ToleranceInfo`), the resolved options (`RunOptions`), each input fed
(`InputInfo`) and what each pipeline stage cost (`StageCost`).

Assumptions: this module sits at the bottom of the layering and imports only the standard library, so
reading a saved report (`bisect_ov.report`) never loads OpenVINO. Records are turned into JSON and back by
`bisect_ov.core.codec`, driven by their fields; a field's type annotation is what the codec checks on reading.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

# The remedies' records live by themselves; they are results like the others, and read from here too.
from bisect_ov.core.remedies import Clamp, Fix, KernelSetting, RemedyCost, ScaleFactor

__all__ = ["DeviceInfo", "Fix", "ScaleFactor", "KernelSetting", "Clamp", "RemedyCost", "Delegation", "CurvePoint",
           "LayerSensitivity", "Fidelity", "Noise", "SamplesSummary",
           "Step", "Cause", "CAUSE_KINDS", "ToleranceFields", "ToleranceInfo", "RunOptions", "InputInfo", "StageCost", "FrameworkMatch",
           "Truth", "Repro"]

# What a `Cause` can say. Observations (any role): "nonfinite" (NaN/Inf appeared on the target), "f16_limit",
# "int_limit" (values at a type's limits), "kernel_difference" (the sides ran different kernels),
# "foreign_inputs" (a twin's extra ops feed the node), "exact" (an integer-exact result checked), "note" (anything
# else, as a shape mismatch). Diagnoses (sources and amplifiers): "overflow", "underflow", "cancellation",
# "long_reduction", "over_tolerance" (none of those: how far over its tolerance it is), "compressed_weights" (the
# model stores the op's weights in f16 and another framework computes with the original ones), "concentrated" (a
# few elements far off), "constant_range" (a constant input past the target precision's range),
# "quantized_activations" (the target's plugin quantizes the activations of a product over compressed weights).
CAUSE_KINDS = ("nonfinite", "f16_limit", "int_limit", "kernel_difference", "foreign_inputs", "exact", "note",
               "overflow", "underflow", "cancellation", "long_reduction", "over_tolerance", "compressed_weights",
               "concentrated", "constant_range", "quantized_activations")


@dataclass(frozen=True)
class DeviceInfo:
    """What one side ran on, as read back after compiling."""

    name: str
    device: str
    full_name: str = ""
    precision: str = "unknown"
    requested_precision: str | None = None
    config: dict[str, str] = field(default_factory=dict)
    emulated: bool = False
    note: str = ""
    precision_counts: dict[str, int] = field(default_factory=dict)
    weights: str | None = None  # the precision weights are stored in, when lower than the arithmetic's
    # For AUTO, HETERO and MULTI: the devices the plugin really ran the model on (its EXECUTION_DEVICES).
    execution_devices: tuple[str, ...] = ()
    # The OpenVINO runtime that ran this side, version and build (``ov.get_version()``): for a recorded run,
    # the one it was recorded with. Empty in reports saved before it was recorded.
    openvino_version: str = ""
    # A side replayed from a recording (`bisect_ov.capture`), not run here.
    recorded: bool = False
    # The group size its plugin quantized the activations of compressed-weight matrix products to int8 in
    # (``DYNAMIC_QUANTIZATION_GROUP_SIZE``, `bisect_ov.run.compressed`); 0: it did not, or the model has no such weights.
    activation_groups: int = 0

    @property
    def label(self) -> str:
        """``CPU/f32``, ``CPU/f32 (weights f16)``, ``EMU:f16 (emulated)``: the precision after the name unless the
        name's suffix already says it (``CPU:f32``; ``CPU:bf16/f32`` when the CPU could not run what was asked)."""
        weights = f" (weights {self.weights})" if self.weights else ""
        suffix = self.name.rpartition(":")[2].split("-")[0].lower().replace("fp", "f") if ":" in self.name else ""
        shown = self.name if suffix == self.precision else f"{self.name}/{self.precision}"
        return f"{shown}{weights}" + (" (emulated)" if self.emulated else "")


@dataclass(frozen=True)
class Delegation:
    """The shortest node range [start, end] (topological positions among the candidates) whose delegation to
    the target alone reproduces `goal` (a share of `full_error`); `start` is None when there is no error."""

    full_error: float
    goal: float
    start: int | None
    end: int | None
    error: float
    runs: int
    first: str | None = None
    last: str | None = None
    nodes: int = 0


@dataclass(frozen=True)
class LayerSensitivity:
    """One quantized layer of a twin: its own (local) error and the final-output error when it alone is quantized."""

    name: str
    op_type: str
    quantization: str  # "int4 weights (i4, group 64, symmetric)", "int8 activations", ...
    local_error: float | None
    impact: float
    local_unit: str | None = None  # the fused group whose local error `local_error` is, when not the layer's own


@dataclass(frozen=True)
class CurvePoint:
    """Final-output error with the first `fraction` of the graph (`nodes` nodes) on the target."""

    fraction: float
    nodes: int
    error: float


@dataclass(frozen=True)
class Fidelity:
    """Did exposing taps change the final-output error? The worst ratio of instrumented to plain error."""

    plain_error: float
    tapped_error: float
    ratio: float
    warning: str = ""
    # When the ratio is out of range, what the verdict rests on instead: `outcome` "localized_by_partitions"
    # (runs that expose nothing named `node`, the last node of the shortest prefix of the graph whose run on the
    # target, the rest on the reference, reaches half the full final-output error: `prefix_error`, against
    # `before_error` up to the node before, in `partitioned_runs` runs) or "unfaithful" (no node can be named:
    # `reason` says why); "" when the taps were faithful.
    outcome: str = ""
    node: str | None = None
    group: tuple[str, ...] = ()  # the nodes the target fused with `node` (its runtime graph)
    prefix_error: float | None = None
    before_error: float | None = None
    full_error: float | None = None
    partitioned_runs: int = 0
    reason: str = ""
    # True: `prefix_error` and `before_error` are the worst error of the tensors the prefix, run alone on the
    # target, hands on, against the reference's values of them (a reference that runs only whole models).
    cut_compared: bool = False

    def partition_finding(self, fmt: Callable[[float], str] = "{:.2e}".format, node: str = "it") -> str:
        """What the partitioned runs of "localized_by_partitions" found, saying `node` of the node they name."""
        at, before = fmt(self.prefix_error or 0.0), fmt(self.before_error or 0.0)
        if self.cut_compared:
            return (f"the graph up to {node}, alone on the target, hands on tensors off the reference's by {at}, up to "
                    f"the node before by {before}")
        return (f"the final-output error is {at} with the graph up to {node} on the target, {before} up to the node "
                "before")

    @property
    def rejected(self) -> bool:
        """True when the tapped runs did not reproduce the plain run: their per-node errors are not evidence."""
        return bool(self.warning)


@dataclass(frozen=True)
class Noise:
    """The target against itself: largest relative L2 difference of the final outputs between two runs of one
    compile, and between two compiles; None where not measured (a second compile proves nothing for an emulated
    device; neither runs when a floor could not change the verdict)."""

    run_to_run: float | None = None
    compile_to_compile: float | None = None

    @property
    def floor(self) -> float:
        """The largest of the measured differences: errors below twice this are not the model's doing."""
        return max(self.run_to_run or 0.0, self.compile_to_compile or 0.0)

    def items(self) -> list[tuple[str, float]]:
        """The measured differences by name, in order (those measured only)."""
        pairs = [("run_to_run", self.run_to_run), ("compile_to_compile", self.compile_to_compile)]
        return [(k, v) for k, v in pairs if v is not None]


@dataclass(frozen=True)
class SamplesSummary:
    """Many samples run on both sides: final-output error per sample, ranking, classifier answers that changed.

    ``topk_misses`` counts the samples whose reference top-1 is not among the target's top `k`. ``count`` is
    the samples measured of the ``given``; ``missing`` lists those whose unit failed (their ``errors`` are NaN)
    and ``spread_missing`` those missing from the per-node distributions; ``failures`` says why. ``executor``
    names where the samples ran and ``workers`` how many processes ran units; ``batch_seconds`` (and
    ``spread_batch_seconds``, the per-node pass) is the wall time of each unit of samples, ``retried`` how many
    units ran again after a failure.
    """

    JSON_PROPERTIES = ("partial",)

    count: int
    errors: tuple[float, ...]
    ranking: tuple[int, ...]
    worst: int | None
    error_mean: float | None
    error_max: float | None
    classifier: bool = False
    class_outputs: tuple[str, ...] = ()
    top1_flips: int = 0
    top1_flipped: tuple[int, ...] = ()
    k: int = 5
    topk_misses: int = 0
    topk_missed: tuple[int, ...] = ()
    given: int | None = None
    missing: tuple[int, ...] = ()
    spread_missing: tuple[int, ...] = ()
    failures: tuple[str, ...] = ()
    executor: str = "in-process"
    retried: int = 0
    workers: int = 0
    batch_seconds: tuple[float, ...] = ()
    spread_batch_seconds: tuple[float, ...] = ()
    examined: int | None = None  # the sample examined node by node when not the worst (a prompt-length sweep)
    worst_file: str | None = None  # the worst sample's file name, when the samples are files

    @property
    def partial(self) -> bool:
        """True when some samples were not measured (``missing`` or ``spread_missing``): never silently short."""
        return bool(self.missing or self.spread_missing)


@dataclass(frozen=True)
class Step:
    """One generation step of a stateful LLM (step 0 is the prefill), both sides fed the reference's token.

    ``error``: final-output error with each side on its own KV cache; ``local_error``: with the target fed
    the reference's cache (the step's own computation); ``cache_error``: error of the cache the target
    inherited; ``token``/``target_token``: each side's next token (greedy), ``flipped`` when they differ.
    """

    step: int
    token: int
    target_token: int
    error: float
    local_error: float
    cache_error: float
    tolerance: float
    flipped: bool

    @property
    def diverged(self) -> bool:
        return self.error > self.tolerance


@dataclass(frozen=True)
class Repro:
    """A reproducer folder written by `Report.repro`: the piece of the model that shows a divergence alone.

    ``error`` is the piece's error on the target (against the reference's values, under the report's metric),
    ``local_error`` the node's local error in the run it reproduces (its error there when none was measured;
    the plain run's error of the final output it is when the taps were unfaithful), as ``held_to`` says,
    ``reproduces`` whether the piece's error is over ``tolerance`` and within ``factor`` of ``local_error``.
    ``nodes`` are the piece's nodes (the model's names), ``grown`` how many steps it grew upstream past the
    node's fused group to reproduce. ``anonymized``: its weights and names were replaced (and it still
    reproduced, with ``anonymized_error``); ``anonymize_tried`` without ``anonymized``: the replaced piece did
    not reproduce, so the folder holds the model's own weights.
    """

    folder: str
    node: str
    op_type: str
    nodes: tuple[str, ...]
    error: float
    local_error: float
    tolerance: float
    factor: float
    reproduces: bool
    grown: int = 0
    attempts: tuple[float, ...] = ()  # the piece's error at each size tried, smallest first
    anonymize_tried: bool = False
    anonymized: bool = False
    anonymized_error: float | None = None
    files: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    held_to: str = "local error"  # what `local_error` is: "local error", "error in the run", "error in the plain run"


@dataclass(frozen=True)
class Cause:
    """One reason a node diverged (or one thing its values show): what code tests (`kind`, one of
    `CAUSE_KINDS`), the magnitudes behind it (`numbers`, by name: ``input_max``, ``output_max``, ``ratio``,
    ``limit``, ...) and the sentence a person reads (`text`).

    Examples
    --------
    >>> c = Cause("cancellation", "cancellation: its inputs reach 1.1e+03 but ...", {"ratio": 302.0})
    >>> c.kind == "cancellation", str(c).startswith("cancellation")
    (True, True)
    """

    kind: str
    text: str
    numbers: dict[str, float] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.text


class _ByName:
    """Read access to a record's fields by name (``report.costs["plain"]["ref_compiles"]``), as the plain dicts
    of schema version 2 and earlier gave it: code written against them keeps working."""

    def __getitem__(self, name: str) -> Any:
        if name not in getattr(self, "__dataclass_fields__", {}):
            raise KeyError(name)
        return getattr(self, name)

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default


@dataclass(frozen=True)
class ToleranceFields:
    """The tolerance model's parameters, declared once: `bisect_ov.analysis.tolerance.Tolerance` computes with
    them and `ToleranceInfo` records them.

    ``value`` set: one fixed threshold. Otherwise ``factor`` x the unit roundoff of ``precision`` x
    (1 + log2(K)/4) for a node reducing over K values, at least ``floor``; ``per_node`` overrides by node name;
    a twin's quantized nodes (``quantization``: expected relative error by name) get ``quant_factor`` x that
    error; a node is a source only if it grows its inherited error by ``min_growth``.
    """

    precision: str | None = None
    factor: float = 8.0
    floor: float = 1e-6
    value: float | None = None
    per_node: dict[str, float] = field(default_factory=dict)
    min_growth: float = 2.0
    quantization: dict[str, float] = field(default_factory=dict)
    quant_factor: float = 4.0


@dataclass(frozen=True)
class ToleranceInfo(ToleranceFields, _ByName):
    """The tolerance model a run judged nodes by, as values (`ToleranceFields`)."""


@dataclass(frozen=True)
class RunOptions(_ByName):
    """The options a run resolved to (`bisect_ov.pipeline.options.BisectOptions`, as JSON values): a callable
    metric by its name, configs as strings, an executor by its name, a path as a string."""

    ref_config: dict[str, str] = field(default_factory=dict)
    target_config: dict[str, str] = field(default_factory=dict)
    strategy: str = "auto"
    metric: str = "rel_l2"
    tolerance: ToleranceInfo | float | None = None
    refine: bool = True
    max_tap_bytes: int | str | None = "auto"
    budget: str = "default"
    local: bool = True
    noise: bool = True
    baseline: bool = True
    impact: int = 3
    fix: bool = False
    fix_tolerance: float | None = None
    max_fix_slowdown: float | None = None
    delegation: bool = False
    curve: int = 0
    sensitivity: bool = False
    truth: str | None = None
    keep: tuple[str, ...] = ()
    patched_model: str | None = None
    seed: int = 0
    executor: str | None = None
    samples_per_batch: int = 16
    batch_retries: int = 2
    classifier_outputs: tuple[str, ...] | None = None
    prompt_length: int = 16
    prompt_lengths: tuple[int, ...] = ()
    steps: int = 0
    progress: bool | None = None


@dataclass(frozen=True)
class InputInfo(_ByName):
    """One input the model was fed: its parameter's name, the array's shape and numpy dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class StageCost(_ByName):
    """What one pipeline stage cost: wall time, and compiles and inferences on each side while it ran."""

    seconds: float = 0.0
    ref_compiles: int = 0
    target_compiles: int = 0
    ref_infers: int = 0
    target_infers: int = 0


@dataclass(frozen=True)
class FrameworkMatch:
    """How a framework side (PyTorch eager, ONNX Runtime) matched the OpenVINO model's nodes.

    ``matched`` nodes have a framework value compared with theirs; ``covered`` adds the nodes inside a matched
    aten call (a ``linear``'s MatMul before its bias Add), compared through the call's output. ``by_kind``
    counts the matched values by how they were found (``aten``: an aten call of the eager run, ``module``: a
    module's output from its forward hook, ``export``: a ``torch.export`` graph node, ``tensor``: an ONNX
    tensor name). ``unmatched`` lists every compute node neither matched nor covered, by name.
    """

    role: str  # "ref", "target" or "truth"
    framework: str  # "torch" or "onnxruntime"
    dtype: str  # "f32" or "f64"
    compute_nodes: int
    matched: int
    covered: int
    by_kind: dict[str, int] = field(default_factory=dict)
    unmatched: tuple[str, ...] = ()

    @property
    def coverage(self) -> float:
        """Share of the model's compute nodes matched or covered."""
        return self.covered / self.compute_nodes if self.compute_nodes else 0.0


@dataclass(frozen=True)
class Truth:
    """Both sides against a float64 run of the model (``truth="f64"``): who is right.

    ``outputs`` holds each final output's (reference error, target error) against float64; ``closer`` says
    which side is closer at the final outputs (``"ref"``, ``"target"``, ``"tie"``). ``imprecise_ref`` lists the
    diverged nodes where the reference itself is off float64 by more than the node's tolerance while the target
    stays within `multiplier` times the reference's own error of float64: there the disagreement is the
    reference's imprecision (a cancellation in f32), not a fault of the target. ``target_off`` lists the
    diverged nodes where the target is further from float64 than that.
    """

    side: str  # the float64 side's label ("torch/f64")
    multiplier: float
    outputs: dict[str, tuple[float, float]] = field(default_factory=dict)
    closer: str = "tie"
    imprecise_ref: tuple[str, ...] = ()
    target_off: tuple[str, ...] = ()
    compared: int = 0  # nodes with both sides' errors against float64
