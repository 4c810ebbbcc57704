"""What travels to a worker, and one batch of samples run there (or in this process).

A batch is consecutive samples (`Batch`: their indices, and what stands for each). It travels with a `Plan`
shared by every batch of a pass: each model as IR bytes (`ModelPayload`: ``ov.serialize``, weights kept as
they are, named by their digest), the two `Device` objects (a name and compile properties; an emulated
device is rebuilt by the worker, whose compile does the rewrite), the indices of the exposed outputs, the
metric. What stands for a sample is either nothing (a ``Samples(loader=...)``: the worker loads it), the path
of a file the user gave (read by the worker: it must be at the same path there), or the arrays. `execute`
runs a batch on compiled models and returns a `BatchResult`, never tensors: per sample its final-output error
and class answers (`bisect_ov.samples.sources.sample_result`), or per tapped node a mergeable
`Distribution` of its error. `run_batch` is a worker's entry point: it compiles each plan once per process
and keeps the compiles for the batches that follow.

Assumed: a plan and a batch pickle (the devices are checked by the caller, `bisect_ov.samples.runs`), and an
infer request is not shared between threads (one batch at a time per compile).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import openvino as ov

from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.analysis.spread import Distribution
from bisect_ov.core.errors import InputError
from bisect_ov.engine.runner import run_both
from bisect_ov.model.state import STATE_PREFIX
from bisect_ov.run.devices import Device
from bisect_ov.run.inputs import align_inputs, prepare_inputs_noted
from bisect_ov.samples.sources import loaded, sample_result

__all__ = ["ModelPayload", "Plan", "Batch", "BatchResult", "execute", "prepare_pair", "run_batch"]


# ----- what travels ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelPayload:
    """A model as IR bytes, named by their digest (a worker reads it once)."""

    xml: bytes
    weights: bytes
    digest: str

    @classmethod
    def of(cls, model: ov.Model) -> "ModelPayload":
        with tempfile.TemporaryDirectory(prefix="bisect_ov_ir_") as folder:
            xml, weights = os.path.join(folder, "m.xml"), os.path.join(folder, "m.bin")
            ov.serialize(model, xml, weights)  # unlike save_model, never compresses weights to f16
            with open(xml, "rb") as f:
                xml_bytes = f.read()
            with open(weights, "rb") as f:
                weight_bytes = f.read()
        digest = hashlib.sha256(xml_bytes + hashlib.sha256(weight_bytes).digest()).hexdigest()[:24]
        return cls(xml_bytes, weight_bytes, digest)

    def load(self) -> ov.Model:
        from bisect_ov.run.devices import shared_core

        weights = ov.Tensor(np.frombuffer(self.weights, dtype=np.uint8).copy()) if self.weights else ov.Tensor(
            np.zeros(0, np.uint8))
        return shared_core().read_model(self.xml.decode("utf-8"), weights)


@dataclass(frozen=True)
class Plan:
    """What every batch of one pass shares. `kind`: ``outputs`` (the untouched model) or ``taps``."""

    kind: str
    ref_model: ModelPayload | None  # None in this process: the session's compiles are used
    target_model: ModelPayload | None
    ref_device: Device | None
    target_device: Device | None
    input_models: tuple[ModelPayload, ModelPayload | None] | None  # untouched models, to check inputs against
    names: tuple[str, ...]
    positions: tuple[int, ...]
    class_positions: tuple[int, ...] | None
    k: int
    metric: Callable[[TensorStats], float]
    seed: int
    ref_added: tuple[int, ...] = ()
    target_added: tuple[int, ...] = ()
    tap_keys: tuple[str, ...] = ()
    ref_tap_outputs: tuple[int, ...] = ()
    target_tap_outputs: tuple[int, ...] = ()
    jobs: int = 2
    prompts: Any = None  # a PromptInputs: LLM prompts made into the model's inputs, states reset
    limits: tuple[float, ...] = ()  # per tap key (taps in graph order): each sample's first key over it is kept


@dataclass(frozen=True)
class Batch:
    """Consecutive samples: their indices, and what stands for each (None: the worker's `loader` reads it)."""

    number: int
    indices: tuple[int, ...]
    items: tuple[Any, ...]
    loader: Callable[[int], Any] | None = None
    named: tuple[bool, ...] = ()
    attempt: int = 0  # a retry is another task (engines that cache results by arguments run it again)


@dataclass
class BatchResult:
    """What comes back from a batch: per-sample results (`outputs`) or per-node distributions (`taps`)."""

    number: int
    seconds: float
    samples: list = field(default_factory=list)
    spread: dict[str, Distribution] = field(default_factory=dict)
    worker: str = ""
    first_over: dict[int, str] = field(default_factory=dict)  # sample -> first tap key over its limit ("" none)
    ref_absmax: dict[str, float] = field(default_factory=dict)  # tap key -> largest |x| of its floating outputs


# ----- one batch ----------------------------------------------------------------------------------------------
def prepare_pair(index: int | None, sample: Any, ref_model: ov.Model, target_model: ov.Model | None, seed: int,
                 named: bool, prompts: Any = None, *,
                 prompt_length: int = 16) -> tuple[list[np.ndarray], list[np.ndarray], tuple[str, ...]]:
    """One sample's checked arrays for both sides, and a note per input whose values were cast (and one when the
    target model's inputs were paired otherwise than by name); the one way a
    sample becomes arrays, for one sample (`index` None) and for each of many (a bad one named by its number, and
    its file if any).

    `prompts` (a `bisect_ov.samples.prompts.PromptInputs`) makes an LLM prompt into the model's inputs first:
    token ids into its inputs, a stateful model's variables reset. `sample` None: seeded random inputs
    (`prompt_length` tokens for an LLM)."""
    try:
        if prompts is not None and sample is None:
            prompts.check_length(prompt_length)
        if prompts is not None and isinstance(sample, (str, os.PathLike)):
            from bisect_ov.samples.prompts import read_prompt  # (it imports this module)

            asked: Any = read_prompt(sample)  # what expand reads first: the inputs given, for the note below
            given = prompts.expand(asked)
        else:
            asked = sample
            given = prompts.expand(sample) if prompts is not None and sample is not None else sample
        ref_arrays, notes = prepare_inputs_noted(ref_model, given, seed=seed, prompt_length=prompt_length)
        made = sorted(str(k) for k in given if k not in asked and not str(k).startswith(STATE_PREFIX)) if isinstance(
            given, Mapping) and isinstance(asked, Mapping) else []
        if made:  # they follow from input_ids as an LLM's do: a mask that attends to every token, padding too
            notes += (f"Input(s) {', '.join(made)} not given: made from input_ids as for a prompt (a full attention "
                      "mask, every token attended, padding included; positions from 0; zeros for token types and the "
                      "beam index). Give them to use others.",)
        if target_model is None:
            return ref_arrays, ref_arrays, notes
        target, paired = align_inputs(ref_model, target_model, ref_arrays)
        return ref_arrays, target, notes + paired
    except InputError as err:
        if index is None:
            raise
        where = f" ('{sample}')" if named else ""
        raise InputError(f"Sample #{index}{where}: {err}") from err


def _load(loader: Callable[[int], Any], index: int) -> Any:
    """`loader(index)`, a failure naming the sample (still a failure of the batch, which may run again: a disk or
    a service may come back); a bad sample the loader itself refuses stays the user's (`InputError`)."""
    try:
        return loaded(loader(index), index)
    except InputError:
        raise
    except Exception as err:
        raise RuntimeError(f"sample #{index}: loader({index}) raised {type(err).__name__}: {err}") from err


def execute(plan: Plan, batch: Batch, compiled: tuple[Any, Any], models: tuple[ov.Model, ov.Model | None]) -> BatchResult:
    """Run `batch` with compiled (ref, target) models; `models` are the untouched ones inputs are checked against."""
    start = time.perf_counter()
    named = batch.named or (False,) * len(batch.indices)

    def pairs() -> Iterator[tuple[int, list[np.ndarray], list[np.ndarray]]]:
        for i, item, is_file in zip(batch.indices, batch.items, named):
            sample = _load(batch.loader, i) if batch.loader is not None else item
            yield (i, *prepare_pair(i, sample, models[0], models[1], plan.seed, is_file, plan.prompts)[:2])

    ref_c, target_c = compiled
    result = BatchResult(batch.number, 0.0, worker=f"{os.uname().nodename}:{os.getpid()}")
    if plan.kind == "outputs":
        ready = list(pairs())  # one batch's inputs at a time: memory follows the batch, not the run
        try:
            ref_out, target_out = run_both(lambda: ref_c.infer_many([p[1] for p in ready], jobs=plan.jobs),
                                           lambda: target_c.infer_many([p[2] for p in ready], jobs=plan.jobs))
        except InputError as err:  # a recorded side without this sample's inputs names the input set: name the sample
            if err.position is None:
                raise
            raise type(err)(f"Sample #{ready[err.position][0]}: {err}") from err
        n = len(plan.names)
        result.samples = [sample_result(p[0], r[:n], t, plan.positions, plan.names, plan.class_positions, plan.k,
                                        plan.metric) for p, r, t in zip(ready, ref_out, target_out)]
    else:
        for i, ref_in, target_in in pairs():  # one sample at a time: tapped outputs can be large
            ref_out, target_out = run_both(functools.partial(ref_c.infer, ref_in),
                                           functools.partial(target_c.infer, target_in))
            seen: dict[str, float] = {}
            for key, ri, ti in zip(plan.tap_keys, plan.ref_tap_outputs, plan.target_tap_outputs):
                stats = compare(ref_out[ri], target_out[ti])
                seen[key] = _worse(seen.get(key), plan.metric(stats))
                if not stats.integer:  # what each node's values reach on the reference (its f16 headroom)
                    result.ref_absmax[key] = _worse(result.ref_absmax.get(key), stats.ref_absmax)
            for key, value in seen.items():
                result.spread.setdefault(key, Distribution()).add(value, i)
            if plan.limits:
                result.first_over[i] = next((k for k, limit in zip(plan.tap_keys, plan.limits)
                                             if not seen[k] <= limit), "")
    result.seconds = time.perf_counter() - start
    return result


def _worse(a: float | None, b: float) -> float:
    """The larger error, NaN counting as the largest (a node's worst output port)."""
    if a is None or np.isnan(b):
        return float(b)
    return a if np.isnan(a) else max(a, float(b))


_COMPILED: "OrderedDict[tuple, tuple[Any, Any, tuple, threading.Lock]]" = OrderedDict()
_COMPILED_LOCK = threading.Lock()
_KEEP_COMPILED = 4  # plans kept compiled per worker process (two passes, a few runs)


def run_batch(plan: Plan, batch: Batch) -> BatchResult:
    """A worker's entry point: compile `plan` once per process (kept for later batches), then run `batch`."""
    assert plan.ref_model is not None and plan.target_model is not None and plan.input_models is not None
    start = time.perf_counter()
    key = (plan.ref_model.digest, plan.target_model.digest, pickle.dumps(plan.ref_device),
           pickle.dumps(plan.target_device), plan.ref_added, plan.target_added)
    with _COMPILED_LOCK:
        entry = _COMPILED.get(key)
        if entry is None:
            ref_payload, target_payload = plan.ref_model, plan.target_model
            ref_model = ref_payload.load()
            target_model = ref_model if target_payload.digest == ref_payload.digest else target_payload.load()
            ref_device, target_device = plan.ref_device, plan.target_device
            assert ref_device is not None and target_device is not None
            ref_c, target_c = run_both(lambda: ref_device.compile(ref_model, taps=plan.ref_added),
                                       lambda: target_device.compile(target_model, taps=plan.target_added))
            first, second = plan.input_models
            untouched = (ref_model if first.digest == ref_payload.digest else first.load(),
                         None if second is None else target_model if second.digest == target_payload.digest
                         else second.load())
            entry = (ref_c, target_c, untouched, threading.Lock())
            _COMPILED[key] = entry
            while len(_COMPILED) > _KEEP_COMPILED:
                _COMPILED.popitem(last=False)
        _COMPILED.move_to_end(key)
    ref_c, target_c, untouched, lock = entry
    with lock:  # one batch at a time per compile: an infer request is not shared between threads
        result = execute(plan, batch, (ref_c, target_c), untouched)
    result.seconds = time.perf_counter() - start  # the batch's time on the worker, its compile included
    return result
