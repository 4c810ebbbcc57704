"""Generation steps of a stateful LLM: a prefill and N decode steps on both sides, each on its own KV cache.

The model runs in its stateless form (`bisect_ov.model.state`): the variables are inputs and outputs, so each
side carries its own cache from step to step by feeding its state outputs back in, exactly as the plugin's
variables would. Both sides are fed the same next token, the reference's (greedy: the largest logit at the
last position), so they stay on one path and every step compares like with like. Per step:

* ``error``: the final-output (logits) error, target on its own cache against the reference on its own;
* ``local_error``: the target fed the *reference's* cache: the error of the step's own computation;
* ``cache_error``: the largest error of the cache the target inherited (its state inputs against the
  reference's);
* ``flipped``: whether the target's next token differs from the reference's.

The first step over tolerance starts the divergence; it starts in the step's computation when its local
error is over tolerance too, else in the cache it inherited. That step's inputs (the reference's cache on
both sides when the step's computation is at fault) are then examined node by node by the usual pipeline.

Assumptions: the model takes ``input_ids`` (and optionally ``attention_mask``, ``position_ids``,
``beam_idx``) with batch 1, and its first output is the logits ``[batch, seq, vocab]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.core.errors import InputError
from bisect_ov.core.records import Step
from bisect_ov.model.state import Stateless
from bisect_ov.run.devices import Compiled

__all__ = ["Generation", "run_steps", "step_inputs"]


@dataclass(frozen=True)
class Generation:
    """The steps' records, and the inputs of the step to examine node by node (None: the prefill)."""

    steps: tuple[Step, ...]
    examine: tuple[list[np.ndarray], list[np.ndarray]] | None
    examined_step: int
    why: str
    recompiled: tuple[np.ndarray, ...] | None = None  # the steps' target compile on the prefill (see run_steps)


