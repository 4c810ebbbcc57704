"""A measuring session: both sides of one comparison, ready to run the model with any set of taps.

`Session` owns the walked graph(s), the node matching, the two devices and the inputs. `plain()` runs the
untouched model on both sides (the divergence to explain, and the target's fusion groups from its runtime
graph); `measure(taps)` compiles a tapped copy on both sides, runs it once, compares each tapped pair as it
arrives and keeps only statistics. Every compile is counted, every tapped run's final-output error kept for
the fidelity check, and the runtime info (kernel, precision, fusion group) of every compiled layer collected.
Search strategies (`bisect_ov.search.strategies`) decide which taps to measure.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from typing import Any, Callable, Collection, Iterator, Mapping, Sequence

import numpy as np
from tqdm import tqdm

from bisect_ov.analysis.exactness import EXACT_OPS, ExactCheck, check_node, exact_candidates
from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.model.fusion import int8_internal
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.match import Match
from bisect_ov.model.partition import extract, last_uses, plan_segments
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap, plan_chunks, tap_model, tensor_sizes
from bisect_ov.run.devices import Device, DeviceInfo, bf16_to_f32, kept_outputs

__all__ = ["Session", "Clock", "PIECE_CACHE"]

PIECE_CACHE = 256  # compiled segments kept for reuse by partitioned runs


class Clock:
    """Wall time per named step (`clock("compile")`), and per pipeline stage (`clock.stage("capture")`) the
    time and the compiles and inferences made on each side while it ran: what each stage cost."""

    def __init__(self) -> None:
        self.stages: dict[str, float] = {}
        self.costs: dict[str, dict[str, float]] = {}
        self._stage = "open"
        self._stage_start = time.perf_counter()

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stages[stage] = round(self.stages.get(stage, 0.0) + time.perf_counter() - start, 4)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Attribute what happens meanwhile to pipeline stage `name`."""
        outer, outer_start = self._stage, self._stage_start
        self._stage, self._stage_start = name, time.perf_counter()
        try:
            yield
        finally:
            cost = self._cost(name)
            cost["seconds"] = round(cost["seconds"] + time.perf_counter() - self._stage_start, 4)
            self._stage, self._stage_start = outer, outer_start

    def snapshot(self) -> dict[str, dict[str, float]]:
        """The costs so far, the running stage's time included (a copy)."""
        costs = {k: dict(v) for k, v in self.costs.items()}
        running = costs.setdefault(self._stage, {"seconds": 0.0, "ref_compiles": 0, "target_compiles": 0,
                                                 "ref_infers": 0, "target_infers": 0})
        running["seconds"] = round(running["seconds"] + time.perf_counter() - self._stage_start, 4)
        return costs

    def count(self, what: str, side: str, n: int = 1) -> None:
        """Count `n` compiles or inferences (`what`: ``compiles``/``infers``) on `side` in the current stage."""
        self._cost(self._stage)[f"{side}_{what}"] += n

    def _cost(self, name: str) -> dict[str, float]:
        return self.costs.setdefault(name, {"seconds": 0.0, "ref_compiles": 0, "target_compiles": 0,
                                            "ref_infers": 0, "target_infers": 0})


