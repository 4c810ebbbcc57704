"""The report of a pipeline of models (`bisect_pipeline`): each component judged on its own inputs, the
pipeline end to end, and the node-level report of the first component that diverges.

`PipelineReport` is data: per component (`ComponentResult`) how many calls the pipeline made, each call's own
error (the component replayed on the target with the reference's inputs, its state included: teacher-forced),
its tolerance, the worst call; the tokens each side generated when the pipeline ran free on it; which component
was bisected and its `Report`. Saved and loaded as JSON through the records' codec; no OpenVINO here.
"""

from __future__ import annotations

import json
import os
import pathlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from bisect_ov.core import codec
from bisect_ov.core.errors import InputError
from bisect_ov.core.fileio import refuse_overlaps, write_text_atomic
from bisect_ov.report.numbers import fmt
from bisect_ov.report.report import Report

__all__ = ["ComponentResult", "PipelineReport"]

PIPELINE_SCHEMA = 1


@dataclass(frozen=True)
class ComponentResult:
    """One component over all its calls.

    ``errors`` holds each call's own error (the largest of its outputs' ``rel_l2``), ``tolerance`` the
    component's output tolerance for the target's precision, ``first_over`` and ``worst`` the first call over
    it and the call with the largest error against it (the one bisected), ``nonfinite`` the calls whose outputs
    gain NaN/Inf on the target from the same inputs. ``free_errors`` holds the same calls' errors when the
    target ran the pipeline alone (each call against the reference's call of the same number, as long as both
    made one: once the generated tokens differ, the calls no longer see the same inputs); ``free_calls`` how
    many calls the target's run made."""

    name: str
    calls: int
    sequences: int
    tolerance: float
    errors: tuple[float, ...]
    worst: int
    first_over: int | None
    nonfinite: int = 0
    stateful: bool = False
    precision: str = ""
    free_errors: tuple[float, ...] = ()
    free_calls: int = 0

    @property
    def diverges(self) -> bool:
        return self.first_over is not None

    @property
    def worst_error(self) -> float | None:
        return self.errors[self.worst] if 0 <= self.worst < len(self.errors) else None


