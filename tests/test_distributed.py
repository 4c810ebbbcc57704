"""Many samples on an executor: the same figures as in this process, faults retried or reported, never short.

The Dask tests start a local cluster of two worker processes on this machine; they are skipped when the
``cluster`` extra is not installed. The fault tests use a thread pool, where a loader can fail on cue.
"""

from __future__ import annotations

import functools
import math
import os
import pathlib
import signal
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from bisect_ov import BisectError, InputError, Report, Samples, bisect
from bisect_ov.pipeline.options import BisectOptions
from bisect_ov.zoo import synthetic
from tests.conftest import tiny_chain

N = 56
# The Dask cluster and the Ray instance each start worker processes: their tests share one xdist worker
# (`--dist loadgroup` in pyproject.toml), so the two never compete for this machine's cores at once.
CLUSTERS = pytest.mark.xdist_group("clusters")


@functools.lru_cache(maxsize=1)
def _models():
    _, int8 = synthetic.fp32_and_int8()
    return int8


def _data(n: int = N) -> list[dict[str, np.ndarray]]:
    param = _models().get_parameters()[0]
    rng = np.random.default_rng(0)
    return [{param.get_friendly_name(): rng.uniform(-1, 1, list(param.shape)).astype(np.float32)} for _ in range(n)]


def _folder(tmp_path: pathlib.Path, n: int = N) -> pathlib.Path:
    folder = tmp_path / "samples"
    folder.mkdir()
    for i, sample in enumerate(_data(n)):
        np.savez(folder / f"{i:04d}.npz", **sample)
    return folder


def _run(inputs, executor=None, target="EMU:f16", **extra) -> Report:
    """Many samples through the emulated f16 target (rebuilt on each worker), or another target."""
    return bisect(_models(), "CPU", target, inputs, executor=executor, samples_per_batch=8, local=False, impact=0,
                  noise=False, progress=False, **extra)


def _figures(report: Report):
    s = report.samples
    return (s.errors, s.ranking, s.worst, s.top1_flipped, s.topk_missed,
            {n.key: n.over_samples for n in report.nodes})


def _load_from(folder: str, index: int) -> str:
    """A loader run on the workers: the path of sample `index` in a folder they share."""
    return os.path.join(folder, f"{index:04d}.npz")


def _load_and_die_once(folder: str, marker: str, index: int) -> str:
    """Kill the worker process reading sample 20, the first time only (the marker file remembers)."""
    if index == 20 and not os.path.exists(marker):
        pathlib.Path(marker).write_text("killed")
        os.kill(os.getpid(), signal.SIGKILL)
    return _load_from(folder, index)


def _load_and_raise_once(folder: str, marker: str, index: int) -> str:
    """Raise on sample 9 the first time only, on whichever worker reads it."""
    if index == 9 and not os.path.exists(marker):
        pathlib.Path(marker).write_text("raised")
        raise ConnectionError("storage hiccup")
    return _load_from(folder, index)


# ----- Dask: a local cluster with two worker processes ---------------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                  silence_logs=50) as local, distributed.Client(local) as client:
        yield client