class Session:
    """Both sides of a comparison; see the module docstring."""

    def __init__(self, graph: ModelGraph, target_graph: ModelGraph, match: Match, ref: Device, target: Device,
                 ref_arrays: Sequence[np.ndarray], target_arrays: Sequence[np.ndarray], *,
                 clock: Clock | None = None, progress: bool = False, exact_checks: bool = True):
        self.graph = graph
        self.target_graph = target_graph
        self.match = match
        self.target_of: dict[Tap, Tap] = dict(match.pairs)
        self.ref, self.target = ref, target
        self._ref_arrays, self._target_arrays = list(ref_arrays), list(target_arrays)
        self.clock = clock or Clock()
        self.progress = progress
        self._compiles = {"ref": 0, "target": 0}
        self.ref_info: DeviceInfo | None = None
        self.target_info: DeviceInfo | None = None
        self.runtime_ref: dict[str, dict] = {}
        self.runtime_target: dict[str, dict] = {}
        self.target_runtime: RuntimeGraph = RuntimeGraph()  # of the untouched model: its real fusion groups
        self.outputs: list[tuple[str, str, TensorStats]] = []
        self.ref_final: list[np.ndarray] = []
        self._tapped_runs: list[list[tuple[str, str, TensorStats]]] = []
        self._exact: dict[str, ExactCheck] = {}
        self._exact_checks = exact_checks
        self._ref_ready: _ReadyRun | None = None  # a reference compile with taps, made by `plain` for `measure`
        self._untouched = None  # (ref, target) compiles of the untouched model, when made before `plain`
        self._plain_target_final: list[np.ndarray] = []
        self._reproduced = False  # an instrumented target compile gave the plain run's outputs bit for bit
        self._run_to_run: float | None = None  # the plain target compile run twice (`plain(repeat=True)`)
        self._sizes: dict[Tap, int] | None = None  # bytes of each reference tensor for these inputs
        self._streamed: tuple[frozenset[Tap], dict[Tap, TensorStats]] | None = None  # measured by `plain`
        self._streamed_ref_final: list[np.ndarray] = []
        self._target_output = _target_output_positions(graph, target_graph, self.target_of)
        self._untappable: frozenset[Tap] = frozenset()
        self._pieces: dict[tuple, tuple[Any, Any]] = {}  # (side, segment, outputs) -> (piece, compiled)

    # ----- state, read-only from outside ------------------------------------------------------------
    @property
    def ref_arrays(self) -> list[np.ndarray]:
        """The reference's inputs of the sample being examined."""
        return self._ref_arrays

    @property
    def target_arrays(self) -> list[np.ndarray]:
        """The target's inputs of the sample being examined (the twin's input order with `target_model`)."""
        return self._target_arrays

    @property
    def compiles(self) -> dict[str, int]:
        """Compiles made so far per side (a copy)."""
        return dict(self._compiles)

    @property
    def tapped_runs(self) -> tuple[list[tuple[str, str, TensorStats]], ...]:
        """Final-output statistics of every instrumented run so far, for the fidelity check."""
        return tuple(self._tapped_runs)

    @property
    def target_output_positions(self) -> list[int]:
        """For each reference output (model order), the position of its counterpart among the target's outputs."""
        return list(self._target_output)

    @property
    def untappable(self) -> frozenset[Tap]:
        """Reference taps never exposed: their twin tensors live inside an int8 kernel (`model.fusion.int8_internal`)."""
        return self._untappable

    @property
    def exact(self) -> dict[str, ExactCheck]:
        """Integer Conv/MatMul nodes checked against their exact result, by node key (a copy)."""
        return dict(self._exact)

    @property
    def tensor_sizes(self) -> dict[Tap, int]:
        """Bytes of each reference tensor for the inputs being examined (`model.taps.tensor_sizes`)."""
        if self._sizes is None:
            self._sizes = tensor_sizes(self.graph, self._ref_arrays)
        return self._sizes

    def chunks(self, taps: Sequence[Tap], max_bytes: int | None) -> list[list[Tap]]:
        """`taps` in chunks whose tensors fit `max_bytes` for the inputs being examined."""
        sizes = self.tensor_sizes
        return plan_chunks(self.graph, taps, max_bytes, sizes or None)

    def select_sample(self, ref_arrays: Sequence[np.ndarray], target_arrays: Sequence[np.ndarray]) -> None:
        """Examine another sample from now on (the worst of many, or a generation step)."""
        self._ref_arrays, self._target_arrays = list(ref_arrays), list(target_arrays)
        self._sizes = None
        self._pieces.clear()  # compiled for the previous sample's shapes

    def forget_tapped_runs(self) -> None:
        """Drop the fidelity history (a strategy that is abandoned does not speak for the next one)."""
        self._tapped_runs.clear()

    def compile_pair(self, ref_model, target_model, *, ref_taps: Sequence[int] = (), target_taps: Sequence[int] = ()):
        """Compile one model per side at once (counted); returns (ref compiled, target compiled)."""
        with self.clock("compile"):
            ref_c, target_c = run_both(lambda: self.ref.compile(ref_model, taps=ref_taps),
                                       lambda: self.target.compile(target_model, taps=target_taps))
        self._count(ref_c, target_c)
        return ref_c, target_c

    def compile_untouched(self):
        """Compile the untouched model on both sides; `plain` then reuses these compiles (many samples)."""
        self._untouched = self.compile_pair(self.graph.model, self.target_graph.model)
        return self._untouched

    # ----- running ------------------------------------------------------------------------------------
    def plain(self, ref_taps: Sequence[Tap] | Callable[[], Sequence[Tap]] = (), *,
              repeat: bool = False, stream_bytes: int | None = None,
              streamed_taps: Callable[[], Sequence[Tap]] | None = None) -> list[tuple[str, str, TensorStats]]:
        """Run the untouched model on both sides; returns (name, result key, stats) per final output.

        `ref_taps`: taps later measurements may ask for, or a function that names them once the target has
        compiled (its runtime graph and fusion groups are then known). An f32 reference then compiles with
        them at once and keeps the values of that run: `measure` and `ref_values` take the reference's side of
        any of these taps from it, without compiling the reference again. The target always runs untouched:
        its fidelity is what the plain run is for. `repeat`: run the target's compile a second time, for the
        run-to-run noise (`noise`), so that compile need not be kept.

        `stream_bytes`: when `ref_taps` do not fit that budget and the model can be streamed, the reference's
        plain run is the streamed measurement of them (`measure_streamed`): its segments give the reference's
        final outputs, and `measure_chunked` of those taps returns what it measured instead of running again.
        `streamed_taps()`, when given, names the ones to measure then (called after `ref_taps()`): the others
        are values for local-error runs, which a streamed run does not keep, and exposing them on the target
        too would change what it compiles.

        The sides run one after the other, the target first, and each compile is released once it has run:
        two compiles of the whole model never live at once, so memory stays near what one plain compile takes
        (on 2 cores, running both sides at once saved under 5% of the time: OpenVINO already spreads one
        compile and one inference over the cores).
        """
        compiled, self._untouched = self._untouched, None
        self._ref_ready = None
        n = len(self.graph.model.outputs)
        ref_model = None
        with self.clock("plain run"):
            if compiled is not None:  # compiled already, to run many samples: reusing them beats a recompile
                ref_c, target_c = compiled
                ref_out, target_out = run_both(partial(ref_c.infer, self._ref_arrays, share_outputs=False),
                                               partial(target_c.infer, self._target_arrays, share_outputs=False))
                self._ran_both()
                self._note_side("ref", ref_c)
            else:
                target_c = self.target.compile(self.target_graph.model)
                self._compiled_one("target")
                target_out = [np.array(a) for a in target_c.infer(self._target_arrays)]  # copies: `repeat` reruns
                self.ran("target")
            self._note_side("target", target_c)
            self._run_to_run = None
            if repeat:
                again = target_c.infer(self._target_arrays)
                self.ran("target")
                self._run_to_run = max((compare(a, b).rel_l2 for a, b in zip(target_out[:n], again[:n])), default=0.0)
            # An emulated device's runtime graph is the CPU's f32 graph of the rewritten model: its fusion
            # groups and kernels say nothing about the emulated device, so they are not used.
            self.target_runtime = RuntimeGraph() if target_c.info.emulated else target_c.runtime
            if self.target_graph is not self.graph:
                inside = int8_internal(self.target_graph, self.target_runtime)
                self._untappable = frozenset(r for r, t in self.target_of.items() if t.key in inside)
            del target_c  # released before the reference compiles
            self._streamed = None
            if compiled is None:
                wanted = ref_taps() if callable(ref_taps) else ref_taps
                wanted = [t for t in dict.fromkeys(wanted) if t in self.target_of and t not in self._untappable]
                fits = len(self.chunks(wanted, stream_bytes)) == 1
                if wanted and not fits and stream_bytes is not None and self.can_stream:
                    self._plain_target_final = [np.array(a) for a in target_out[:n]]
                    self._reproduced = False
                    if streamed_taps is not None:
                        kept = set(wanted)
                        wanted = [t for t in dict.fromkeys(streamed_taps()) if t in kept]
                    stats = self.measure_streamed(wanted, stream_bytes, desc="plain run")
                    self._streamed = (frozenset(wanted), stats)
                    ref_out = self._streamed_ref_final
                    self.outputs = self._final_outputs(ref_out, target_out, n)
                    self.ref_final = [np.array(a) for a in ref_out[:n]]
                    return self.outputs
                if wanted and fits and self.ref.activation_precision == "f32":
                    ref_model = tap_model(self.graph, wanted)
                ref_c = self.ref.compile(ref_model.model if ref_model else self.graph.model,
                                         taps=ref_model.added_outputs if ref_model else ())
                self._compiled_one("ref")
                # The outputs are views on the request's tensors, which they keep alive: nothing is copied,
                # and no later call on this compile can overwrite them, as it is released here.
                ref_out = ref_c.infer(self._ref_arrays)
                self.ran("ref")
                self._note_side("ref", ref_c)
                del ref_c
                if ref_model is not None:
                    for array in ref_out:
                        array.flags.writeable = False  # handed out by `ref_values` without copies
                    self._ref_ready = _ReadyRun(ref_model, ref_out, dict(zip(wanted, ref_model.tap_outputs)))
            self.outputs = self._final_outputs(ref_out, target_out, n)
            # Kept for partitioned runs, which compare their final outputs with the reference's.
            self.ref_final = [np.array(a) for a in ref_out[:n]]
            # Kept to tell noise: a later compile of the target (with taps) that reproduces these bits shows that
            # compiling again does not change the answer.
            self._plain_target_final = [np.array(a) for a in target_out[:n]]
            self._reproduced = False
        return self.outputs

    def noise(self, *, extra_work: bool = True) -> dict[str, float]:
        """The target against itself: two runs of the plain compile, and another compile.

        Returns the largest relative L2 difference of the final outputs between two runs of one compile and
        between two compiles (0.0 when bit-identical). Differences below this floor are not the model's doing.
        The run-to-run figure is the plain run's second run (`plain(repeat=True)`). The instrumented target
        compiles already made count as the second compile when one of them reproduced the plain run's
        outputs bit for bit; only otherwise is the untouched model compiled again. With ``extra_work=False``
        nothing more is run: only what those runs showed is reported (an unmeasured figure as 0.0).
        """
        with self.clock("noise"):
            plain = self._plain_target_final
            result: dict[str, float] = {}
            if self._run_to_run is not None:
                result["run_to_run"] = self._run_to_run
            if self.target_info is not None and self.target_info.emulated:
                # An emulated device is the CPU in f32 running fixed arithmetic: recompiling it proves nothing.
                return result if result else {"run_to_run": 0.0}
            if self._reproduced or not extra_work:
                result.setdefault("run_to_run", 0.0)
                if self._reproduced:
                    result["compile_to_compile"] = 0.0
                return result
            recompiled = self.target.compile(self.target_graph.model)
            self._compiled_one("target")
            other = recompiled.infer(self._target_arrays, share_outputs=False)
            self.ran("target")
            result["compile_to_compile"] = max((compare(a, b).rel_l2 for a, b in zip(plain, other)), default=0.0)
            if "run_to_run" not in result:
                again = recompiled.infer(self._target_arrays)
                self.ran("target")
                result["run_to_run"] = max((compare(a, b).rel_l2 for a, b in zip(other, again)), default=0.0)
        return result

    def fetch(self, taps: Sequence[Tap]) -> dict[Tap, tuple[np.ndarray, np.ndarray]]:
        """The reference's and the target's values of `taps` (copies), in one compile per side."""
        taps = [t for t in dict.fromkeys(taps) if t in self.target_of]
        if not taps:
            return {}
        ref_tapped = tap_model(self.graph, taps)
        target_tapped = tap_model(self.target_graph, [self.target_of[t] for t in taps])
        ref_c, target_c = self.compile_pair(ref_tapped.model, target_tapped.model, ref_taps=ref_tapped.added_outputs,
                                            target_taps=target_tapped.added_outputs)
        with self.clock("infer"):
            ref_out, target_out = run_both(lambda: ref_c.infer(self._ref_arrays, share_outputs=False),
                                           lambda: target_c.infer(self._target_arrays, share_outputs=False))
        self._ran_both()
        return {t: (ref_out[ri], target_out[ti])
                for t, ri, ti in zip(taps, ref_tapped.tap_outputs, target_tapped.tap_outputs)}

    def ref_values(self, taps: Sequence[Tap]) -> dict[Tap, np.ndarray]:
        """The reference's values of `taps` (copies), in one reference compile."""
        taps = list(dict.fromkeys(taps))
        values: dict[Tap, np.ndarray] = {}
        params = [t for t in taps if self.graph[t.key].kind == "parameter"]
        for t in params:
            values[t] = self._ref_arrays[self.graph.parameter_position[t.key]]
        ready = self._ref_ready
        if ready is not None:
            values.update({t: ready.outputs[ready.index[t]] for t in taps
                           if t not in values and t in ready.index})
        rest = [t for t in taps if t not in values]
        if rest:
            tapped = tap_model(self.graph, rest)
            with self.clock("compile"):
                compiled = self.ref.compile(tapped.model, taps=tapped.added_outputs)
            self._compiled_one("ref")
            with self.clock("infer"):
                out = compiled.infer(self._ref_arrays, share_outputs=False)
            self.ran("ref")
            values.update({t: out[i] for t, i in zip(rest, tapped.tap_outputs)})
        return values

    def run_piece(self, side: str, piece, values: dict[Tap, np.ndarray], final: frozenset[Tap] = frozenset()
                  ) -> list[np.ndarray]:
        """Compile an extracted piece on one side and run it on `values` (its fed tensors); copies out.

        Outputs hand values on like taps, in the precision the device stores activations in, except the
        model's own outputs (`final`), which the plugin produces as the plain model would.
        """
        with self.clock("compile"):
            compiled = self._compile_piece(side, piece, final)
        return self._run_compiled_piece(side, piece, compiled, values)

    def run_segment(self, side: str, segment: Sequence[str], outputs: Sequence[Tap], make_piece: Callable[[], Any],
                    values: dict[Tap, np.ndarray], final: frozenset[Tap] = frozenset(), *, keep: bool = True
                    ) -> list[np.ndarray]:
        """`run_piece` for a segment of the graph, compiled once per side and reused by later partitioned runs.

        A fix search or a delegation search runs the same segments again and again (everything between two
        kept nodes); compiling each once keeps a search over a deep model affordable. At most `PIECE_CACHE`
        compiled pieces are kept, the oldest dropped first; with ``keep=False`` the compile is released after
        its run (a segment run once).
        """
        key = (side, tuple(segment), tuple(outputs))
        found = self._pieces.get(key)
        if found is None:
            piece = make_piece()
            with self.clock("compile"):
                found = (piece, self._compile_piece(side, piece, final))
            if keep:
                if len(self._pieces) >= PIECE_CACHE:
                    self._pieces.pop(next(iter(self._pieces)))
                self._pieces[key] = found
        return self._run_compiled_piece(side, *found, values)

    def _compile_piece(self, side: str, piece, final: frozenset[Tap], handed: Collection[Tap] | None = None):
        """Compile an extracted piece (counted): values cross its cuts in the precision the target stored them.

        `handed`: the outputs later pieces read (None: all of them). The others are only compared, and are typed
        in the device's activation precision, as `measure` types its taps: an f32 output makes the CPU plugin
        run the op before it in f32, and an EfficientNet-B0 streamed with its squeeze-and-excite means typed
        as stored (f32) ran them, and the convolutions before them, in f32 (fidelity 0.78).
        """
        device = self.target if side == "target" else self.ref
        low = self._stored_low if side == "target" else (lambda t: True)
        typed = tuple(i for i, t in enumerate(piece.outputs)
                      if t not in final and (low(t) or (handed is not None and t not in handed)))
        fed = tuple(i for i, t in enumerate(piece.fed) if low(t))
        compiled = device.compile(piece.model, taps=typed, fed=fed)
        self._compiled_one(side)
        return compiled

    def _run_compiled_piece(self, side: str, piece, compiled, values: Mapping[Tap, np.ndarray], *,
                            share: bool = False) -> list[np.ndarray]:
        """Run a compiled piece fed with `values`; `share`: outputs as views valid until the next run."""
        arrays = self._target_arrays if side == "target" else self._ref_arrays
        feed = [values[t] for t in piece.fed] + [arrays[i] for i in piece.model_inputs]
        self.ran(side)
        with self.clock("infer"):
            return compiled.infer(feed, share_outputs=share)

    def _stored_low(self, tap: Tap) -> bool:
        """Whether the untouched target stored this tensor (a target-graph tap) in its activation precision.

        The CPU plugin in bf16 keeps some tensors in f32 (residual sums, some convolutions' outputs): a value
        handed between pieces must keep that precision, or rounding it adds error the whole model never had
        (it doubled a Whisper encoder's final-output error). Without a runtime graph (emulated devices, which
        round every tensor), every tensor is taken as stored in the activation precision.
        """
        layer = self.target_runtime.by_original.get(tap.key)
        if layer is None or not layer.output_precisions:
            return True
        precision = layer.output_precisions[min(tap.port, len(layer.output_precisions) - 1)]
        return precision not in ("f32", "f64", "fp32")

    @property
    def can_stream(self) -> bool:
        """Whether `measure_chunked` may run the model segment by segment (`measure_streamed`): one model on
        both sides, devices that run pieces fed with values, an f32 reference (whose values cross cuts as
        they are), and model outputs that compute nodes or inputs produce."""
        graph = self.graph
        return (self.target_graph is graph and self.ref.can_run_pieces and self.target.can_run_pieces
                and not self._untappable and self.ref.activation_precision in ("f32", "")
                and all(graph[r.inputs[0][0]].kind in ("compute", "parameter") for r in graph.results()))

    def measure_streamed(self, taps: Sequence[Tap], max_bytes: int, *, desc: str = "compare",
                         on_segment: Callable[[dict[Tap, np.ndarray], dict[Tap, TensorStats]], None] | None = None
                         ) -> dict[Tap, TensorStats]:
        """Measure `taps` running the model segment by segment on each side, each fed its own side's values.

        The segments (`model.partition.plan_segments`) end where every floating-point tensor crossing the cut
        is a tap, so each side computes what one compile exposing `taps` would, while only one segment's
        tensors and the values crossing into later segments are held at once: memory stays bounded by
        `max_bytes` instead of growing with the model. Compiles cost about one whole-model compile per side in
        all. `on_segment(ref_values, stats)` is called after each segment with the reference's values of its
        taps and of the tensors it reads, while they are still held (local errors run there).
        """
        graph = self.graph
        order = [n.key for n in graph.candidates()]
        wanted = [t for t in dict.fromkeys(taps) if t in self.target_of]
        tapped = set(wanted)
        parts = plan_segments(graph, order, tapped, self.tensor_sizes, max_bytes)
        position = {k: i for i, k in enumerate(order)}
        results = graph.results()
        final_taps = [Tap(*r.inputs[0]) for r in results]
        final = frozenset(final_taps)
        last_use = last_uses(graph, order)
        values: dict[str, dict[Tap, np.ndarray]] = {"ref": {}, "target": {}}
        bits: dict[str, set[Tap]] = {"ref": set(), "target": set()}  # values held as bf16 bits: half the bytes

        def read(side: str, t: Tap) -> np.ndarray:
            return bf16_to_f32(values[side][t]) if t in bits[side] else values[side][t]

        for p in graph.parameters():
            values["ref"][Tap(p.key, 0)] = self._ref_arrays[graph.parameter_position[p.key]]
            values["target"][Tap(p.key, 0)] = self._target_arrays[graph.parameter_position[p.key]]
        stats: dict[Tap, TensorStats] = {}
        counts: Counter = Counter()
        first_info = self.ref_info is None
        with tqdm(total=len(wanted), desc=f"{desc} (streamed)", unit="tensor", disable=not self.progress,
                  leave=False) as bar:
            for segment in parts:
                end = position[segment[-1]]
                produced = [Tap(k, t.port) for k in segment for t in graph[k].outputs]
                outputs = [t for t in produced if t in tapped or last_use.get(t, 0) > end or t in final]
                if not outputs:
                    continue
                handed = {t for t in outputs if last_use.get(t, 0) > end}
                piece = extract(graph, segment, outputs)
                with self.clock("compile and infer"):
                    for side in ("ref", "target"):
                        compiled = self._compile_piece(side, piece, final, handed)
                        if side == "ref":
                            counts.update(compiled.info.precision_counts)
                            self.ref_info = self.ref_info or compiled.info
                        fed = {t: read(side, t) for t in piece.fed}
                        got, low = kept_outputs(self._run_compiled_piece(side, piece, compiled, fed, share=True))
                        values[side].update(zip(outputs, got))
                        bits[side].update(outputs[i] for i in low)
                        del fed
                    compiled = None
                with self.clock("compare"):
                    here = [t for t in outputs if t in tapped]
                    ref_list = list(values["ref"].values())
                    ref_of = {t: j for j, t in enumerate(values["ref"])}
                    found = {}
                    target_value = None
                    for tap in here:
                        target_value = read("target", tap)  # widened one tensor at a time
                        found[tap] = compare(values["ref"][tap], target_value)
                        self._check_exact(tap, ref_list, [target_value], ref_of[tap], 0, ref_of)
                    stats.update(found)
                    bar.update(len(here))
                if on_segment is not None:
                    on_segment(dict(values["ref"]), found)
                # Nothing of this segment outlives it but the values later segments read: the next compile and
                # inference must not run beside its outputs (they were a Whisper encoder's peak).
                del got, ref_list, target_value, found
                # What no later segment reads is dropped: memory holds one segment and what crosses its cut.
                for side in ("ref", "target"):
                    for t in [t for t in values[side] if last_use.get(t, len(order)) <= end and t not in final
                              and graph[t.key].kind != "parameter"]:
                        del values[side][t]
                        bits[side].discard(t)
        ref_final = [read("ref", t) for t in final_taps]
        target_final = [read("target", t) for t in final_taps]
        self._streamed_ref_final = ref_final
        if first_info and self.ref_info is not None:  # what the reference ran with, over all its segments
            self.ref_info = replace(self.ref_info, precision_counts=dict(counts))
        self._tapped_runs.append(self._final_outputs(ref_final, target_final, len(final_taps)))
        if not self._reproduced and self._plain_target_final:
            self._reproduced = all(np.array_equal(a, b, equal_nan=True)
                                   for a, b in zip(self._plain_target_final, target_final))
        return stats

    def measure(self, taps: Sequence[Tap], *, bar: tqdm | None = None) -> dict[Tap, TensorStats]:
        """Expose `taps` (reference-side taps; matched target taps are found) in one compile per side."""
        taps = [t for t in taps if t in self.target_of and t not in self._untappable]
        target_tapped = tap_model(self.target_graph, [self.target_of[t] for t in taps])
        ready = self._ref_ready
        if ready is not None and all(t in ready.index for t in taps):
            # The reference ran with these taps (and maybe more) in `plain`: only the target compiles.
            ref_out = ready.outputs
            ref_positions = [ready.index[t] for t in taps]
            n_original = ready.model.n_original_outputs
            with self.clock("compile and infer"):
                target_c, target_out = _compile_and_run(self.target, target_tapped.model, self._target_arrays,
                                                        target_tapped.added_outputs)
            self._compiled_one("target")
            self.ran("target")
            if not target_c.info.emulated:
                _collect_runtime(self.runtime_target, target_c.runtime)
        else:
            ref_tapped = tap_model(self.graph, taps)
            # Each side compiles and runs in its own thread: one side's inference overlaps the other's compile.
            with self.clock("compile and infer"):
                (ref_c, ref_out), (target_c, target_out) = run_both(
                    lambda: _compile_and_run(self.ref, ref_tapped.model, self._ref_arrays, ref_tapped.added_outputs),
                    lambda: _compile_and_run(self.target, target_tapped.model, self._target_arrays,
                                             target_tapped.added_outputs))
            self._count(ref_c, target_c)
            self._ran_both()
            ref_positions, n_original = list(ref_tapped.tap_outputs), ref_tapped.n_original_outputs
        stats: dict[Tap, TensorStats] = {}
        with self.clock("compare"):
            self._tapped_runs.append(self._final_outputs(ref_out, target_out, n_original))
            if not self._reproduced and self._plain_target_final:
                self._reproduced = all(np.array_equal(a, b, equal_nan=True) for a, b in
                                       zip(self._plain_target_final, target_out[:n_original]))
            ref_of = dict(zip(taps, ref_positions))
            pairs = list(zip(taps, ref_positions, target_tapped.tap_outputs))
            # numpy releases the GIL on large arrays: two threads compare two tensors at a time.
            with ThreadPoolExecutor(max_workers=2) as pool:
                for (tap, ri, ti), result in zip(pairs, pool.map(lambda p: compare(ref_out[p[1]], target_out[p[2]]), pairs)):
                    stats[tap] = result
                    self._check_exact(tap, ref_out, target_out, ri, ti, ref_of)
                    if bar is not None:
                        bar.update(1)
        return stats

    def measure_chunked(self, taps: Sequence[Tap], max_bytes: int | None, *, desc: str = "compare",
                        on_segment: Callable[[dict[Tap, np.ndarray], dict[Tap, TensorStats]], None] | None = None
                        ) -> dict[Tap, TensorStats]:
        """`measure` in as many compiles as the byte budget needs, with a progress bar over tensors.

        When the taps do not fit one compile and the model can run in pieces, it is measured segment by
        segment instead (`measure_streamed`), which compiles each op once per side rather than once per chunk.
        """
        wanted = [t for t in taps if t in self.target_of and t not in self._untappable]
        measured, self._streamed = self._streamed, None
        if measured is not None and set(wanted) <= measured[0]:  # streamed by `plain` already
            return {t: measured[1][t] for t in wanted if t in measured[1]}
        chunks = self.chunks(wanted, max_bytes)
        if len(chunks) > 1 and max_bytes is not None and self.can_stream:
            return self.measure_streamed([t for c in chunks for t in c], max_bytes, desc=desc, on_segment=on_segment)
        stats: dict[Tap, TensorStats] = {}
        with tqdm(total=sum(map(len, chunks)), desc=desc, unit="tensor", disable=not self.progress, leave=False) as bar:
            for i, chunk in enumerate(chunks):
                bar.set_description(f"{desc} {i + 1}/{len(chunks)}" if len(chunks) > 1 else desc)
                stats.update(self.measure(chunk, bar=bar))
        return stats

    # ----- helpers ------------------------------------------------------------------------------------
    def _compiled_one(self, side: str) -> None:
        self._compiles[side] += 1
        self.clock.count("compiles", side)

    def ran(self, side: str, n: int = 1) -> None:
        """Count `n` inferences on `side` (for the per-stage cost)."""
        self.clock.count("infers", side, n)

    def _ran_both(self) -> None:
        self.ran("ref")
        self.ran("target")

    def _count(self, ref_c, target_c) -> None:
        self._compiled_one("ref")
        self._compiled_one("target")
        self._note(ref_c, target_c)

    def _note(self, ref_c, target_c) -> None:
        self._note_side("ref", ref_c)
        self._note_side("target", target_c)

    def _note_side(self, side: str, compiled) -> None:
        """Remember what a side ran with: device facts and per-layer runtime info."""
        if side == "ref":
            self.ref_info = self.ref_info or compiled.info
        else:
            self.target_info = self.target_info or compiled.info
        if not compiled.info.emulated:
            _collect_runtime(self.runtime_ref if side == "ref" else self.runtime_target, compiled.runtime)

    def _final_outputs(self, ref_out, target_out, n: int) -> list[tuple[str, str, TensorStats]]:
        outputs = []
        for result_node, r, i in zip(self.graph.results(), ref_out[:n], self._target_output[:n]):
            t = target_out[i]
            outputs.append((self.graph.output_name(result_node.key), result_node.key, compare(r, t)))
        return outputs

    def _check_exact(self, tap: Tap, ref_out, target_out, ri: int, ti: int, ref_of: dict[Tap, int]) -> None:
        """For Conv/MatMul over integer-valued inputs, compare both sides with the exact int64 result."""
        if not self._exact_checks:  # sampled outputs (a stats capture) are not whole tensors
            return
        node = self.graph[tap.key]
        if node.op_type not in EXACT_OPS or tap.port != 0 or node.key in self._exact:
            return

        def value(key: str, port: int):
            if self.graph[key].kind == "parameter":
                return self._ref_arrays[self.graph.parameter_position[key]]
            return ref_out[ref_of[Tap(key, port)]] if Tap(key, port) in ref_of else None

        check = check_node(self.graph, tap.key, value, ref_out[ri], target_out[ti])
        if check is not None:
            self._exact[node.key] = check

    def exact_candidates(self) -> list[str]:
        """Integer Conv/MatMul nodes of the reference model (`analysis.exactness.exact_candidates`)."""
        return exact_candidates(self.graph) if self._exact_checks else []


