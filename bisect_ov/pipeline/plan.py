"""The plan of a run, made once right after the untouched run (the first point where the precision each side
really ran and the target's runtime graph are known), and read by every later stage.

It holds the tolerance model for that precision and, from it, every node's and every final output's tolerance
(`analysis.tolerance.node_thresholds`: ops that only move values carry their producer's), and the untouched
target's fusion (`Fusion`: the group boundaries, each boundary's group and local-error unit, which tensors exist
only inside a kernel). No stage computes a tolerance or a boundary of its own: the reference's plain run, the
measurement's search, the scoring, the experiments, the judge and the sweep read these.

It says which experiments run after the measurement and why the others do not (`Experiments`: what the budget
and the sides allow, decided by `BisectOptions.resolve`, and the rounding-only baseline, which needs the precision
the target ran), and which tensors count toward a node's error (`Plan.counts`): all of them except the index outputs of
an op that selects among floating values (MaxPool's and TopK's indices). Those change whenever two values within
rounding of each other swap order, which says nothing of the arithmetic: the values the op selects are judged
instead, and the indices are still compared and shown.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping

from bisect_ov.analysis.judge import MOVEMENT
from bisect_ov.analysis.tolerance import Tolerance, node_thresholds
from bisect_ov.core.numeric import F32_AGREEMENT
from bisect_ov.engine.comparison import Comparison
from bisect_ov.experiments.baseline import baseline_device
from bisect_ov.experiments.local import owned_units
from bisect_ov.model.fusion import KernelTensors, kernel_tensors
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.scaling import SCALED_OPS
from bisect_ov.model.taps import Tap
from bisect_ov.search.strategies import fusion_taps

if TYPE_CHECKING:
    from bisect_ov.pipeline.options import ResolvedOptions

__all__ = ["Plan", "Fusion", "Experiments", "make_plan", "plan_fusion", "plan_experiments", "two_implementations",
           "OTHER_IMPLEMENTATION_FLOOR"]

# What each experiment is called in the report's notes.
EXPERIMENT_TITLES = {"local": "local errors", "baseline": "the rounding-only baseline", "impact": "impact runs",
                     "scale_factor": "the activation scale factor search",
                     "kernel_setting": "the run without generated kernels",
                     "activation_setting": "the run without activation quantization",
                     "clamp": "the clamp remedy",
                     "fix": "the fix search", "delegation": "the delegation range", "curve": "the contribution curve",
                     "sensitivity": "layer sensitivity"}


@dataclass(frozen=True)
class Fusion:
    """The untouched target's fused kernels, read once from its runtime graph.

    boundaries
        The tensors each fusion group ends in (what the fusion strategy measures first), reference taps.
    groups
        Boundary node key -> the members of its group (the ops the kernel computes before it).
    units
        Boundary node key -> the members it computes when run alone for its local error (`owned_units`).
    kernels
        Which tensors exist only inside a kernel, and what each kernel stores (`model.fusion.kernel_tensors`).
    """

    boundaries: tuple[Tap, ...] = ()
    groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    units: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    kernels: KernelTensors = field(default_factory=KernelTensors)


def plan_fusion(comparison: Comparison, runtime: RuntimeGraph, untappable: frozenset[Tap]) -> Fusion:
    """The `Fusion` of the untouched target whose runtime graph is `runtime` (`untappable`: a twin's taps inside
    its int8 kernels, never exposed)."""
    boundaries, groups = fusion_taps(comparison, runtime, untappable)
    units = owned_units(comparison.graph, [t.key for t in boundaries], groups)
    kernels = kernel_tensors(comparison.target_graph, runtime, comparison.match)
    return Fusion(tuple(boundaries), groups, units, kernels)


@dataclass(frozen=True)
class Experiments:
    """Which experiments run after the measurement, and why each one asked for does not.

    local
        Each measured node (or fusion group) alone on the target, fed the reference's values.
    baseline
        The emulated device whose rounding alone is measured (`experiments.baseline`), or None.
    impact
        How many suspects get an impact run.
    fix, fix_limit
        Whether the fix is searched, and the final-output error it must reach (None: the outputs' tolerance).
    scale_factor
        With the fix, against an f16 target whose device takes ``ACTIVATIONS_SCALE_FACTOR``: the smallest factor
        that solves an overflow is searched first (`experiments.scaling`), when the reference's values leave
        f16's range and the outputs diverge.
    clamp
        With the fix, against an f16 target: clamps after the overflow's origins are tried next
        (`experiments.clamping`), when some node's values leave f16's range and the outputs diverge.
    kernel_setting
        The untouched target compiled without the kernels its plugin generates for fused subgraphs, run whole
        (`experiments.generated`), when the outputs diverge: a target that computes in f32, has such a setting
        (the CPU plugin) and runs the model the reference runs (not a twin).
    activation_setting
        The untouched target compiled without quantizing the activations of compressed-weight matrix products
        (``DYNAMIC_QUANTIZATION_GROUP_SIZE=0``), run whole (`experiments.generated`), when the outputs diverge: a
        target whose plain compile quantized them, with that setting, running the reference's model (not a twin).
    delegation, curve, sensitivity
        The delegation range, the contribution curve's points, layer sensitivity (a twin).
    left_out
        (experiment, why) for each experiment that was asked for and does not run here.
    """

    local: bool = False
    baseline: str | None = None
    impact: int = 0
    fix: bool = False
    fix_limit: float | None = None
    scale_factor: bool = False
    clamp: bool = False
    kernel_setting: bool = False
    activation_setting: bool = False
    delegation: bool = False
    curve: int = 0
    sensitivity: bool = False
    left_out: tuple[tuple[str, str], ...] = ()

    @property
    def partitioned(self) -> bool:
        """Whether some experiment runs the model partly on each side."""
        return bool(self.impact or self.fix or self.delegation or self.curve or self.sensitivity)

    @property
    def any(self) -> bool:
        """Whether any experiment runs."""
        return self.local or self.partitioned or self.kernel_setting or self.activation_setting

    def note(self) -> str | None:
        """One sentence for the report naming what was asked for and left out, and why; None when nothing was."""
        if not self.left_out:
            return None
        by_why: dict[str, list[str]] = {}
        for name, why in self.left_out:
            by_why.setdefault(why, []).append(EXPERIMENT_TITLES.get(name, name))
        parts = [f"{', '.join(names)} ({why})" for why, names in by_why.items()]
        return "Not run: " + "; ".join(parts) + "."


def plan_experiments(options: "ResolvedOptions", comparison: Comparison, precision: str | None,
                     activation_groups: int = 0) -> Experiments:
    """The `Experiments` of a run from its resolved options (`ResolvedOptions`: the budget and what the sides
    can do already applied), the precision the target ran (which decides the rounding-only baseline) and the
    group size its plain compile quantized compressed-weight products' activations in (`DeviceInfo`)."""
    applies = baseline_device(comparison, precision)  # None: no rounding-only baseline for this comparison
    device = applies if options.baseline else None
    left_out = tuple((name, why) for name, why in options.left_out if name != "baseline" or applies is not None)
    scale_factor = bool(options.fix) and precision == "f16"
    if scale_factor and comparison.target.with_activation_scale(2.0) is None:
        scale_factor = False
        left_out += (("scale_factor", f"{comparison.target.name} has no ACTIVATIONS_SCALE_FACTOR setting (the CPU "
                                      "plugin refuses it; the GPU's and emulated f16 take it)"),)
    elif scale_factor and not any(n.op_type in SCALED_OPS for n in comparison.target_graph):
        scale_factor = False
        left_out += (("scale_factor", "the model has no Convolution or MatMul for the activation scaling to act on"),)
    return Experiments(local=bool(options.local), baseline=device, impact=int(options.impact), fix=bool(options.fix),
                       fix_limit=options.fix_tolerance, scale_factor=scale_factor,
                       clamp=bool(options.fix) and precision == "f16",
                       kernel_setting=(options.generated_kernels and precision == "f32" and not comparison.twin
                                       and comparison.target.without_generated_kernels() is not None),
                       activation_setting=(options.generated_kernels and activation_groups > 0 and not comparison.twin
                                           and comparison.target.without_activation_quantization() is not None),
                       delegation=bool(options.delegation), curve=int(options.curve),
                       sensitivity=bool(options.sensitivity and comparison.twin), left_out=left_out)


@dataclass(frozen=True)
class Plan:
    """The tolerance model and every node's and output's tolerance, by key, and the target's fusion."""

    tolerance: Tolerance
    thresholds: Mapping[tuple[str, int], float] = field(default_factory=dict)
    outputs: Mapping[str, float] = field(default_factory=dict)  # Result key -> tolerance
    movement: frozenset[str] = frozenset()  # keys of the nodes that only move values
    fusion: Fusion = field(default_factory=Fusion)
    indices: frozenset[tuple[str, int]] = frozenset()  # (key, port): index outputs of a selection among floats
    experiments: Experiments = field(default_factory=Experiments)
    two_implementations: bool = False  # both sides compute in f32 and one is another framework (`two_implementations`)
    output_floor: float = 0.0  # the least final output tolerance (f32-level agreement there, the default model's)

    def node(self, key: str, port: int = 0) -> float:
        """The tolerance of node `key`'s output `port` (its first output's when the port has none; infinite for
        an index output, which never counts as diverged: see `counts`)."""
        if (key, port) in self.indices:
            return float("inf")
        found = self.thresholds.get((key, port))
        return found if found is not None else self.thresholds.get((key, 0), 0.0)

    def search_limit(self, key: str, port: int = 0) -> float:
        """What a bisection counts as a diverged cut at node `key`'s output `port`: its tolerance, and between
        two implementations of f32 no less than the outputs' floor, which benign differences reach after some
        layers while every node keeps its tolerance for the verdict (a binary search for the first cut over it
        stops at one of them)."""
        return max(self.node(key, port), self.output_floor if self.two_implementations else 0.0)

    def counts(self, key: str, port: int = 0) -> bool:
        """Whether output `port` of node `key` counts toward the node's error: every output but the integer
        indices of an op that also outputs the floating values it selected (MaxPool, TopK)."""
        return (key, port) not in self.indices

    def output(self, key: str) -> float:
        """The tolerance of final output `key` (a Result)."""
        return self.outputs[key]

    def any_over(self, nodes: Iterable[tuple[str, int, float]], outputs: Iterable[tuple[str, float]]) -> bool:
        """Whether any counted node output (key, port, error) or final output (result key, error) is over its
        tolerance (a NaN error is). When none is, a noise floor cannot change what is counted: tolerances are
        raised to the floor, never lowered."""
        return (any(self.counts(k, p) and not e <= self.node(k) for k, p, e in nodes)
                or any(not e <= self.output(k) for k, e in outputs))

    @property
    def limit(self) -> float:
        """The smallest of the final outputs' tolerances: what a fix must reach, what "diverges" means."""
        return min(self.outputs.values(), default=0.0)


# Two correct f32 implementations of one deep network (PyTorch eager or ONNX Runtime against OpenVINO) differ by
# about 1e-6 at the outputs after dozens of layers, from their summation orders: f32-level agreement.
OTHER_IMPLEMENTATION_FLOOR = F32_AGREEMENT


def two_implementations(comparison: Comparison, precision: str) -> bool:
    """Whether two implementations of f32 are compared (both sides compute in f32 and one is another framework:
    PyTorch eager, ONNX Runtime). Their summation orders leave about 1e-6 between correct results after dozens of
    layers, so the final outputs are judged against f32-level agreement (`OTHER_IMPLEMENTATION_FLOOR`) while
    every node keeps its tolerance, and a node's rounding-only local error is taken as its tolerance: one op that
    differs by more (a tanh GELU for an erf one) is still named where it enters."""
    return precision == "f32" and (comparison.ref.other_implementation or comparison.target.other_implementation)


def make_plan(tolerance: Tolerance, graph: ModelGraph, fusion: Fusion | None = None,
              experiments: Experiments | None = None, *, two_implementations: bool = False,
              default_model: bool = True) -> Plan:
    """The plan for `graph` under `tolerance` (its precision filled in from what the sides ran), with the target's
    `fusion` (`plan_fusion`; none known when not given) and the `experiments` that run (`plan_experiments`;
    none when not given). `two_implementations` (see that function): with the `default_model` of tolerance, no
    final output's tolerance is below `OTHER_IMPLEMENTATION_FLOOR`."""
    output_floor = OTHER_IMPLEMENTATION_FLOOR if two_implementations and default_model else 0.0
    thresholds = node_thresholds(tolerance, graph, MOVEMENT)
    outputs = {}
    for result in graph.results():
        producer, port = result.inputs[0]
        node = graph[producer]
        outputs[result.key] = max(output_floor, thresholds[(producer, port)] if (producer, port) in thresholds
                                  else tolerance.for_node(node, port))
    movement = frozenset(n.key for n in graph.candidates() if n.op_type in MOVEMENT)
    return Plan(tolerance, thresholds, outputs, movement, fusion or Fusion(), index_outputs(graph),
                experiments or Experiments(), two_implementations, output_floor)


def index_outputs(graph: ModelGraph) -> frozenset[tuple[str, int]]:
    """(key, port) of every integer output of a node that reads and outputs floating tensors: the indices a
    selection (MaxPool, TopK) returns beside the values it selected."""
    found: set[tuple[str, int]] = set()
    for node in graph.candidates():
        if not any(t.is_float for t in node.outputs):
            continue
        if not any(graph[k].outputs[p].is_float for k, p in graph.data_inputs(node.key)):
            continue
        found.update((node.key, t.port) for t in node.outputs if not t.is_float)
    return frozenset(found)