@dataclass(frozen=True)
class PipelineReport:
    """A pipeline's comparison: the components in data-flow order, the free-running outputs, and the
    node-level report of the first diverging component (`examined`; None when none diverges)."""

    family: str
    source: str
    ref: str
    target: str
    components: tuple[ComponentResult, ...]
    ref_tokens: tuple[int, ...] = ()
    target_tokens: tuple[int, ...] = ()
    examined: str | None = None
    report: Report | None = None
    notes: tuple[str, ...] = ()
    seconds: dict[str, float] = field(default_factory=dict)  # plain pipeline run, the comparison, the bisection
    schema_version: int = PIPELINE_SCHEMA
    # A pipeline whose result is an image (diffusion): the free-running target's image against the reference's
    # (relative L2), and the tolerance of the component that makes it.
    output_error: float | None = None
    output_tolerance: float | None = None

    @property
    def diverges(self) -> bool:
        return (any(c.diverges for c in self.components) or self.first_token_difference is not None
                or self.output_differs)

    @property
    def output_differs(self) -> bool:
        """Whether the free-running target's image is over its tolerance from the reference's (NaN is)."""
        return self.output_error is not None and not self.output_error <= (self.output_tolerance or 0.0)

    @property
    def first_token_difference(self) -> int | None:
        """The first generated position where the target's free-running pipeline leaves the reference's."""
        for i, (r, t) in enumerate(zip(self.ref_tokens, self.target_tokens)):
            if r != t:
                return i
        if len(self.ref_tokens) != len(self.target_tokens):
            return min(len(self.ref_tokens), len(self.target_tokens))
        return None

    def remedies(self) -> dict[str, list[Any]]:
        """The remedies tried, by the component they apply to (the examined one's, with ``fix=True``): each is set on
        that component alone, as optimum-intel sets a compile property (``ACTIVATIONS_SCALE_FACTOR``) per
        component."""
        if self.examined is None or self.report is None:
            return {}
        found = self.report.remedies()
        return {self.examined: found} if found else {}

    def component(self, name: str) -> ComponentResult:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(f"No component '{name}'; the pipeline has {[c.name for c in self.components]}.")

    def overview(self) -> str:
        """The pipeline's part of the report: each component's figures, the tokens or images, remedies, notes."""
        lines = [f"Pipeline ({self.family}, {self.source}): {self.ref} -> {self.target}", "",
                 "Each component on the reference's inputs (teacher-forced):"]
        for c in self.components:
            over = sum(e > c.tolerance for e in c.errors)
            verdict = "DIVERGES" if c.diverges else "ok"
            state = ", stateful" if c.stateful else ""
            lines.append(f"  {c.name:<18} {verdict:<8} {c.calls} call(s){state}, worst {fmt(c.worst_error)} at call "
                         f"{c.worst} (tolerance {fmt(c.tolerance)}), {over} over"
                         + (f", {c.nonfinite} gain NaN/Inf" if c.nonfinite else "")
                         + (f", first over at call {c.first_over}" if c.first_over is not None else ""))
        first = self.first_token_difference
        if self.ref_tokens or self.target_tokens or self.output_error is not None:
            lines += ["", "End to end (each side free-running):"]
            for c in self.components:
                if c.free_errors:
                    lines.append(f"  {c.name:<18} {c.free_calls} call(s), error {fmt(c.free_errors[0])} at the first, "
                                 f"{fmt(c.free_errors[-1])} at call {len(c.free_errors) - 1}, worst {fmt(max(c.free_errors))}")
            if self.output_error is not None:
                lines.append(f"  the images differ by rel_l2 {fmt(self.output_error)} (tolerance "
                             f"{fmt(self.output_tolerance)}, the last component's)")
            elif first is None:
                lines.append(f"  the {len(self.ref_tokens)} token(s) generate() returned are the same on both sides "
                             "(with a decoder-only model's prompt, or a seq2seq decoder's start token)")
            else:
                def shown(tokens: tuple[int, ...]) -> str:  # five, and how many more
                    rest = tokens[first:]
                    return str(list(rest[:5]))[:-1] + (f", ... {len(rest) - 5} more]" if len(rest) > 5 else "]")

                lines.append(f"  generated tokens differ from position {first}: reference {shown(self.ref_tokens)}, "
                             f"target {shown(self.target_tokens)}")
        lines.append("")
        if self.examined is None:
            lines.append("No component diverges on its own inputs." + (
                " The generated tokens still differ: the components' small errors add up along the pipeline's loop."
                if first is not None else " The images still differ: the components' small errors add up along "
                "the denoising steps." if self.output_differs else ""))
        else:
            c = self.component(self.examined)
            lines.append(f"First diverging component: '{self.examined}' (call {c.worst}, its worst)"
                         + ("; its node-level report:" if self.report is not None else "; no node-level report (see the notes)."))
        for name, found in self.remedies().items():
            usable = [r.title for r in found if r.usable]
            lines.append(f"Remedies for '{name}' alone (set on that component, e.g. in optimum-intel's ov_config for it): "
                         + ("; ".join(usable) + " solve" + ("s" if len(usable) == 1 else "") if usable
                            else "none of those tried solves") + " (details below).")
        for note in self.notes:
            lines.append(f"Note: {note}")
        return "\n".join(lines)

    def to_text(self, top: int = 10, width: int = 120) -> str:
        """The components, tokens or images, remedies and notes, then the examined component's report."""
        text = self.overview()
        return text + ("\n\n" + self.report.to_text(top=top, width=width) if self.report is not None else "")

    def page(self, top: int = 25) -> str:
        """The HTML page: the overview above the examined component's page (`render_pipeline_page`)."""
        from bisect_ov.report.html import render_pipeline_page

        return render_pipeline_page(self.overview(), f"bisect_ov pipeline: {self.family}, {self.ref} -> {self.target}",
                                    self.report, top=top)

    def save_html(self, path: str | os.PathLike, *, top: int = 25) -> pathlib.Path:
        """Write `page()` to `path` atomically (never inside the export folder compared, as `save`)."""
        self._refuse_folder("the HTML page", path)
        return write_text_atomic(path, self.page(top))

    def _refuse_folder(self, what: str, path: str | os.PathLike) -> None:
        """Refuse to write `what` inside the export folder the comparison read, when it is on this machine."""
        if pathlib.Path(self.source).is_dir():
            refuse_overlaps([(what, path)], [("the export folder", self.source)])

    def __repr__(self) -> str:
        where = f", first diverging component '{self.examined}'" if self.examined else ", no component diverges"
        return f"PipelineReport({self.family}: {self.ref} -> {self.target}{where})"

    def _repr_html_(self) -> str:
        """In a notebook: the overview, then the examined component's report as Jupyter shows any report."""
        import html

        below = self.report._repr_html_() if self.report is not None else ""
        return f'<pre style="white-space: pre-wrap">{html.escape(self.overview())}</pre>{below}'

    def to_dict(self) -> dict[str, Any]:
        return codec.to_dict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "PipelineReport":
        if not isinstance(d, Mapping) or d.get("schema_version") != PIPELINE_SCHEMA or "components" not in d:
            raise InputError("Not a pipeline report saved by bisect_ov (no 'components', or a schema version "
                             f"other than {PIPELINE_SCHEMA}).")
        report = d.get("report")
        rest = {k: v for k, v in d.items() if k != "report"}
        loaded = codec.from_dict(cls, {**rest, "report": None}, where="pipeline report")
        if report is None:
            return loaded
        from dataclasses import replace

        return replace(loaded, report=Report.from_dict(report))

    def to_json(self) -> str:
        """The text `save` writes: strict JSON (as `Report.to_json`)."""
        return json.dumps(self.to_dict(), indent=1, allow_nan=False)

    def save(self, path: str | os.PathLike) -> pathlib.Path:
        """Write as JSON (atomically, as `Report.save`; never inside the export folder compared)."""
        self._refuse_folder("the report", path)
        return write_text_atomic(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> "PipelineReport":
        try:
            data = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"Pipeline report not found: '{path}'.") from None
        except (OSError, ValueError) as e:
            raise InputError(f"'{path}' cannot be read as a pipeline report: {e}") from None
        return cls.from_dict(data)