class _ReadyRun:
    """A reference run made with taps by `plain`: its tapped model, its outputs (read-only copies) by tap."""

    def __init__(self, model, outputs, index: dict[Tap, int]):
        self.model, self.outputs, self.index = model, outputs, index


def _target_output_positions(graph: ModelGraph, target_graph: ModelGraph, target_of: dict[Tap, Tap]) -> list[int]:
    """For each reference output (in model order), the position of the same output among the target's.

    One model on both sides: the same positions. A twin: the target's Result that reads the matched tensor, else
    the one with the same name, else the same position.
    """
    ref_results, target_results = graph.results(), target_graph.results()
    if target_graph is graph:
        return list(range(len(ref_results)))
    by_source = {target_results[i].inputs[0]: i for i in range(len(target_results))}
    by_name = {r.name: i for i, r in enumerate(target_results)}
    positions = []
    for i, result in enumerate(ref_results):
        matched = target_of.get(Tap(*result.inputs[0]))
        if matched is not None and (matched.key, matched.port) in by_source:
            positions.append(by_source[(matched.key, matched.port)])
        elif result.name in by_name and not result.auto_named:
            positions.append(by_name[result.name])
        else:
            positions.append(i if i < len(target_results) else 0)
    return positions


def _compile_and_run(device: Device, model, arrays, taps: tuple[int, ...] = ()):
    compiled = device.compile(model, taps=taps)
    return compiled, compiled.infer(arrays)


def run_both(ref_call: Callable[[], Any], target_call: Callable[[], Any]) -> tuple[Any, Any]:
    """Run the two sides' calls at once: compiling and inferring release the GIL, so they overlap."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        target_future = pool.submit(target_call)
        ref_result = ref_call()
        return ref_result, target_future.result()


def _collect_runtime(into: dict[str, dict], runtime: RuntimeGraph) -> None:
    for name, layer in runtime.by_original.items():
        if layer.is_compute:
            into.setdefault(name, {"layer": layer.name, "layer_type": layer.layer_type,
                                   "precision": layer.runtime_precision, "kernel": layer.primitive_type,
                                   "fused": list(layer.original_names)})


Predicate = Callable[[Tap, TensorStats], bool]
