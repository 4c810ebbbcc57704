"""The remedies' records: what a remedy a run found or tried is, whether it solves, and what it costs.

The verified fix (`Fix`: nodes kept in the reference's precision), the activation scale factor (`ScaleFactor`),
clamps after an overflow's origins (`Clamp`), the target without the kernels its plugin generates
(`KernelSetting`), and the measured latency and memory of one applied (`RemedyCost`). Read through
`bisect_ov.core.records` as well. Standard library only, as the rest of `bisect_ov.core`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Fix", "RemedyCost", "Clamp", "ScaleFactor", "KernelSetting"]


@dataclass(frozen=True)
class Fix:
    """The nodes to run on the reference (in its precision), and the final error before and after, verified.

    ``patched_model`` is the path of the model saved with the fix marked for GPU/NPU plugins, when asked for.
    """

    JSON_PROPERTIES = ("solved",)  # derived, written for readers of the JSON; ignored when reading

    on_reference: tuple[str, ...]
    error_before: float
    error_after: float
    tolerance: float
    verified: bool
    runs: int
    tried: tuple[str, ...] = ()
    patched_model: str | None = None
    # The repeated-block roles the kept nodes make up ("<pattern> (kept of all)"), when several nodes share one.
    patterns: tuple[str, ...] = ()
    # 1-minimal, checked: no kept node can go back to the target without the final error going over the tolerance.
    minimal: bool = False
    # On a target that honours precision marks (GPU, NPU, emulated): the final error of the whole model with the
    # kept nodes marked to stay in f32, run on the target, and its latency against the untouched model's.
    error_on_target: float | None = None
    cost: RemedyCost | None = None
    # Partitioned runs the plugin could not compile or run (their assignments count as unsolved): how many, and
    # what it said the first time.
    failed: tuple[int, str] | None = None

    @property
    def solved(self) -> bool:
        return self.error_after <= self.tolerance


@dataclass(frozen=True)
class RemedyCost:
    """What a remedy costs on the target: the latency of the model with the remedy applied (`seconds`) against the
    untouched model's (`untouched_seconds`), each the median of `repeats` inferences of the examined sample after a
    warm-up, on `device`. `emulated`: the device is emulated, so the cost is the CPU's running the emulation, not
    the real device's. `peak_mb` and `untouched_peak_mb`: how far a fresh process's peak resident memory grows to
    compile each model and run it (`bisect_ov.experiments.peak`), None when not measured."""

    JSON_PROPERTIES = ("slowdown", "memory_ratio")

    seconds: float
    untouched_seconds: float
    repeats: int
    device: str
    emulated: bool = False
    peak_mb: float | None = None
    untouched_peak_mb: float | None = None

    @property
    def memory_ratio(self) -> float | None:
        """How many times the untouched model's peak memory the remedy's is (None when either is not measured)."""
        if self.peak_mb is None or not self.untouched_peak_mb:
            return None
        return self.peak_mb / self.untouched_peak_mb

    @property
    def slowdown(self) -> float:
        """How many times the untouched model's latency the remedy's is."""
        return self.seconds / self.untouched_seconds if self.untouched_seconds > 0 else float("inf")


@dataclass(frozen=True)
class Clamp:
    """Clamps after the nodes whose values leave the target's range (`bisect_ov.model.clamping`): each node of
    `bounds` has its floating outputs kept within ``[-bound, bound]``, the whole patched model run on `device` and
    its final error (`error_after`) compared with `tolerance`.

    The nodes are the overflow's origins: nodes whose reference values exceed the target's largest finite value,
    or whose target outputs gain NaN/Inf from finite inputs, and whose nearest measured producers do neither. The
    bound is the largest value the reference reaches there, at most the target's largest finite value. When the clamps solve it, each
    was dropped in turn and kept only when the rest no longer did (`bounds` is 1-minimal). `runs`: the patched
    models run.
    """

    JSON_PROPERTIES = ("solved",)

    bounds: tuple[tuple[str, float], ...]
    error_before: float
    error_after: float
    tolerance: float
    device: str
    emulated: bool = False
    runs: int = 1
    cost: RemedyCost | None = None

    @property
    def solved(self) -> bool:
        return self.error_after <= self.tolerance


@dataclass(frozen=True)
class ScaleFactor:
    """The smallest power of two for the activation scale factor (``ACTIVATIONS_SCALE_FACTOR``) that brings the
    final error under `tolerance`, verified on `device`; `factor` is None when no factor tried does.

    ``tried`` holds every (factor, final error) run, in order; the factor half as large was among them and did
    not solve it (unless `factor` is 2, the smallest). `emulated`: verified on an emulated device, with the
    plugin's activation scaling written out as ops (`bisect_ov.model.scaling`), not on the real plugin.
    """

    JSON_PROPERTIES = ("solved",)

    factor: float | None
    error_before: float
    error_after: float | None
    tolerance: float
    tried: tuple[tuple[float, float], ...]
    device: str
    emulated: bool = False
    cost: RemedyCost | None = None  # the model compiled with the factor against the untouched one, when it solves

    @property
    def solved(self) -> bool:
        return self.factor is not None

    def error_at(self, factor: float) -> float | None:
        """The final error measured with `factor`, None when it was not tried."""
        return next((e for f, e in self.tried if f == factor), None)


@dataclass(frozen=True)
class KernelSetting:
    """The target compiled once more with a property that replaces the kernels its plugin generates for fused
    subgraphs by its ordinary ones (the CPU plugin's ``SNIPPETS_MODE=DISABLE``), or that stops it quantizing the
    activations of matrix products over compressed weights (``DYNAMIC_QUANTIZATION_GROUP_SIZE=0``; `kernels` are then
    those products), run whole on the examined sample:
    the final error with it (`error_after`) against the plain run's (`error_before`), both against the reference.
    `kernels`: the generated kernels of the plain compile, each as its output node and the model's ops it fused
    (``"out: a, b, out"``). When it solves, the divergence is made by those kernels, not by the model's numbers."""

    JSON_PROPERTIES = ("solved", "explains")

    option: str
    value: str
    error_before: float
    error_after: float
    tolerance: float
    device: str
    kernels: tuple[str, ...] = ()
    cost: RemedyCost | None = None  # the model compiled with the setting against the untouched one, when it solves

    # How many times its tolerance the plain run's error must be for a setting that brings it within tolerance to
    # say the generated kernels make it: nearer, two correct kernels' summation orders differ by as much.
    MARGIN = 4.0

    @property
    def solved(self) -> bool:
        return self.error_after <= self.tolerance

    @property
    def explains(self) -> bool:
        """It solves a divergence far beyond the tolerance (`MARGIN` times): the generated kernels make it."""
        return self.solved and self.error_before > self.MARGIN * self.tolerance

    @property
    def quantization(self) -> bool:
        """The setting stops the plugin quantizing compressed-weight products' activations to int8
        (``DYNAMIC_QUANTIZATION_GROUP_SIZE=0``; `kernels` are those products), not its generated kernels."""
        return self.option == "DYNAMIC_QUANTIZATION_GROUP_SIZE"

    @property
    def setting(self) -> str:
        """``OPTION=VALUE``."""
        return f"{self.option}={self.value}"
