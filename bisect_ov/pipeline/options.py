"""Every knob of a `bisect()` run in one frozen record: its default, its doc, its check, its CLI flag.

`BisectOptions` is read by the API (`bisect(**keywords)` builds one), by the CLI (its flags are generated from
the fields here, so an option is added in one place) and by the report (which records the resolved options).
`BisectOptions.resolve` decides once what can run on a given pair of sides (recorded runs cannot run pieces
of the model) and returns the notes that say what was
switched off.

Assumes nothing about OpenVINO: options are plain values, checked at construction.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Iterable, Mapping, TypeGuard

from bisect_ov.analysis.metrics import METRICS, TensorStats
from bisect_ov.analysis.tolerance import Tolerance
from bisect_ov.core.errors import InputError
from bisect_ov.search.strategies import STRATEGIES

__all__ = ["BisectOptions", "STRATEGIES", "BUDGETS", "DEFAULT_MAX_TAP_BYTES", "AUTO_MIN_TAP_BYTES", "auto_tap_bytes"]

BUDGETS = ("default", "fast")
DEFAULT_MAX_TAP_BYTES = "auto"
AUTO_MIN_TAP_BYTES = 64 << 20


def auto_tap_bytes(weight_bytes: int) -> int:
    """The ``"auto"`` tap budget: half the model's weight bytes, at least `AUTO_MIN_TAP_BYTES` (64 MB).

    A plain job holds the weights about twice (the file mapped, the plugin's compiled copy); taps up to half
    of them, held by both sides, keep the default job near 1.5x of its memory, and a model whose tensors
    are larger than that (a long-sequence encoder, a small convolutional net at a high resolution) is
    measured segment by segment instead (`Session.measure_streamed`).
    """
    return max(AUTO_MIN_TAP_BYTES, int(weight_bytes) // 2)


def _opt(default: Any = None, doc: str = "", *, factory: Callable[[], Any] | None = None, cli: str | None = "auto",
         kind: type | None = None, metavar: str | None = None, cli_help: str | None = None) -> Any:
    """A dataclass field with its documentation and how the command line spells it (`cli` None: API only;
    `cli_help`: the flag's help where the doc does not read as one, e.g. for a ``--no-...`` flag)."""
    meta = {"doc": doc, "cli": cli, "kind": kind, "metavar": metavar, "cli_help": cli_help or doc}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class BisectOptions:
    """How a comparison runs. Every field is checked when the record is made (`InputError` on a bad value).

    Examples
    --------
    >>> BisectOptions(impact=0, fix=True).fix_tolerance is None
    True
    >>> BisectOptions(curve=-1)
    Traceback (most recent call last):
    ...
    bisect_ov.core.errors.InputError: curve must be an integer >= 0 (points of the contribution curve; 0 for none); got -1.
    """

    ref_config: Mapping[str, Any] = _opt(doc="compile properties for the reference", factory=dict, cli=None)
    target_config: Mapping[str, Any] = _opt(doc="compile properties for the target", factory=dict, cli=None)
    metric: str | Callable[[TensorStats], float] = _opt(
        "rel_l2", "error measure per tensor: a name in METRICS or a callable on TensorStats", kind=str,
        cli_help="error metric: rel_l2, max_rel, max_abs, mean_abs, cosine_distance, ...")
    tolerance: float | Tolerance | None = _opt(
        None, "None: precision-aware; a number: one threshold everywhere; or a Tolerance", kind=float, cli="--tolerance",
        cli_help="one error threshold for every node (default: precision-aware)")
    seed: int = _opt(0, "seed of the random inputs", kind=int)
    strategy: str = _opt("auto", "which tensors to expose: " + ", ".join(STRATEGIES), kind=str)
    budget: str = _opt("default", "default: every experiment asked for; fast: no local errors, no impact runs, fusion "
                       "groups not refined, no extra noise runs and, with many samples, no per-node pass over them "
                       "(about 2x the plain compile-and-run of both sides)", kind=str)
    refine: bool = _opt(True, "with fusion taps, re-measure the members of groups where error starts",
                        cli_help="keep fusion-group granularity (no re-measuring of the groups where error starts)")
    local: bool = _opt(True, "run each measured node alone on the target fed with reference inputs",
                       cli_help="skip running each node alone on the target fed with reference inputs")
    impact: int = _opt(3, "suspects whose final-output impact is measured by partitioned runs", kind=int, metavar="N")
    fix: bool = _opt(False, "search the smallest set of nodes to keep on the reference, verified", cli=None)
    fix_tolerance: float | None = _opt(None, "final-output error the fix must reach (None: each output's tolerance)",
                                       cli=None)
    delegation: bool = _opt(False, "find the shortest node range whose delegation reproduces half the error")
    curve: int = _opt(0, "points of the error contribution curve (0 for none)", kind=int, metavar="N")
    sensitivity: bool = _opt(False, "with a quantized twin, rank its quantized layers by their local error and "
                             "their impact on the final outputs (one partitioned run per layer)")
    noise: bool = _opt(True, "run the target against itself to measure its noise floor",
                       cli_help="skip running the target against itself")
    patched_model: str | os.PathLike | None = _opt(
        None, "with fix, save the model marked for GPU/NPU to keep the fix in f32 (IR .xml)", cli=None)
    classifier_outputs: tuple[str, ...] | None = _opt(
        None, "outputs holding class scores whose top-1/top-5 answers are compared over samples "
        "(None: [batch, classes] outputs and logits)", cli=None)
    keep: tuple[str, ...] = _opt((), "node names whose tensors the report keeps ('culprits': the top five)",
                                 cli="--keep", kind=str, metavar="NAME")
    max_tap_bytes: int | str | None = _opt(
        DEFAULT_MAX_TAP_BYTES, "most bytes of exposed tensors per compile or segment ('auto': half the weights' "
        "bytes, at least 64 MB; None: no limit)", cli=None)
    progress: bool | None = _opt(None, "progress bars; None: when stderr is a terminal", cli=None)
    executor: Any = _opt(
        None, "where many samples run: None (this process), a concurrent.futures.Executor (Dask's "
        "Client.get_executor(), bisect_ov.samples.executors.RayExecutor, a process pool), 'processes:N', 'threads:N', "
        "'dask://HOST:PORT', 'ray' or 'ray://HOST:PORT'", kind=str, metavar="WHERE",
        cli_help="where many samples run: processes:N, threads:N, dask://HOST:PORT, ray or ray://HOST:PORT "
        "(default: here)")
    samples_per_unit: int = _opt(16, "samples per work unit when many samples run", kind=int, metavar="N")
    unit_retries: int = _opt(2, "times a failed unit of samples runs again before it is reported", cli=None)
    prompt_length: int = _opt(16, "tokens of the generated prompt for LLM inputs with a dynamic sequence length",
                              kind=int, metavar="N")
    steps: int = _opt(0, "decode steps after the prefill of a stateful LLM, each side on its own KV cache "
                      "(0: the prefill only)", kind=int, metavar="N")

    def __post_init__(self) -> None:
        for name in ("ref_config", "target_config"):
            value = getattr(self, name)
            if value is None:
                object.__setattr__(self, name, {})
            elif not isinstance(value, Mapping):
                raise InputError(f"{name} must be a dict of compile properties (name -> value); got {value!r}.")
            elif not all(isinstance(k, str) and k for k in value):
                raise InputError(f"{name}'s keys must be property names (strings such as 'INFERENCE_PRECISION_HINT'); "
                                 f"got {list(value)!r}.")
            else:
                object.__setattr__(self, name, dict(value))
        if isinstance(self.metric, str):
            if self.metric not in METRICS:
                raise InputError(f"Unknown metric '{self.metric}'. Available: {sorted(METRICS)}, or a callable on "
                                 "TensorStats.")
        elif not callable(self.metric):
            raise InputError(f"metric must be a metric name or a callable on TensorStats; got {self.metric!r}.")
        if self.tolerance is not None and not isinstance(self.tolerance, Tolerance):
            if not _number(self.tolerance) or not 0 <= self.tolerance < math.inf:
                raise InputError(f"tolerance must be None, a finite number >= 0 or a Tolerance; got {self.tolerance!r}.")
        if not _integer(self.seed) or not 0 <= self.seed < 2**32:
            raise InputError(f"seed must be an integer in [0, 2**32); got {self.seed!r}.")
        if self.budget not in BUDGETS:
            raise InputError(f"Unknown budget '{self.budget}'. Available: {list(BUDGETS)}.")
        if self.strategy not in STRATEGIES:
            raise InputError(f"Unknown strategy '{self.strategy}'. Available: {list(STRATEGIES)}.")
        for name in ("refine", "local", "fix", "delegation", "noise", "sensitivity"):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"{name} must be True or False; got {getattr(self, name)!r}.")
        if self.executor is not None and not isinstance(self.executor, str) and not callable(
                getattr(self.executor, "submit", None)):
            raise InputError("executor must be None, a concurrent.futures.Executor, 'processes:N', 'threads:N', "
                             f"'dask://HOST:PORT', 'ray' or 'ray://HOST:PORT'; got {self.executor!r}.")
        if not _integer(self.samples_per_unit) or self.samples_per_unit < 1:
            raise InputError(f"samples_per_unit must be an integer >= 1; got {self.samples_per_unit!r}.")
        if not _integer(self.unit_retries) or self.unit_retries < 0:
            raise InputError(f"unit_retries must be an integer >= 0; got {self.unit_retries!r}.")
        if self.progress is not None and not isinstance(self.progress, bool):
            raise InputError(f"progress must be True, False or None; got {self.progress!r}.")
        if not _integer(self.impact) or self.impact < 0:
            raise InputError(f"impact must be an integer >= 0 (suspects to measure; 0 for none); got {self.impact!r}.")
        if not _integer(self.prompt_length) or self.prompt_length < 1:
            raise InputError(f"prompt_length must be an integer >= 1 (tokens of the generated prompt); "
                             f"got {self.prompt_length!r}.")
        if not _integer(self.steps) or self.steps < 0:
            raise InputError(f"steps must be an integer >= 0 (decode steps after the prefill; 0 for none); "
                             f"got {self.steps!r}.")
        if not _integer(self.curve) or self.curve < 0:
            raise InputError(f"curve must be an integer >= 0 (points of the contribution curve; 0 for none); "
                             f"got {self.curve!r}.")
        if self.fix_tolerance is not None and (not _number(self.fix_tolerance)
                                               or not 0 <= self.fix_tolerance < math.inf):
            raise InputError(f"The fix tolerance must be a finite number >= 0; got {self.fix_tolerance!r}.")
        if self.max_tap_bytes is not None and self.max_tap_bytes != "auto" and (
                not _integer(self.max_tap_bytes) or self.max_tap_bytes <= 0):
            raise InputError(f"max_tap_bytes must be a positive integer, 'auto' or None (no limit); "
                             f"got {self.max_tap_bytes!r}.")
        keep = (self.keep,) if isinstance(self.keep, str) else self.keep
        try:
            keep = tuple(keep)
        except TypeError:
            raise InputError(f"keep must be a node name or a list of names; got {self.keep!r}.") from None
        if not all(isinstance(k, str) for k in keep):
            raise InputError(f"keep must hold node names (strings); got {list(keep)!r}.")
        object.__setattr__(self, "keep", keep)
        if self.classifier_outputs is not None:
            names = (self.classifier_outputs,) if isinstance(self.classifier_outputs, str) else self.classifier_outputs
            names = tuple(names) if isinstance(names, Iterable) else None
            if names is None or not all(isinstance(n, str) for n in names):
                raise InputError(f"classifier_outputs must be an output name or a list of output names; got "
                                 f"{self.classifier_outputs!r}.")
            object.__setattr__(self, "classifier_outputs", names)
        if self.patched_model is not None and not isinstance(self.patched_model, (str, os.PathLike)):
            raise InputError(f"patched_model must be a path ending in .xml; got {self.patched_model!r}.")
        if self.patched_model is not None and not os.fspath(self.patched_model).endswith(".xml"):
            raise InputError(f"patched_model must be an IR path ending in .xml; got '{os.fspath(self.patched_model)}'.")

    @classmethod
    def from_keywords(cls, **keywords: Any) -> "BisectOptions":
        """Options from `bisect()`'s keywords; ``fix`` may be a bool or a tolerance (a number), as it always was."""
        unknown = sorted(set(keywords) - {f.name for f in fields(cls)})
        if unknown:
            raise InputError(f"Unknown option(s) {unknown}. Available: {[f.name for f in fields(cls)]}.")
        fix = keywords.get("fix", False)
        if not isinstance(fix, bool):
            if not _number(fix):
                raise InputError(f"fix must be True, False or a tolerance (a number >= 0); got {fix!r}.")
            keywords["fix"], keywords["fix_tolerance"] = True, fix
        return cls(**keywords)

    @property
    def partitioned(self) -> bool:
        """True when some experiment needs partitioned (mixed-device) runs."""
        return bool(self.impact or self.fix or self.delegation or self.curve or self.sensitivity)

    def resolve(self, *, local_possible: bool, pieces_possible: bool, twin: bool) -> tuple["BisectOptions", tuple[str, ...]]:
        """The options that can run here, and notes for what was switched off.

        `local_possible`: the target can run pieces fed with the reference's values (not a recorded target,
        not a sampled side). `pieces_possible`: both sides can run pieces (partitioned runs). `twin`: the target
        runs another model (`target_model`): partitioned runs then take the target's segments from it
        (`bisect_ov.experiments.twin`); layer sensitivity needs one.
        """
        resolved = self
        notes: list[str] = []
        if self.budget == "fast":
            # What the fast budget leaves out; noise is read from the compiles made anyway (see Session.noise).
            # Without local errors, refining would re-measure every diverged group's members (one more compile
            # per side): the report names fusion groups instead.
            resolved = replace(resolved, local=False, impact=0, refine=False)
        if not local_possible and self.local:
            resolved = replace(resolved, local=False)
        if not twin and self.sensitivity:
            notes.append("Layer sensitivity ranks the quantized layers of a twin; it needs target_model.")
            resolved = replace(resolved, sensitivity=False)
        if not pieces_possible:
            resolved = replace(resolved, impact=0, fix=False, fix_tolerance=None, delegation=False, curve=0,
                               patched_model=None, sensitivity=False)
        return resolved, tuple(notes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values of every option (a callable metric by its name, configs as strings)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "metric" and callable(value):
                value = getattr(value, "__name__", "custom")
            elif isinstance(value, Tolerance):
                value = value.to_dict()
            elif isinstance(value, Mapping):
                value = {str(k): str(v) for k, v in value.items()}
            elif f.name == "executor" and value is not None and not isinstance(value, str):
                value = type(value).__name__
            elif isinstance(value, os.PathLike):
                value = os.fspath(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @property
    def metric_name(self) -> str:
        return self.metric if isinstance(self.metric, str) else getattr(self.metric, "__name__", "custom")

    def tolerance_model(self) -> Tolerance:
        """The `Tolerance` these options ask for, before the precision in play is known."""
        if self.tolerance is None:
            return Tolerance()
        if isinstance(self.tolerance, Tolerance):
            return self.tolerance
        return Tolerance(value=float(self.tolerance))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def _integer(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
