"""The untouched run: the model as the user would run it, on both sides, the divergence every later
measurement explains.

Two functions, called in this order by the pipeline, each returning a frozen record:

* `run_target` compiles and runs the untouched target once and reads its runtime graph: its real fusion
  groups, and which of a twin's tensors live inside int8 kernels.
* `run_reference` runs the reference, given what the target showed. An f32 reference can expose at once the
  tensors later measurements compare (`taps`): their values are kept (`ReadyValues`) and no later measurement
  compiles the reference for them. Beyond the tap budget, when the model can be streamed, the reference's plain
  run *is* the streamed measurement of `streamed_taps` (`bisect_ov.engine.streamed`), kept in the record.

When the samples pass compiled the untouched pair already (`Runner.compile_untouched`), it is handed to
`run_target` (a value, `compiled=`), and `run_reference` runs the reference on it and exposes nothing.
The records say what each side ran with (`TargetRun.info`, `Untouched.ref_info`: the untouched compiles' device
facts, a streamed reference's counted over its segments); the ledger only counts.

The sides run one after the other, the target first, and each compile is released once it has run: two
compiles of the whole model never live at once, so memory stays near what one plain compile takes (on 2
cores, running both sides at once saved under 5% of the time: OpenVINO already spreads one compile and one
inference over the cores). With generation steps to run, `run_reference` hands the reference's compile, the
last made, to its `keep` (a second infer request on it): the steps run the same model, and compiling it again
cost more than the steps (the steps release it before they compile the target).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from bisect_ov.core.records import DeviceInfo
from bisect_ov.engine.comparison import Sample
from bisect_ov.engine.measured import Measured
from bisect_ov.engine.runner import FinalOutput, Runner
from bisect_ov.engine.streamed import can_stream, stream
from bisect_ov.model.fusion import int8_internal
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap, TappedModel, plan_chunks, tap_model, tensor_sizes

__all__ = ["TargetRun", "ReadyValues", "Streamed", "Untouched", "run_target", "run_reference", "exposable",
           "ready_taps"]


@dataclass(frozen=True, eq=False)
class TargetRun:
    """The untouched target's run: its outputs (copies) and its runtime graph. It runs once: the noise check
    runs the target again only when a floor could change the verdict (`Engine.noise`)."""

    outputs: tuple[np.ndarray, ...]
    runtime: RuntimeGraph  # empty for an emulated device: the CPU's f32 graph of the rewritten model says nothing
    untappable: frozenset[Tap]  # reference taps whose twin tensors live inside an int8 kernel
    info: DeviceInfo | None = None  # what the untouched target compile runs with
    compiled: Any = None  # the samples pass's reference compile, when it made the pair: the reference reuses it


@dataclass(frozen=True, eq=False)
class ReadyValues:
    """A reference run made with taps: its tapped model and its outputs (read-only views) by tap."""

    model: TappedModel
    outputs: tuple[np.ndarray, ...]
    index: dict[Tap, int]


@dataclass(frozen=True, eq=False)
class Streamed:
    """The reference's plain run done as the streamed measurement of `taps` (what it measured)."""

    taps: frozenset[Tap]
    measured: Measured


@dataclass(frozen=True, eq=False)
class Untouched:
    """Both sides' untouched run: final outputs compared, kept for partitioned runs and for telling noise."""

    outputs: tuple[FinalOutput, ...]
    ref_final: tuple[np.ndarray, ...]
    target_final: tuple[np.ndarray, ...]
    target: TargetRun  # (without the samples pass's reference compile, which the reference ran)
    ready: ReadyValues | None = None
    streamed: Streamed | None = None
    ref_info: DeviceInfo | None = None  # what the reference ran with (a streamed one: over all its segments)

    @property
    def target_runtime(self) -> RuntimeGraph:
        return self.target.runtime

    @property
    def untappable(self) -> frozenset[Tap]:
        return self.target.untappable


def run_target(runner: Runner, sample: Sample, *, compiled: Any = None) -> TargetRun:
    """Compile and run the untouched target (see the module docstring).
    `compiled`: the (ref, target) pair the samples pass compiled (`Runner.compile_untouched`), run rather than
    compiling again."""
    comparison = runner.comparison
    with runner.clock("plain run"):
        if compiled is not None:  # compiled already, to run many samples: reusing them beats a recompile
            ref_c, target_c = compiled
            target_out = [np.array(a) for a in target_c.infer(list(sample.target), share_outputs=False)]
        else:
            target_c = runner.compile("target", comparison.target_graph.model)
            target_out = [np.array(a) for a in target_c.infer(list(sample.target))]  # copies: outlive the compile
        runner.ran("target")
        runner.note("target", target_c)
        runtime = RuntimeGraph() if target_c.info.emulated else target_c.runtime
        untappable: frozenset[Tap] = frozenset()
        if comparison.twin:
            inside = int8_internal(comparison.target_graph, runtime)
            untappable = frozenset(r for r, t in comparison.target_of.items() if t.key in inside)
    return TargetRun(tuple(target_out), runtime, untappable, target_c.info,
                     ref_c if compiled is not None else None)


