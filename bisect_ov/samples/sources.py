"""Many inputs: where samples come from, read one at a time, and what is kept of each: a few numbers.

One random input rarely shows a problem: an int8 model may agree on most images and flip the class of a few.
`as_samples` recognises a set of samples among the forms `bisect` accepts. `Samples` reads them lazily, by
index: a list is indexed (never copied), a folder is a list of paths, a ``loader(i)`` runs wherever the
sample is needed (on a cluster's worker, so inputs in a shared folder never pass through the driver), and a
generator is spilled to a temporary folder of ``.npz`` as it is read, so the sample the search runs on and
the per-node pass can read it again; the folder is removed by `Samples.close` (or when the object goes).

What is kept of a sample is a summary (`sample_result`): its final-output error and, for outputs holding
class scores (`classifier_outputs`: ``[batch, classes]``, or logits), whether its top-1 answer differs or its
reference top-1 is outside the target's top-k (`flips`; ties count as agreement). Per-node errors over the
samples are `bisect_ov.analysis.spread.Distribution`s, which merge. `SampleSummary` collects the summaries
and the run's log (batches, their time, failures) into the report's `SamplesSummary`. Running the samples,
in this process or on an executor, is `bisect_ov.samples.runs`.
"""

from __future__ import annotations

import logging
import math
import os
import pathlib
import re
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.core.errors import InputError
from bisect_ov.core.records import SamplesSummary
from bisect_ov.run.inputs import load_arrays

__all__ = ["Samples", "as_samples", "load_folder", "loaded", "SampleSummary", "PassLog", "sample_result", "classifier_outputs",
           "flips"]

log = logging.getLogger(__name__)