@pytest.mark.slow
@CLUSTERS
def test_a_dask_cluster_gives_the_in_process_figures(cluster):
    here = _run(Samples(_data()))
    there = _run(Samples(_data()), cluster.get_executor())
    assert there.samples.count == here.samples.count == N and not there.samples.partial
    assert there.samples.workers == 2 and there.samples.executor == "ClientExecutor"
    assert _figures(there) == _figures(here)
    assert len(there.samples.batch_seconds) == -(-N // 8) and len(there.samples.spread_batch_seconds) == -(-N // 8)
    # The search ran on the same (worst) sample in this process: the same culprit.
    assert there.first_divergence.name == here.first_divergence.name
    assert any(n.over_samples.get("count") == N for n in there.nodes)


@pytest.mark.slow
@CLUSTERS
def test_a_worker_killed_mid_run_loses_no_sample(cluster, tmp_path):
    folder = _folder(tmp_path)
    marker = tmp_path / "killed"
    loader = functools.partial(_load_and_die_once, str(folder), str(marker))
    there = _run(Samples(loader=loader, count=N), cluster.get_executor(), "CPU")
    assert marker.exists()  # a worker really died
    here = _run(str(folder), target="CPU")
    assert there.samples.count == N and not there.samples.partial and not there.samples.missing
    assert _figures(there) == _figures(here)


@pytest.mark.slow
@CLUSTERS
def test_a_unit_that_raises_on_a_worker_is_run_again(cluster, tmp_path):
    folder = _folder(tmp_path, 24)
    marker = tmp_path / "raised"
    loader = functools.partial(_load_and_raise_once, str(folder), str(marker))
    there = _run(Samples(loader=loader, count=24), cluster.get_executor(), "CPU")
    assert marker.exists() and there.samples.retried == 1
    assert there.samples.count == 24 and not there.samples.partial
    assert _figures(there) == _figures(_run(str(folder), target="CPU"))


@pytest.mark.slow
@CLUSTERS
def test_the_executor_flag_reaches_a_scheduler(cluster, tmp_path):
    from bisect_ov.cli import main

    folder = _folder(tmp_path, 12)
    address = cluster.scheduler.address.replace("tcp://", "dask://")
    out = tmp_path / "r.json"
    code = main([str(_ir(tmp_path)), "--ref", "CPU", "--target", "CPU", "--inputs", str(folder), "--executor",
                 address, "--samples-per-batch", "4", "--no-local", "--impact", "0", "--no-noise", "--quiet",
                 "--json", str(out)])
    assert code in (0, 1)
    samples = Report.load(out).samples
    assert samples.count == 12 and samples.executor.startswith("dask tcp://") and len(samples.batch_seconds) == 3


def _ir(tmp_path: pathlib.Path) -> pathlib.Path:
    import openvino as ov

    path = tmp_path / "int8.xml"
    ov.save_model(_models(), path, compress_to_fp16=False)
    return path


# ----- Ray: a local instance with two CPUs (its worker processes are kept between tasks) -----------------------
@pytest.fixture(scope="module")
def ray_executor():
    pytest.importorskip("ray")
    from bisect_ov.samples.executors import RayExecutor

    executor = RayExecutor(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield executor
    executor.shutdown()


@pytest.mark.slow
@CLUSTERS
def test_ray_gives_the_in_process_figures(ray_executor):
    here = _run(Samples(_data()))
    there = _run(Samples(_data()), ray_executor)
    assert there.samples.count == here.samples.count == N and not there.samples.partial
    assert there.samples.executor == "RayExecutor" and there.samples.workers >= 1
    assert _figures(there) == _figures(here)
    assert there.first_divergence.name == here.first_divergence.name


@pytest.mark.slow
@CLUSTERS
def test_the_executor_flag_uses_ray(ray_executor, tmp_path):
    # 'ray' joins the instance this process is connected to (the fixture's) and leaves it running.
    from bisect_ov.cli import main

    folder = _folder(tmp_path, 12)
    out = tmp_path / "r.json"
    code = main([str(_ir(tmp_path)), "--ref", "CPU", "--target", "CPU", "--inputs", str(folder), "--executor", "ray",
                 "--samples-per-batch", "4", "--no-local", "--impact", "0", "--no-noise", "--quiet", "--json", str(out)])
    assert code in (0, 1)
    samples = Report.load(out).samples
    assert samples.count == 12 and samples.executor == "ray local" and len(samples.batch_seconds) == 3
    assert _figures(Report.load(out)) == _figures(_run(str(folder), target="CPU"))
    import ray

    assert ray.is_initialized()


# ----- a local process pool ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_process_pool_by_name_gives_the_in_process_figures(tmp_path):
    folder = _folder(tmp_path, 20)
    assert _figures(_run(str(folder), "processes:2", "CPU")) == _figures(_run(str(folder), target="CPU"))


def test_a_twin_on_an_executor_gives_the_in_process_figures():
    from tests.test_samples import _miscalibrated

    clipped = _miscalibrated(_models(), "block2/pw/fq_in", 0.5)
    data = _data(24)
    here, there = (bisect(_models(), "CPU", "CPU:f32", Samples(data), target_model=clipped, executor=executor,
                          samples_per_batch=5, progress=False, local=False, noise=False)
                   for executor in (None, ThreadPoolExecutor(2)))
    assert there.samples.top1_flips > 0 and _figures(there) == _figures(here)
    assert len(there.samples.batch_seconds) == 5 and there.first_divergence.name == "block2/pw/fq_in"


def test_the_executor_flag_runs_a_folder_on_a_local_pool(tmp_path):
    from bisect_ov.cli import main

    folder = _folder(tmp_path, 10)
    out = tmp_path / "r.json"
    code = main([str(_ir(tmp_path)), "--ref", "CPU", "--target", "CPU", "--inputs", str(folder), "--executor",
                 "threads:2", "--samples-per-batch", "4", "--no-local", "--impact", "0", "--no-noise", "--quiet",
                 "--json", str(out)])
    assert code in (0, 1)
    samples = Report.load(out).samples
    assert samples.count == 10 and samples.executor == "threads:2" and len(samples.batch_seconds) == 3


# ----- faults --------------------------------------------------------------------------------------------------
class _Flaky:
    """A loader that raises for some samples: `times` times each (None: always)."""

    def __init__(self, data, failing, times=None):
        self.data, self.failing, self.times, self.calls = data, set(failing), times, {}

    def __call__(self, index):
        self.calls[index] = self.calls.get(index, 0) + 1
        if index in self.failing and (self.times is None or self.calls[index] <= self.times):
            raise ConnectionError(f"storage hiccup on sample {index}")
        return self.data[index]


def test_a_unit_that_raises_once_is_run_again():
    data = _data(24)
    flaky = _Flaky(data, {9}, times=1)
    report = _run(Samples(loader=flaky, count=24), ThreadPoolExecutor(2), "CPU")
    assert report.samples.count == 24 and not report.samples.partial and report.samples.retried >= 1
    assert _figures(report) == _figures(_run(Samples(data), target="CPU"))


class _LosesOneFuture(ThreadPoolExecutor):
    """A thread pool that loses track of batch 3's first attempt: its future never completes (as a Dask client's can
    when a worker dies mid-run and the scheduler forgets the task)."""

    def submit(self, fn, *args, **kwargs):
        batch = args[-1]
        if getattr(batch, "number", None) == 3 and getattr(batch, "attempt", None) == 0:
            from concurrent.futures import Future

            return Future()
        return super().submit(fn, *args, **kwargs)


def test_a_batch_that_never_comes_back_is_run_again(monkeypatch):
    import bisect_ov.samples.runs as runs

    monkeypatch.setattr(runs, "STALL_FLOOR", 0.5)
    monkeypatch.setattr(runs, "STALL_FACTOR", 2.0)
    report = _run(Samples(_data(40)), _LosesOneFuture(2), "CPU")
    # Both passes over the samples (ranking them, then each node's spread) lose it once and run it again.
    assert report.samples.count == 40 and not report.samples.partial and report.samples.retried == 2
    assert _figures(report) == _figures(_run(Samples(_data(40)), target="CPU"))


def test_a_sample_whose_loader_keeps_failing_is_lost_alone(tmp_path):
    """Its batch's other samples run again without it (the batch of eight was lost whole, and in-process, where one
    unit holds sixteen, every sample: "No sample could be measured")."""
    data = _data(24)
    flaky = _Flaky(data, {9})
    report = _run(Samples(loader=flaky, count=24), ThreadPoolExecutor(2), "CPU", batch_retries=1)
    s = report.samples
    # Tried twice (batch_retries=1) by the outputs' pass, and not again by the per-node pass: a sample that kills
    # its worker would kill it again, and the pass wait out its stall limit (152 s for a 4 s run).
    assert flaky.calls[9] == 2 and flaky.calls[10] >= 2
    assert s.partial and s.count == 23 and s.given == 24
    assert s.missing == (9,) and s.spread_missing == (9,)
    assert all(math.isnan(s.errors[i]) for i in s.missing) and not any(math.isnan(e) for e in s.errors[:9])
    assert "samples #9)" in s.failures[0] and "ConnectionError" in s.failures[0]
    assert "sample #9: loader(9) raised ConnectionError: storage hiccup on sample 9" in s.failures[0]  # which one
    assert len(s.failures) == len(set(s.failures))  # both passes lost it alike: said once
    assert all(i not in s.missing for i in s.ranking)
    text = " ".join(report.to_text().split())
    assert "Partial run: 23 of 24 samples measured" in text
    # What was measured is what an in-process run of those samples gives.
    kept = [d for i, d in enumerate(data) if i != 9]
    alone = _run(Samples(kept), target="CPU").samples
    assert [e for i, e in enumerate(s.errors) if i not in s.missing] == list(alone.errors)
    report.save(tmp_path / "r.json")
    assert Report.load(tmp_path / "r.json").samples.partial
    # In this process (one unit of sixteen) the same: that sample alone is lost.
    here = _run(Samples(loader=_Flaky(data, {9}), count=24), None, "CPU", batch_retries=1).samples
    assert here.missing == (9,) and here.errors == s.errors


def test_each_pass_returns_what_it_found_and_the_run_keeps_nothing():
    """The outputs' pass and the per-node pass return frozen results that carry their own notes and logs (a
    partial run's note, each sample's first node over its limit); the `SampleRun` keeps only the samples and the
    knobs, so giving it to the passes twice gives the same answers twice."""
    import dataclasses

    from bisect_ov.analysis.metrics import metric_value
    from bisect_ov.engine.comparison import Comparison
    from bisect_ov.engine.runner import Runner
    from bisect_ov.model.graph import ModelGraph
    from bisect_ov.model.match import identity_match
    from bisect_ov.model.taps import Tap
    from bisect_ov.run.devices import make_device
    from bisect_ov.samples.runs import SampleRun, node_spread, run_samples

    graph = ModelGraph(_models())
    comparison = Comparison(graph, graph, identity_match(graph), make_device("CPU", role="ref"),
                            make_device("EMU:f16"))
    runner = Runner(comparison)
    run = SampleRun(Samples(loader=_Flaky(_data(8), {5}), count=8), ThreadPoolExecutor(2), samples_per_batch=2,
                    batch_retries=0)
    error_of = functools.partial(metric_value, metric="rel_l2")
    taps = [Tap(n.key, 0) for n in graph.candidates()]
    try:
        first, compiled = run_samples(runner, run, error_of)
        assert compiled is None  # ran on the executor: nothing compiled here
        assert first.missing == (5,) and first.log.lost == (5,) and first.executor == "ThreadPoolExecutor"
        assert [n for n in first.notes if n.startswith("Partial run: 7 of 8 samples measured")]
        with pytest.raises(dataclasses.FrozenInstanceError):
            first.examined = 0  # type: ignore[misc]
        spread = node_spread(runner, taps, run, error_of, limits={t.key: 0.0 for t in taps})
        assert spread.log is not None and spread.log.lost == (5,)
        assert set(spread.first_over) == {0, 1, 2, 3, 4, 6, 7} and all(spread.first_over.values())
        assert vars(run).keys().isdisjoint({"notes", "log", "first_over"})
        again, _ = run_samples(runner, run, error_of)
        assert again.notes == first.notes and again.missing == first.missing
        assert np.array_equal(again.errors, first.errors, equal_nan=True)
        assert node_spread(runner, taps, run, error_of, limits={t.key: 0.0 for t in taps}).first_over == \
            spread.first_over
    finally:
        run.close()


class _EveryBatchFails(ThreadPoolExecutor):
    """An executor whose every task fails, as when its workers die."""

    def submit(self, fn, *args, **kwargs):
        from concurrent.futures import Future

        future: Future = Future()
        future.set_exception(RuntimeError("worker lost"))
        return future


def test_nothing_measured_is_an_error_not_an_empty_answer():
    with pytest.raises(BisectError, match="No sample could be measured.*worker lost"):
        _run(Samples(_data(8)), _EveryBatchFails(2), "CPU", batch_retries=0)


def test_a_bad_sample_stops_the_run_and_is_named(tmp_path):
    data = _data(20)
    data[13] = {"nope": np.zeros(3, np.float32)}
    with pytest.raises(InputError, match="Sample #13"):
        _run(Samples(data), ThreadPoolExecutor(2), "CPU")


# ----- streaming -----------------------------------------------------------------------------------------------
def test_a_generator_is_read_as_it_runs_and_its_spill_folder_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    data = _data(20)
    read = []

    def generate():
        for i, d in enumerate(data):
            read.append(i)
            yield d

    report = _run(generate(), target="CPU")
    assert read == list(range(20)) and report.samples.count == 20
    assert not list(tmp_path.glob("bisect_ov_samples_*"))  # removed at the end
    assert _figures(report) == _figures(_run(Samples(data), target="CPU"))


def test_samples_read_lazily_by_index():
    seen = []

    def generate():
        for i in range(5):
            seen.append(i)
            yield [np.full((1, 8), i, np.float32)]

    s = Samples(generate())
    assert seen == []
    s.load(2)
    assert seen == [0, 1, 2]
    assert len(s) == 5 and seen == [0, 1, 2, 3, 4]
    s.close()
    with pytest.raises(InputError, match="count"):
        Samples(loader=lambda i: None)
    with pytest.raises(InputError, match="no sample"):
        bisect(tiny_chain(), "CPU", "CPU:f32", Samples(iter([])), progress=False)


def test_executor_options_are_checked():
    for bad, match in ((5, "executor must be"), ("gpu-farm", "Unknown executor"), ("processes:x", "number of workers")):
        with pytest.raises(InputError, match=match):
            if isinstance(bad, int):
                BisectOptions(executor=bad)
            else:
                bisect(tiny_chain(), "CPU", "CPU:f32", [[np.zeros((1, 8), np.float32)]] * 2, executor=bad,
                       progress=False)
    with pytest.raises(InputError, match="samples_per_batch"):
        BisectOptions(samples_per_batch=0)
    assert BisectOptions(executor=ThreadPoolExecutor(1)).to_dict()["executor"] == "ThreadPoolExecutor"


def test_a_closed_executor_is_refused_up_front_not_read_as_the_devices_failure():
    # A pool shut down (or a closed Dask client) had every batch retried three times, then "DeviceError: No sample
    # could be measured ... cannot schedule new futures after shutdown".
    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    with pytest.raises(InputError, match=r"The executor \(ThreadPoolExecutor\) takes no work: cannot schedule new "
                                         r"futures after shutdown\. Pass one that is open"):
        bisect(tiny_chain(), "CPU", "CPU:f32", [[np.zeros((1, 8), np.float32)]] * 2, executor=pool, progress=False)


@pytest.mark.slow
@CLUSTERS
def test_a_dask_client_itself_is_taken_and_a_scheduler_without_workers_is_refused(cluster):
    # A Client (not its get_executor()) ended in "AttributeError: 'Future' object has no attribute '_condition'";
    # a scheduler with no worker waited silently for its stall limit (half an hour a pass).
    distributed = pytest.importorskip("distributed")
    assert _figures(_run(Samples(_data()[:8]), cluster)) == _figures(_run(Samples(_data()[:8])))
    from bisect_ov.samples import executors

    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=":0", silence_logs=50) as empty, \
            distributed.Client(empty) as client:
        with pytest.raises(InputError, match=r"Client has no worker \(none joined within 1 s\): start workers"):
            executors._has_workers(client, "Client", timeout=1)


def test_a_cluster_s_wrapped_failure_is_told_by_its_cause_without_terminal_colours():
    # A loader failing on Ray put "RayTaskError(RuntimeError): \x1b[36mray::run_batch()\x1b[39m (pid=...) ^^^^ File
    # ..." into the report's notes (boxes in the HTML): the cause's sentence, no escape, no traceback.
    from bisect_ov.core.errors import cause_of, first_line

    class TaskError(Exception):  # what Ray raises: its text a coloured traceback, the original kept as `cause`
        def __init__(self, cause):
            super().__init__("\x1b[36mray::run_batch()\x1b[39m (pid=7)\n  File \"w.py\", line 3\n    ^^^^\nboom")
            self.cause = cause

    wrapped = TaskError(RuntimeError("sample #9: loader(9) raised DecodeError: bad file"))
    assert first_line(wrapped) == "sample #9: loader(9) raised DecodeError: bad file"
    assert type(cause_of(wrapped)) is RuntimeError
    assert first_line(RuntimeError("\x1b[31mred\x1b[0m text")) == "red text"


def _sigint_ignored() -> bool:
    """Run on a pool worker: whether SIGINT is ignored there."""
    import signal as signals

    return signals.getsignal(signals.SIGINT) in (signals.SIG_IGN, int(signals.SIG_IGN))


def test_a_local_process_pool_leaves_ctrl_c_to_the_driver():
    # Ctrl-C reaches every process of the terminal's group: each 'processes:N' worker printed its own
    # "Process SpawnProcess-3: Traceback ... KeyboardInterrupt" under the one-line "bisect-ov: interrupted".
    from bisect_ov.samples.executors import open_executor

    pool, _, close = open_executor("processes:1")
    try:
        assert pool.submit(_sigint_ignored).result(timeout=120) is True
    finally:
        close()
