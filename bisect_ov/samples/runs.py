"""Running many samples: in this process, or as work batches on any `concurrent.futures.Executor`.

The samples are cut into batches (`samples_per_batch` consecutive indices). A batch runs one pass over its
samples on both sides and returns what is kept of them, never tensors (`bisect_ov.samples.batches`). Two passes
run: the untouched model on every sample (`run_samples`: the ranking; the detailed search then runs on the
worst sample, in this process), and after the search the model with the measured nodes exposed
(`node_spread`: each node's error over the samples). `SampleRun` holds the samples, the executor
(`bisect_ov.samples.executors`) and the knobs, and hands out the batches; it keeps nothing of a pass. Each pass
returns a frozen result that carries its own log (`PassLog`) and notes: `SampleSummary` (with the sample the
search runs on, `examined`) and `NodeSpread` (with each sample's first node over its limit).

On an executor, every batch of a pass refers to one `Plan` (on Dask sent once to every worker, on Ray put
once in its object store), and a worker compiles each plan once. Merging does not depend on where or in
which order batches ran: per-sample results are keyed by index and distributions merge exactly
(`bisect_ov.analysis.spread`), so a cluster's figures are an in-process run's. A batch that raises is run
again (`batch_retries` times); what still fails is reported with the sample indices it held, and the summary
says the run is partial. Bad inputs are not retried: they stop the run as they would in-process. Recorded
sides (captures) replay from a file on this machine: they run in-process.

Assumed: the `Runner` gives the compiles, graphs and devices of both sides; a device and a metric that go
to an executor must pickle (checked here, with a message saying what to do).
"""

from __future__ import annotations

import logging
import math
import pickle
import re
from concurrent.futures import FIRST_COMPLETED, CancelledError, Future, wait
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Collection, Iterator, Mapping, Sequence

import openvino as ov
from tqdm import tqdm

from bisect_ov.analysis.metrics import TensorStats
from bisect_ov.analysis.spread import Distribution
from bisect_ov.core.errors import DeviceError, InputError, cause_of, first_line
from bisect_ov.engine.runner import Runner
from bisect_ov.model.taps import Tap, tap_model
from bisect_ov.samples.batches import Batch, BatchResult, ModelPayload, Plan, execute, run_batch
from bisect_ov.samples.executors import Inline, RayExecutor, executor_width, open_executor
from bisect_ov.samples.sources import PassLog, Samples, SampleSummary

__all__ = ["SampleRun", "NodeSpread", "node_spread", "run_samples"]

log = logging.getLogger(__name__)


