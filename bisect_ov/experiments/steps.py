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
from functools import partial
from typing import Callable, Sequence

import numpy as np

from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.core.errors import InputError
from bisect_ov.core.records import Step
from bisect_ov.engine.runner import run_both
from bisect_ov.model.state import Stateless
from bisect_ov.run.devices import Compiled, Device

__all__ = ["Generation", "run_steps", "step_inputs"]


@dataclass(frozen=True)
class Generation:
    """The steps' records, and the inputs of the step to examine node by node (None: the prefill)."""

    steps: tuple[Step, ...]
    examine: tuple[list[np.ndarray], list[np.ndarray]] | None
    examined_step: int
    why: str


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


def _infer(compiled: Compiled, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run a compiled model on `arrays`; its outputs copied out."""
    return [np.array(a) for a in compiled.infer(arrays)]


def run_steps(stateless: Stateless, names: Sequence[str], ref: Device, target: Device, prompt: Sequence[np.ndarray],
              initial: Sequence[np.ndarray], steps: int, error_of: Callable[[TensorStats], float],
              tolerance: float, target_stateless: Stateless | None = None) -> Generation:
    """The prefill and `steps` decode steps on both sides (see the module docstring).

    `target_stateless`: the target's own model (a twin), whose inputs and variables are the model's.

    Raises
    ------
    InputError
        When the model has no ``input_ids`` input.
    """
    if "input_ids" not in names:
        raise InputError(f"steps need a model with an 'input_ids' input (a causal LM); its inputs are {list(names)}. "
                         "Pass steps=0.")
    target_model = (target_stateless or stateless).model  # a twin (`target_model`) with the same inputs
    ref_c, target_c = run_both(lambda: ref.compile(stateless.model), lambda: target.compile(target_model))
    n, states = stateless.n_outputs, stateless.state_outputs
    ref_state, target_state = list(initial), list(initial)
    records: list[Step] = []
    step_arrays: list[tuple[list[np.ndarray], list[np.ndarray]]] = []
    token: int | None = None
    for step in range(steps + 1):
        if step == 0:
            own = list(prompt) + ref_state
            theirs = list(prompt) + target_state
        else:
            assert token is not None  # the previous step's reference token
            own = step_inputs(stateless, names, prompt, token, step, ref_state)
            theirs = step_inputs(stateless, names, prompt, token, step, target_state)
        shared = own  # the target fed the reference's cache
        ref_out, target_out = run_both(partial(_infer, ref_c, own), partial(_infer, target_c, theirs))
        local_out = [np.array(a) for a in target_c.infer(shared)]
        error = max(error_of(compare(r, t)) for r, t in zip(ref_out[:n], target_out[:n]))
        local = max(error_of(compare(r, t)) for r, t in zip(ref_out[:n], local_out[:n]))
        cache = max((error_of(compare(r, t)) for r, t in zip(ref_state, target_state) if r.size), default=0.0)
        ref_token = int(np.argmax(ref_out[0][0, -1]))
        target_token = int(np.argmax(target_out[0][0, -1]))
        records.append(Step(step=step, token=ref_token, target_token=target_token, error=error, local_error=local,
                            cache_error=cache, tolerance=tolerance, flipped=ref_token != target_token))
        step_arrays.append((own, shared if local > tolerance else theirs))
        token = ref_token
        ref_state = [ref_out[i] for i in states]
        target_state = [target_out[i] for i in states]
    first = next((r for r in records if r.error > tolerance or r.local_error > tolerance), None)
    if first is None:
        return Generation(tuple(records), None, 0, f"every step's final output is within tolerance ({tolerance:.1e})")
    origin = "its own computation" if first.local_error > tolerance else "the cache it inherited"
    why = (f"divergence starts at step {first.step} ({'prefill' if first.step == 0 else 'decode'}), in {origin}: "
           f"error {first.error:.1e}, {first.local_error:.1e} with the reference's cache (tolerance {tolerance:.1e})")
    if first.local_error <= tolerance:
        # The cache drifted: examine the step where the cache first went over, fed its own inputs.
        worst = max(range(first.step + 1), key=lambda i: records[i].local_error)
        return Generation(tuple(records), step_arrays[worst] if worst else None, worst, why)
    return Generation(tuple(records), step_arrays[first.step] if first.step else None, first.step, why)
