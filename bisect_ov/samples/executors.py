"""Running many samples: in this process, or as work units on any `concurrent.futures.Executor`.

The samples are cut into units (`samples_per_unit` consecutive indices). A unit runs one pass over its
samples on both sides and returns what is kept of them, never tensors: per sample its final-output error and
class answers (`bisect_ov.samples.sources.sample_result`), or per tapped node a mergeable `Distribution` of its
error. Two passes run: the untouched model on every sample (the ranking; the detailed search then runs on
the worst sample, in this process), and after the search the model with the measured nodes exposed (each
node's error over the samples).

With an executor (Dask ``distributed.Client(...).get_executor()``, Ray's, a ``ProcessPoolExecutor``, or
the ``--executor`` forms of `open_executor`) a unit travels as a `Plan` shared by every unit of the pass --
each model as IR bytes (``ov.serialize``, weights kept as they are), the two `Device` objects (a name and
compile properties; an emulated device is rebuilt by the worker, whose compile does the rewrite), the
indices of the exposed outputs, the metric -- and the unit's sample indices with either nothing (a
``Samples(loader=...)``: the worker loads them), the paths of files the user gave (read by the worker: they
must be at the same path there), or the arrays (a generator's or a list's samples). A worker compiles each
plan once and keeps the compiles for the units that follow.

Merging does not depend on where or in which order units ran: per-sample results are keyed by index and
distributions merge exactly (`bisect_ov.analysis.spread`), so a cluster's figures are an in-process run's.
A unit that raises is run again (`unit_retries` times); what still fails is reported with the sample
indices it held, and the summary says the run is partial. Bad inputs are not retried: they stop the run as
they would in-process. Recorded sides (captures) replay from a file on this machine: they run in-process.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import multiprocessing
import os
import pickle
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import openvino as ov
from tqdm import tqdm

from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.analysis.spread import Distribution
from bisect_ov.core.errors import DeviceError, InputError, first_line
from bisect_ov.engine.runner import Runner, run_both
from bisect_ov.model.taps import Tap, tap_model
from bisect_ov.run.devices import Device
from bisect_ov.run.inputs import align_inputs, prepare_inputs
from bisect_ov.samples.sources import RunLog, Samples, SampleSummary, sample_result

__all__ = ["SampleRun", "open_executor", "RayExecutor", "run_samples", "node_spread", "ModelPayload", "Plan", "Unit",
           "UnitResult", "run_unit", "prepare_pair"]

log = logging.getLogger(__name__)
EXECUTOR_FORMS = ("None (in this process), 'processes:N', 'threads:N', 'dask://HOST:PORT' (or 'tcp://HOST:PORT'), "
                  "'ray' (a local Ray instance) or 'ray://HOST:PORT'")


# ----- executors -------------------------------------------------------------------------------------------
class _Inline(Executor):
    """Runs each call at once in this process: the default, with the same code path as the executors."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as err:  # noqa: B036 -- handed to the caller through the future, as executors do
            future.set_exception(err)
        return future


class RayExecutor(Executor):
    """Ray as a `concurrent.futures.Executor`: each `submit` is one Ray task, its result a standard future.

    Uses the Ray instance this process is connected to, else connects with ``ray.init(address, **init)``
    (``address=None``: a local instance; ``'ray://HOST:PORT'``: a cluster's client server) and disconnects
    on `shutdown`. `share` puts an object in Ray's object store once, so the model's IR travels to each node
    once per pass rather than with every unit. Ray schedules each task on a worker process it keeps, so a
    worker compiles each plan once (`run_unit`).

    >>> executor = RayExecutor()                                   # doctest: +SKIP
    >>> bisect("model.xml", "CPU", "CPU:bf16", samples, executor=executor)  # doctest: +SKIP
    """

    def __init__(self, address: str | None = None, **init: Any):
        import ray

        self._ray = ray
        self._connected_here = not ray.is_initialized()
        if self._connected_here:
            ray.init(address=address, **init)
        self._tasks: dict[Any, Any] = {}  # fn -> its Ray remote function, made once

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        task = self._tasks.get(fn)
        if task is None:
            task = self._tasks[fn] = self._ray.remote(fn)
        return task.remote(*args, **kwargs).future()

    def share(self, obj: Any) -> Any:
        """`obj` in the object store: tasks given the reference receive the object."""
        return self._ray.put(obj)

    @property
    def _max_workers(self) -> int:  # read by `_width`: the cluster's CPUs, one task each
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._connected_here and self._ray.is_initialized():
            self._ray.shutdown()