def step_inputs(stateless: Stateless, names: Sequence[str], prompt: Sequence[np.ndarray], token: int, step: int,
                states: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The inputs of decode step `step` (1-based) after a prompt of `prompt`'s length, given the cache `states`."""
    length = prompt[list(names).index("input_ids")].shape[-1]
    arrays = []
    for name, value in zip(names, prompt):
        if name == "input_ids":
            arrays.append(np.full((1, 1), token, dtype=value.dtype))
        elif name == "attention_mask":
            arrays.append(np.ones((1, length + step), dtype=value.dtype))
        elif name == "position_ids":
            arrays.append(np.full((1, 1), length + step - 1, dtype=value.dtype))
        else:  # beam_idx and the like keep their prefill value
            arrays.append(value)
    return arrays + list(states)


def _infer(compiled: Compiled, arrays: Sequence[np.ndarray], count: int) -> list[np.ndarray]:
    """Run a compiled model on `arrays`; its first `count` outputs copied out (a tapped compile has more)."""
    out = compiled.infer(arrays)
    return [np.array(out[i]) for i in range(count)]


def run_steps(stateless: Stateless, names: Sequence[str], compile_ref: Callable[[], Compiled],
              compile_target: Callable[[], Compiled], prompt: Sequence[np.ndarray], initial: Sequence[np.ndarray],
              steps: int, error_of: Callable[[TensorStats], float], tolerance: float, *,
              prefill: tuple[Sequence[np.ndarray], Sequence[np.ndarray]] | None = None,
              ran: Callable[[str, int], None] | None = None) -> Generation:
    """The prefill and `steps` decode steps on both sides (see the module docstring).

    `compile_ref`, `compile_target`: each side's compile of the stateless model (the target's may be its twin,
    with the same inputs and variables), whose first outputs are the model's. The reference runs all its steps
    first and its compile is released before the target's is made: one compile of the model lives at a time,
    while the reference's cache of every step is held (steps + 1 caches: 0.8 GB for 8 steps after 2,048 tokens
    of a 1B Llama with 4 key-value heads).
    `prefill`: both sides' outputs on the prompt with the initial states, when the untouched run made them
    already: the reference's prefill is not run again, and the target's compile runs it once, its outputs
    kept as `Generation.recompiled` (a second compile of the untouched target, for the noise check). `ran(side,
    n)` counts inferences.

    Raises
    ------
    InputError
        When the model has no ``input_ids`` input.
    """
    if "input_ids" not in names:
        raise InputError(f"steps need a model with an 'input_ids' input (a causal LM); its inputs are {list(names)}. "
                         "Pass steps=0.")
    n, states = stateless.n_outputs, stateless.state_outputs
    count = max([n, *(i + 1 for i in states)])
    count_run = ran or (lambda side, k: None)

    # The reference on its own cache, fed its own greedy tokens: each step's inputs, outputs and token.
    ref_inputs: list[list[np.ndarray]] = []
    ref_outputs: list[list[np.ndarray]] = []
    tokens: list[int] = []
    ref_c = None
    ref_state = list(initial)
    for step in range(steps + 1):
        own = (list(prompt) + ref_state if step == 0
               else step_inputs(stateless, names, prompt, tokens[-1], step, ref_state))
        if step == 0 and prefill is not None:
            out = list(prefill[0][:count])
        else:
            ref_c = ref_c or compile_ref()
            out = _infer(ref_c, own, count)
            count_run("ref", 1)
        ref_inputs.append(own)
        ref_outputs.append(out)
        tokens.append(int(np.argmax(out[0][0, -1])))
        ref_state = [out[i] for i in states]
    del ref_c  # released before the target compiles

    # The target on its own cache, fed the reference's tokens, and on the reference's cache (its local error).
    target_c = None
    recompiled: tuple[np.ndarray, ...] | None = None
    target_state = list(initial)
    records: list[Step] = []
    step_arrays: list[tuple[list[np.ndarray], list[np.ndarray]]] = []
    for step in range(steps + 1):
        own, ref_out = ref_inputs[step], ref_outputs[step]
        theirs = (list(prompt) + target_state if step == 0
                  else step_inputs(stateless, names, prompt, tokens[step - 1], step, target_state))
        target_c = target_c or compile_target()
        target_out = _infer(target_c, theirs, count)
        count_run("target", 1)
        if step == 0 and prefill is not None:
            # This compile's prefill is another compile of the untouched target on its inputs: its outputs tell
            # the compile-to-compile noise; the records keep the untouched run's.
            recompiled, target_out = tuple(target_out), list(prefill[1][:count])
        if step == 0:  # both sides start from the same states: the target's own run is the local one
            local_out = target_out
        else:
            local_out = _infer(target_c, own, n)
            count_run("target", 1)
        error = max(error_of(compare(r, t)) for r, t in zip(ref_out[:n], target_out[:n]))
        local = max(error_of(compare(r, t)) for r, t in zip(ref_out[:n], local_out[:n]))
        ref_in_state, target_in_state = own[len(prompt):], theirs[len(prompt):]
        cache = max((error_of(compare(r, t)) for r, t in zip(ref_in_state, target_in_state) if r.size), default=0.0)
        target_token = int(np.argmax(target_out[0][0, -1]))
        records.append(Step(step=step, token=tokens[step], target_token=target_token, error=error,
                            local_error=local, cache_error=cache, tolerance=tolerance,
                            flipped=tokens[step] != target_token))
        step_arrays.append((own, own if local > tolerance else theirs))
        target_state = [target_out[i] for i in states]
    first = next((r for r in records if r.error > tolerance or r.local_error > tolerance), None)
    if first is None:
        return Generation(tuple(records), None, 0, f"every step's final output is within tolerance ({tolerance:.1e})",
                          recompiled)
    origin = "its own computation" if first.local_error > tolerance else "the cache it inherited"
    why = (f"divergence starts at step {first.step} ({'prefill' if first.step == 0 else 'decode'}), in {origin}: "
           f"error {first.error:.1e}, {first.local_error:.1e} with the reference's cache (tolerance {tolerance:.1e})")
    if first.local_error <= tolerance:
        # The cache drifted: examine the step where the cache first went over, fed its own inputs.
        worst = max(range(first.step + 1), key=lambda i: records[i].local_error)
        return Generation(tuple(records), step_arrays[worst] if worst else None, worst, why, recompiled)
    return Generation(tuple(records), step_arrays[first.step] if first.step else None, first.step, why,
                      recompiled)
