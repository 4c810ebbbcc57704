"""The streamed measurement: the model run segment by segment on each side, each fed its own side's values,
so memory holds one segment's tensors and what crosses into later segments instead of every tap at once.

The segments (`model.partition.plan_segments`) end where every floating-point tensor crossing the cut is a
tap, so each side computes what one compile exposing the taps would. Compiles cost about one whole-model
compile per side in all. `stream` is a generator: it hands out one `Part` per segment, with the reference's
values it holds at that moment, and whoever iterates decides what to do with them (local errors run there)
before the next segment drops what no later segment reads.

Assumes what `can_stream` checks: one model on both sides, devices that run pieces fed with values, an f32
reference, and model outputs produced by compute nodes or inputs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Iterator, Sequence

import numpy as np
from tqdm import tqdm

from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.engine.comparison import Comparison, Sample
from bisect_ov.engine.measured import Part, TappedRun, exact_checks
from bisect_ov.engine.pieces import compile_piece, run_compiled_piece
from bisect_ov.engine.runner import Runner, same_bits
from bisect_ov.model.partition import extract, last_uses, plan_segments
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap
from bisect_ov.run.devices import bf16_to_f32, kept_outputs

__all__ = ["can_stream", "stream"]


def can_stream(comparison: Comparison, untappable: frozenset[Tap]) -> bool:
    """Whether the model may be measured segment by segment: see the module docstring."""
    graph = comparison.graph
    return (not comparison.twin and comparison.ref.can_run_pieces and comparison.target.can_run_pieces
            and not untappable and comparison.ref.activation_precision in ("f32", "")
            and all(graph[r.inputs[0][0]].kind in ("compute", "parameter") for r in graph.results()))


def stream(runner: Runner, sample: Sample, taps: Sequence[Tap], max_bytes: int, *, target_runtime: RuntimeGraph,
           sizes: dict[Tap, int], untouched_target: Sequence[np.ndarray] = (), desc: str = "compare"
           ) -> Iterator[Part]:
    """Measure `taps` segment by segment; one `Part` per segment, the last one with the run's final outputs.

    `untouched_target`: the untouched target's final outputs, to tell whether this run reproduced them.
    `sizes`: bytes of each reference tensor for the sample (`model.taps.tensor_sizes`).
    """
    comparison = runner.comparison
    graph = comparison.graph
    order = [n.key for n in graph.candidates()]
    wanted = [t for t in dict.fromkeys(taps) if t in comparison.target_of]
    tapped = set(wanted)
    parts = plan_segments(graph, order, tapped, sizes, max_bytes)
    position = {k: i for i, k in enumerate(order)}
    final_taps = [Tap(*r.inputs[0]) for r in graph.results()]
    final = frozenset(final_taps)
    last_use = last_uses(graph, order)
    values: dict[str, dict[Tap, np.ndarray]] = {"ref": {}, "target": {}}
    bits: dict[str, set[Tap]] = {"ref": set(), "target": set()}  # values held as bf16 bits: half the bytes

    def read(side: str, t: Tap) -> np.ndarray:
        return bf16_to_f32(values[side][t]) if t in bits[side] else values[side][t]

    for p in graph.parameters():
        values["ref"][Tap(p.key, 0)] = sample.ref[graph.parameter_position[p.key]]
        values["target"][Tap(p.key, 0)] = sample.target[graph.parameter_position[p.key]]
    counts: Counter = Counter()
    ref_info = None
    with tqdm(total=len(wanted), desc=f"{desc} (streamed)", unit="tensor", disable=not runner.progress,
              leave=False) as bar:
        for segment in parts:
            end = position[segment[-1]]
            produced = [Tap(k, t.port) for k in segment for t in graph[k].outputs]
            outputs = [t for t in produced if t in tapped or last_use.get(t, 0) > end or t in final]
            if not outputs:
                continue
            handed = {t for t in outputs if last_use.get(t, 0) > end}
            piece = extract(graph, segment, outputs)
            with runner.clock("compile and infer"):
                for side in ("ref", "target"):
                    compiled = compile_piece(runner, side, piece, final, target_runtime, handed)
                    if side == "ref":
                        counts.update(compiled.info.precision_counts)
                        ref_info = ref_info or compiled.info
                    fed = {t: read(side, t) for t in piece.fed}
                    got, low = kept_outputs(run_compiled_piece(runner, sample, side, piece, compiled, fed, share=True))
                    values[side].update(zip(outputs, got))
                    bits[side].update(outputs[i] for i in low)
                    del fed
                compiled = None
            with runner.clock("compare"):
                here = [t for t in outputs if t in tapped]
                found: dict[Tap, TensorStats] = {}
                checked = []
                target_value = None
                for tap in here:
                    target_value = read("target", tap)  # widened one tensor at a time
                    found[tap] = compare(values["ref"][tap], target_value)
                    checked.append((tap, values["ref"][tap], target_value))
                exact = exact_checks(comparison, sample, checked, values["ref"].get)
                bar.update(len(here))
            yield Part(found, exact, values=dict(values["ref"]))
            # Nothing of this segment outlives it but the values later segments read: the next compile and
            # inference must not run beside its outputs (they were a Whisper encoder's peak).
            del got, target_value, found, checked
            # What no later segment reads is dropped: memory holds one segment and what crosses its cut.
            for side in ("ref", "target"):
                for t in [t for t in values[side] if last_use.get(t, len(order)) <= end and t not in final
                          and graph[t.key].kind != "parameter"]:
                    del values[side][t]
                    bits[side].discard(t)
    ref_final = [read("ref", t) for t in final_taps]
    target_final = [read("target", t) for t in final_taps]
    if ref_info is not None:  # what the reference ran with, over all its segments
        ref_info = replace(ref_info, precision_counts=dict(counts))
    reproduced = bool(untouched_target) and same_bits(list(untouched_target), target_final)
    run = TappedRun(tuple(runner.final_outputs(ref_final, target_final, len(final_taps))), reproduced)
    yield Part({}, run=run, finals=(ref_final, target_final), ref_info=ref_info)