def open_executor(spec: Any) -> tuple[Executor | None, str, Callable[[], None]]:
    """(executor, label for the report, close) from an `executor` option value.

    Parameters
    ----------
    spec
        None (in this process); a `concurrent.futures.Executor` (anything with ``submit``), used as given and
        left open; ``'processes:N'`` or ``'threads:N'`` (a local pool, closed afterwards);
        ``'dask://HOST:PORT'`` or ``'tcp://HOST:PORT'`` (a Dask scheduler: needs ``bisect_ov[cluster]``);
        ``'ray'`` (the Ray instance this process is connected to, or a local one) or ``'ray://HOST:PORT'``
        (a Ray cluster's client server; both need ``bisect_ov[ray]``), through `RayExecutor`.
    """
    if spec is None or spec == "in-process":
        return None, "in-process", lambda: None
    if not isinstance(spec, str):
        if not callable(getattr(spec, "submit", None)):
            raise InputError(f"executor must be a concurrent.futures.Executor or one of {EXECUTOR_FORMS}; "
                             f"got {spec!r}.")
        return spec, type(spec).__name__, lambda: None
    kind, _, rest = spec.partition(":")
    if kind in ("processes", "threads"):
        if not rest.isdigit() or int(rest) < 1:
            raise InputError(f"executor '{spec}': give the number of workers, e.g. '{kind}:2'.")
        if kind == "threads":
            pool: Executor = ThreadPoolExecutor(int(rest))
        else:  # a forked child would inherit OpenVINO's threads mid-state: start fresh interpreters
            pool = ProcessPoolExecutor(int(rest), mp_context=multiprocessing.get_context("spawn"))
        return pool, spec, lambda: pool.shutdown(wait=True, cancel_futures=True)
    if kind in ("dask", "tcp", "tls"):
        address = "tcp:" + rest if kind == "dask" else spec
        try:
            from distributed import Client
        except ImportError as err:
            raise InputError(f"executor '{spec}' needs Dask: pip install 'bisect_ov[cluster]'.") from err
        try:
            client = Client(address, timeout=30)
        except Exception as err:
            raise InputError(f"Cannot reach the Dask scheduler at {address}: {first_line(err)}. Start one with "
                             "'dask scheduler' and workers with 'dask worker ADDRESS'.") from err
        return client.get_executor(), f"dask {address}", client.close
    if kind == "ray":
        ray_address = spec if rest else None
        try:
            import ray  # noqa: F401 -- only to say what is missing
        except ImportError as err:
            raise InputError(f"executor '{spec}' needs Ray: pip install 'bisect_ov[ray]'.") from err
        try:
            ray_pool = RayExecutor(ray_address, **({} if ray_address else {"include_dashboard": False,
                                                                             "log_to_driver": False}))
        except Exception as err:
            raise InputError(f"Cannot start or reach Ray at {ray_address or 'a local instance'}: "
                             f"{first_line(err)}.") from err
        return ray_pool, f"ray {ray_address or 'local'}", ray_pool.shutdown
    raise InputError(f"Unknown executor '{spec}'. Use {EXECUTOR_FORMS}, or pass an Executor object.")


def _width(executor: Executor | None) -> int:
    """Workers behind an executor, to keep about two units per worker in flight (a guess for unknown kinds)."""
    if executor is None or isinstance(executor, _Inline):
        return 1
    count = getattr(executor, "_max_workers", None)
    client = getattr(executor, "_client", None)
    if client is not None:
        try:
            count = sum(client.nthreads().values())
        except Exception as err:
            log.debug("Could not count the Dask workers: %s", err)
    return max(1, int(count or 2))


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
    """What every unit of one pass shares. `kind`: ``outputs`` (the untouched model) or ``taps``."""

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