class Samples:
    """Many samples (each a dict name -> array, a list of arrays in input order, or a ``.npz``/``.npy`` path),
    read one at a time.

    Parameters
    ----------
    samples
        A list or tuple (indexed, not copied), or any iterable (a generator: read once, spilled to a
        temporary folder of ``.npz`` as it is read).
    loader
        Instead of `samples`: ``loader(i) -> sample`` for ``i`` in ``range(count)``. It runs where the sample is
        needed, on the workers of an executor too, so it must be picklable (a module-level function or a
        `functools.partial` of one) and read what every worker can reach (a shared folder).
    count
        With `loader`: how many samples.

    Examples
    --------
    >>> import numpy as np
    >>> s = Samples({"x": np.full(2, i)} for i in range(3))
    >>> len(s), float(s.load(2)["x"][0])
    (3, 2.0)
    >>> s.close()
    """

    def __init__(self, samples: Iterable[Any] | None = None, *, loader: Callable[[int], Any] | None = None,
                 count: int | None = None):
        self.loader = loader
        self._items: Sequence[Any] | None = None
        self._source: Iterator[Any] | None = None
        self._spilled: list[Any] = []  # a generator's samples read so far: spill paths (or the sample when unsaveable)
        self._spill: tempfile.TemporaryDirectory | None = None
        self._count: int | None = None
        if loader is not None:
            if samples is not None:
                raise InputError("Samples takes either samples or loader=..., not both.")
            if not callable(loader):
                raise InputError(f"Samples(loader=...) takes a callable loader(i) -> sample; got {loader!r}.")
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise InputError("Samples(loader=..., count=N) needs the number of samples, an integer >= 1; "
                                 f"got {count!r}.")
            self._count = count
        elif isinstance(samples, Samples):
            self.__dict__.update(samples.__dict__)
        elif isinstance(samples, (list, tuple)):
            if not samples:
                raise InputError("Samples(...) is empty: give at least one sample.")
            # Files named relative to this process's folder are found by workers in other folders (a cluster's)
            self._items, self._count = [_absolute(sample) for sample in samples], len(samples)
        elif samples is not None and hasattr(samples, "__iter__") and not isinstance(samples, (str, bytes, dict)):
            self._source = iter(samples)
        else:
            raise InputError(f"Samples takes a list of samples, an iterable (a generator) or loader=...; got "
                             f"{type(samples).__name__}.")

    # ----- reading ----------------------------------------------------------------------------------
    @property
    def listed(self) -> Sequence[Any] | None:
        """The samples as given in a list, or None for a loader or a generator."""
        return self._items

    @property
    def kind(self) -> str:
        """``list``, ``loader`` or ``generator``."""
        return "loader" if self.loader is not None else "list" if self._items is not None else "generator"

    def __len__(self) -> int:
        """How many samples; a generator is read to its end (and spilled) to know."""
        if self._count is None:
            for _ in self.stream(len(self._spilled)):
                pass
        assert self._count is not None
        return self._count

    def __getitem__(self, index: int) -> Any:
        if not isinstance(index, int) or index < 0:
            raise IndexError(f"Samples are read by index, an integer >= 0; got {index!r}.")
        if self._count is not None and index >= self._count:
            raise IndexError(f"Sample #{index} does not exist: there are {self._count}.")
        return self.load(index)

    def __iter__(self) -> Iterator[Any]:
        for _, sample in self.stream():
            yield sample

    def stream(self, start: int = 0) -> Iterator[tuple[int, Any]]:
        """(index, sample) from `start` on, reading a generator only as far as asked (spilling what it reads)."""
        index = start
        while True:
            if self._count is not None and index >= self._count:
                return
            if self._source is not None and index >= len(self._spilled):
                try:
                    sample = next(self._source)
                except StopIteration:
                    self._source, self._count = None, len(self._spilled)
                    if not self._count:
                        raise InputError("The samples' generator gave no sample: give at least one.") from None
                    return
                self._spilled.append(self._save(len(self._spilled), sample))
                yield index, sample
            else:  # a loader's samples are read where they run (None here): a worker reads its own
                yield index, None if self.loader is not None else self._raw(index)
            index += 1

    def load(self, index: int) -> Any:
        """Sample `index` as given (a generator's read back from its spill file)."""
        return self.travelling(index, self._raw(index)) if self.loader is None else self._raw(index)

    def _raw(self, index: int) -> Any:
        """Sample `index`, a generator's as the path of its spill file (which `prepare_inputs` reads)."""
        if self.loader is not None:
            try:
                return loaded(self.loader(index), index)
            except InputError:
                raise
            except Exception as err:
                raise InputError(f"Sample #{index}: loader({index}) failed: {type(err).__name__}: {err}") from err
        if self._items is not None:
            return self._items[index]
        if index >= len(self._spilled):
            for _ in self.stream(len(self._spilled)):
                if index < len(self._spilled):
                    break
        if index >= len(self._spilled):
            raise IndexError(f"Sample #{index} does not exist: the generator gave {len(self._spilled)}.")
        return self._spilled[index]

    def travelling(self, index: int, sample: Any) -> Any:
        """What an executor's batch carries for sample `index` just read as `sample`: None when the worker loads
        it itself (`loader`), the arrays when only this machine can read them (a generator's spill file)."""
        if self.loader is not None:
            return None
        return load_arrays(sample) if self._is_spill(sample) else sample

    def file_of(self, index: int) -> str | None:
        """The name of sample `index`'s file when the user gave it as one (a folder's, a list of paths), else None."""
        items = self._items
        item = items[index] if items is not None and 0 <= index < len(items) else None
        return pathlib.Path(item).name if item is not None and self.names_file(index, item) else None

    def names_file(self, index: int, sample: Any) -> bool:
        """True when `sample` is a file the user gave (error messages then name it)."""
        return isinstance(sample, (str, os.PathLike)) and not self._is_spill(sample)

    def _is_spill(self, sample: Any) -> bool:
        return (isinstance(sample, pathlib.Path) and self._spill is not None
                and sample.parent == pathlib.Path(self._spill.name))

    def close(self) -> None:
        """Remove a generator's spill folder (the samples it held can no longer be read)."""
        if self._spill is not None:
            self._spill.cleanup()
            self._spill = None

    def _save(self, index: int, sample: Any) -> Any:
        """Spill one generator sample to ``NNNNNN.npz`` (arrays by name, or arr_0... in order)."""
        if isinstance(sample, (str, os.PathLike)):
            return sample
        if self._spill is None:
            self._spill = tempfile.TemporaryDirectory(prefix="bisect_ov_samples_")
        path = pathlib.Path(self._spill.name) / f"{index:06d}.npz"
        try:
            if isinstance(sample, dict):
                np.savez(path, **{str(k): np.asarray(v) for k, v in sample.items()})  # type: ignore[arg-type]
            elif isinstance(sample, (list, tuple)):
                np.savez(path, *[np.asarray(v) for v in sample])
            elif isinstance(sample, np.ndarray):
                np.savez(path, sample)
            else:
                return sample  # not arrays: `prepare_inputs` refuses it, naming the sample
            return path
        except Exception as err:  # an array numpy cannot save without pickle: kept, and refused on preparing
            log.debug("Sample #%d not spilled (%s); kept in memory", index, err)
            path.unlink(missing_ok=True)
            return sample


