"""Every knob of a `bisect()` run in one frozen record, grouped by concern: each field's default, doc, check
and command-line flag are written once, on the field.

`BisectOptions` is read by the API (`bisect()`'s signature matches its fields, its docstring's option entries
are made from their docs by `bisect_ov.pipeline.api.documented`, and its keywords become one record), by the
CLI (its flags are generated from the fields, in argument groups named by `GROUPS`) and by the report (which
records the resolved options).
`BisectOptions.resolve` decides once what runs on a given pair of sides and budget and returns a
`ResolvedOptions` that stages read as is, with the notes that say what was switched off.

Assumes nothing about OpenVINO: options are plain values, checked at construction.
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Iterable, Mapping

from bisect_ov.analysis.metrics import METRICS, TensorStats
from bisect_ov.analysis.tolerance import Tolerance
from bisect_ov.core.checks import check_config, check_flag, check_seed, check_tap_bytes, is_integer, tap_bytes_of_mb
from bisect_ov.core.errors import InputError
from bisect_ov.samples.executors import check_executor
from bisect_ov.search.strategies import STRATEGIES, strategy_names

__all__ = ["BisectOptions", "ResolvedOptions", "Flag", "GROUPS", "KEYWORDS", "STRATEGIES", "BUDGETS",
           "DEFAULT_MAX_TAP_BYTES", "AUTO_MIN_TAP_BYTES", "MAX_CURVE_POINTS", "auto_tap_bytes", "key_value"]

PROMPT_LENGTH = 16  # the generated prompt's tokens by default

BUDGETS = ("default", "fast")
MAX_CURVE_POINTS = 1000  # each point is a partitioned run: more is a typo, not a curve
DEFAULT_MAX_TAP_BYTES = "auto"
AUTO_MIN_TAP_BYTES = 64 << 20
# The concerns options are grouped by (key -> title), in the order of the fields, of `bisect()`'s keywords
# and of the argument groups in ``bisect-ov --help``.
GROUPS = {
    "devices": "devices and compiling",
    "search": "what to tap and search",
    "experiments": "which experiments run",
    "samples": "inputs, samples and executors",
    "generation": "LLM prompts and generation",
    "output": "output",
}


def auto_tap_bytes(weight_bytes: int) -> int:
    """The ``"auto"`` tap budget: half the model's weight bytes, at least `AUTO_MIN_TAP_BYTES` (64 MB).

    A plain job holds the weights about twice (the file mapped, the plugin's compiled copy); taps up to half
    of them, held by both sides, keep the default job near 1.5x of its memory, and a model whose tensors
    are larger than that (a long-sequence encoder, a small convolutional net at a high resolution) is
    measured segment by segment instead (`bisect_ov.engine.streamed`).
    """
    return max(AUTO_MIN_TAP_BYTES, int(weight_bytes) // 2)


@dataclass(frozen=True)
class Flag:
    """A command-line spelling the generated one does not fit: the flag's names, its `argparse` keywords, and
    how the parsed value becomes the option's value (`to_option`; None: as parsed)."""

    names: tuple[str, ...]
    spec: Mapping[str, Any] = field(default_factory=dict)
    to_option: Callable[[Any], Any] | None = None


def key_value(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` from the command line, as a pair (the type of ``--ref-config`` and ``--target-config``)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got '{text}'")
    return key.strip(), value.strip()


def _bytes_of_mb(mb: float | None) -> int | str | None:
    return "auto" if mb is None else tap_bytes_of_mb("--max-tap-mb", mb)


# ----- checks: each takes the option's name and value and returns the value to keep (or raises InputError) -----
Check = Callable[[str, Any], Any]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def _at_least(low: int, hint: str = "") -> Check:
    def check(name: str, value: Any) -> int:
        if not is_integer(value) or value < low:
            raise InputError(f"{name} must be an integer >= {low}{hint}; got {value!r}.")
        return value
    return check


def _between(low: int, high: int, hint: str = "") -> Check:
    def check(name: str, value: Any) -> int:
        if not is_integer(value) or not low <= value <= high:
            raise InputError(f"{name} must be an integer from {low} to {high}{hint}; got {value!r}.")
        return value
    return check


def _one_of(choices: Iterable[str]) -> Check:
    allowed = tuple(choices)

    def check(name: str, value: Any) -> str:
        if not isinstance(value, str) or value not in allowed:
            raise InputError(f"Unknown {name} '{value}'. Available: {list(allowed)}.")
        return value
    return check


def _strategy(name: str, value: Any) -> str:
    """A strategy name of the live registry (`register_strategy` may add one after this module is imported)."""
    return _one_of(strategy_names())(name, value)


def _metric(name: str, value: Any) -> Any:
    if isinstance(value, str):
        if value not in METRICS:
            raise InputError(f"Unknown metric '{value}'. Available: {sorted(METRICS)}, or a callable on TensorStats.")
    elif not callable(value):
        raise InputError(f"metric must be a metric name or a callable on TensorStats; got {value!r}.")
    return value


def _tolerance(name: str, value: Any) -> Any:
    if value is not None and not isinstance(value, Tolerance) and (not _number(value) or not 0 <= value < math.inf):
        raise InputError(f"tolerance must be None, a finite number >= 0 or a Tolerance; got {value!r}.")
    return value


def _truth(name: str, value: Any) -> Any:
    # A side object is checked where it is resolved (`bisect_ov.frameworks.resolve.truth_side`); names here.
    if value is None or value == "f64" or (not isinstance(value, str) and hasattr(value, "compile")):
        return value
    if not isinstance(value, str) and type(value).__module__.startswith("torch"):
        return value  # a module: PyTorch eager in float64 is asked for with Torch(module, dtype="f64")
    raise InputError(f"truth must be None, 'f64' or a framework side such as Torch(module, dtype='f64'); got {value!r}.")


def _fix_tolerance(name: str, value: Any) -> Any:
    if value is not None and (not _number(value) or not 0 <= value < math.inf):
        raise InputError(f"The fix tolerance must be a finite number >= 0; got {value!r}.")
    return value


def _slowdown(name: str, value: Any) -> Any:
    if value is not None and (not _number(value) or not 1 < value < math.inf):
        raise InputError(f"{name} must be a number above 1 (a remedy's latency over the untouched model's); "
                         f"got {value!r}.")
    return value


def _keep(name: str, value: Any) -> tuple[str, ...]:
    try:
        keep = tuple((value,) if isinstance(value, str) else value)
    except TypeError:
        raise InputError(f"keep must be a node name or a list of names; got {value!r}.") from None
    if not all(isinstance(k, str) for k in keep):
        raise InputError(f"keep must hold node names (strings); got {list(keep)!r}.")
    return keep


def _names(name: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    names = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, Iterable) else None
    if names is None or not all(isinstance(n, str) for n in names):
        raise InputError(f"{name} must be an output name or a list of output names; got {value!r}.")
    return names


def _lengths(name: str, value: Any) -> tuple[int, ...]:
    lengths = tuple(value) if isinstance(value, Iterable) and not isinstance(value, (str, bytes)) else None
    if lengths is None or not all(is_integer(n) and 1 <= n <= 1_000_000 for n in lengths):
        raise InputError(f"{name} must be a list of prompt lengths in tokens, each from 1 to 1,000,000; got {value!r}.")
    return tuple(sorted(set(int(n) for n in lengths)))


def _ir_path(name: str, value: Any) -> Any:
    if value is not None and not isinstance(value, (str, os.PathLike)):
        raise InputError(f"{name} must be a path ending in .xml; got {value!r}.")
    if value is not None and not os.fspath(value).endswith(".xml"):
        raise InputError(f"{name} must be an IR path ending in .xml; got '{os.fspath(value)}'.")
    return value


def _executor(name: str, value: Any) -> Any:
    return check_executor(value)


def _progress(name: str, value: Any) -> Any:
    if value is not None and not isinstance(value, bool):
        raise InputError(f"progress must be True, False or None; got {value!r}.")
    return value


def _first_sentence(doc: str) -> str:
    sentence = doc.split(". ")[0].rstrip(".")
    return sentence[:1].lower() + sentence[1:]


def _opt(default: Any, group: str, doc: str, check: Check, *, help: str | None = None, cli: str | Flag | None = "auto",
         keyword: bool = True, kind: type | None = None, metavar: str | None = None,
         choices: tuple[str, ...] | None = None) -> Any:
    """A field with everything said about its option: its default, its `GROUPS` concern, its doc (the entry of
    `bisect()`'s docstring), its check, and its flag: `help` (the flag's one line; the doc's first sentence
    when not given), `cli` (``"auto"``: generated from the name, type and default; a `Flag`; None: no flag,
    then the field says why), `keyword` (False: not a keyword of `bisect()`; set through another)."""
    assert group in GROUPS, group
    meta = {"group": group, "doc": doc, "check": check, "help": help or _first_sentence(doc),
            "cli": cli, "keyword": keyword, "kind": kind, "metavar": metavar, "choices": choices}
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
    bisect_ov.core.errors.InputError: curve must be an integer from 0 to 1000 (points of the contribution curve; 0 for none); got -1.
    """

    # ----- devices and compiling
    ref_config: Mapping[str, Any] = _opt(
        None, "devices", "Properties passed to `compile_model` for the reference (name -> value).", check_config,
        help="compile property for the reference (repeatable)",
        cli=Flag(("--ref-config",), {"action": "append", "type": key_value, "default": [], "metavar": "KEY=VALUE"}, dict))
    target_config: Mapping[str, Any] = _opt(
        None, "devices", "Properties passed to `compile_model` for the target (name -> value).", check_config,
        help="compile property for the target (repeatable)",
        cli=Flag(("--target-config",), {"action": "append", "type": key_value, "default": [], "metavar": "KEY=VALUE"}, dict))
    # ----- what to tap and search
    strategy: str = _opt(
        "auto", "search", "Which tensors to expose (see `bisect_ov.search.strategies`): ``fusion`` taps only the outputs "
        "of the target's fusion groups, so the instrumented target compiles the same kernels; ``full`` taps every node; "
        "``bisection`` searches with a few taps per compile (about log2(N) compiles); ``auto`` (default) is ``fusion``, "
        "falling back to ``bisection`` when the fidelity check fails.", _strategy, choices=STRATEGIES,
        kind=str, help="which tensors to expose (auto: fusion, falling back to bisection when taps change the target)")
    metric: str | Callable[[TensorStats], float] = _opt(
        "rel_l2", "search", "Error measure per tensor: a name in `bisect_ov.analysis.metrics.METRICS` or a callable on "
        "`TensorStats`. The default tolerance model is calibrated for ``rel_l2`` and ``max_rel``; any other metric needs "
        "`tolerance` (docs/tolerance.md).", _metric, kind=str,
        help="error metric: rel_l2, max_rel; max_abs, mean_abs, cosine_distance, mismatch_fraction with --tolerance")
    tolerance: float | Tolerance | None = _opt(
        None, "search", "None for the precision-aware default, a float for one threshold everywhere, or a `Tolerance`.",
        _tolerance, kind=float, help="one error threshold for every node (default: precision-aware)")
    refine: bool = _opt(
        True, "search", "With ``fusion``: re-measure the members of the groups where error starts, to name the member "
        "node.", check_flag, help="keep fusion-group granularity (no re-measuring of the groups where error starts)")
    max_tap_bytes: int | str | None = _opt(
        DEFAULT_MAX_TAP_BYTES, "search", "Most bytes of exposed tensors per compile; more taps are measured segment by "
        "segment (one model on both sides) or split into several compiles. ``\"auto\"`` (the default): half the model's "
        "weight bytes, at least 64 MB (`bisect_ov.pipeline.options.auto_tap_bytes`). None: no limit.", check_tap_bytes,
        help="most MB of exposed tensors per compile or segment, 0 for no limit (default: half the weights' size, "
        "at least 64)", cli=Flag(("--max-tap-mb",), {"type": float, "default": None, "metavar": "MB"}, _bytes_of_mb))
    # ----- which experiments run
    budget: str = _opt(
        "default", "experiments", "``default``: every experiment asked for. ``fast``: no local errors, no impact runs, "
        "fusion groups not refined (the report names a group by its output), no per-node pass over many samples (they "
        "are still run and ranked by final-output error), no run without the CPU's generated kernels, and the noise "
        "floor read from the compiles made anyway (no extra compile or run): about twice the plain compile-and-run of "
        "both sides, for a first look at a big model.",
        _one_of(BUDGETS), choices=BUDGETS, kind=str,
        help="default: every experiment asked for; fast: about 2x the plain compile-and-run of both sides (no local "
        "errors, impact runs, refinement, extra noise runs or per-node pass over many samples)")
    local: bool = _opt(
        True, "experiments", "Run every measured node (or fusion group) on the target fed with the reference's inputs, "
        "so its own (local) error is told from what it inherited; one reference and one target compile per memory "
        "chunk. Not available with `target_model`.", check_flag,
        help="skip running each node alone on the target fed with reference inputs")
    noise: bool = _opt(
        True, "experiments", "Run the target against itself (twice, and a second compile): differences below that "
        "floor are noise.", check_flag, help="skip running the target against itself")
    baseline: bool = _opt(
        True, "experiments", "Against a bf16 or f16 target, measure what rounding alone does: the model on the "
        "emulated device of that precision (the final outputs, and each suspect alone fed the reference's values). "
        "A node whose local error is several times its rounding-only one is named as an origin even when the final "
        "outputs stay within tolerance; the report shows each node's expected error and the ratio.", check_flag,
        help="skip the rounding-only baseline (the emulated device of the target's precision)")
    impact: int = _opt(
        3, "experiments", "For this many top suspects, the final-output error when only that node runs on the target "
        "(partitioned runs); the culprit ranking puts higher impact first.",
        _at_least(0, " (suspects to measure; 0 for none)"), kind=int, metavar="N",
        help="suspects whose final-output impact is measured by partitioned runs")
    fix: bool = _opt(
        False, "experiments", "Search the smallest set of nodes which, kept on the reference, brings the final-output "
        "error under a tolerance (True: each output's tolerance; a float: that value), verified by partitioned runs.",
        check_flag, help="search the smallest set of nodes to keep on the reference (optionally under TOL)",
        cli=Flag(("--fix",), {"nargs": "?", "const": True, "default": False, "type": float, "metavar": "TOL"}))
    fix_tolerance: float | None = _opt(
        None, "experiments", "Final-output error the fix must reach (None: each output's tolerance).", _fix_tolerance,
        cli=None, keyword=False)  # set by fix=TOL (--fix TOL)
    max_fix_slowdown: float | None = _opt(
        None, "experiments", "With the fix: the largest slowdown (a remedy's latency over the untouched model's, on "
        "the target) a remedy may cost; a remedy that solves but costs more is said to be too slow, and the next one "
        "is offered. None: no bound.", _slowdown, kind=float, metavar="X",
        help="with --fix: a remedy slower than X times the untouched model is reported as too slow")
    delegation: bool = _opt(
        False, "experiments", "Search the shortest node range whose delegation to the target alone reproduces half "
        "the final error.", check_flag)
    curve: int = _opt(
        0, "experiments", "Points of the error contribution curve (final error with the first fraction of the graph "
        "on the target); 0 for none. Each point is a partitioned run, and a graph of N compute nodes has at most N + 1 "
        "distinct points (no more are run).", _between(0, MAX_CURVE_POINTS, " (points of the contribution curve; 0 for "
                                                     "none)"), kind=int,
        metavar="N")
    sensitivity: bool = _opt(
        False, "experiments", "With a quantized twin (`target_model`): rank its quantized layers by their own error and "
        "by the final-output error when each alone is quantized (one partitioned run per layer); "
        "`Report.sensitivity`.", check_flag, help="with a quantized twin, rank its quantized layers by their local error "
        "and their impact on the final outputs (one partitioned run per layer)")
    truth: Any = _opt(
        None, "experiments", "A float64 run that says which side is right: ``\"f64\"`` runs the reference's framework "
        "(PyTorch eager, ONNX Runtime; else the target's, else ONNX Runtime on an .onnx model) in float64, or pass a "
        "side such as ``Torch(module, dtype=\"f64\")``. Every compared node gets both sides' error against it, and "
        "the verdict says which side is closer and where the f32 reference is itself the imprecise one "
        "(`Report.truth`).", _truth, kind=str, choices=("f64",), metavar="f64",
        help="compare both sides with a float64 run of the model's framework (who is right)")
    keep: tuple[str, ...] = _opt(
        (), "experiments", "Names of nodes whose reference and target tensors the report keeps in memory, for "
        "``report.tensors(name)`` and ``report.plot_values(name)`` (one more compile per side). ``\"culprits\"`` keeps "
        "the top five culprits' tensors.", _keep, kind=str, metavar="NAME",
        help="node names whose tensors the report keeps ('culprits': the top five)")
    patched_model: str | os.PathLike | None = _opt(
        None, "experiments", "With `fix`, also save the model with the fix as runtime info that GPU/NPU plugins honour "
        "(``disable_fp16_compression``) to this path (IR .xml).", _ir_path,
        help="with --fix, save the model marked for GPU/NPU to keep those nodes in f32",
        cli=Flag(("--patched-model",), {"type": pathlib.Path, "metavar": "OUT.xml"}))
    # ----- inputs, samples and executors
    seed: int = _opt(0, "samples", "Seed of the random inputs.", check_seed, kind=int)
    executor: Any = _opt(
        None, "samples", "Where many samples run: None (this process), any `concurrent.futures.Executor` (Dask's "
        "``distributed.Client(...).get_executor()``, Ray's, a ``ProcessPoolExecutor``), or ``'processes:N'``, "
        "``'threads:N'``, ``'dask://HOST:PORT'``, ``'ray'``, ``'ray://HOST:PORT'``. Batches of `samples_per_batch` samples "
        "travel to the workers with the model as IR and the devices, and return summaries, never tensors "
        "(`bisect_ov.samples.executors`).", _executor, kind=str, metavar="WHERE",
        help="where many samples run: processes:N, threads:N, dask://HOST:PORT, ray or ray://HOST:PORT (default: here)")
    samples_per_batch: int = _opt(16, "samples", "Samples per batch (the work that travels to a worker at once) when "
                                  "many samples run.", _at_least(1), kind=int, metavar="N")
    batch_retries: int = _opt(
        2, "samples", "Times a batch that raised (or whose worker died) runs again; what still fails is reported with "
        "its sample indices and the run is marked partial (`SamplesSummary.partial`).", _at_least(0), kind=int,
        metavar="N", help="times a failed batch of samples runs again before it is reported")
    classifier_outputs: tuple[str, ...] | None = _opt(
        None, "samples", "With many samples: the outputs holding class scores, whose top-1 and top-5 answers are "
        "compared. None takes ``[batch, classes]`` outputs and outputs named like logits (``[batch, seq, vocab]``).",
        _names, help="with many samples, an output holding class scores whose top-1/top-5 answers are compared "
        "(repeatable; default: [batch, classes] outputs and logits)",
        cli=Flag(("--classifier-output",), {"action": "append", "default": None, "metavar": "NAME"},
                 lambda names: tuple(names) if names else None))
    # ----- LLM prompts and generation
    prompt_length: int = _opt(
        PROMPT_LENGTH, "generation", "Tokens of the generated prompt when `inputs` is None and the model takes LLM inputs "
        "(``input_ids``, ``attention_mask``, ``position_ids``, ``beam_idx``) with a dynamic sequence length.",
        _at_least(1, " (tokens of the generated prompt)"), kind=int, metavar="N",
        help="tokens of the generated prompt for LLM inputs with a dynamic sequence length")
    prompt_lengths: tuple[int, ...] = _opt(
        (), "generation", "A prompt-length sweep for an LLM: the prompt (the given token ids, or a seeded random one "
        "as long as the longest length) cut to each length and run on both sides, each with its states reset; the "
        "report gives each length's final-output error, from which length the outputs diverge, and examines that "
        "length node by node (the longest when none diverges). One dynamic-shape compile per side serves every "
        "length.", _lengths, help="prompt-length sweep of an LLM: each length's final error, where divergence "
        "starts, that length examined node by node",
        cli=Flag(("--prompt-lengths",), {"nargs": "+", "type": int, "default": (), "metavar": "N"}, tuple))
    steps: int = _opt(
        0, "generation", "For a stateful LLM (KV-cache variables): after the prefill, run this many decode steps on "
        "both sides, each side on its own cache, both fed the reference's next token; the report gives each step's "
        "final-output error, token flips, and the first step and node where divergence starts.",
        _at_least(0, " (decode steps after the prefill; 0 for none)"), kind=int, metavar="N",
        help="decode steps after the prefill of a stateful LLM, each side on its own KV cache (0: the prefill only)")
    # ----- output
    progress: bool | None = _opt(
        None, "output", "Show progress bars; None shows them when stderr is a terminal.", _progress, help="no progress bars",
        cli=Flag(("-q", "--quiet"), {"action": "store_true"}, lambda quiet: False if quiet else None))

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, f.metadata["check"](f.name, getattr(self, f.name)))
        if self.patched_model is not None and not self.fix:
            raise InputError("patched_model (--patched-model) saves the model with the fix's nodes marked: add fix=True "
                             "(--fix), or leave it out.")
        if self.max_fix_slowdown is not None and not self.fix:
            raise InputError("max_fix_slowdown (--max-fix-slowdown) bounds what a remedy may cost: add fix=True (--fix), "
                             "or leave it out.")
        if self.prompt_lengths and self.prompt_length != PROMPT_LENGTH:
            raise InputError(f"prompt_length={self.prompt_length} (--prompt-length) sets the generated prompt's tokens, "
                             f"and a sweep runs the lengths {list(self.prompt_lengths)} (--prompt-lengths): give one "
                             "of the two.")

    @classmethod
    def from_keywords(cls, **keywords: Any) -> "BisectOptions":
        """Options from `bisect()`'s keywords; ``fix`` may be a bool or a tolerance (a number), as it always was."""
        names = [f.name for f in fields(BisectOptions)]
        unknown = sorted(set(keywords) - set(names))
        if unknown:
            raise InputError(f"Unknown option(s) {unknown}. Available: {names}.")
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

    def resolve(self, *, local_possible: bool, pieces_possible: bool, twin: bool,
                weight_bytes: int | None = None) -> "ResolvedOptions":
        """What runs here, decided once from the budget and what the sides can do; what was asked for and
        switched off is in `ResolvedOptions.left_out`, with why.

        Parameters
        ----------
        local_possible
            The target can run pieces fed with the reference's values (not a recorded target, not a sampled side).
        pieces_possible
            Both sides can run pieces (partitioned runs).
        twin
            The target runs another model (`target_model`): partitioned runs then take the target's segments from
            it (`bisect_ov.experiments.twin`); layer sensitivity needs one.
        weight_bytes
            The bytes of the model's weights: ``max_tap_bytes="auto"`` becomes `auto_tap_bytes` of them. None
            leaves ``"auto"`` in place (`ResolvedOptions.tap_bytes` then refuses to answer).

        Returns
        -------
        ResolvedOptions
            Options whose fields say what runs: `local` (local errors), `refine` (fusion groups re-measured),
            `impact`, `fix`, `delegation`, `curve`, `sensitivity` (0/False when they cannot run), `max_tap_bytes`
            (bytes or None once `weight_bytes` is given), `noise_runs`, `node_spread` and `left_out`.
        """
        fast = self.budget == "fast"
        resolved = ResolvedOptions(**{f.name: getattr(self, f.name) for f in fields(BisectOptions)},
                                   noise_runs=self.noise and not fast, node_spread=not fast,
                                   generated_kernels=not fast)
        left_out: dict[str, str] = {}  # experiment asked for -> why it does not run

        def leave_out(why: str, **off: Any) -> None:
            nonlocal resolved
            for name in off:
                if name in _EXPERIMENT_NAMES and getattr(resolved, name) and name not in left_out:
                    left_out[name] = why
            resolved = replace(resolved, **off)

        if fast:
            # What the fast budget leaves out; noise is read from the compiles made anyway (see Engine.noise).
            # Without local errors, refining would re-measure every diverged group's members (one more compile
            # per side): the report names fusion groups instead.
            leave_out("budget='fast'", local=False, impact=0, refine=False, baseline=False)
        if not local_possible and self.local:
            leave_out("the target cannot run a piece fed with the reference's values (a recorded or sampled side)",
                      local=False)
        if not twin and self.sensitivity:
            leave_out("it ranks the quantized layers of a twin: it needs target_model", sensitivity=False)
        if not pieces_possible:
            leave_out("a side cannot run pieces of the model (PyTorch and ONNX Runtime run it whole, a recorded or "
                      "sampled side replays whole runs)",
                      impact=0, fix=False, fix_tolerance=None, delegation=False, curve=0, patched_model=None,
                      sensitivity=False)
        if weight_bytes is not None and self.max_tap_bytes == "auto":
            resolved = replace(resolved, max_tap_bytes=auto_tap_bytes(weight_bytes))
        return replace(resolved, left_out=tuple(left_out.items()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values of every option (a callable metric by its name, configs as strings)."""
        out: dict[str, Any] = {}
        for f in fields(BisectOptions):
            value = getattr(self, f.name)
            if f.name == "metric" and callable(value):
                value = getattr(value, "__name__", "custom")
            elif isinstance(value, Tolerance):
                value = value.to_dict()
            elif isinstance(value, Mapping):
                value = {str(k): str(v) for k, v in value.items()}
            elif f.name == "executor" and value is not None and not isinstance(value, str):
                value = type(value).__name__
            elif f.name == "truth" and value is not None and not isinstance(value, str):
                value = getattr(value, "name", type(value).__name__)
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


@dataclass(frozen=True, eq=False)
class ResolvedOptions(BisectOptions):
    """The options of one run as `BisectOptions.resolve` decided them: stages read these, never the budget.

    Besides the option fields (switched off where they cannot run), three decisions of the budget: `noise_runs`,
    `node_spread` and `generated_kernels`; and `tap_bytes`. Equal to a `BisectOptions` with the same option values (the decisions
    follow from them).
    """

    noise_runs: bool = field(default=True, metadata={"check": check_flag, "doc": (
        "The noise floor gets runs of its own (the target's second run and second compile); False: it is read "
        "from the compiles made anyway, or not measured (``noise=False``).")})
    node_spread: bool = field(default=True, metadata={"check": check_flag, "doc": (
        "With many samples, each measured node's error is summarised over every sample (each sample runs again "
        "with the measured tensors exposed); False: the samples are only run and ranked by final-output error.")})
    generated_kernels: bool = field(default=True, metadata={"check": check_flag, "doc": (
        "An f32 target on the CPU whose outputs diverge runs once more without the kernels its plugin generates, "
        "and a target that quantized compressed-weight products' activations once more without that "
        "(`bisect_ov.experiments.generated`: one compile each); False under ``budget='fast'``.")})
    left_out: tuple[tuple[str, str], ...] = field(default=(), metadata={"check": lambda _, value: tuple(value), "doc": (
        "(experiment option, why) for each experiment asked for that does not run here (the budget, or what the "
        "sides can do).")})

    @property
    def tap_bytes(self) -> int | None:
        """Most bytes of exposed tensors per compile or segment; None: no limit."""
        if isinstance(self.max_tap_bytes, str):
            raise TypeError("max_tap_bytes is still 'auto': resolve(weight_bytes=...) makes it a number of bytes.")
        return self.max_tap_bytes

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BisectOptions):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(BisectOptions))

    __hash__ = None  # type: ignore[assignment]


# The options that switch an experiment on (`ResolvedOptions.left_out` names these).
_EXPERIMENT_NAMES = ("local", "baseline", "impact", "fix", "delegation", "curve", "sensitivity")

# The keywords of `bisect()` that are options, in the record's order.
KEYWORDS = tuple(f.name for f in fields(BisectOptions) if f.metadata["keyword"])