@dataclass(frozen=True)
class Unit:
    """Consecutive samples: their indices, and what stands for each (None: the worker's `loader` reads it)."""

    number: int
    indices: tuple[int, ...]
    items: tuple[Any, ...]
    loader: Callable[[int], Any] | None = None
    named: tuple[bool, ...] = ()
    attempt: int = 0  # a retry is another task (engines that cache results by arguments run it again)


@dataclass
class UnitResult:
    """What comes back from a unit: per-sample results (`outputs`) or per-node distributions (`taps`)."""

    number: int
    seconds: float
    samples: list = field(default_factory=list)
    spread: dict[str, Distribution] = field(default_factory=dict)
    worker: str = ""


# ----- one unit ----------------------------------------------------------------------------------------------
def prepare_pair(index: int, sample: Any, ref_model: ov.Model, target_model: ov.Model | None, seed: int,
                 named: bool) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """One sample's checked arrays for both sides; a bad sample is named (its number, and its file if any)."""
    try:
        ref_arrays = prepare_inputs(ref_model, sample, seed=seed)
        return ref_arrays, align_inputs(ref_model, target_model, ref_arrays) if target_model is not None else ref_arrays
    except InputError as err:
        where = f" ('{sample}')" if named else ""
        raise InputError(f"Sample #{index}{where}: {err}") from err


def execute(plan: Plan, unit: Unit, compiled: tuple[Any, Any], models: tuple[ov.Model, ov.Model | None]) -> UnitResult:
    """Run `unit` with compiled (ref, target) models; `models` are the untouched ones inputs are checked against."""
    start = time.perf_counter()
    named = unit.named or (False,) * len(unit.indices)

    def pairs() -> Iterator[tuple[int, list[np.ndarray], list[np.ndarray]]]:
        for i, item, is_file in zip(unit.indices, unit.items, named):
            sample = unit.loader(i) if unit.loader is not None else item
            yield (i, *prepare_pair(i, sample, models[0], models[1], plan.seed, is_file))

    ref_c, target_c = compiled
    result = UnitResult(unit.number, 0.0, worker=f"{os.uname().nodename}:{os.getpid()}")
    if plan.kind == "outputs":
        ready = list(pairs())  # one unit's inputs at a time: memory follows the unit, not the run
        ref_out, target_out = run_both(lambda: ref_c.infer_many([p[1] for p in ready], jobs=plan.jobs),
                                       lambda: target_c.infer_many([p[2] for p in ready], jobs=plan.jobs))
        n = len(plan.names)
        result.samples = [sample_result(p[0], r[:n], t, plan.positions, plan.names, plan.class_positions, plan.k,
                                        plan.metric) for p, r, t in zip(ready, ref_out, target_out)]
    else:
        for i, ref_in, target_in in pairs():  # one sample at a time: tapped outputs can be large
            ref_out, target_out = run_both(functools.partial(ref_c.infer, ref_in),
                                           functools.partial(target_c.infer, target_in))
            seen: dict[str, float] = {}
            for key, ri, ti in zip(plan.tap_keys, plan.ref_tap_outputs, plan.target_tap_outputs):
                seen[key] = _worse(seen.get(key), plan.metric(compare(ref_out[ri], target_out[ti])))
            for key, value in seen.items():
                result.spread.setdefault(key, Distribution()).add(value, i)
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


def run_unit(plan: Plan, unit: Unit) -> UnitResult:
    """A worker's entry point: compile `plan` once per process (kept for later units), then run `unit`."""
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
    with lock:  # one unit at a time per compile: an infer request is not shared between threads
        result = execute(plan, unit, (ref_c, target_c), untouched)
    result.seconds = time.perf_counter() - start  # the unit's time on the worker, its compile included
    return result


