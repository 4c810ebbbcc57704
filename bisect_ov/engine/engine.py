"""Measuring one examined sample: tapped compiles, chunked or streamed measurements, pieces run alone, the
target against itself.

An `Engine` is made from a `Runner`, a `Sample` and that sample's `Untouched` run, so it cannot exist before
the untouched run did, and nothing it computes depends on which of its methods ran before: every method
returns what it measured (a `Measured`, values, a noise record) and keeps nothing but a cache of compiled
pieces (partitioned runs repeat the same segments) and, until its first measurement takes it, the target's
tapped compile started beside the reference's untouched run (`Ahead`). Examining another sample is another
engine.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
from tqdm import tqdm

from bisect_ov.analysis.exactness import exact_candidates
from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.core.errors import DeviceError
from bisect_ov.engine.comparison import Sample
from bisect_ov.engine.measured import Measured, Part, TappedRun, exact_checks
from bisect_ov.engine.pieces import compile_piece, run_compiled_piece, static_piece
from bisect_ov.engine.runner import Runner, run_both, same_bits
from bisect_ov.engine.streamed import can_stream, stream
from bisect_ov.engine.untouched import Untouched
from bisect_ov.model.graph import weight_bytes
from bisect_ov.model.taps import Tap, TappedModel, plan_chunks, tap_model, tensor_sizes

__all__ = ["Engine", "PIECE_CACHE", "PIECE_CACHE_FLOOR", "Ahead", "one_compile", "start_ahead", "ran_ahead"]

PIECE_CACHE = 256  # compiled segments kept for reuse by partitioned runs
# The weights those kept compiles may hold together: the model's, and at least this much. Impact runs of a 24-layer
# BERT (1.3 GB of weights) against EMU:f16 kept six prefix and suffix pieces of 0.5 to 0.6 GB each alive to the end
# (3.5 GB) before the bound; models this small keep every piece.
PIECE_CACHE_FLOOR = 256 * 2**20


@dataclass(frozen=True, eq=False)
class Ahead:
    """The target's compile of `taps` exposed, started beside the reference's untouched run (`start_ahead`):
    the first measurement takes it when it measures exactly these taps (it is counted then), and drops it
    otherwise. `compiled` resolves to (the tapped target model, its compile). With `outputs`, the compile ran
    already, as an emulated target's untouched run (`ran_ahead`): counted there, its outputs are the
    measurement's and its compile is gone (None)."""

    taps: tuple[Tap, ...]
    compiled: Future
    outputs: tuple[np.ndarray, ...] | None = None


def ran_ahead(tapped: TappedModel, taps: Sequence[Tap], outputs: Sequence[np.ndarray]) -> Ahead:
    """The first measurement of `taps` made already (an emulated target's untouched run exposed them): its
    tapped target model and outputs (copies)."""
    done: Future = Future()
    done.set_result((tapped, None))
    return Ahead(tuple(taps), done, tuple(outputs))


def one_compile(runner: Runner, taps: Sequence[Tap], max_bytes: int | None, sizes: Mapping[Tap, int] | None,
                untappable: frozenset[Tap]) -> list[Tap] | None:
    """The taps `Engine.measure_parts(taps, max_bytes)` exposes in its one compile, or None when it takes
    several (or none)."""
    wanted = _tappable(runner, untappable, taps)
    chunks = plan_chunks(runner.graph, wanted, max_bytes, sizes or None)
    return chunks[0] if wanted and len(chunks) == 1 else None


def start_ahead(runner: Runner, taps: Sequence[Tap]) -> Ahead:
    """Start compiling the target with `taps` exposed, in a thread (uncounted until used: `Ahead`). The tapped
    copy is made here: the thread touches no model another thread reads."""
    tapped = tap_model(runner.target_graph, [runner.target_of[t] for t in taps])

    def compile_tapped() -> tuple[TappedModel, Any]:
        return tapped, runner.target.compile(tapped.model, taps=tapped.added_outputs)

    pool = ThreadPoolExecutor(max_workers=1)
    try:
        return Ahead(tuple(taps), pool.submit(compile_tapped))
    finally:
        pool.shutdown(wait=False)


