"""The records the pipeline's stages hand to each other, frozen, in the order the stages make them.

    Setup       open_comparison   the comparison, the runner, the examined sample, resolved options, samples
    Examined        run_untouched         the engine of the examined sample (its untouched run) and the tolerance
    Measurement  measure           statistics per tap, groups, local errors, fidelity, exact checks, spread
    Scored       score, decide     errors, tolerances, scores, final outputs, noise, the verdict
    Findings     experiments       (`bisect_ov.experiments.partitioned`)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bisect_ov.analysis.exactness import ExactCheck
from bisect_ov.analysis.metrics import TensorStats, metric_value
from bisect_ov.analysis.scoring import Scores
from bisect_ov.analysis.spread import Distribution
from bisect_ov.analysis.tolerance import Tolerance
from bisect_ov.core.records import Fidelity, FrameworkMatch, Noise
from bisect_ov.engine.comparison import Comparison, Sample
from bisect_ov.engine.engine import Engine
from bisect_ov.engine.ledger import Clock
from bisect_ov.engine.runner import Runner
from bisect_ov.experiments.local import LocalErrors
from bisect_ov.model.state import Stateless
from bisect_ov.model.taps import Tap
from bisect_ov.pipeline.options import ResolvedOptions
from bisect_ov.pipeline.plan import Plan
from bisect_ov.report.report import OutputResult
from bisect_ov.samples.runs import SampleRun
from bisect_ov.samples.sources import PassLog, SampleSummary

__all__ = ["Setup", "Examined", "Measurement", "Scored"]


@dataclass(frozen=True, eq=False)
class Setup:
    """A comparison ready to run: what is compared, the resolved options, the sample to examine, the samples
    and why options changed."""

    comparison: Comparison
    runner: Runner
    sample: Sample  # the examined sample (the worst of many)
    options: ResolvedOptions  # resolved: what runs here is decided (`BisectOptions.resolve`)
    model: Any  # ov.Model
    target_model: Any  # ov.Model | None
    samples: SampleRun | None  # many samples: where they come from and run (closed by `run` at the end)
    summary: SampleSummary | None
    notes: tuple[str, ...]
    clock: Clock
    # A stateful model's variables as inputs and outputs (`bisect_ov.model.state`); `model` is then its
    # stateless form, and `state_of_target` the target model's when it is stateful too.
    state: Stateless | None = None
    state_of_target: Stateless | None = None
    # Framework sides (PyTorch, ONNX Runtime): what each matched; the bound float64 side of truth="f64".
    frameworks: tuple[FrameworkMatch, ...] = ()
    truth: Any = None
    # The untouched (ref, target) compiles the samples pass ran on in this process, for the examined sample's
    # untouched run (`run_untouched`); the pipeline drops them from its setup once that run is made.
    untouched: Any = None

    def error_of(self, stats: TensorStats) -> float:
        """The options' metric on one tensor pair's statistics."""
        return metric_value(stats, self.options.metric)

    @property
    def runs_steps(self) -> bool:
        """Whether generation steps run (`bisect_ov.pipeline.generate`): asked for, on a stateful model, and
        against a twin only when it has the same variables."""
        if not self.options.steps or self.state is None:
            return False
        return self.target_model is None or (self.state_of_target is not None
                                             and self.state_of_target.variables == self.state.variables)


@dataclass(frozen=True, eq=False)
class Examined:
    """After the untouched model ran on both sides: the engine of the examined sample, and the tolerance for
    the precision really in play."""

    engine: Engine
    plan: Plan  # the tolerance model and every node's and output's tolerance, made once (`bisect_ov.pipeline.plan`)
    # Another compile of the untouched target run on the engine's sample (the generation steps made one): its
    # outputs, for the compile-to-compile noise (`Engine.noise`).
    recompiled: tuple[np.ndarray, ...] | None = None
    # The reference's untouched compile (a second infer request on it), kept for the generation steps, which run
    # the same model; `generate` takes it and returns the record without it.
    kept_ref: Any = None

    @property
    def tolerance(self) -> Tolerance:
        """The tolerance model for the precision really in play (the plan's)."""
        return self.plan.tolerance


@dataclass(frozen=True, eq=False)
class Measurement:
    """Statistics of every measured tap, the fusion group each stands for, and how they were measured."""

    stats: dict[Tap, TensorStats]
    groups: dict[str, tuple[str, ...]]
    strategy: str
    fell_back: bool = False
    spread: dict[str, Distribution] = field(default_factory=dict)  # each node's error over the samples
    ref_absmax: dict[str, float] = field(default_factory=dict)  # each node's largest |x| over the samples
    # Local errors measured while measuring (to decide which fusion groups to refine), by unit key; the
    # experiments reuse those whose unit did not change.
    local_runs: LocalErrors = field(default_factory=dict)
    fidelity: Fidelity | None = None  # did exposing taps change the final-output error?
    reproduced: bool = False  # some instrumented target compile gave the untouched outputs bit for bit
    exact: dict[str, ExactCheck] = field(default_factory=dict)  # integer nodes checked against the exact result
    # What the noise check's compile of the untouched target, made beside the measurement, gave: its outputs and
    # a second run's (or None); None when none was made or it is not needed (a tapped compile reproduced).
    beside: tuple[Any, Any] | None = None
    # Each sample's first node over its tolerance (a prompt-length sweep's; "" none), from the per-node pass.
    first_over: dict[int, str] = field(default_factory=dict)
    spread_log: PassLog | None = None  # how the per-node pass over the samples ran (None: it did not)
    misshapen: dict[Tap, str] = field(default_factory=dict)  # taps not compared: the sides' shapes differ


@dataclass(frozen=True, eq=False)
class Scored:
    """Per-node errors and tolerances, the error-growth scores, final outputs, noise and fidelity."""

    errors: dict[tuple[str, int], float]
    tolerances: dict[str, float]
    scores: Scores
    outputs: tuple[OutputResult, ...]
    noise: Noise | None
    fidelity: Fidelity | None
    absorbed: tuple[str, ...] = ()  # over their tolerance, but absorbed by the network (the judge's verdict)
    absorbed_why: str = ""
    verdict: Any = None  # the judge's `Verdict` (`bisect_ov.pipeline.decide`), once it has spoken
    noise_note: str = ""  # why the noise check made no second compile, when that is not evident

    @property
    def floor(self) -> float:
        """Errors below twice the target's own noise are not counted."""
        return 2 * self.noise.floor if self.noise is not None else 0.0
