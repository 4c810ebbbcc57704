"""The generation stage: with ``steps``, the prefill and decode steps of a stateful LLM on both sides
(`bisect_ov.experiments.steps`), and the step where divergence starts examined in place of the prefill; steps
beyond the model's position table, or whose caches would not fit in memory, refused before the first decode step.

On an OpenVINO device the steps run the stateful model as the user runs it (`bisect_ov.run.stateful`), while
nodes are measured on its stateless form, which the plugin compiles differently: where the two forms' errors
disagree on a step examined, a note says so with both figures."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from bisect_ov.analysis.metrics import compare
from bisect_ov.core.errors import DeviceError
from bisect_ov.engine.comparison import Sample
from bisect_ov.experiments.steps import Generation, run_steps
from bisect_ov.pipeline.records import Examined, Setup
from bisect_ov.pipeline.stages import examine
from bisect_ov.run.inputs import llm_role
from bisect_ov.run.stateful import cache_precision, compile_stateful, runs_stateful, with_cache_like
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
    target_state = setup.state_of_target or state
    stateful = (runs_stateful(runner.device("ref")), runs_stateful(runner.device("target")))
    said: list[str] = []  # notes on what the steps ran
    # The precision the reference keeps its cache in: its activations' where it runs the stateless form.
    caches: dict[str, str | None] = {"ref": runner.device("ref").activation_precision}

    def compile_side(side: str, stateless, model):
        if stateful[side == "target"]:
            compiled = compile_stateful(runner.device(side), stateless)
            if compiled is not None:
                runner.count_compile(side)
                if side == "ref":
                    caches["ref"] = cache_precision(compiled)
                return compiled
        return (side == "ref" and kept.pop("ref")) or runner.compile(side, model)

    # The steps' prefill is the untouched run's when both sides ran the same inputs, in the same order, and a
    # side's steps run the form its untouched run ran (the stateless one).
    same = (runner.target_output_positions == list(range(len(untouched.target_final)))
            and len(arrays) == len(engine.sample.target)
            and all(np.array_equal(a, b) for a, b in zip(arrays, engine.sample.target)))
    prefill = (None if stateful[0] or not same else untouched.ref_final,
               None if stateful[1] or not same else untouched.target_final)

    def cache_retry(compiled):  # the target's cache kept as the reference keeps its own, where it is not
        try:
            again = with_cache_like(runner.device("target"), target_state, compiled, caches["ref"])
        except DeviceError as err:
            said.append(f"the target with its KV cache kept as the reference's ({caches['ref']}) did not compile: {err}")
            return None
        if again is not None:
            runner.count_compile("target")
        return again

    with setup.clock("steps"):
        generation = run_steps(state, names, lambda: compile_side("ref", state, runner.graph.model),
                               lambda: compile_side("target", target_state, runner.target_graph.model),
                               arrays[: state.n_inputs], arrays[state.n_inputs:], options.steps, setup.error_of,
                               tolerance, prefill=prefill, ran=runner.ran, positions=position_range(runner.graph.model),
                               retry=cache_retry if stateful[1] else None)
    generation = replace(generation, notes=generation.notes + _retried(generation) + tuple(
        f"Generation: {t}." for t in said))
    if generation.examine is not None:
        try:
            stepped = replace(examined, engine=examine(runner, Sample.of(*generation.examine)))
        except DeviceError as err:
            if not any(stateful):
                raise
            # The stateless form of that step does not run where the stateful model did: the prefill is examined.
            note = (f"Step {generation.examined_step}'s stateless form, in which nodes are measured, failed to run "
                    f"({err}); the stateful model ran it: the nodes below are the prefill's.")
            generation = replace(generation, examine=None, examined_step=0, notes=generation.notes + (note,))
        else:
            return _forms(generation, stepped, setup, stateful), stepped
    return _forms(generation, examined, setup, stateful), replace(examined, recompiled=generation.recompiled)


def _forms(generation: Generation, examined: Examined, setup: Setup, stateful: tuple[bool, bool]) -> Generation:
    """`generation` with a note when the examined step's error as the steps ran it (the stateful model) and as
    its stateless form ran it (the untouched run whose nodes are measured) disagree: one over the tolerance and
    the other not, or one 2x the other with the larger over half the tolerance; only where the target runs the
    stateful model (an emulated target runs the stateless form in the steps too)."""
    if not stateful[1]:
        return generation
    record = generation.steps[generation.examined_step]
    untouched, n = examined.engine.untouched, setup.state.n_outputs if setup.state is not None else 1
    stateless = max(setup.error_of(compare(r, t)) for r, t in zip(untouched.ref_final[:n], untouched.target_final[:n]))
    # The examined inputs are the step's own (its cache the target's) or the reference's cache (`run_steps`).
    steps_error = record.local_error if generation.examined_step and record.local_error > record.tolerance else record.error
    low, high = sorted((steps_error, stateless))
    tolerance = record.tolerance
    if not ((low <= tolerance < high) or (high > tolerance / 2 and high > 2 * low)):
        return generation
    step = "the prefill" if generation.examined_step == 0 else f"step {generation.examined_step}"
    note = (f"At {step} the model as it runs (stateful, the plugin keeping its variables) gives error {steps_error:.1e}, "
            f"its stateless form, whose nodes are measured below, {stateless:.1e} (tolerance {tolerance:.1e}): the "
            "plugin compiles the two forms differently, so the node figures are the stateless form's.")
    return replace(generation, notes=generation.notes + (note,))


def _retried(generation: Generation) -> tuple[str, ...]:
    """What the target's steps gave again with the setting `run_steps` retried (`Generation.retried`)."""
    if generation.retried is None:
        return ()
    setting, records = generation.retried
    over = [r for r in records if r.diverged or r.local_error > r.tolerance]
    largest = max(max(r.error, r.local_error) for r in records)
    if not over:
        return (f"Generation: with {setting} on the target, every step is within tolerance (largest error "
                f"{largest:.1e}): the cache's precision makes the divergence; compile the target with that setting to "
                "avoid it.",)
    return (f"Generation: with {setting} on the target, step {over[0].step} still diverges (error "
            f"{max(over[0].error, over[0].local_error):.1e}): the cache's precision is not all of it.",)
