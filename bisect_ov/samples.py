"""Many inputs: run every sample on both sides, rank the samples, count answers that flip.

One random input rarely shows a problem: an int8 model may agree on most images and flip the class of a few.
`as_samples` recognises a set of samples among the forms `bisect` accepts; `run_samples` runs the untouched
model on all of them (`Compiled.infer_many`: OpenVINO's asynchronous infer requests keep the device busy),
ranks them by final-output error and, for outputs holding class scores (`classifier_outputs`: ``[batch,
classes]``, or logits), counts the samples whose top-1 answer differs, or whose reference top-1 is not in the
target's top-k (ties count as agreement). `node_spread` aggregates the error of measured tensors over samples
(mean, max, quantiles). The detailed search then runs on the worst sample.
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

__all__ = ["Samples", "as_samples", "run_samples", "SampleSummary", "node_spread", "load_folder",
           "classifier_outputs", "flips"]


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
    class_outputs: list[str] = field(default_factory=list)

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
            classifier=self.classifier, class_outputs=tuple(self.class_outputs),
            top1_flips=len(self.flips_top1), top1_flipped=tuple(self.flips_top1),
            k=self.k, topk_misses=len(self.flips_topk), topk_missed=tuple(self.flips_topk),
        )


def run_samples(session: Session, samples: Sequence[tuple[list[np.ndarray], list[np.ndarray]]],
                error_of: Callable[[TensorStats], float], *, k: int = 5, jobs: int = 2,
                class_names: Sequence[str] | None = None) -> SampleSummary:
    """Run the untouched model on every (ref inputs, target inputs) sample on both sides.

    `class_names`: the outputs holding class scores, whose top-1/top-k answers are compared; None decides by
    shape (`classifier_outputs`).
    """
    ref_c, target_c = session.compile_untouched()  # `Session.plain` reuses them for the worst sample
    with session.clock("samples"):
        ref_out, target_out = run_both(lambda: ref_c.infer_many([s[0] for s in samples], jobs=jobs),
                                    lambda: target_c.infer_many([s[1] for s in samples], jobs=jobs))
    session.ran("ref", len(samples))
    session.ran("target", len(samples))
    names = [session.graph.output_name(r.key) for r in session.graph.results()]
    if class_names is None:
        first = ref_out[0] if ref_out else []
        chosen = classifier_outputs([a.shape for a in first], [a.dtype for a in first], names)
    else:
        unknown = [n for n in class_names if n not in names]
        if unknown:
            raise InputError(f"classifier_outputs {unknown} are not outputs of the model. Outputs: {names}.")
        chosen = [names.index(n) for n in class_names]
    summary = SampleSummary(k=k, classifier=bool(chosen), class_outputs=[names[i] for i in chosen])
    positions = session.target_output_positions
    for i, (r_outs, t_all) in enumerate(zip(ref_out, target_out)):
        t_outs = [t_all[p] for p in positions]
        summary.errors.append(max((error_of(compare(r, t)) for r, t in zip(r_outs, t_outs)), default=0.0))
        answers = [flips(r_outs[j], t_outs[j], k) for j in chosen]
        if any(a[0] for a in answers):
            summary.flips_top1.append(i)
        if any(a[1] for a in answers):
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
    ref_c, target_c = session.compile_pair(ref_tapped.model, target_tapped.model, ref_taps=ref_tapped.added_outputs,
                                           target_taps=target_tapped.added_outputs)
    per_node: dict[str, list[float]] = {}
    with session.clock("samples"):
        for ref_in, target_in in samples:
            ref_out, target_out = run_both(lambda: ref_c.infer(ref_in), lambda: target_c.infer(target_in))
            session.ran("ref")
            session.ran("target")
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
    least its k-th largest.

    Examples
    --------
    >>> flips(np.array([[0.1, 0.9, 0.0]]), np.array([[0.5, 0.5, 0.0]]), 2)
    (False, False)
    >>> flips(np.array([[0.1, 0.9, 0.0]]), np.array([[0.6, 0.4, 0.0]]), 1)
    (True, True)
    """
    if ref.shape != target.shape:
        return True, True
    r2, t2 = ref.reshape(-1, ref.shape[-1]), target.reshape(-1, target.shape[-1]).astype(np.float64)
    rows = np.arange(len(r2))
    chosen = t2[rows, r2.argmax(axis=1)]
    top1 = bool(np.any(chosen < t2.max(axis=1)))
    kk = min(k, t2.shape[1])
    kth = -np.partition(-t2, kk - 1, axis=1)[:, kk - 1]
    return top1, bool(np.any(chosen < kth))