def run_reference(runner: Runner, sample: Sample, target: TargetRun, *, taps: Sequence[Tap] = (),
                  stream_bytes: int | None = None, streamed_taps: Sequence[Tap] | None = None,
                  keep: Callable[[Any], None] | None = None) -> Untouched:
    """Run the untouched reference; see the module docstring for `taps`, streaming and `keep` (given, it
    receives a second infer request on the reference's untouched compile, for later runs of the same model).

    `taps`: tensors later measurements will compare, exposed at once by an f32 reference that fits
    `stream_bytes` in one compile. `streamed_taps`: beyond that budget, the ones a streamed run measures (the
    others are values for local-error runs, which a streamed run does not keep; exposing them on the target
    too would change what it compiles). None: all of `taps`.
    """
    comparison = runner.comparison
    graph = comparison.graph
    n = len(graph.model.outputs)
    target_out = list(target.outputs)
    target_final = tuple(np.array(a) for a in target_out[:n])
    with runner.clock("plain run"):
        if target.compiled is not None:  # the samples pass's pair: the reference compile is ready
            ref_c = target.compiled
            ref_out = ref_c.infer(list(sample.ref), share_outputs=False)
            runner.ran("ref")
            runner.note("ref", ref_c)
            _keep(keep, ref_c)
            return _untouched(runner, ref_out, target_out, target_final, replace(target, compiled=None),
                              ref_info=ref_c.info)
        sizes = tensor_sizes(graph, list(sample.ref))
        wanted, fits = exposable(comparison, taps, target.untappable, stream_bytes, sizes)
        if wanted and not fits and stream_bytes is not None and can_stream(comparison, target.untappable):
            if streamed_taps is not None:
                kept = set(wanted)
                wanted = [t for t in dict.fromkeys(streamed_taps) if t in kept]
            # Each part's reference values are dropped as it arrives: kept, they held every segment's tensors
            # to the end (a Whisper encoder's peak grew by each segment's).
            parts = [replace(part, values=None)
                     for part in stream(runner, sample, wanted, stream_bytes, target_runtime=target.runtime,
                                        sizes=sizes, untouched_target=target_final, desc="plain run")]
            finals = parts[-1].finals
            assert finals is not None  # the last part of a streamed run carries its final outputs
            measured = Measured.of(parts)
            return _untouched(runner, finals[0], target_out, target_final, target,
                              streamed=Streamed(frozenset(wanted), measured), ref_info=parts[-1].ref_info)
        tapped = tap_model(graph, wanted) if ready_taps(comparison, wanted, fits) else None
        ref_c = runner.compile("ref", tapped.model if tapped else graph.model,
                               taps=tapped.added_outputs if tapped else ())
        # The outputs are views on the request's tensors, which they keep alive: nothing is copied, and no
        # later call on this compile can overwrite them, as it is released here.
        ref_out = ref_c.infer(list(sample.ref))
        runner.ran("ref")
        runner.note("ref", ref_c)
        _keep(keep, ref_c)
        ref_info = ref_c.info
        del ref_c
        ready = None
        if tapped is not None:
            for array in ref_out:
                array.flags.writeable = False  # handed out by `Engine.ref_values` without copies
            ready = ReadyValues(tapped, tuple(ref_out), dict(zip(wanted, tapped.tap_outputs)))
    return _untouched(runner, ref_out, target_out, target_final, target, ready=ready, ref_info=ref_info)


def exposable(comparison: Any, taps: Sequence[Tap], untappable: frozenset[Tap], stream_bytes: int | None,
              sizes: Mapping[Tap, int] | None) -> tuple[list[Tap], bool]:
    """Of `taps`, those the reference's plain run can expose (a target counterpart, not inside a twin's int8
    kernel), and whether they fit one compile of `stream_bytes`."""
    wanted = [t for t in dict.fromkeys(taps) if t in comparison.target_of and t not in untappable]
    return wanted, len(plan_chunks(comparison.graph, wanted, stream_bytes, sizes or None)) == 1


def ready_taps(comparison: Any, wanted: list[Tap], fits: bool) -> list[Tap]:
    """What `run_reference` exposes in the reference's plain run and keeps as `ReadyValues`, given `exposable`'s
    answer: the taps when they fit one compile of an f32 reference, else none."""
    return wanted if wanted and fits and comparison.ref.activation_precision == "f32" else []


def _keep(keep: Callable[[Any], None] | None, compiled: Any) -> None:
    """Hand `keep` a second infer request on `compiled` (`another`), so later runs leave the output views of
    the untouched run alone; a compile without one is not kept."""
    another = getattr(compiled, "another", None)
    if keep is not None and another is not None:
        keep(another())


def _untouched(runner: Runner, ref_out, target_out, target_final, target: TargetRun, *,
               ready: ReadyValues | None = None, streamed: Streamed | None = None,
               ref_info: DeviceInfo | None = None) -> Untouched:
    n = len(runner.graph.model.outputs)
    outputs = tuple(runner.final_outputs(ref_out, target_out, n))
    # Kept for partitioned runs, which compare their final outputs with the reference's.
    ref_final = tuple(np.array(a) for a in ref_out[:n])
    # The target's target_final tells noise: a later compile of the target (with taps) that reproduces these
    # bits shows that compiling again does not change the answer.
    return Untouched(outputs, ref_final, target_final, target, ready, streamed, ref_info)

