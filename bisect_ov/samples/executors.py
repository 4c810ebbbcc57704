"""Where samples run: in this process or on any `concurrent.futures.Executor`, named by an option value.

`open_executor` turns the ``executor`` option into an executor, a label for the report and a way to close it:
None (in this process: `Inline`, which runs each call at once with the same code path), an executor object
given by the user (Dask ``distributed.Client(...).get_executor()``, Ray's, a ``ProcessPoolExecutor``: used as
given and left open), or a name: ``'processes:N'`` and ``'threads:N'`` (local pools), ``'dask://HOST:PORT'``
(a Dask scheduler), ``'ray'`` or ``'ray://HOST:PORT'`` (through `RayExecutor`). Dask and Ray are optional
extras, imported only when named. `executor_width` guesses how many workers stand behind an executor.

Assumed: whatever is submitted is picklable and importable on the workers (the functions of
`bisect_ov.samples.batches`); the executors know nothing of models or samples.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any, Callable

from bisect_ov.core.errors import InputError, first_line
from bisect_ov.core.extras import install_hint

__all__ = ["EXECUTOR_FORMS", "Inline", "RayExecutor", "check_executor", "executor_width", "open_executor"]

log = logging.getLogger(__name__)
EXECUTOR_FORMS = ("None (in this process), 'processes:N', 'threads:N', 'dask://HOST:PORT' (or 'tcp://HOST:PORT'), "
                  "'ray' (a local Ray instance) or 'ray://HOST:PORT'")


# ----- executors -------------------------------------------------------------------------------------------
class Inline(Executor):
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
    once per pass rather than with every batch. Ray schedules each task on a worker process it keeps, so a
    worker compiles each plan once (`bisect_ov.samples.batches.run_batch`).

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
        if not self._ray.is_initialized():  # ray.remote would start a local instance: not the cluster it was given
            raise RuntimeError("cannot schedule new futures after shutdown: Ray was shut down (ray.shutdown())")
        task = self._tasks.get(fn)
        if task is None:
            task = self._tasks[fn] = self._ray.remote(fn)
        return task.remote(*args, **kwargs).future()

    def share(self, obj: Any) -> Any:
        """`obj` in the object store: tasks given the reference receive the object."""
        return self._ray.put(obj)

    @property
    def _max_workers(self) -> int:  # read by `executor_width`: the cluster's CPUs, one task each
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._connected_here and self._ray.is_initialized():
            self._ray.shutdown()


def check_executor(spec: Any) -> Any:
    """`spec` as given when it is an `open_executor` form, else `InputError` saying what is wrong with it.

    Checked without opening anything (no pool started, no scheduler reached), so a bad value is refused up
    front even when a single sample never needs the executor. A ``ProcessPoolExecutor`` that starts its workers
    by ``fork`` (Python's default on Linux before 3.14) is refused: a forked child inherits OpenVINO's thread
    pools mid-state and hangs once this process has run a model; ``'processes:N'`` starts fresh interpreters.
    """
    if spec is None or spec == "in-process":
        return spec
    if not isinstance(spec, str):
        if not callable(getattr(spec, "submit", None)):
            raise InputError(f"executor must be a concurrent.futures.Executor or one of {EXECUTOR_FORMS}; "
                             f"got a {type(spec).__name__}.")
        if isinstance(spec, ProcessPoolExecutor) and _start_method(spec) == "fork":
            raise InputError(
                "executor: this ProcessPoolExecutor starts its workers by fork, and a forked worker inherits "
                "OpenVINO's threads mid-state (it hangs once this process has run a model). Make it with "
                "mp_context=multiprocessing.get_context('spawn') (or 'forkserver'), or pass 'processes:N'.")
        return spec
    kind, sep, rest = spec.partition(":")
    if kind in ("processes", "threads"):
        if not sep or not rest.isdigit() or int(rest) < 1:
            raise InputError(f"executor '{spec}': give the number of workers as a positive integer, e.g. '{kind}:2'.")
    elif kind in ("dask", "tcp", "tls"):
        host, colon, port = rest.removeprefix("//").rpartition(":")
        if not rest.startswith("//") or not host or not colon or not port.isdigit():
            raise InputError(f"executor '{spec}': a Dask scheduler is named '{kind}://HOST:PORT', e.g. "
                             f"'{kind}://127.0.0.1:8786'.")
    elif kind == "ray":
        if sep and (not rest.startswith("//") or not rest[2:]):
            raise InputError(f"executor '{spec}': use 'ray' (a local instance) or 'ray://HOST:PORT'.")
    else:
        raise InputError(f"Unknown executor '{spec}'. Use {EXECUTOR_FORMS}, or pass an Executor object.")
    return spec


def _leave_interrupts_to_the_driver() -> None:
    """A pool worker's start: Ctrl-C reaches every process of the terminal's group, and the driver stops the run
    and the pool (each worker printed its own KeyboardInterrupt traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _start_method(pool: ProcessPoolExecutor) -> str | None:
    """How the pool starts its workers (``fork``, ``spawn``, ``forkserver``); None when it does not say."""
    context = getattr(pool, "_mp_context", None)
    try:
        return context.get_start_method() if context is not None else None
    except Exception as err:  # a private attribute: another Python may hold something else there
        log.debug("Could not read the start method of %r: %s", pool, err)
        return None


def open_executor(spec: Any) -> tuple[Executor | None, str, Callable[[], None]]:
    """(executor, label for the report, close) from an `executor` option value.

    Parameters
    ----------
    spec
        None (in this process); a `concurrent.futures.Executor` (anything with ``submit``), used as given and
        left open; ``'processes:N'`` or ``'threads:N'`` (a local pool, closed afterwards);
        ``'dask://HOST:PORT'`` or ``'tcp://HOST:PORT'`` (a Dask scheduler: needs the ``cluster`` extra);
        ``'ray'`` (the Ray instance this process is connected to, or a local one) or ``'ray://HOST:PORT'``
        (a Ray cluster's client server; both need the ``ray`` extra), through `RayExecutor`.
    """
    check_executor(spec)
    if spec is None or spec == "in-process":
        return None, "in-process", lambda: None
    if not isinstance(spec, str):
        label = type(spec).__name__
        if not isinstance(spec, Executor) and callable(getattr(spec, "get_executor", None)):  # a Dask Client
            _has_workers(spec, label)
            spec = spec.get_executor()
        return spec, label, lambda: None
    kind, _, rest = spec.partition(":")
    if kind in ("processes", "threads"):
        if kind == "threads":
            pool: Executor = ThreadPoolExecutor(int(rest))
        else:  # a forked child would inherit OpenVINO's threads mid-state: start fresh interpreters
            pool = ProcessPoolExecutor(int(rest), mp_context=multiprocessing.get_context("spawn"),
                                       initializer=_leave_interrupts_to_the_driver)
        return pool, spec, lambda: pool.shutdown(wait=True, cancel_futures=True)
    if kind in ("dask", "tcp", "tls"):
        address = "tcp:" + rest if kind == "dask" else spec
        try:
            from distributed import Client
        except ImportError as err:
            raise InputError(f"executor '{spec}' needs Dask: {install_hint('cluster')}.") from err
        try:
            client = Client(address, timeout=30)
        except Exception as err:
            raise InputError(f"Cannot reach the Dask scheduler at {address}: {first_line(err)}. Start one with "
                             "'dask scheduler' and workers with 'dask worker ADDRESS'.") from err
        try:
            _has_workers(client, f"The Dask scheduler at {address}")
        except InputError:
            client.close()
            raise
        return client.get_executor(), f"dask {address}", client.close
    if kind == "ray":
        ray_address = spec if rest else None
        try:
            import ray  # noqa: F401 -- only to say what is missing
        except ImportError as err:
            raise InputError(f"executor '{spec}' needs Ray: {install_hint('ray')}.") from err
        try:
            ray_pool = RayExecutor(ray_address, **({} if ray_address else {"include_dashboard": False,
                                                                             "log_to_driver": False}))
        except Exception as err:
            raise InputError(f"Cannot start or reach Ray at {ray_address or 'a local instance'}: "
                             f"{first_line(err)}.") from err
        return ray_pool, f"ray {ray_address or 'local'}", ray_pool.shutdown
    raise AssertionError(f"check_executor let '{spec}' through")  # pragma: no cover


def _has_workers(client: Any, what: str, timeout: float = 30.0) -> None:
    """Refuse a Dask client whose scheduler has no worker within `timeout` seconds: its tasks would wait for one
    (the run's stall limit is half an hour per pass)."""
    try:
        client.wait_for_workers(1, timeout=timeout)
    except Exception as err:  # noqa: BLE001 - a timeout, or a closed client
        why = f"none joined within {timeout:.0f} s" if isinstance(err, TimeoutError) else first_line(err).rstrip(".")
        raise InputError(f"{what} has no worker ({why}): start workers with 'dask worker ADDRESS', or check the "
                         "client is open.") from err


def executor_width(executor: Executor | None) -> int:
    """Workers behind an executor, to keep about two batches per worker in flight (a guess for unknown kinds)."""
    if executor is None or isinstance(executor, Inline):
        return 1
    count = getattr(executor, "_max_workers", None)
    client = getattr(executor, "_client", None)
    if client is not None:
        try:
            count = sum(client.nthreads().values())
        except Exception as err:
            log.debug("Could not count the Dask workers: %s", err)
    return max(1, int(count or 2))