# ----- the driver ------------------------------------------------------------------------------------------
class SampleRun:
    """Many samples and where they run: the `Samples`, the executor and the knobs (nothing a pass found).

    Parameters
    ----------
    samples
        The samples.
    executor
        An `open_executor` form (None: in this process).
    samples_per_batch, batch_retries
        Samples per batch; how many times a failed batch runs again.
    owned
        Close (remove a generator's spill folder) at the end: the samples were made from the user's inputs.
    prompts
        A `bisect_ov.samples.prompts.PromptInputs` when the samples are an LLM's prompts (token ids made into
        its inputs, a stateful model's variables reset for each), else None.
    """

    def __init__(self, samples: Samples, executor: Any = None, *, samples_per_batch: int = 16, batch_retries: int = 2,
                 progress: bool = False, owned: bool = True, prompts: Any = None):
        self.samples = samples
        self.prompts = prompts  # a PromptInputs when the samples are LLM prompts
        self.executor, self.label, self._close_executor = open_executor(executor)
        self.per_unit, self.retries, self.progress, self.owned = samples_per_batch, batch_retries, progress, owned
        self.accepted = False  # whether the executor has taken any batch of this run

    def remote(self, runner: Runner) -> bool:
        """True when batches go to the executor: recorded sides replay from a file here, and framework sides
        (ONNX Runtime, PyTorch) hold a session or module here, so they stay."""
        sides = (runner.ref, runner.target)
        return self.executor is not None and not any(d.recorded or not d.travels for d in sides)

    def where(self, runner: Runner) -> tuple[str, tuple[str, ...]]:
        """Where the batches run for `runner` (the executor's label, or "in-process"), and the note that says
        why an executor was given but not used."""
        if self.remote(runner):
            return self.label, ()
        if self.executor is None:
            return "in-process", ()
        why = ("a recorded side (capture) replays from a file on this machine" if
               any(d.recorded for d in (runner.ref, runner.target)) else
               f"the {' and '.join(d.name for d in (runner.ref, runner.target) if not d.travels)} side runs in this "
               "process (an ONNX Runtime session or a PyTorch module does not travel to workers)")
        return "in-process", (f"The samples ran in this process, not on the executor: {why}.",)

    def share(self, plan: Plan) -> Any:
        """What the batches refer to for `plan`: on Dask, the plan sent once to every worker (a future the
        workers resolve), on Ray put once in its object store, rather than the model's IR with every batch;
        elsewhere the plan itself."""
        if isinstance(self.executor, RayExecutor):
            return self.executor.share(plan)
        client = getattr(self.executor, "_client", None)  # Dask's executor wraps a Client
        if client is None or not callable(getattr(client, "scatter", None)):
            return plan
        try:
            return client.scatter(plan, broadcast=True, hash=False)
        except Exception as err:  # the plan then travels with each batch, as with other executors
            log.info("Could not send the plan to the workers once (%s); it travels with each batch", first_line(err))
            return plan

    def close(self) -> None:
        self._close_executor()
        if self.owned:
            self.samples.close()

    def batches(self, skip: Collection[int] = ()) -> Iterator[Batch]:
        """The samples cut into batches, read as the batches are handed out; none of those in `skip`."""
        batch: list[tuple[int, Any]] = []
        number = 0
        for index, sample in self.samples.stream():
            if index in skip:
                continue
            batch.append((index, sample))
            if len(batch) == self.per_unit:
                yield self._unit(number, batch)
                number, batch = number + 1, []
        if batch:
            yield self._unit(number, batch)

    def _unit(self, number: int, batch: list[tuple[int, Any]]) -> Batch:
        s = self.samples
        if self.executor is None:  # in this process: the samples as they are (a spill file is read when prepared)
            return Batch(number, tuple(i for i, _ in batch), tuple(x for _, x in batch), s.loader,
                        tuple(s.names_file(i, x) for i, x in batch))
        return Batch(number, tuple(i for i, _ in batch), tuple(s.travelling(i, x) for i, x in batch), s.loader,
                    tuple(s.names_file(i, x) for i, x in batch))

    def drive(self, submit: Callable[[Batch], Future], desc: str, skip: Collection[int] = ()
              ) -> tuple[list[BatchResult], PassLog]:
        """Hand out the batches (about two per worker in flight), retry failures, collect results in batch order;
        the samples in `skip` (lost by an earlier pass: a sample that kills its worker would again) are not run.

        Returns the results and the pass's log (with the sample indices of batches that failed every attempt, and
        those skipped).
        """
        window = 2 * executor_width(self.executor) + 1
        total = -(-len(self.samples) // self.per_unit) if self.samples.kind != "generator" else None
        pending: dict[Future, tuple[Batch, int]] = {}
        results: list[BatchResult] = []
        lost: list[int] = list(skip)
        seconds: list[float] = []
        failures: list[str] = []
        workers: set[str] = set()
        retried = 0
        source = self.batches(frozenset(skip))
        exhausted = False
        with tqdm(total=total, desc=desc, unit="batch", disable=not self.progress, leave=False) as bar:
            while pending or not exhausted:
                while not exhausted and len(pending) < window:
                    batch = next(source, None)
                    if batch is None:
                        exhausted = True
                        break
                    self._submit(submit, batch, 0, pending, lost, failures)
                if not pending:
                    continue
                # None in flight may take far longer than the slowest batch did (half an hour before any is back): an
                # executor can lose track of a future for good (a Dask worker killed mid-run left the client's
                # futures waiting on tasks its scheduler had forgotten), and the pass would wait forever.
                stall = max(STALL_FLOOR, STALL_FACTOR * max(seconds)) if seconds else STALL_FIRST
                done, _ = wait(list(pending), timeout=stall, return_when=FIRST_COMPLETED)
                stalled = not done
                if stalled:
                    log.warning("No batch came back in %.0f s: the %d in flight are taken as failed attempts", stall,
                                len(pending))
                    done = set(pending)
                for future in done:
                    batch, attempt = pending.pop(future)
                    # A future the executor cancelled (Dask does when the worker holding it dies) is a failed
                    # attempt like any other: asking it for its exception would raise instead.
                    if stalled:
                        future.cancel()
                        error: BaseException | None = TimeoutError(
                            f"batch {batch.number} did not come back in {stall:.0f} s")
                    else:
                        error = (CancelledError(f"the executor cancelled batch {batch.number}") if future.cancelled()
                                 else future.exception())
                    if error is None:
                        result = future.result()
                        results.append(result)
                        seconds.append(result.seconds)
                        workers.add(result.worker)
                        bar.update(1)
                        continue
                    if isinstance(error, InputError):  # a bad sample: the user's to fix, as in-process
                        for other in pending:
                            other.cancel()
                        raise error
                    if attempt < self.retries:
                        log.info("Batch %d (samples %s) failed (%s); running it again", batch.number, _span(batch),
                                 first_line(error))
                        retried += 1
                        self._submit(submit, replace(batch, attempt=attempt + 1), attempt + 1, pending, lost, failures)
                    elif (bad := _loader_failure(error, batch)) is not None and len(batch.indices) > 1:
                        # The user's loader failed on one sample every time: that sample is lost, not the batch's
                        # others, which run again without it (a batch of 16 in-process lost all 16).
                        keep = [j for j, i in enumerate(batch.indices) if i != bad]
                        self._fail(_only(batch, [batch.indices.index(bad)]), error, lost, failures)
                        self._submit(submit, replace(_only(batch, keep), attempt=0), 0, pending, lost, failures)
                    else:
                        self._fail(batch, error, lost, failures)
                        bar.update(1)
        results.sort(key=lambda r: r.number)
        return results, PassLog(tuple(seconds), retried, tuple(failures), frozenset(workers), tuple(sorted(lost)))

    def _submit(self, submit: Callable[[Batch], Future], batch: Batch, attempt: int,
                pending: dict[Future, tuple[Batch, int]], lost: list[int], failures: list[str]) -> None:
        try:
            pending[submit(batch)] = (batch, attempt)
            self.accepted = True
        except Exception as err:  # a broken pool refuses new work: the batch is reported, not dropped
            if not self.accepted:  # it never took any (shut down, a closed Dask client): the user's to fix
                raise InputError(f"The executor ({self.label}) takes no work: {first_line(err).rstrip('.')}. Pass one "
                                 "that is open (a running pool, a Dask client's get_executor(), Ray before "
                                 "ray.shutdown()).") from err
            self._fail(batch, err, lost, failures)

    def _fail(self, batch: Batch, error: BaseException, lost: list[int], failures: list[str]) -> None:
        message = (f"batch {batch.number} (samples {_span(batch)}) failed after {self.retries + 1} attempt(s): "
                   f"{type(cause_of(error)).__name__}: {first_line(error)}")
        log.warning("%s", message)
        failures.append(message)
        lost.extend(batch.indices)


def _loader_failure(error: BaseException, batch: Batch) -> int | None:
    """The sample of `batch` whose loader raised `error` (`batches._load`'s message, kept by every executor's
    wrapping of it), or None."""
    found = re.search(r"loader\((\d+)\) raised", str(error))
    return int(found[1]) if found and int(found[1]) in batch.indices else None


def _only(batch: Batch, positions: Sequence[int]) -> Batch:
    """`batch` with only the samples at `positions`."""
    return replace(batch, indices=tuple(batch.indices[j] for j in positions),
                   items=tuple(batch.items[j] for j in positions),
                   named=tuple(batch.named[j] for j in positions) if batch.named else ())


# A pass whose batches stop coming back: after STALL_FACTOR times the slowest batch so far (at least STALL_FLOOR
# seconds; STALL_FIRST before any came back, as the first batches compile the models on every worker) with none
# done, those in flight are failed attempts, run again up to the retries.
STALL_FACTOR = 20.0
STALL_FLOOR = 120.0
STALL_FIRST = 1800.0


def _span(batch: Batch) -> str:
    first, last = batch.indices[0], batch.indices[-1]
    return f"#{first}" if first == last else f"#{first}-#{last}"


def _plan_models(runner: Runner, ref_model: ov.Model, target_model: ov.Model, remote: bool) -> dict[str, Any]:
    """The travelling part of a plan: models as IR, the devices (checked picklable), the untouched models."""
    if not remote:
        return {"ref_model": None, "target_model": None, "ref_device": None, "target_device": None,
                "input_models": None}
    for device in (runner.ref, runner.target):
        try:
            pickle.dumps(device)
        except Exception as err:
            raise InputError(f"The device {device!r} cannot travel to the executor's workers ({first_line(err)}): "
                             "use a device name, or run without executor.") from err
    ref_payload = ModelPayload.of(ref_model)
    twin = runner.comparison.twin
    target_payload = ModelPayload.of(target_model) if (twin or target_model is not ref_model) else ref_payload
    untouched = ModelPayload.of(runner.graph.model) if ref_model is not runner.graph.model else ref_payload
    untouched_target = None
    if twin:
        untouched_target = (ModelPayload.of(runner.target_graph.model)
                            if target_model is not runner.target_graph.model else target_payload)
    return {"ref_model": ref_payload, "target_model": target_payload, "ref_device": runner.ref,
            "target_device": runner.target, "input_models": (untouched, untouched_target)}


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


def run_samples(runner: Runner, run: SampleRun, error_of: Callable[[TensorStats], float], *, k: int = 5,
                class_names: Sequence[str] | None = None, seed: int = 0,
                jobs: int = 2) -> tuple[SampleSummary, tuple[Any, Any] | None]:
    """Run the untouched model on every sample on both sides; per sample only its summary is kept.

    Returns the summary and the untouched (ref, target) compiles the samples ran on in this process (None on
    an executor), for the examined sample's untouched run (`engine.untouched.run_target`'s `compiled`).

    `class_names`: the outputs holding class scores; None decides by shape (`classifier_outputs`).

    Raises
    ------
    InputError
        A bad sample (named), unknown `class_names`.
    DeviceError
        No sample could be measured (every batch failed).
    """
    names = tuple(runner.graph.output_name(r.key) for r in runner.graph.results())
    class_positions = None
    if class_names is not None:
        unknown = [n for n in class_names if n not in names]
        if unknown:
            raise InputError(f"classifier_outputs {unknown} are not outputs of the model. Outputs: {list(names)}.")
        class_positions = tuple(names.index(n) for n in class_names)
    remote = run.remote(runner)
    executor, notes = run.where(runner)
    twin = runner.comparison.twin
    models = (runner.graph.model, runner.target_graph.model if twin else None)
    if remote:
        _check_metric(error_of)
    plan = Plan("outputs", names=names, positions=tuple(runner.target_output_positions),
                class_positions=class_positions, k=k, metric=error_of, seed=seed, jobs=jobs, prompts=run.prompts,
                **_plan_models(runner, runner.graph.model, runner.target_graph.model, remote))
    with runner.clock("samples"):
        # Compiled here, `engine.untouched.run_target` reuses them for the worst sample.
        results, passed, compiled = _run_batches(run, plan, remote, runner.compile_untouched, models, "samples")
    lost = passed.lost
    _count_runs(runner, len(run.samples) - len(lost))
    flat = [s for r in results for s in r.samples]
    if not flat:
        raise DeviceError("No sample could be measured: " + "; ".join(passed.failures[:3]))
    summary = SampleSummary.from_results(flat, len(run.samples), names, k, class_positions, passed,
                                         executor=executor)
    if lost:
        notes += (f"Partial run: {summary.count} of {len(run.samples)} samples measured; "
                  f"{len(lost)} not ({_listed(lost)}): " + "; ".join(passed.failures[:3]),)
    return replace(summary, notes=notes), compiled


def node_spread(runner: Runner, taps: Sequence[Tap], run: SampleRun,
                error_of: Callable[[TensorStats], float], *, seed: int = 0,
                limits: Mapping[str, float] | None = None, skip: Collection[int] = ()) -> NodeSpread:
    """Error of each tapped node over all samples, merged over the batches (`Distribution.summary` gives mean,
    median, 90th percentile, max, the worst sample and the count; `count_above` the samples over a limit), and
    the largest magnitude each node's floating outputs reach on the reference over all samples (but those in
    `skip`, the samples the outputs pass lost).

    With `limits` (a tolerance per node key), each sample's first node in graph order over its limit is kept
    in the result's ``first_over`` (sample index -> node key, "" when none is)."""
    graph = runner.graph
    taps = sorted((t for t in taps if t in runner.target_of), key=lambda t: (graph[t.key].index, t.port))
    if not taps or len(run.samples) < 2:
        return NodeSpread()
    ref_tapped = tap_model(runner.graph, taps)
    target_tapped = tap_model(runner.target_graph, [runner.target_of[t] for t in taps])
    remote = run.remote(runner)
    twin = runner.comparison.twin
    plan = Plan("taps", names=(), positions=(), class_positions=None, k=0, metric=error_of, seed=seed,
                ref_added=tuple(ref_tapped.added_outputs), target_added=tuple(target_tapped.added_outputs),
                tap_keys=tuple(t.key for t in taps), ref_tap_outputs=tuple(ref_tapped.tap_outputs),
                target_tap_outputs=tuple(target_tapped.tap_outputs), prompts=run.prompts,
                limits=tuple(limits.get(t.key, math.inf) for t in taps) if limits is not None else (),
                **_plan_models(runner, ref_tapped.model, target_tapped.model, remote))
    models = (runner.graph.model, runner.target_graph.model if twin else None)
    with runner.clock("samples"):
        results, passed, _ = _run_batches(
            run, plan, remote,
            lambda: runner.compile_pair(ref_tapped.model, target_tapped.model, ref_taps=ref_tapped.added_outputs,
                                         target_taps=target_tapped.added_outputs),
            models, "samples over nodes", skip=skip)
    _count_runs(runner, len(run.samples) - len(passed.lost))
    merged: dict[str, Distribution] = {}
    absmax: dict[str, float] = {}
    first_over: dict[int, str] = {}
    for result in results:  # in batch order; the merge is exact, so any order gives these figures
        for key, dist in result.spread.items():
            merged[key] = merged[key].merge(dist) if key in merged else dist
        for key, value in result.ref_absmax.items():
            absmax[key] = max(absmax.get(key, value), value, key=lambda v: math.inf if math.isnan(v) else v)
        first_over.update(result.first_over)
    return NodeSpread(merged, absmax, first_over, passed)


@dataclass(frozen=True)
class NodeSpread:
    """What the per-node pass over many samples found: each tapped node's error distribution (by key), the
    largest magnitude its floating outputs reached on the reference over every sample (its f16 headroom), each
    sample's first node over its limit (with `limits`), and how the pass ran (None: it did not run)."""

    errors: Mapping[str, Distribution] = field(default_factory=dict)
    ref_absmax: Mapping[str, float] = field(default_factory=dict)
    first_over: Mapping[int, str] = field(default_factory=dict)
    log: PassLog | None = None


def _count_runs(runner: Runner, samples: int) -> None:
    """The samples' inferences, one per side each, in the stage's cost (on workers too; their compiles, one
    per worker process, are not counted)."""
    for side in ("ref", "target"):
        runner.ran(side, samples)


def _run_batches(run: SampleRun, plan: Plan, remote: bool, compile_here: Callable[[], Any],
               models: tuple[ov.Model, ov.Model | None], label: str, skip: Collection[int] = ()
               ) -> tuple[list[BatchResult], PassLog, Any]:
    """Every batch of `plan`: on the run's executor when `remote`, else in this process with the (ref, target)
    compiles `compile_here()` makes. Returns the batch results, the pass's log and those compiles (None when
    remote)."""
    if remote:
        pool, shared = run.executor, run.share(plan)
        assert pool is not None
        # A retry carries the plan itself: the worker that held the shared copy may be the one that died (Dask
        # then cancels every task that needs it, however often it runs again).
        return (*run.drive(lambda u: pool.submit(run_batch, shared if u.attempt == 0 else plan, u), label, skip), None)
    compiled = compile_here()
    inline = Inline()
    return (*run.drive(lambda u: inline.submit(execute, plan, u, compiled, models), label, skip), compiled)


def _listed(indices: Sequence[int], most: int = 20) -> str:
    shown = ", ".join(f"#{i}" for i in indices[:most])
    return shown + (f" and {len(indices) - most} more" if len(indices) > most else "")
