"""A measuring session: both sides of one comparison, ready to run the model with any set of taps.

`Session` owns the walked graph(s), the node matching, the two devices and the inputs. `plain()` runs the
untouched model on both sides (the divergence to explain, and the target's fusion groups from its runtime
graph); `measure(taps)` compiles a tapped copy on both sides, runs it once, compares each tapped pair as it
arrives and keeps only statistics. Every compile is counted, every tapped run's final-output error kept for
the fidelity check, and the runtime info (kernel, precision, fusion group) of every compiled layer collected.
Search strategies (`bisect_ov.strategies`) decide which taps to measure.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from tqdm import tqdm

from bisect_ov.analysis.exactness import ExactCheck, check_exact, exact_result, integer_valued
from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.match import Match
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap, plan_chunks, tap_model
from bisect_ov.run.devices import Device, DeviceInfo

__all__ = ["Session", "Clock"]

_EXACT_OPS = ("Convolution", "GroupConvolution", "MatMul")


class Clock:
    """Accumulates wall time per named stage."""

    def __init__(self) -> None:
        self.stages: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.stages[stage] = round(self.stages.get(stage, 0.0) + time.perf_counter() - start, 4)


class Session:
    """Both sides of a comparison; see the module docstring."""

    def __init__(self, graph: ModelGraph, target_graph: ModelGraph, match: Match, ref: Device, target: Device,
                 ref_arrays: Sequence[np.ndarray], target_arrays: Sequence[np.ndarray], *,
                 clock: Clock | None = None, progress: bool = False):
        self.graph = graph
        self.target_graph = target_graph
        self.match = match
        self.target_of: dict[Tap, Tap] = dict(match.pairs)
        self.ref, self.target = ref, target
        self.ref_arrays, self.target_arrays = list(ref_arrays), list(target_arrays)
        self.clock = clock or Clock()
        self.progress = progress
        self.compiles = {"ref": 0, "target": 0}
        self.ref_info: DeviceInfo | None = None
        self.target_info: DeviceInfo | None = None
        self.runtime_ref: dict[str, dict] = {}
        self.runtime_target: dict[str, dict] = {}
        self.target_runtime: RuntimeGraph = RuntimeGraph()  # of the untouched model: its real fusion groups
        self.outputs: list[tuple[str, str, TensorStats]] = []
        self.tapped_outputs: list[list[tuple[str, str, TensorStats]]] = []
        self.exact: dict[str, ExactCheck] = {}
        self._ref_ready = None  # a reference compile with taps, made by `plain` for the next `measure`
        self.plain_compiled = None  # (ref, target) compiles of the untouched model, when made before `plain`
        self.notes: list[str] = []
        self.exact_checks = True

    # ----- running ------------------------------------------------------------------------------------
    def plain(self, ref_taps: Sequence[Tap] = ()) -> list[tuple[str, str, TensorStats]]:
        """Run the untouched model on both sides; returns (name, result key, stats) per final output.

        `ref_taps`: taps the next `measure` will ask for. An f32 reference then compiles with them at once
        (exposing tensors does not change f32 results), and `measure` reuses that compile: one reference
        compile less. The target always runs untouched here: its fidelity is what the plain run is for.
        """
        ref_taps = [t for t in ref_taps if t in self.target_of]
        reuse = bool(ref_taps) and self.ref.activation_precision == "f32"
        ref_model = tap_model(self.graph, ref_taps) if reuse else None
        compiled, self.plain_compiled = self.plain_compiled, None
        with self.clock("plain run"):
            if compiled is not None and ref_model is None:  # compiled already, to run many samples
                ref_c, target_c = compiled
                ref_out, target_out = run_both(lambda: ref_c.infer(self.ref_arrays),
                                               lambda: target_c.infer(self.target_arrays))
                self._note(ref_c, target_c)
            else:
                (ref_c, ref_out), (target_c, target_out) = run_both(
                    lambda: _compile_and_run(self.ref, ref_model.model if ref_model else self.graph.model,
                                             self.ref_arrays, ref_model.added_outputs if ref_model else ()),
                    lambda: _compile_and_run(self.target, self.target_graph.model, self.target_arrays))
                self._count(ref_c, target_c)
            if ref_model is not None:
                self._ref_ready = (tuple(ref_taps), ref_model, ref_c, ref_out)
            # An emulated device's runtime graph is the CPU's f32 graph of the rewritten model: its fusion
            # groups and kernels say nothing about the emulated device, so they are not used.
            self.target_runtime = RuntimeGraph() if target_c.info.emulated else target_c.runtime
            n = len(self.graph.model.outputs)
            self.outputs = self._final_outputs(ref_out, target_out, n)
            # Kept for partitioned runs, which compare their final outputs with the reference's.
            self.ref_final = [np.array(a) for a in ref_out[:n]]
            self._plain_target = target_c
        return self.outputs

    def noise(self) -> dict[str, float]:
        """Run the target against itself: the same compiled model twice, and a second compile.

        Returns the largest relative L2 difference of the final outputs between the two runs and between the
        two compiles (0.0 when bit-identical). Differences below this floor are not the model's doing.
        """
        with self.clock("noise"):
            first = [np.array(a) for a in self._plain_target.infer(self.target_arrays)]
            again = self._plain_target.infer(self.target_arrays)
            run_to_run = max((compare(a, b).rel_l2 for a, b in zip(first, again)), default=0.0)
            if self.target_info is not None and self.target_info.emulated:
                # An emulated device is the CPU in f32 running fixed arithmetic: recompiling it proves nothing.
                return {"run_to_run": run_to_run}
            recompiled = self.target.compile(self.target_graph.model)
            self.compiles["target"] += 1
            other = recompiled.infer(self.target_arrays)
            compile_to_compile = max((compare(a, b).rel_l2 for a, b in zip(first, other)), default=0.0)
        return {"run_to_run": run_to_run, "compile_to_compile": compile_to_compile}

    def fetch(self, taps: Sequence[Tap]) -> dict[Tap, tuple[np.ndarray, np.ndarray]]:
        """The reference's and the target's values of `taps` (copies), in one compile per side."""
        taps = [t for t in dict.fromkeys(taps) if t in self.target_of]
        if not taps:
            return {}
        ref_tapped = tap_model(self.graph, taps)
        target_tapped = tap_model(self.target_graph, [self.target_of[t] for t in taps])
        with self.clock("compile"):
            ref_c, target_c = run_both(lambda: self.ref.compile(ref_tapped.model, taps=ref_tapped.added_outputs),
                                       lambda: self.target.compile(target_tapped.model, taps=target_tapped.added_outputs))
        self._count(ref_c, target_c)
        with self.clock("infer"):
            ref_out, target_out = run_both(lambda: ref_c.infer(self.ref_arrays, share_outputs=False),
                                           lambda: target_c.infer(self.target_arrays, share_outputs=False))
        return {t: (ref_out[ri], target_out[ti])
                for t, ri, ti in zip(taps, ref_tapped.tap_outputs, target_tapped.tap_outputs)}

    def ref_values(self, taps: Sequence[Tap]) -> dict[Tap, np.ndarray]:
        """The reference's values of `taps` (copies), in one reference compile."""
        taps = list(dict.fromkeys(taps))
        values: dict[Tap, np.ndarray] = {}
        params = [t for t in taps if self.graph[t.key].kind == "parameter"]
        for t in params:
            values[t] = self.ref_arrays[self.graph.parameter_position[t.key]]
        rest = [t for t in taps if t not in values]
        if rest:
            tapped = tap_model(self.graph, rest)
            with self.clock("compile"):
                compiled = self.ref.compile(tapped.model, taps=tapped.added_outputs)
            self.compiles["ref"] += 1
            with self.clock("infer"):
                out = compiled.infer(self.ref_arrays, share_outputs=False)
            values.update({t: out[i] for t, i in zip(rest, tapped.tap_outputs)})
        return values

    def run_piece(self, side: str, piece, values: dict[Tap, np.ndarray], final: frozenset[Tap] = frozenset()
                  ) -> list[np.ndarray]:
        """Compile an extracted piece on one side and run it on `values` (its fed tensors); copies out.

        Outputs hand values on like taps, in the precision the device stores activations in, except the
        model's own outputs (`final`), which the plugin produces as the plain model would.
        """
        device = self.target if side == "target" else self.ref
        arrays = self.target_arrays if side == "target" else self.ref_arrays
        typed = tuple(i for i, t in enumerate(piece.outputs) if t not in final)
        with self.clock("compile"):
            compiled = device.compile(piece.model, taps=typed, fed=tuple(range(len(piece.fed))))
        self.compiles[side] += 1
        feed = [values[t] for t in piece.fed] + [arrays[i] for i in piece.model_inputs]
        with self.clock("infer"):
            return compiled.infer(feed, share_outputs=False)

    def measure(self, taps: Sequence[Tap], *, bar: tqdm | None = None) -> dict[Tap, TensorStats]:
        """Expose `taps` (reference-side taps; matched target taps are found) in one compile per side."""
        taps = [t for t in taps if t in self.target_of]
        target_tapped = tap_model(self.target_graph, [self.target_of[t] for t in taps])
        ready, self._ref_ready = self._ref_ready, None
        if ready is not None and ready[0] == tuple(taps):
            _, ref_tapped, ref_c, ref_out = ready  # compiled with these taps by `plain`
            with self.clock("compile and infer"):
                target_c, target_out = _compile_and_run(self.target, target_tapped.model, self.target_arrays,
                                                        target_tapped.added_outputs)
            self.compiles["target"] += 1
            if not target_c.info.emulated:
                _collect_runtime(self.runtime_target, target_c.runtime)
        else:
            ref_tapped = tap_model(self.graph, taps)
            # Each side compiles and runs in its own thread: one side's inference overlaps the other's compile.
            with self.clock("compile and infer"):
                (ref_c, ref_out), (target_c, target_out) = run_both(
                    lambda: _compile_and_run(self.ref, ref_tapped.model, self.ref_arrays, ref_tapped.added_outputs),
                    lambda: _compile_and_run(self.target, target_tapped.model, self.target_arrays,
                                             target_tapped.added_outputs))
            self._count(ref_c, target_c)
        stats: dict[Tap, TensorStats] = {}
        with self.clock("compare"):
            self.tapped_outputs.append(self._final_outputs(ref_out, target_out, ref_tapped.n_original_outputs))
            ref_of = dict(zip(taps, ref_tapped.tap_outputs))
            pairs = list(zip(taps, ref_tapped.tap_outputs, target_tapped.tap_outputs))
            # numpy releases the GIL on large arrays: two threads compare two tensors at a time.
            with ThreadPoolExecutor(max_workers=2) as pool:
                for (tap, ri, ti), result in zip(pairs, pool.map(lambda p: compare(ref_out[p[1]], target_out[p[2]]), pairs)):
                    stats[tap] = result
                    self._check_exact(tap, ref_out, target_out, ri, ti, ref_of)
                    if bar is not None:
                        bar.update(1)
        return stats

    def measure_chunked(self, taps: Sequence[Tap], max_bytes: int | None, *, desc: str = "compare") -> dict[Tap, TensorStats]:
        """`measure` in as many compiles as the byte budget needs, with a progress bar over tensors."""
        chunks = plan_chunks(self.graph, [t for t in taps if t in self.target_of], max_bytes)
        stats: dict[Tap, TensorStats] = {}
        with tqdm(total=sum(map(len, chunks)), desc=desc, unit="tensor", disable=not self.progress, leave=False) as bar:
            for i, chunk in enumerate(chunks):
                bar.set_description(f"{desc} {i + 1}/{len(chunks)}" if len(chunks) > 1 else desc)
                stats.update(self.measure(chunk, bar=bar))
        return stats

    # ----- helpers ------------------------------------------------------------------------------------
    def _count(self, ref_c, target_c) -> None:
        self.compiles["ref"] += 1
        self.compiles["target"] += 1
        self._note(ref_c, target_c)

    def _note(self, ref_c, target_c) -> None:
        """Remember what each side ran with: device facts and per-layer runtime info."""
        self.ref_info = self.ref_info or ref_c.info
        self.target_info = self.target_info or target_c.info
        if not ref_c.info.emulated:
            _collect_runtime(self.runtime_ref, ref_c.runtime)
        if not target_c.info.emulated:
            _collect_runtime(self.runtime_target, target_c.runtime)

    def _final_outputs(self, ref_out, target_out, n: int) -> list[tuple[str, str, TensorStats]]:
        outputs = []
        for result_node, r, t in zip(self.graph.results(), ref_out[:n], target_out[:n]):
            producer = self.graph[result_node.inputs[0][0]]
            names = producer.outputs[result_node.inputs[0][1]].names
            # The user's own name for the output when there is one; OpenVINO's made-up Result names are not.
            name = result_node.name if not result_node.auto_named else (names[0] if names else producer.name)
            outputs.append((name, result_node.key, compare(r, t)))
        return outputs

    def _check_exact(self, tap: Tap, ref_out, target_out, ri: int, ti: int, ref_of: dict[Tap, int]) -> None:
        """For Conv/MatMul over integer-valued inputs, compare both sides with the exact int64 result."""
        if not self.exact_checks:  # sampled outputs (a stats capture) are not whole tensors
            return
        node = self.graph[tap.key]
        if node.op_type not in _EXACT_OPS or tap.port != 0 or node.key in self.exact:
            return
        inputs = []
        for key, port in node.inputs:
            producer = self.graph[key]
            if producer.kind == "constant":
                (op,) = self.graph.ops_of(self.graph.model, [key])
                inputs.append(np.asarray(op.get_data()))
            elif producer.kind == "parameter":
                inputs.append(self.ref_arrays[self.graph.parameter_position[key]])
            elif Tap(key, port) in ref_of:
                inputs.append(ref_out[ref_of[Tap(key, port)]])
            else:
                return
        (op,) = self.graph.ops_of(self.graph.model, [tap.key])
        exact = exact_result(node.op_type, op.get_attributes(), inputs)
        if exact is not None:
            self.exact[node.key] = check_exact(exact, ref_out[ri], target_out[ti])

    def exact_candidates(self) -> list[str]:
        """Conv/MatMul nodes that compute on integers: integer-valued constant operands, and data operands of
        an integer type or converted from one. Their result has an exact integer answer to check against."""
        graph = self.graph
        found = []
        for node in graph.candidates():
            if node.op_type not in _EXACT_OPS:
                continue
            integer = True
            for key, port in node.inputs:
                producer = graph[key]
                if producer.kind == "constant":
                    (op,) = graph.ops_of(graph.model, [key])
                    integer = integer_valued(np.asarray(op.get_data()))
                elif not producer.outputs[port].is_float:
                    continue
                elif producer.op_type == "Convert":
                    source, source_port = producer.inputs[0]
                    integer = not graph[source].outputs[source_port].is_float
                else:
                    integer = False
                if not integer:
                    break
            if integer:
                found.append(node.key)
        return found


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
