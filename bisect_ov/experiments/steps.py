"""Generation steps of a stateful LLM: a prefill and N decode steps on both sides, each on its own KV cache.

Each side carries its own cache from step to step as arrays: the state outputs of one step are the state
inputs of the next (`bisect_ov.model.state`'s stateless form). On an OpenVINO device the stateful model itself
runs, its variables set to those arrays before each call and read back after it, and the prefill starts from
the variables the model initialises itself (`bisect_ov.run.stateful.Stateful`): the plugin compiles the
stateless rewrite differently (its fused attention keeps the cache in its own precision), so the steps'
figures are the model's as the user runs it. An emulated device runs the stateless form. Both sides are fed
the same next token, the reference's (greedy: the largest logit at the last position), so they stay on one
path and every step compares like with like. Per step:

* ``error``: the final-output (logits) error, target on its own cache against the reference on its own;
* ``local_error``: the target fed the *reference's* cache: the error of the step's own computation;
* ``cache_error``: the largest error of the cache the target inherited (its state inputs against the
  reference's);
* ``flipped``: whether the target's next token differs from the reference's.

The first step over tolerance starts the divergence; it starts in the step's computation when its local
error is over tolerance too, else in the cache it inherited. That step's inputs (the reference's cache on
both sides when the step's computation is at fault) are then examined node by node by the usual pipeline.

The steps are bounded before they run (`check_positions`, `check_memory`): the last position must lie within the model's position
table when it has one (GPT-2's), and the caches held to the end (the reference's of every step, and the
target's inputs of every step: about twice the sum over the steps of a cache of that length) must fit in half
the memory available; beyond either, the run is refused with the most steps that fit.

Assumptions: the model takes ``input_ids`` (and optionally ``attention_mask``, ``position_ids``,
``beam_idx``) with batch 1, and its first output is the logits ``[batch, seq, vocab]``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.core.errors import InputError
from bisect_ov.core.records import Step
from bisect_ov.model.state import Stateless
from bisect_ov.run.devices import Compiled
from bisect_ov.run.inputs import decode_value

__all__ = ["Generation", "available_memory", "check_memory", "check_positions", "run_steps", "step_inputs", "STEPS_WITHOUT_MEMORY"]

STEPS_WITHOUT_MEMORY = 4096  # the most steps where the memory available cannot be read


@dataclass(frozen=True)
class Generation:
    """The steps' records, and the inputs of the step to examine node by node (None: the prefill)."""

    steps: tuple[Step, ...]
    examine: tuple[list[np.ndarray], list[np.ndarray]] | None
    examined_step: int
    why: str
    recompiled: tuple[np.ndarray, ...] | None = None  # the steps' target compile on the prefill (see run_steps)
    notes: tuple[str, ...] = ()  # what the report should say besides `why`
    # The target's steps again with a setting that may undo the divergence (`run_steps`' `retry`): its text and
    # the steps' records with it.
    retried: tuple[str, tuple[Step, ...]] | None = None