def loaded(sample: Any, index: int) -> Any:
    """`sample`, what `loader(index)` returned; None (a loader that forgot to return) is refused by name."""
    if sample is None:
        raise InputError(f"Sample #{index}: loader({index}) returned None: return the sample (a dict of arrays by "
                         "input name, a list of arrays, an array, or the path of a .npz/.npy file).")
    return sample


def _absolute(sample: Any) -> Any:
    """`sample` as an absolute path when it names a file (a ``.npz``/``.npy``), else as it is."""
    if isinstance(sample, pathlib.PurePath):
        return pathlib.Path(os.path.abspath(sample))
    return os.path.abspath(sample) if isinstance(sample, (str, os.PathLike)) else sample


def load_folder(folder: pathlib.Path) -> Samples:
    """Every ``.npz`` (one sample: one array per input name) and ``.npy`` (one single-input sample) in a folder."""
    # In natural order of their names: img_2 before img_10, as a person numbers them.
    files = sorted((p for p in folder.iterdir() if p.suffix in (".npz", ".npy") and p.is_file()),
                   key=lambda p: [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", p.name)])
    if not files:
        raise InputError(f"The input folder '{folder}' holds no .npz or .npy files.")
    return Samples(files)


def as_samples(inputs: Any) -> Samples | None:
    """The samples in `inputs` when it stands for several, else None (one sample, or random inputs).

    Several samples: a `Samples`, a folder, a list/tuple of dicts or of lists, or any other iterator
    (a generator, read lazily). A list of arrays is one sample, in input order.
    """
    if inputs is None or isinstance(inputs, (np.ndarray, dict, str, bytes)):
        if isinstance(inputs, str) and pathlib.Path(inputs).is_dir():
            return load_folder(pathlib.Path(inputs))
        return None
    if isinstance(inputs, Samples):
        return inputs
    if isinstance(inputs, os.PathLike):
        path = pathlib.Path(inputs)
        return load_folder(path) if path.is_dir() else None
    if isinstance(inputs, (list, tuple)):
        if inputs and all(isinstance(s, (dict, list, tuple, os.PathLike)) for s in inputs):
            return Samples(inputs)
        return None
    if hasattr(inputs, "__iter__"):
        return Samples(inputs)
    return None


# ----- what is kept of each sample ---------------------------------------------------------------------------
SampleResult = tuple[int, float, tuple[int, ...], dict[int, tuple[bool, bool]]]  # index, error, class outputs, flips


def sample_result(index: int, ref_outs: Sequence[np.ndarray], target_all: Sequence[np.ndarray],
                  positions: Sequence[int], names: Sequence[str], class_positions: Sequence[int] | None, k: int,
                  error_of: Callable[[TensorStats], float]) -> SampleResult:
    """One sample's summary: its final-output error (the worst output's), the outputs taken for class scores
    on it (`class_positions`, or by shape), and per such output (top-1 differs, top-k miss)."""
    t_outs = [target_all[p] for p in positions]
    error = max((error_of(compare(r, t)) for r, t in zip(ref_outs, t_outs)), default=0.0)
    chosen = (tuple(class_positions) if class_positions is not None else
              tuple(classifier_outputs([a.shape for a in ref_outs], [a.dtype for a in ref_outs], names)))
    return index, float(error), chosen, {j: flips(ref_outs[j], t_outs[j], k) for j in chosen}


@dataclass(frozen=True)
class PassLog:
    """How one pass over the samples ran: the wall time of each batch, batches run again, what failed (a line
    each), the processes that ran batches (host:pid), and the sample indices of batches that failed every try."""

    batch_seconds: tuple[float, ...] = ()
    retried: int = 0
    failures: tuple[str, ...] = ()
    workers: frozenset[str] = frozenset()
    lost: tuple[int, ...] = ()


@dataclass(frozen=True)
class SampleSummary:
    """What the outputs' pass over every sample found: final-output error per sample (NaN where not measured),
    the ranking, classifier answers that changed, where and how the pass ran, its notes, and the sample the
    search runs on when it is not the worst (`examined`: a prompt-length sweep's)."""

    errors: tuple[float, ...] = ()
    flips_top1: tuple[int, ...] = ()
    flips_topk: tuple[int, ...] = ()
    k: int = 5
    classifier: bool = False
    class_outputs: tuple[str, ...] = ()
    missing: tuple[int, ...] = ()
    log: PassLog = field(default_factory=PassLog)
    executor: str = "in-process"
    notes: tuple[str, ...] = ()
    examined: int | None = None

    @classmethod
    def from_results(cls, results: Iterable[SampleResult], given: int, names: Sequence[str], k: int,
                     class_positions: Sequence[int] | None, log: PassLog,
                     executor: str = "in-process") -> "SampleSummary":
        """Collect per-sample results (any order); the classes are those of the lowest-numbered sample."""
        by_index = {r[0]: r for r in results}
        chosen = (list(class_positions) if class_positions is not None
                  else list(by_index[min(by_index)][2]) if by_index else [])
        errors: list[float] = []
        missing: list[int] = []
        top1: list[int] = []
        topk: list[int] = []
        for i in range(given):
            if i not in by_index:
                errors.append(math.nan)
                missing.append(i)
                continue
            _, error, _, answers = by_index[i]
            errors.append(error)
            picked = [answers.get(j, (True, True)) for j in chosen]
            if any(a[0] for a in picked):
                top1.append(i)
            if any(a[1] for a in picked):
                topk.append(i)
        return cls(tuple(errors), tuple(top1), tuple(topk), k, bool(chosen), tuple(names[i] for i in chosen),
                   tuple(missing), log, executor)

    @property
    def count(self) -> int:
        """Samples measured."""
        return len(self.errors) - len(self.missing)

    @property
    def ranking(self) -> list[int]:
        """Measured sample indices, worst final-output error first (NaN worst, then the lower index)."""
        missing = set(self.missing)
        measured = [i for i in range(len(self.errors)) if i not in missing]
        return sorted(measured, key=lambda i: (0 if math.isnan(self.errors[i]) else 1,
                                               -self.errors[i] if not math.isnan(self.errors[i]) else 0.0, i))

    def to_record(self, spread: Any = None) -> SamplesSummary:
        """The record the report keeps (the first 50 of the ranking), with how the per-node pass ran (`spread`:
        its `PassLog`, None when it did not run)."""
        missing = set(self.missing)
        measured = np.asarray([e for i, e in enumerate(self.errors) if i not in missing], dtype=np.float64)
        finite = measured[np.isfinite(measured)]
        ranking = self.ranking
        log_ = self.log
        spread_log = spread if spread is not None else PassLog()
        return SamplesSummary(
            count=self.count, errors=tuple(self.errors), ranking=tuple(ranking[:50]),
            worst=ranking[0] if ranking else None,
            error_mean=float(finite.mean()) if finite.size else None,
            error_max=float(measured.max()) if measured.size else None,
            classifier=self.classifier, class_outputs=tuple(self.class_outputs),
            top1_flips=len(self.flips_top1), top1_flipped=tuple(self.flips_top1),
            k=self.k, topk_misses=len(self.flips_topk), topk_missed=tuple(self.flips_topk),
            given=len(self.errors), missing=tuple(self.missing), spread_missing=spread_log.lost,
            # Both passes losing one batch fail alike: each failure said once.
            failures=tuple(dict.fromkeys(log_.failures + spread_log.failures)), executor=self.executor,
            retried=log_.retried + spread_log.retried, workers=len(log_.workers | spread_log.workers),
            batch_seconds=tuple(round(s, 4) for s in log_.batch_seconds),
            spread_batch_seconds=tuple(round(s, 4) for s in spread_log.batch_seconds),
            examined=self.examined,
        )


def classifier_outputs(shapes: Sequence[tuple[int, ...]], dtypes: Sequence[np.dtype], names: Sequence[str]) -> list[int]:
    """Positions of the outputs that hold class scores: floating, and either ``[batch, classes]`` (rank 2,
    2 or more classes) or named like logits with the classes last (an LLM's ``[batch, seq, vocab]``).

    A feature map (``1x64x32x32``) is not a classifier, however many values its last axis holds.
    """
    found = []
    for i, (shape, dtype, name) in enumerate(zip(shapes, dtypes, names)):
        if not np.issubdtype(dtype, np.floating) or len(shape) < 2 or shape[-1] < 2:
            continue
        if len(shape) == 2 or (len(shape) == 3 and "logit" in name.lower()):
            found.append(i)
    return found


def flips(ref: np.ndarray, target: np.ndarray, k: int) -> tuple[bool, bool]:
    """(top-1 answer differs, reference top-1 outside the target's top-k) for one class-score output.

    Ties count as agreement, as either side would break them either way: the target agrees on top-1 when its
    score for the reference's class equals its own maximum, and keeps it in its top-k when that score is at
    least its k-th largest. A target row with no answer (a NaN or infinite score, or every score equal: logits
    all zero) differs on both.

    Examples
    --------
    >>> flips(np.array([[0.1, 0.9, 0.0]]), np.array([[0.5, 0.5, 0.0]]), 2)
    (False, False)
    >>> flips(np.array([[0.1, 0.9, 0.0]]), np.array([[0.6, 0.4, 0.0]]), 1)
    (True, True)
    >>> flips(np.array([[0.1, 0.9, 0.0]]), np.array([[0.0, np.nan, 0.0]]), 2), flips(np.zeros((1, 3)) + [[0, 1, 0]], np.zeros((1, 3)), 3)
    ((True, True), (True, True))
    """
    if ref.shape != target.shape:
        return True, True
    r2, t2 = ref.reshape(-1, ref.shape[-1]), target.reshape(-1, target.shape[-1]).astype(np.float64)
    rows = np.arange(len(r2))
    chosen = t2[rows, r2.argmax(axis=1)]
    with np.errstate(invalid="ignore"):
        none = ~np.isfinite(t2).all(axis=1) | ((t2.max(axis=1) == t2.min(axis=1)) & (t2.shape[1] > 1))
        top1 = np.any(none | (chosen < t2.max(axis=1)))
        kk = min(k, t2.shape[1])
        kth = -np.partition(-t2, kk - 1, axis=1)[:, kk - 1]
        return bool(top1), bool(np.any(none | (chosen < kth)))
