"""Many inputs: run every sample on both sides, rank the samples, count answers that flip.

One random input rarely shows a problem: an int8 model may agree on most images and flip the class of a few.
`as_samples` recognises a set of samples among the forms `bisect` accepts; `run_samples` runs the untouched
model on all of them (`Compiled.infer_many`: OpenVINO's asynchronous infer requests keep the device busy),
ranks them by final-output error and, for classifier-like outputs (floating, last axis of 2 or more classes),
counts the samples whose top-1 answer differs, or whose reference top-1 is not in the target's top-k. `node_spread` aggregates the
error of measured tensors over samples (mean, max, quantiles). The detailed search then runs on the worst
sample.
"""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from bisect_ov.analysis.metrics import TensorStats, compare
from bisect_ov.errors import InputError
from bisect_ov.model.taps import Tap, tap_model
from bisect_ov.records import SamplesSummary
from bisect_ov.session import Session, run_both

__all__ = ["Samples", "as_samples", "run_samples", "SampleSummary", "node_spread", "load_folder"]


class Samples(list):
    """An explicit list of samples (each a dict name -> array, or a list of arrays in input order)."""

    def __init__(self, samples: Iterable[Any]):
        super().__init__(samples)
        if not self:
            raise InputError("Samples(...) is empty: give at least one sample.")


def load_folder(folder: pathlib.Path) -> Samples:
    """Every ``.npz`` (one sample: one array per input name) and ``.npy`` (one single-input sample) in a folder."""
    files = sorted(p for p in folder.iterdir() if p.suffix in (".npz", ".npy") and p.is_file())
    if not files:
        raise InputError(f"The input folder '{folder}' holds no .npz or .npy files.")
    return Samples(files)


def as_samples(inputs: Any) -> Samples | None:
    """The samples in `inputs` when it stands for several, else None (one sample, or random inputs).

    Several samples: a `Samples`, a folder, a list/tuple of dicts or of lists, or any other iterator
    (a generator). A list of arrays is one sample, in input order.
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


@dataclass
class SampleSummary:
    """Final-output error per sample, the ranking, and classifier answers that changed."""

    errors: list[float] = field(default_factory=list)
    flips_top1: list[int] = field(default_factory=list)
    flips_topk: list[int] = field(default_factory=list)
    k: int = 5
    classifier: bool = False

    @property
    def ranking(self) -> list[int]:
        """Sample indices, worst final-output error first."""
        return sorted(range(len(self.errors)), key=lambda i: (-self.errors[i], i))

    def to_record(self) -> SamplesSummary:
        """The frozen record the report keeps (the first 50 of the ranking)."""
        errors = np.asarray(self.errors, dtype=np.float64) if self.errors else np.zeros(0)
        finite = errors[np.isfinite(errors)]
        return SamplesSummary(
            count=len(self.errors), errors=tuple(self.errors), ranking=tuple(self.ranking[:50]),
            worst=self.ranking[0] if self.errors else None,
            error_mean=float(finite.mean()) if finite.size else None,
            error_max=float(errors.max()) if errors.size else None,
            classifier=self.classifier, top1_flips=len(self.flips_top1), top1_flipped=tuple(self.flips_top1),
            k=self.k, topk_misses=len(self.flips_topk), topk_missed=tuple(self.flips_topk),
        )


def run_samples(session: Session, samples: Sequence[tuple[list[np.ndarray], list[np.ndarray]]],
                error_of: Callable[[TensorStats], float], *, k: int = 5, jobs: int = 2) -> SampleSummary:
    """Run the untouched model on every (ref inputs, target inputs) sample on both sides."""
    ref_c, target_c = run_both(lambda: session.ref.compile(session.graph.model),
                               lambda: session.target.compile(session.target_graph.model))
    session.compiles["ref"] += 1
    session.compiles["target"] += 1
    session.plain_compiled = (ref_c, target_c)  # `Session.plain` reuses them for the worst sample
    with session.clock("samples"):
        ref_out, target_out = run_both(lambda: ref_c.infer_many([s[0] for s in samples], jobs=jobs),
                                       lambda: target_c.infer_many([s[1] for s in samples], jobs=jobs))
    summary = SampleSummary(k=k)
    for i, (r_outs, t_outs) in enumerate(zip(ref_out, target_out)):
        summary.errors.append(max((error_of(compare(r, t)) for r, t in zip(r_outs, t_outs)), default=0.0))
        top1, topk, classifier = _flips(r_outs, t_outs, k)
        summary.classifier = summary.classifier or classifier
        if top1:
            summary.flips_top1.append(i)
        if topk:
            summary.flips_topk.append(i)
    return summary


def node_spread(session: Session, taps: Sequence[Tap], samples: Sequence[tuple[list[np.ndarray], list[np.ndarray]]],
                error_of: Callable[[TensorStats], float]) -> dict[str, dict[str, float]]:
    """Error of each tapped node over all samples: mean, median, 90th percentile, max, and the worst sample."""
    taps = [t for t in taps if t in session.target_of]
    if not taps or len(samples) < 2:
        return {}
    ref_tapped = tap_model(session.graph, taps)
    target_tapped = tap_model(session.target_graph, [session.target_of[t] for t in taps])
    ref_c, target_c = run_both(lambda: session.ref.compile(ref_tapped.model, taps=ref_tapped.added_outputs),
                            lambda: session.target.compile(target_tapped.model, taps=target_tapped.added_outputs))
    session.compiles["ref"] += 1
    session.compiles["target"] += 1
    per_node: dict[str, list[float]] = {}
    with session.clock("samples"):
        for ref_in, target_in in samples:
            ref_out, target_out = run_both(lambda: ref_c.infer(ref_in), lambda: target_c.infer(target_in))
            seen: dict[str, float] = {}
            for tap, ri, ti in zip(taps, ref_tapped.tap_outputs, target_tapped.tap_outputs):
                seen[tap.key] = max(seen.get(tap.key, 0.0), error_of(compare(ref_out[ri], target_out[ti])))
            for key, value in seen.items():
                per_node.setdefault(key, []).append(value)
    spread = {}
    for key, values in per_node.items():
        arr = np.asarray(values, dtype=np.float64)
        clean = np.where(np.isfinite(arr), arr, np.finfo(np.float64).max)
        spread[key] = {"mean": float(np.mean(clean)), "p50": float(np.quantile(clean, 0.5)),
                       "p90": float(np.quantile(clean, 0.9)), "max": float(arr.max()), "worst_sample": int(arr.argmax())}
    return spread


def _flips(ref_outs: Sequence[np.ndarray], target_outs: Sequence[np.ndarray], k: int) -> tuple[bool, bool, bool]:
    """(top-1 differs, reference top-1 not in target top-k, classifier-like) over the classifier-like outputs."""
    top1 = topk = classifier = False
    for r, t in zip(ref_outs, target_outs):
        if r.ndim == 0 or r.shape[-1] < 2 or not np.issubdtype(r.dtype, np.floating) or r.shape != t.shape:
            continue
        classifier = True
        r2, t2 = r.reshape(-1, r.shape[-1]), t.reshape(-1, t.shape[-1])
        r_top = r2.argmax(axis=1)
        top1 = top1 or bool(np.any(r_top != t2.argmax(axis=1)))
        kk = min(k, r2.shape[1])
        t_topk = np.argsort(-t2, axis=1)[:, :kk]
        topk = topk or bool(np.any([r_top[i] not in t_topk[i] for i in range(len(r_top))]))
    return top1, topk, classifier