# ----- the driver ------------------------------------------------------------------------------------------
class SampleRun:
    """Many samples and where they run: the `Samples`, the executor, the knobs, and the log of both passes.

    Parameters
    ----------
    samples
        The samples.
    executor
        An `open_executor` form (None: in this process).
    samples_per_unit, unit_retries
        Samples per unit; how many times a failed unit runs again.
    owned
        Close (remove a generator's spill folder) at the end: the samples were made from the user's inputs.
    """

    def __init__(self, samples: Samples, executor: Any = None, *, samples_per_unit: int = 16, unit_retries: int = 2,
                 progress: bool = False, owned: bool = True):
        self.samples = samples
        self.executor, label, self._close_executor = open_executor(executor)
        self.per_unit, self.retries, self.progress, self.owned = samples_per_unit, unit_retries, progress, owned
        self.log = RunLog(executor=label)
        self.notes: list[str] = []

    def remote(self, session: Runner) -> bool:
        """True when units go to the executor: recorded sides replay from a file here, so they stay."""
        if self.executor is None:
            return False
        if session.ref.recorded or session.target.recorded:
            note = ("The samples ran in this process, not on the executor: a recorded side (capture) replays from a "
                    "file on this machine.")
            if note not in self.notes:
                self.notes.append(note)
            self.log.executor = "in-process"
            return False
        return True

    def share(self, plan: Plan) -> Any:
        """What the units refer to for `plan`: on Dask, the plan sent once to every worker (a future the
        workers resolve), on Ray put once in its object store, rather than the model's IR with every unit;
        elsewhere the plan itself."""
        if isinstance(self.executor, RayExecutor):
            return self.executor.share(plan)
        client = getattr(self.executor, "_client", None)  # Dask's executor wraps a Client
        if client is None or not callable(getattr(client, "scatter", None)):
            return plan
        try:
            return client.scatter(plan, broadcast=True, hash=False)
        except Exception as err:  # the plan then travels with each unit, as with other executors
            log.info("Could not send the plan to the workers once (%s); it travels with each unit", first_line(err))
            return plan

    def close(self) -> None:
        self._close_executor()
        if self.owned:
            self.samples.close()

    def units(self) -> Iterator[Unit]:
        """The samples cut into units, read as the units are handed out."""
        batch: list[tuple[int, Any]] = []
        number = 0
        for index, sample in self.samples.stream():
            batch.append((index, sample))
            if len(batch) == self.per_unit:
                yield self._unit(number, batch)
                number, batch = number + 1, []
        if batch:
            yield self._unit(number, batch)

    def _unit(self, number: int, batch: list[tuple[int, Any]]) -> Unit:
        s = self.samples
        if self.executor is None:  # in this process: the samples as they are (a spill file is read when prepared)
            return Unit(number, tuple(i for i, _ in batch), tuple(x for _, x in batch), s.loader,
                        tuple(s.names_file(i, x) for i, x in batch))
        return Unit(number, tuple(i for i, _ in batch), tuple(s.travelling(i, x) for i, x in batch), s.loader,
                    tuple(s.names_file(i, x) for i, x in batch))

    def drive(self, submit: Callable[[Unit], Future], desc: str,
              seconds: list[float]) -> tuple[list[UnitResult], list[int]]:
        """Hand out the units (about two per worker in flight), retry failures, collect results in unit order.

        Returns the results and the sample indices of units that failed every attempt (their failures logged).
        """
        window = 2 * _width(self.executor) + 1
        total = -(-len(self.samples) // self.per_unit) if self.samples.kind != "generator" else None
        pending: dict[Future, tuple[Unit, int]] = {}
        results: list[UnitResult] = []
        lost: list[int] = []
        source = self.units()
        exhausted = False
        with tqdm(total=total, desc=desc, unit="unit", disable=not self.progress, leave=False) as bar:
            while pending or not exhausted:
                while not exhausted and len(pending) < window:
                    unit = next(source, None)
                    if unit is None:
                        exhausted = True
                        break
                    self._submit(submit, unit, 0, pending, lost)
                if not pending:
                    continue
                done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                for future in done:
                    unit, attempt = pending.pop(future)
                    error = future.exception()
                    if error is None:
                        result = future.result()
                        results.append(result)
                        seconds.append(result.seconds)
                        self.log.workers.add(result.worker)
                        bar.update(1)
                        continue
                    if isinstance(error, InputError):  # a bad sample: the user's to fix, as in-process
                        for other in pending:
                            other.cancel()
                        raise error
                    if attempt < self.retries:
                        log.info("Unit %d (samples %s) failed (%s); running it again", unit.number, _span(unit),
                                 first_line(error))
                        self.log.retried += 1
                        self._submit(submit, replace(unit, attempt=attempt + 1), attempt + 1, pending, lost)
                    else:
                        self._fail(unit, error, lost)
                        bar.update(1)
        results.sort(key=lambda r: r.number)
        return results, sorted(lost)

    def _submit(self, submit: Callable[[Unit], Future], unit: Unit, attempt: int,
                pending: dict[Future, tuple[Unit, int]], lost: list[int]) -> None:
        try:
            pending[submit(unit)] = (unit, attempt)
        except Exception as err:  # a broken pool refuses new work: the unit is reported, not dropped
            self._fail(unit, err, lost)

    def _fail(self, unit: Unit, error: BaseException, lost: list[int]) -> None:
        message = (f"unit {unit.number} (samples {_span(unit)}) failed after {self.retries + 1} attempt(s): "
                   f"{type(error).__name__}: {first_line(error)}")
        log.warning("%s", message)
        self.log.failures.append(message)
        lost.extend(unit.indices)


def _span(unit: Unit) -> str:
    first, last = unit.indices[0], unit.indices[-1]
    return f"#{first}" if first == last else f"#{first}-#{last}"


def _plan_models(session: Runner, ref_model: ov.Model, target_model: ov.Model, remote: bool) -> dict[str, Any]:
    """The travelling part of a plan: models as IR, the devices (checked picklable), the untouched models."""
    if not remote:
        return {"ref_model": None, "target_model": None, "ref_device": None, "target_device": None,
                "input_models": None}
    for device in (session.ref, session.target):
        try:
            pickle.dumps(device)
        except Exception as err:
            raise InputError(f"The device {device!r} cannot travel to the executor's workers ({first_line(err)}): "
                             "use a device name, or run without executor.") from err
    ref_payload = ModelPayload.of(ref_model)
    twin = session.target_graph is not session.graph
    target_payload = ModelPayload.of(target_model) if (twin or target_model is not ref_model) else ref_payload
    untouched = ModelPayload.of(session.graph.model) if ref_model is not session.graph.model else ref_payload
    untouched_target = None
    if twin:
        untouched_target = (ModelPayload.of(session.target_graph.model)
                            if target_model is not session.target_graph.model else target_payload)
    return {"ref_model": ref_payload, "target_model": target_payload, "ref_device": session.ref,
            "target_device": session.target, "input_models": (untouched, untouched_target)}


def _check_metric(metric: Callable[[TensorStats], float]) -> None:
    try:
        pickle.dumps(metric)
    except Exception:
        try:
            import cloudpickle  # Dask ships functions with cloudpickle, which also takes lambdas

            cloudpickle.dumps(metric)
        except Exception as err:
            raise InputError("A callable metric must be picklable to run on an executor (a module-level function): "
                             f"{first_line(err)}") from err


def run_samples(session: Runner, run: SampleRun, error_of: Callable[[TensorStats], float], *, k: int = 5,
                class_names: Sequence[str] | None = None, seed: int = 0, jobs: int = 2) -> SampleSummary:
    """Run the untouched model on every sample on both sides; per sample only its summary is kept.

    `class_names`: the outputs holding class scores; None decides by shape (`classifier_outputs`).

    Raises
    ------
    InputError
        A bad sample (named), unknown `class_names`.
    DeviceError
        No sample could be measured (every unit failed).
    """
    names = tuple(session.graph.output_name(r.key) for r in session.graph.results())
    class_positions = None
    if class_names is not None:
        unknown = [n for n in class_names if n not in names]
        if unknown:
            raise InputError(f"classifier_outputs {unknown} are not outputs of the model. Outputs: {list(names)}.")
        class_positions = tuple(names.index(n) for n in class_names)
    remote = run.remote(session)
    twin = session.target_graph is not session.graph
    models = (session.graph.model, session.target_graph.model if twin else None)
    if remote:
        _check_metric(error_of)
    plan = Plan("outputs", names=names, positions=tuple(session.target_output_positions),
                class_positions=class_positions, k=k, metric=error_of, seed=seed, jobs=jobs,
                **_plan_models(session, session.graph.model, session.target_graph.model, remote))
    with session.clock("samples"):
        # Compiled here, `engine.untouched.run_target` reuses them for the worst sample.
        results, lost = _run_units(run, plan, remote, session.compile_untouched, models, "samples",
                                   run.log.unit_seconds)
    _count_runs(session, len(run.samples) - len(lost))
    flat = [s for r in results for s in r.samples]
    if not flat:
        raise DeviceError("No sample could be measured: " + "; ".join(run.log.failures[:3]))
    summary = SampleSummary.from_results(flat, len(run.samples), names, k, class_positions, run.log)
    if lost:
        run.notes.append(f"Partial run: {summary.count} of {len(run.samples)} samples measured; "
                         f"{len(lost)} not ({_listed(lost)}): " + "; ".join(run.log.failures[:3]))
    return summary


def node_spread(session: Runner, taps: Sequence[Tap], run: SampleRun,
                error_of: Callable[[TensorStats], float], *, seed: int = 0) -> dict[str, Distribution]:
    """Error of each tapped node over all samples, merged over the units (`Distribution.summary` gives mean,
    median, 90th percentile, max, the worst sample and the count; `count_above` the samples over a limit)."""
    taps = [t for t in taps if t in session.target_of]
    if not taps or len(run.samples) < 2:
        return {}
    ref_tapped = tap_model(session.graph, taps)
    target_tapped = tap_model(session.target_graph, [session.target_of[t] for t in taps])
    remote = run.remote(session)
    twin = session.target_graph is not session.graph
    plan = Plan("taps", names=(), positions=(), class_positions=None, k=0, metric=error_of, seed=seed,
                ref_added=tuple(ref_tapped.added_outputs), target_added=tuple(target_tapped.added_outputs),
                tap_keys=tuple(t.key for t in taps), ref_tap_outputs=tuple(ref_tapped.tap_outputs),
                target_tap_outputs=tuple(target_tapped.tap_outputs),
                **_plan_models(session, ref_tapped.model, target_tapped.model, remote))
    models = (session.graph.model, session.target_graph.model if twin else None)
    with session.clock("samples"):
        results, lost = _run_units(
            run, plan, remote,
            lambda: session.compile_pair(ref_tapped.model, target_tapped.model, ref_taps=ref_tapped.added_outputs,
                                         target_taps=target_tapped.added_outputs),
            models, "samples over nodes", run.log.spread_unit_seconds)
    _count_runs(session, len(run.samples) - len(lost))
    if lost:
        run.log.spread_missing.extend(lost)
    merged: dict[str, Distribution] = {}
    for result in results:  # in unit order; the merge is exact, so any order gives these figures
        for key, dist in result.spread.items():
            merged[key] = merged[key].merge(dist) if key in merged else dist
    return merged


def _count_runs(session: Runner, samples: int) -> None:
    """The samples' inferences, one per side each, in the stage's cost (on workers too; their compiles, one
    per worker process, are not counted)."""
    for side in ("ref", "target"):
        session.ran(side, samples)


def _run_units(run: SampleRun, plan: Plan, remote: bool, compile_here: Callable[[], Any],
               models: tuple[ov.Model, ov.Model | None], label: str, times: list[float]):
    """Every unit of `plan`: on the run's executor when `remote`, else in this process with the (ref, target)
    compiles `compile_here()` makes. Returns the unit results and the sample indices lost."""
    if remote:
        pool, shared = run.executor, run.share(plan)
        assert pool is not None
        return run.drive(lambda u: pool.submit(run_unit, shared, u), label, times)
    compiled = compile_here()
    inline = _Inline()
    return run.drive(lambda u: inline.submit(execute, plan, u, compiled, models), label, times)


def _listed(indices: Sequence[int], most: int = 20) -> str:
    shown = ", ".join(f"#{i}" for i in indices[:most])
    return shown + (f" and {len(indices) - most} more" if len(indices) > most else "")

