"""Result records: what a run found, as frozen dataclasses of statistics (no tensors, no device handles).

These are the records the report layer shows and saves: what a side ran with (`DeviceInfo`), the verified
fix (`Fix`), the shortest delegated range (`Delegation`), one point of the contribution curve
(`CurvePoint`), the fidelity check (`Fidelity`), the target-against-itself noise floor (`Noise`) and the
summary of many samples (`SamplesSummary`).

Assumptions: this module sits at the bottom of the layering and imports only the standard library, so
reading a saved report (`bisect_ov.report`) never loads OpenVINO. Records are turned into JSON and back by
`bisect_ov.core.codec`, driven by their fields; a field's type annotation is what the codec checks on reading.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DeviceInfo", "Fix", "Delegation", "CurvePoint", "LayerSensitivity", "Fidelity", "Noise", "SamplesSummary",
           "Step"]


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

    @property
    def label(self) -> str:
        """``CPU/f32``, ``CPU/f32 (weights f16)``, ``EMU:f16/f16 (emulated)``."""
        weights = f" (weights {self.weights})" if self.weights else ""
        return f"{self.name}/{self.precision}{weights}" + (" (emulated)" if self.emulated else "")


@dataclass(frozen=True)
class Fix:
    """Nodes to keep in the reference precision, and the final error before and after, verified.

    ``patched_model`` is the path of the model saved with the fix marked for GPU/NPU plugins, when asked for.
    """

    JSON_PROPERTIES = ("solved",)  # derived, written for readers of the JSON; ignored when reading

    keep: tuple[str, ...]
    error_before: float
    error_after: float
    tolerance: float
    verified: bool
    runs: int
    tried: tuple[str, ...] = ()
    patched_model: str | None = None
    # The repeated-block roles the kept nodes make up ("<pattern> (kept of all)"), when several nodes share one.
    patterns: tuple[str, ...] = ()

    @property
    def solved(self) -> bool:
        return self.error_after <= self.tolerance


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


@dataclass(frozen=True)
class Noise:
    """The target against itself: largest relative L2 difference of the final outputs between two runs of one
    compile, and between two compiles (None when a second compile proves nothing, as for emulated devices)."""

    run_to_run: float
    compile_to_compile: float | None = None

    @property
    def floor(self) -> float:
        """The largest of the measured differences: errors below twice this are not the model's doing."""
        return max(self.run_to_run, self.compile_to_compile or 0.0)

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
    names where the samples ran and ``workers`` how many processes ran units; ``unit_seconds`` (and
    ``spread_unit_seconds``, the per-node pass) is the wall time of each unit of samples, ``retried`` how many
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
    unit_seconds: tuple[float, ...] = ()
    spread_unit_seconds: tuple[float, ...] = ()

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
