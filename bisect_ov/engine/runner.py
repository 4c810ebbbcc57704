"""Compiling and running models on the two sides of a comparison, every compile and inference counted.

A `Runner` holds a `Comparison`, the `Ledger` and whether to show progress; it has no results of its own.
The samples pass (`bisect_ov.samples`) runs through it before anything is examined, and an `Engine`
(`bisect_ov.engine.engine`) runs through it once a sample is.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

import numpy as np

from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.engine.comparison import Comparison
from bisect_ov.engine.ledger import Clock, Ledger
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.match import Match
from bisect_ov.model.taps import Tap
from bisect_ov.run.devices import Device

__all__ = ["Runner", "FinalOutput", "run_both", "final_outputs"]

# (output name, result node key, statistics) of one final output.
FinalOutput = tuple[str, str, TensorStats]


class Runner:
    """Both devices of a comparison, compiling and running with every compile and inference counted."""

    def __init__(self, comparison: Comparison, ledger: Ledger | None = None, *, progress: bool = False):
        self.comparison = comparison
        self.ledger = ledger or Ledger()
        self.progress = progress

    # What the comparison holds, read-only.
    @property
    def graph(self) -> ModelGraph:
        return self.comparison.graph

    @property
    def target_graph(self) -> ModelGraph:
        return self.comparison.target_graph

    @property
    def match(self) -> Match:
        return self.comparison.match

    @property
    def target_of(self) -> dict[Tap, Tap]:
        return self.comparison.target_of

    @property
    def ref(self) -> Device:
        return self.comparison.ref

    @property
    def target(self) -> Device:
        return self.comparison.target

    @property
    def target_output_positions(self) -> list[int]:
        """For each reference output (model order), the position of its counterpart among the target's outputs."""
        return list(self.comparison.target_output_positions)

    @property
    def clock(self) -> Clock:
        return self.ledger.clock

    def device(self, side: str) -> Device:
        return self.comparison.target if side == "target" else self.comparison.ref

    # Compiling and running.
    def compile(self, side: str, model, *, taps: Sequence[int] = (), fed: Sequence[int] = (), note: bool = False):
        """Compile `model` on `side` (counted; `note`: its runtime facts go into the ledger)."""
        compiled = self.device(side).compile(model, taps=taps, fed=fed)
        self.ledger.compiled(side, compiled if note else None)
        return compiled

    def compile_pair(self, ref_model, target_model, *, ref_taps: Sequence[int] = (), target_taps: Sequence[int] = ()):
        """Compile one model per side at once (counted and noted); returns (ref compiled, target compiled)."""
        with self.clock("compile"):
            ref_c, target_c = run_both(lambda: self.ref.compile(ref_model, taps=ref_taps),
                                       lambda: self.target.compile(target_model, taps=target_taps))
        self.ledger.compiled("ref", ref_c)
        self.ledger.compiled("target", target_c)
        return ref_c, target_c

    def compile_and_run_both(self, ref_model, target_model, ref_arrays, target_arrays, *,
                             ref_taps: Sequence[int] = (), target_taps: Sequence[int] = ()):
        """Each side compiles and runs its model in its own thread (one side's inference overlaps the other's
        compile), counted and noted; returns ((ref compiled, ref outputs), (target compiled, target outputs))."""
        def one(device: Device, model, arrays, taps):
            compiled = device.compile(model, taps=taps)
            return compiled, compiled.infer(arrays)

        ref, target = run_both(lambda: one(self.ref, ref_model, ref_arrays, ref_taps),
                               lambda: one(self.target, target_model, target_arrays, target_taps))
        self.ledger.compiled("ref", ref[0])
        self.ledger.compiled("target", target[0])
        self.ran("ref")
        self.ran("target")
        return ref, target

    def count_compile(self, side: str) -> None:
        """Count a compile made on `side` outside the runner and used now (the noise check's, started in a
        thread beside the measurement and counted only when used; a remedy's variant on a configured device)."""
        self.ledger.compiled(side)

    def note(self, side: str, compiled) -> None:
        """Keep the runtime facts of `side`'s compile for the report (a compile counted already)."""
        self.ledger.note(side, compiled)

    def sharing(self, comparison: Comparison) -> "Runner":
        """A runner of another comparison (another target device) whose compiles and runs count in this one's
        ledger, with this one's progress bars."""
        return Runner(comparison, self.ledger, progress=self.progress)

    @property
    def compiles(self) -> dict[str, int]:
        """Compiles made so far per side (a copy)."""
        return self.ledger.compiles

    def runtime(self, side: str) -> dict[str, dict]:
        """`side`'s runtime facts by original op name, over every compile noted so far."""
        return self.ledger.runtime[side]

    def compile_untouched(self):
        """Compile the untouched model on both sides (counted): the samples pass runs many samples on the pair,
        and hands it on (a value) to the examined sample's untouched run, which then compiles nothing."""
        return self.compile_pair(self.graph.model, self.target_graph.model)

    def ran(self, side: str, n: int = 1) -> None:
        """Count `n` inferences on `side` (for the per-stage cost)."""
        self.ledger.ran(side, n)

    def final_outputs(self, ref_out, target_out, n: int) -> list[FinalOutput]:
        """(name, result key, statistics) of the first `n` outputs, each side's in its own model order."""
        return final_outputs(self.comparison, ref_out, target_out, n)


def final_outputs(comparison: Comparison, ref_out, target_out, n: int) -> list[FinalOutput]:
    graph, positions = comparison.graph, comparison.target_output_positions
    return [(graph.output_name(result.key), result.key, compare(r, target_out[i]))
            for result, r, i in zip(graph.results(), ref_out[:n], positions[:n])]


def run_both(ref_call: Callable[[], Any], target_call: Callable[[], Any]) -> tuple[Any, Any]:
    """Run the two sides' calls at once: compiling and inferring release the GIL, so they overlap."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        target_future = pool.submit(target_call)
        ref_result = ref_call()
        return ref_result, target_future.result()


def same_bits(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> bool:
    """Whether two lists of arrays are equal bit for bit (a NaN equal to the same NaN; -0.0 differs from 0.0)."""
    return len(a) == len(b) and all(_same_bits(np.asarray(x), np.asarray(y)) for x, y in zip(a, b))


def _same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    # Compared as unsigned integers of the element's size: one pass, where equality with NaNs takes five.
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if x.dtype.itemsize not in (1, 2, 4, 8) or x.dtype.hasobject:
        return bool(np.array_equal(x, y, equal_nan=x.dtype.kind in "fc"))
    bits = np.dtype(f"u{x.dtype.itemsize}")
    return bool(np.array_equal(np.asarray(x, order="C").view(bits), np.asarray(y, order="C").view(bits)))