def step_inputs(stateless: Stateless, names: Sequence[str], prompt: Sequence[np.ndarray], token: int, step: int,
                states: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The inputs of decode step `step` (1-based) after a prompt of `prompt`'s length, given the cache `states`."""
    length = prompt[list(names).index("input_ids")].shape[-1]
    return [decode_value(name, value, token, length, step) for name, value in zip(names, prompt)] + list(states)


def check_positions(steps: int, length: int, positions: int | None) -> None:
    """Refuse `steps` decode steps after a prompt of `length` tokens that reach beyond the model's position table
    of `positions` rows (None: no table, nothing to check).

    Raises
    ------
    InputError
        With the most steps the table takes.
    """
    if positions is not None and length + steps > positions:
        raise InputError(f"steps={steps:,} after a prompt of {length} tokens reach position {length + steps - 1:,}, beyond "
                         f"the model's position range (positions 0 to {positions - 1:,}: its position table has "
                         f"{positions:,} rows). Ask for steps up to {max(positions - length, 0):,}.")


def check_memory(steps: int, length: int, cache_bytes: int, available: int | None) -> None:
    """Refuse `steps` decode steps whose caches would not fit in half the memory `available` (see the module
    docstring); `cache_bytes`: the variables' bytes after the prompt of `length` tokens. Where the memory
    available is unknown (None), at most `STEPS_WITHOUT_MEMORY` steps.

    Raises
    ------
    InputError
        With the most steps that would fit.
    """
    if available is None:
        if steps > STEPS_WITHOUT_MEMORY:
            raise InputError(f"steps={steps:,}: the memory available cannot be read here, so at most "
                             f"{STEPS_WITHOUT_MEMORY:,} decode steps run (each holds its KV cache to the end).")
        return
    per_token = cache_bytes / max(length, 1)

    def held(n: int) -> float:  # two caches per step, growing by one token a step
        return 2 * per_token * ((n + 1) * length + n * (n + 1) / 2)

    budget = available / 2
    if held(steps) > budget:
        fit, high = 0, steps
        while fit < high:  # the most steps whose caches fit
            mid = (fit + high + 1) // 2
            fit, high = (mid, high) if held(mid) <= budget else (fit, mid - 1)
        raise InputError(f"steps={steps:,} would hold about {held(steps) / 1e9:,.3g} GB of KV caches (each step's, on "
                         "both sides, to examine the step where divergence starts), more than half the memory available "
                         f"({available / 1e9:.1f} GB). Ask for at most {fit:,} steps.")


def available_memory() -> int | None:
    """Bytes of memory available now (Linux's MemAvailable, else the free pages), None where neither is known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def _infer(compiled: Compiled, arrays: Sequence[np.ndarray], count: int) -> list[np.ndarray]:
    """Run a compiled model on `arrays`; its first `count` outputs copied out (a tapped compile has more)."""
    out = compiled.infer(arrays)
    return [np.array(out[i]) for i in range(count)]


def _start(compiled: Compiled) -> None:
    """Tell a stateful model's compile that a sequence starts (`Stateful.start`); a stateless one needs nothing."""
    start = getattr(compiled, "start", None)
    if start is not None:
        start()


def run_steps(stateless: Stateless, names: Sequence[str], compile_ref: Callable[[], Compiled],
              compile_target: Callable[[], Compiled], prompt: Sequence[np.ndarray], initial: Sequence[np.ndarray],
              steps: int, error_of: Callable[[TensorStats], float], tolerance: float, *,
              prefill: tuple[Sequence[np.ndarray] | None, Sequence[np.ndarray] | None] = (None, None),
              ran: Callable[[str, int], None] | None = None, positions: int | None = None,
              retry: Callable[[Compiled], tuple[str, Compiled] | None] | None = None) -> Generation:
    """The prefill and `steps` decode steps on both sides (see the module docstring).

    `compile_ref`, `compile_target`: each side's compile, driven as the stateless model (the target's may be its
    twin, with the same inputs and variables), whose first outputs are the model's: a compile with ``start``
    (`Stateful`) is told before the prefill, which then starts from the variables the model initialises itself.
    The reference runs all its steps first and its compile is released before the target's is made: one compile
    of the model lives at a time, while the reference's cache of every step is held (steps + 1 caches: 0.8 GB for
    8 steps after 2,048 tokens of a 1B Llama with 4 key-value heads).
    `prefill`: each side's outputs on the prompt with the initial states, when the untouched run made them with
    the compile the steps make (None: not made, or by another form): the reference's prefill is not run again,
    and the target's compile runs it once, its outputs kept as `Generation.recompiled` (a second compile of the
    untouched target, for the noise check). `ran(side, n)` counts inferences. `positions`: the rows of the
    model's position table, when it has one. `retry`: when a step diverges, given the target's compile, another
    compile of the target with a setting that may undo it and the setting's text (None: nothing to try); the
    target's steps run again on it (`Generation.retried`).

    Raises
    ------
    InputError
        When the model has no ``input_ids`` input, or the steps are more than it or the memory can take
        (`check_positions`, `check_memory`: before the first decode step).
    """
    if "input_ids" not in names:
        raise InputError(f"steps need a model with an 'input_ids' input (a causal LM); its inputs are {list(names)}. "
                         "Pass steps=0.")
    length = prompt[list(names).index("input_ids")].shape[-1]
    check_positions(steps, length, positions)
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
        if step == 0 and prefill[0] is not None:
            out = list(prefill[0][:count])
        else:
            ref_c = ref_c or compile_ref()
            if step == 0:
                _start(ref_c)
            out = _infer(ref_c, own, count)
            count_run("ref", 1)
        ref_inputs.append(own)
        ref_outputs.append(out)
        tokens.append(int(np.argmax(out[0][0, -1])))
        ref_state = [out[i] for i in states]
        if step == 0:  # the cache after the prompt tells what the steps will hold
            check_memory(steps, length, sum(a.nbytes for a in ref_state), available_memory())
    del ref_c  # released before the target compiles

    # The target on its own cache, fed the reference's tokens, and on the reference's cache (its local error).
    def target_steps(target_c: Compiled, prefilled: Sequence[np.ndarray] | None):
        recompiled: tuple[np.ndarray, ...] | None = None
        target_state = list(initial)
        records: list[Step] = []
        step_arrays: list[tuple[list[np.ndarray], list[np.ndarray]]] = []
        for step in range(steps + 1):
            own, ref_out = ref_inputs[step], ref_outputs[step]
            theirs = (list(prompt) + target_state if step == 0
                      else step_inputs(stateless, names, prompt, tokens[step - 1], step, target_state))
            if step == 0:
                _start(target_c)
            target_out = _infer(target_c, theirs, count)
            count_run("target", 1)
            if step == 0 and prefilled is not None:
                # This compile's prefill is another compile of the untouched target on its inputs: its outputs
                # tell the compile-to-compile noise; the records keep the untouched run's.
                recompiled, target_out = tuple(target_out), list(prefilled[:count])
            if step == 0:  # both sides start from the same states: the target's own run is the local one
                local_out = target_out
            else:
                local_out = _infer(target_c, own, n)
                count_run("target", 1)
            error = max(error_of(compare(r, t)) for r, t in zip(ref_out[:n], target_out[:n]))
            local = max(error_of(compare(r, t)) for r, t in zip(ref_out[:n], local_out[:n]))
            ref_in_state, target_in_state = own[len(prompt):], theirs[len(prompt):]
            cache = max((error_of(compare(r, t)) for r, t in zip(ref_in_state, target_in_state) if r.size),
                        default=0.0)
            target_token = int(np.argmax(target_out[0][0, -1]))
            records.append(Step(step=step, token=tokens[step], target_token=target_token, error=error,
                                local_error=local, cache_error=cache, tolerance=tolerance,
                                flipped=tokens[step] != target_token))
            step_arrays.append((own, own if local > tolerance else theirs))
            target_state = [target_out[i] for i in states]
        return records, step_arrays, recompiled

    target_c = compile_target()
    records, step_arrays, recompiled = target_steps(target_c, prefill[1])
    retried = None
    if retry is not None and any(r.error > tolerance or r.local_error > tolerance for r in records):
        again = retry(target_c)
        if again is not None:
            del target_c
            retried = (again[0], tuple(target_steps(again[1], None)[0]))
    first = next((r for r in records if r.error > tolerance or r.local_error > tolerance), None)
    if first is None:
        return Generation(tuple(records), None, 0, f"every step's final output is within tolerance ({tolerance:.1e})",
                          recompiled, retried=retried)
    origin = "its own computation" if first.local_error > tolerance else "the cache it inherited"
    why = (f"divergence starts at step {first.step} ({'prefill' if first.step == 0 else 'decode'}), in {origin}: "
           f"error {first.error:.1e}, {first.local_error:.1e} with the reference's cache (tolerance {tolerance:.1e})")
    if first.local_error <= tolerance:
        # The cache drifted: examine the step where the cache first went over, fed its own inputs.
        worst = max(range(first.step + 1), key=lambda i: records[i].local_error)
        return Generation(tuple(records), step_arrays[worst] if worst else None, worst, why, recompiled, retried=retried)
    return Generation(tuple(records), step_arrays[first.step] if first.step else None, first.step, why,
                      recompiled, retried=retried)