def _tappable(runner: Runner, untappable: frozenset[Tap], taps: Sequence[Tap]) -> list[Tap]:
    return [t for t in taps if t in runner.target_of and t not in untappable]


class Engine:
    """Measurements of one examined sample; see the module docstring. `ahead`: the target's first tapped
    compile, started beside the reference's untouched run (`start_ahead`)."""

    def __init__(self, runner: Runner, sample: Sample, untouched: Untouched, ahead: Ahead | None = None):
        self.runner = runner
        self.sample = sample
        self.untouched = untouched
        self._pieces: dict[tuple, tuple[Any, Any]] = {}  # (side, segment, outputs) -> (piece, compiled)
        self._piece_bytes: dict[tuple, int] = {}  # the same keys -> bytes of the piece's weights
        self._ahead = ahead

    @cached_property
    def piece_budget(self) -> int:
        """Bytes of weights the kept compiled pieces may hold together (`run_segment`): the model's, at least
        `PIECE_CACHE_FLOOR`."""
        return max(PIECE_CACHE_FLOOR, weight_bytes(self.runner.graph.model))

    @cached_property
    def tensor_sizes(self) -> dict[Tap, int]:
        """Bytes of each reference tensor for the sample (`model.taps.tensor_sizes`)."""
        return tensor_sizes(self.runner.graph, self.sample.ref)

    def chunks(self, taps: Sequence[Tap], max_bytes: int | None) -> list[list[Tap]]:
        """`taps` in chunks whose tensors fit `max_bytes` for the sample."""
        return plan_chunks(self.runner.graph, taps, max_bytes, self.tensor_sizes or None)

    def exact_candidates(self) -> list[str]:
        """Integer Conv/MatMul nodes of the reference model (`analysis.exactness.exact_candidates`)."""
        return exact_candidates(self.runner.graph) if self.runner.comparison.exact_checks else []

    def tappable(self, taps: Sequence[Tap]) -> list[Tap]:
        """Of `taps`, those with a target counterpart that can be exposed."""
        return _tappable(self.runner, self.untouched.untappable, taps)

    # ----- measuring ----------------------------------------------------------------------------------
    def measure(self, taps: Sequence[Tap]) -> Measured:
        """Expose `taps` (reference-side taps; matched target taps are found) in one compile per side."""
        return Measured.of([self.measure_part(taps)])

    def measure_part(self, taps: Sequence[Tap], *, bar: tqdm | None = None) -> Part:
        """`measure` as the one `Part` of its compile."""
        return self._measure_once(self.tappable(taps), bar)

    def measure_parts(self, taps: Sequence[Tap], max_bytes: int | None, *, desc: str = "compare") -> Iterator[Part]:
        """`measure` in as many compiles as the byte budget needs, one `Part` per compile (or per streamed
        segment: when the taps do not fit one compile and the model can run in pieces, it is measured segment
        by segment, which compiles each op once per side rather than once per chunk). Taps the untouched run
        streamed already come from it."""
        wanted = self.tappable(taps)
        streamed = self.untouched.streamed
        if streamed is not None and wanted and set(wanted) <= streamed.taps:
            measured = streamed.measured
            yield Part({t: measured.stats[t] for t in wanted if t in measured.stats}, dict(measured.exact),
                       run=measured.runs[-1] if measured.runs else None)
            return
        chunks = self.chunks(wanted, max_bytes)
        if len(chunks) > 1 and max_bytes is not None and can_stream(self.runner.comparison, self.untouched.untappable):
            yield from stream(self.runner, self.sample, [t for c in chunks for t in c], max_bytes,
                              target_runtime=self.untouched.target_runtime, sizes=self.tensor_sizes,
                              untouched_target=self.untouched.target_final, desc=desc)
            return
        with tqdm(total=sum(map(len, chunks)), desc=desc, unit="tensor", disable=not self.runner.progress, leave=False) as bar:
            for i, chunk in enumerate(chunks):
                bar.set_description(f"{desc} {i + 1}/{len(chunks)}" if len(chunks) > 1 else desc)
                yield self._measure_once(chunk, bar)

    def measure_chunked(self, taps: Sequence[Tap], max_bytes: int | None, *, desc: str = "compare") -> Measured:
        """All of `measure_parts`, summed."""
        return Measured.of(self.measure_parts(taps, max_bytes, desc=desc))

    def _measure_once(self, taps: list[Tap], bar: tqdm | None) -> Part:
        ahead, self._ahead = self._ahead, None  # the first measurement takes it, or drops it
        ready = self.untouched.ready
        runner = self.runner
        if ready is not None and all(t in ready.index for t in taps):
            # The reference ran with these taps (and maybe more) in its untouched run: only the target compiles.
            ref_out: Sequence[np.ndarray] = ready.outputs
            ref_positions = [ready.index[t] for t in taps]
            n_original = ready.model.n_original_outputs
            with self.runner.clock("compile and infer"):
                taken = ahead if ahead is not None and ahead.taps == tuple(taps) else None
                made = taken.outputs if taken is not None else None  # run and counted in the untouched run
                same_run = made is not None
                if taken is not None:
                    target_tapped, target_c = taken.compiled.result()
                else:
                    target_tapped = tap_model(self.runner.target_graph, [self.runner.target_of[t] for t in taps])
                    target_c = runner.compile("target", target_tapped.model, taps=target_tapped.added_outputs)
                if made is not None:
                    target_out = made
                else:
                    if taken is not None:  # started ahead: counted when used
                        runner.count_compile("target")
                    target_out = target_c.infer(self.sample.target)
                    runner.ran("target")
            if target_c is not None and not target_c.info.emulated:
                runner.note("target", target_c)
        else:
            target_tapped = tap_model(self.runner.target_graph, [self.runner.target_of[t] for t in taps])
            ref_tapped = tap_model(self.runner.graph, taps)
            with self.runner.clock("compile and infer"):
                (ref_c, ref_out), (target_c, target_out) = runner.compile_and_run_both(
                    ref_tapped.model, target_tapped.model, self.sample.ref, self.sample.target,
                    ref_taps=ref_tapped.added_outputs, target_taps=target_tapped.added_outputs)
            ref_positions, n_original = list(ref_tapped.tap_outputs), ref_tapped.n_original_outputs
            same_run = False
        stats: dict[Tap, TensorStats] = {}
        with self.runner.clock("compare"):
            # The untouched run's own outputs reproduce nothing: no second run, no evidence of repeatability.
            reproduced = not same_run and same_bits(list(self.untouched.target_final), list(target_out[:n_original]))
            run = TappedRun(tuple(runner.final_outputs(ref_out, target_out, n_original)), reproduced)
            pairs = list(zip(taps, ref_positions, target_tapped.tap_outputs))
            # numpy releases the GIL on large arrays: two threads compare two tensors at a time.
            with ThreadPoolExecutor(max_workers=2) as pool:
                for (tap, _, _), result in zip(pairs, pool.map(lambda p: compare(ref_out[p[1]], target_out[p[2]]), pairs)):
                    stats[tap] = result
                    if bar is not None:
                        bar.update(1)
            ref_of = dict(zip(taps, ref_positions))
            exact = exact_checks(self.runner.comparison, self.sample,
                                 [(t, ref_out[ri], target_out[ti]) for t, ri, ti in pairs],
                                 lambda t: ref_out[ref_of[t]] if t in ref_of else None)
        return Part(stats, exact, run=run)

    # ----- values ------------------------------------------------------------------------------------
    def both_values(self, taps: Sequence[Tap]) -> dict[Tap, tuple[np.ndarray, np.ndarray]]:
        """The reference's and the target's values of `taps` (copies), in one compile per side."""
        taps = [t for t in dict.fromkeys(taps) if t in self.runner.target_of]
        if not taps:
            return {}
        ref_tapped = tap_model(self.runner.graph, taps)
        target_tapped = tap_model(self.runner.target_graph, [self.runner.target_of[t] for t in taps])
        ref_c, target_c = self.runner.compile_pair(ref_tapped.model, target_tapped.model,
                                                   ref_taps=ref_tapped.added_outputs,
                                                   target_taps=target_tapped.added_outputs)
        with self.runner.clock("infer"):
            ref_out, target_out = run_both(lambda: ref_c.infer(self.sample.ref, share_outputs=False),
                                           lambda: target_c.infer(self.sample.target, share_outputs=False))
        self.runner.ran("ref")
        self.runner.ran("target")
        return {t: (ref_out[ri], target_out[ti])
                for t, ri, ti in zip(taps, ref_tapped.tap_outputs, target_tapped.tap_outputs)}

    def ref_values(self, taps: Sequence[Tap]) -> dict[Tap, np.ndarray]:
        """The reference's values of `taps` (copies), in one reference compile (none for what the untouched
        run exposed already)."""
        taps = list(dict.fromkeys(taps))
        values: dict[Tap, np.ndarray] = {}
        for t in taps:
            if self.runner.graph[t.key].kind == "parameter":
                values[t] = self.sample.ref[self.runner.graph.parameter_position[t.key]]
        ready = self.untouched.ready
        if ready is not None:
            values.update({t: ready.outputs[ready.index[t]] for t in taps if t not in values and t in ready.index})
        rest = [t for t in taps if t not in values]
        if rest:
            tapped = tap_model(self.runner.graph, rest)
            with self.runner.clock("compile"):
                compiled = self.runner.compile("ref", tapped.model, taps=tapped.added_outputs)
            with self.runner.clock("infer"):
                out = compiled.infer(self.sample.ref, share_outputs=False)
            self.runner.ran("ref")
            values.update({t: out[i] for t, i in zip(rest, tapped.tap_outputs)})
        return values

    # ----- pieces --------------------------------------------------------------------------------------
    def run_piece(self, side: str, piece, values: Mapping[Tap, np.ndarray], final: frozenset[Tap] = frozenset()
                  ) -> list[np.ndarray]:
        """Compile an extracted piece on one side and run it on `values` (its fed tensors); copies out.

        Outputs hand values on like taps, in the precision the device stores activations in, except the
        model's own outputs (`final`), which the plugin produces as the plain model would.
        """
        return self._run_compiled(side, self._compile_piece(side, piece, values, final), values, final)[0]

    def run_segment(self, side: str, segment: Sequence[str], outputs: Sequence[Tap], make_piece: Callable[[], Any],
                    values: Mapping[Tap, np.ndarray], final: frozenset[Tap] = frozenset(), *, keep: bool = True
                    ) -> list[np.ndarray]:
        """`run_piece` for a segment of the graph, compiled once per side and reused by later partitioned runs.

        A fix search or a delegation search runs the same segments again and again (everything between two
        kept nodes); compiling each once keeps a search over a deep model affordable. At most `PIECE_CACHE`
        compiled pieces holding at most `piece_budget` bytes of weights together are kept, the oldest dropped
        first; with ``keep=False`` the compile is released after its run (a segment run once).
        """
        key = (side, tuple(segment), tuple(outputs))
        found = self._pieces.get(key)
        if found is None:
            found = self._compile_piece(side, make_piece(), values, final)
            if keep:
                size = weight_bytes(found[0].model)
                while self._pieces and (len(self._pieces) >= PIECE_CACHE
                                        or sum(self._piece_bytes.values()) + size > self.piece_budget):
                    oldest = next(iter(self._pieces))
                    del self._pieces[oldest], self._piece_bytes[oldest]
                self._pieces[key], self._piece_bytes[key] = found, size
        out, again = self._run_compiled(side, found, values, final)
        if again is not found and key in self._pieces:
            self._pieces[key] = again
        return out

    def _compile_piece(self, side: str, piece: Any, values: Mapping[Tap, np.ndarray], final: frozenset[Tap]
                       ) -> tuple[Any, Any]:
        """Compile a piece; one the plugin refuses to compile (an input nothing reads: "... contains empty child
        edge", in a decoder whose encoder states only its cache uses) is compiled again as `static_piece` makes
        it, once. The (piece, compile)."""
        try:
            with self.runner.clock("compile"):
                return piece, compile_piece(self.runner, side, piece, final, self.untouched.target_runtime)
        except DeviceError as err:
            return self._static_compile(side, piece, values, final, err)

    def _static_compile(self, side: str, piece: Any, values: Mapping[Tap, np.ndarray], final: frozenset[Tap],
                        refused: DeviceError) -> tuple[Any, Any]:
        """(`static_piece` of `piece`, its compile), for a piece the plugin `refused`; that error again when the
        static piece changes nothing."""
        static = static_piece(piece, self.sample, side, values)
        if static is None:
            raise refused
        with self.runner.clock("compile"):
            return static, compile_piece(self.runner, side, static, final, self.untouched.target_runtime)

    def _run_compiled(self, side: str, found: tuple[Any, Any], values: Mapping[Tap, np.ndarray], final: frozenset[Tap]
                      ) -> tuple[list[np.ndarray], tuple[Any, Any]]:
        """Run a compiled (piece, compile); a dynamic piece the plugin cannot run runs again with its shapes fixed
        (`static_piece`), once. Its outputs and the (piece, compile) that gave them."""
        try:
            return run_compiled_piece(self.runner, self.sample, side, *found, values), found
        except DeviceError as err:
            found = self._static_compile(side, found[0], values, final, err)
            return run_compiled_piece(self.runner, self.sample, side, *found, values), found

    # ----- the target against itself -----------------------------------------------------------------
    def start_recompile(self) -> Future:
        """The noise check's second compile of the untouched target (`_recompiled_runs`), started in a thread
        beside the rest of the measurement. Nothing is counted here: `noise` counts it when it uses it; when a
        tapped compile reproduced the untouched outputs instead, it is dropped unused and uncounted."""
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            return pool.submit(self._recompiled_runs)
        finally:
            pool.shutdown(wait=False)

    def _recompiled_runs(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The untouched target compiled again (uncounted) and run twice on the sample: both runs' outputs."""
        compiled = self.runner.target.compile(self.runner.target_graph.model)
        first = compiled.infer(self.sample.target, share_outputs=False)
        return first, compiled.infer(self.sample.target, share_outputs=False)

    def noise(self, *, reproduced: bool, extra_work: bool = True,
              recompiled: Sequence[np.ndarray] | None = None,
              beside: tuple[Sequence[np.ndarray], Sequence[np.ndarray]] | None = None) -> dict[str, float]:
        """The target against itself: two runs of one compile, and two compiles.

        Returns the largest relative L2 difference of the final outputs between two runs of one compile
        (``run_to_run``) and between two compiles (``compile_to_compile``), 0.0 when bit-identical, each only
        when measured. Differences below this floor are not the model's doing. The untouched target runs once;
        `reproduced`: an instrumented target compile gave the untouched outputs bit for bit, so another
        compile's run agreed to the bit (for an emulated device, the CPU in f32 running fixed arithmetic, it
        counts as a second run only: recompiling it proves nothing). Otherwise, with ``extra_work``, the
        untouched model is compiled again and run twice; without, nothing more runs and nothing is reported.
        `recompiled`: the outputs of another compile of the untouched target on this sample, made already
        (by the generation steps): they give the compile-to-compile figure without compiling again.
        `beside`: what the compile started beside the measurement gave (`start_recompile`: two runs' outputs),
        counted here.
        """
        runner = self.runner
        emulated = self.untouched.target.info is not None and self.untouched.target.info.emulated
        if reproduced:
            return {"run_to_run": 0.0} if emulated else {"run_to_run": 0.0, "compile_to_compile": 0.0}
        if emulated:
            return {}
        with self.runner.clock("noise"):
            plain = list(self.untouched.target_final)
            if recompiled is not None:  # made and counted by the generation steps
                return {"compile_to_compile": max((compare(a, b).rel_l2 for a, b in zip(plain, recompiled)),
                                                  default=0.0)}
            if not extra_work:
                return {}
            other, again = (list(beside[0]), list(beside[1])) if beside is not None else self._recompiled_runs()
            runner.count_compile("target")
            runner.ran("target", 2)
            return {"compile_to_compile": max((compare(a, b).rel_l2 for a, b in zip(plain, other)), default=0.0),
                    "run_to_run": max((compare(a, b).rel_l2 for a, b in zip(other, again)), default=0.0)}

