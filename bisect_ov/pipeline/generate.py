"""The generation stage: with ``steps``, the prefill and decode steps of a stateful LLM on both sides
(`bisect_ov.experiments.steps`), and the step where divergence starts examined in place of the prefill; steps
beyond the model's position table, or whose caches would not fit in memory, refused before the first decode step."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from bisect_ov.engine.comparison import Sample
from bisect_ov.experiments.steps import Generation, run_steps
from bisect_ov.pipeline.records import Examined, Setup
from bisect_ov.pipeline.stages import examine
from bisect_ov.run.inputs import llm_role
from bisect_ov.samples.prompts import position_range

__all__ = ["generate"]


def generate(setup: Setup, examined: Examined) -> tuple[Generation | None, Examined]:
    """With ``steps``: the prefill and decode steps on both sides (`bisect_ov.experiments.steps`); None without them.

    When a decode step is where divergence starts, that step's inputs are examined instead (their untouched
    run is made, a new engine), so the node results explain that step: the `Examined` returned is then that
    step's, else `examined` with the steps' target compile's outputs on the prefill (`Examined.recompiled`, the
    noise check's second compile).
    """
    engine, options, state, runner = examined.engine, setup.options, setup.state, setup.runner
    kept = {"ref": examined.kept_ref}  # the untouched run's reference compile
    examined = replace(examined, kept_ref=None)  # the steps release it: nothing later holds it
    if not setup.runs_steps:
        return None, examined
    assert state is not None  # `Setup.runs_steps`
    tolerance = examined.plan.output(engine.runner.graph.results()[0].key)
    names = [llm_role(set(p.output(0).get_names()) | {p.get_friendly_name()}, p.get_friendly_name())
             for p in state.model.get_parameters()[: state.n_inputs]]
    arrays = engine.sample.ref
    untouched = engine.untouched
    # The steps' prefill is the untouched run's when both sides ran the same inputs, in the same order.
    same = (runner.target_output_positions == list(range(len(untouched.target_final)))
            and len(arrays) == len(engine.sample.target)
            and all(np.array_equal(a, b) for a, b in zip(arrays, engine.sample.target)))
    with setup.clock("steps"):
        generation = run_steps(state, names, lambda: kept.pop("ref") or runner.compile("ref", runner.graph.model),
                               lambda: runner.compile("target", runner.target_graph.model),
                               arrays[: state.n_inputs], arrays[state.n_inputs:], options.steps, setup.error_of,
                               tolerance, prefill=(untouched.ref_final, untouched.target_final) if same else None,
                               ran=runner.ran, positions=position_range(runner.graph.model))
    if generation.examine is not None:
        step = Sample.of(*generation.examine)
        return generation, replace(examined, engine=examine(runner, step))
    return generation, replace(examined, recompiled=generation.recompiled)
