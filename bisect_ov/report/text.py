"""A `Report` as a terminal page: the verdict (does it diverge, where does it start, how bad, why), the ranked
culprit table, the final outputs, the experiments, what each side ran with and the run's facts.

Formats the report's view (`bisect_ov.report.view`), which the HTML page formats too: the sentences are the
view's, this module lays them out (prefixes, indentation, wrapping to the width, the table fitted to it).
Control characters in names (an ANSI escape in a node name could move the cursor and erase the verdict) are
shown as Python escapes (`printable`). Assumes a width of at least 40 columns; narrower pages still render,
with table rows wider than the page.
"""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING, Sequence

from bisect_ov.report.numbers import fmt, fmt_growth
from bisect_ov.report.view import COLUMNS, INSIDE_LEGEND, OPTIONAL_COLUMNS, View, samples_over, view

if TYPE_CHECKING:
    from bisect_ov.report.report import Report

__all__ = ["render_text", "verdict_lines", "experiment_lines", "output_lines", "unmatched_lines", "footer_lines",
           "fit_table", "printable", "fmt", "fmt_growth", "samples_over", "COLUMNS", "OPTIONAL_COLUMNS"]

# When the table is wider than the page: the columns left out first (the least needed to read a row); rank,
# node, error and role always stay.
DROP_ORDER = ("target ran", "nan/inf", "shape", "headroom",
              "over tol", "x rounding", "impact", "local", "growth", "inputs", "tol", "#", "op")
# Columns narrowed (to the least width given) before any is left out: kernel names or shapes, names, op types.
_NARROWED = (("last", 12), ("node", 16), ("op", 8))
_LEFT = ("node", "op", "role")  # left-aligned, and the last column (text that may be cut); numbers go right


# C0 and C1 controls and DEL, bidirectional overrides and isolates, line and paragraph separators: characters
# that make a terminal do something (or reorder what it shows) instead of printing.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069]")


def printable(text: str, *, keep: str = "") -> str:
    r"""`text` with every control character written as its Python escape (``\x1b``, ``\n``, ``\u202e``).

    Names come from the model file: printed raw, an ANSI sequence in one could clear the screen or rewrite
    the verdict line. Characters in `keep` (say ``"\n"`` for multi-line messages) pass unchanged.

    Examples
    --------
    >>> print(printable("conv\x1b[2K"))
    conv\x1b[2K
    >>> print(printable("a\nb", keep="\n"))
    a
    b
    """
    def escape(match: re.Match) -> str:
        char = match.group()
        return char if char in keep else repr(char)[1:-1]

    return _UNPRINTABLE.sub(escape, text)


def verdict_lines(report: "Report", v: View | None = None) -> list[str]:
    """The answer in a few lines: the verdict, where it starts, how bad, why, then what follows from it."""
    verdict = (v or view(report)).verdict
    lines = [f"Verdict: {verdict.text}"]
    for first in verdict.first:
        lines.append("  " + first.text)
        if first.samples is not None:
            lines.append("    " + first.samples.text)
    return lines + [f.text for f in verdict.facts]


def experiment_lines(report: "Report", v: View | None = None) -> list[str]:
    """The experiments that ran (`bisect_ov.report.blocks`), an empty line before each block set apart."""
    lines: list[str] = []
    for block in (v or view(report)).experiments:
        lines += ([""] if block.gap else []) + list(block.lines)
    return lines


def output_lines(v: View, limit: int | None = None) -> list[str]:
    """One line per final output: its error against its tolerance, max abs, SQNR, mismatches. With `limit`, the
    first `limit` and every one over its tolerance, then how many more (a stateful LLM has one per KV state)."""
    shown = [o for i, o in enumerate(v.outputs) if limit is None or i < limit or o.diverged]
    more = len(v.outputs) - len(shown)
    return [f"{o.name}: {v.run.metric} {fmt(o.error)} (tol {fmt(o.tolerance)}), max abs {fmt(o.stats.max_abs)}, "
            f"SQNR {o.stats.sqnr_db:.1f} dB, mismatches {o.stats.mismatches}/{o.stats.numel}"
            for o in shown] + ([f"... and {more} more within their tolerance (report.outputs)"] if more else [])


def unmatched_lines(v: View) -> list[str]:
    """The nodes of either model that have no counterpart in the other (with a `target_model`)."""
    lines = []
    for side, names in v.unmatched:
        shown = ", ".join(names[:8]) + (f" ... ({len(names)} in all)" if len(names) > 8 else "")
        lines.append(f"Unmatched in {side}: {shown}")
    return lines


DETAILED_COSTS = frozenset({"timings", "compiles", "costs"})  # the footer's facts shown only with costs=True


def footer_lines(report: "Report", v: View | None = None, *, costs: bool = True) -> list[str]:
    """The run's facts: the fidelity check, timings, compiles, cost per stage, OpenVINO version and tolerance."""
    hidden = {"cost"} if costs else DETAILED_COSTS
    return [f.text for f in (v or view(report)).footer if f.kind not in hidden]


def render_text(report: "Report", *, top: int = 10, width: int = 120, costs: bool = False) -> str:
    """The terminal page of `report`: prose wrapped to `width`, the culprit table fitted to it; the run's cost in one
    line, or (`costs`) its timings, compiles and cost per stage."""
    v = view(report)
    run = v.run
    title = printable(f"{v.title} | {run.ref_label} -> {run.target_label} | {run.compared} node{'s' * (run.compared != 1)} compared")
    lines = [title, "=" * min(width, len(title))]
    lines += verdict_lines(report, v)
    lines.append("")
    table = v.table(top)
    fitted: list[str] = []
    if table.rows:
        inside = f"; {INSIDE_LEGEND}" if any(r.node.inside_kernel for r in table.rows) else ""
        cut: set[str] = set()
        fitted = fit_table(table.columns, [tuple(map(printable, r)) for r in table.cells()], width, cut=cut)
        shortened = "; ~ = cut to fit --width" if cut else ""
        lines.append(f"Culprits (top {len(table.rows)} of {table.total}; * = first divergence{inside}; "
                     f"error = {run.metric}{shortened}):")
        lines += fitted
    elif table.total:
        lines.append(f"Culprits: {table.total} (not listed: top {top}).")
    else:
        lines.append("Culprits: none.")
    if len(v.outputs) > 1 or (v.outputs and v.any_over):
        lines += ["", "Final outputs:"] + ["  " + line for line in output_lines(v, limit=8)]
    if v.coverage is not None:
        lines += ["", v.coverage.text]
    unmatched = unmatched_lines(v)
    if unmatched:
        lines += [""] + unmatched
    lines += experiment_lines(report, v)
    lines.append("")
    lines += [f"{s.role:>6}: {s.text}" for s in v.sides]
    lines += [f"Note: {note}" for note in v.notes]
    wrapped: list[str] = []
    for line in lines + footer_lines(report, v, costs=costs):
        line = printable(line)
        # Table rows are already fitted; prose wraps instead of being cut.
        if len(line) <= width or line in fitted:
            wrapped.append(line)
        else:
            wrapped += textwrap.wrap(line, width, subsequent_indent="    ")
    return "\n".join(wrapped)


def fit_table(header: Sequence[str], rows: Sequence[tuple[str, ...]], width: int, *,
              cut: set[str] | None = None) -> list[str]:
    """The table's lines, at most `width` wide when the kept columns allow it (never wrapped); the names of the
    columns where a cell was cut are added to `cut`.

    Too wide, the last column (kernel names, shapes), the node names and the op types are narrowed, cut text
    ending in ``~``; still too wide, columns are left out in `DROP_ORDER` and the narrowing starts again; as a
    last resort the node names narrow further, down to a few characters.
    """
    header, rows = tuple(header), [tuple(r) for r in rows]
    while True:
        widths = [max(len(c) for c in col) for col in zip(header, *rows)]
        for name, least in _NARROWED:
            col = len(header) - 1 if name == "last" else header.index(name) if name in header else None
            excess = _span(widths) - width
            if col is not None and excess > 0:
                widths[col] = min(widths[col], max(least, widths[col] - excess))
        dropped = next((h for h in DROP_ORDER if h in header), None)
        if _span(widths) <= width or dropped is None:
            break
        keep = [i for i, h in enumerate(header) if h != dropped]
        header, rows = tuple(header[i] for i in keep), [tuple(r[i] for i in keep) for r in rows]
    excess = _span(widths) - width
    if excess > 0 and "node" in header:
        col = header.index("node")
        widths[col] = max(4, widths[col] - excess)
    left = {i for i, h in enumerate(header) if h in _LEFT} | {len(header) - 1}

    def cell(text: str, w: int, i: int) -> str:
        if len(text) > w:
            text = _middle(text, w) if header[i] == "node" else text[: max(1, w - 1)] + "~"
            if cut is not None:
                cut.add(header[i])
        return text.ljust(w) if i in left else text.rjust(w)

    return ["  ".join(cell(c, w, i) for i, (c, w) in enumerate(zip(row, widths))).rstrip() for row in [header, *rows]]


def _middle(name: str, w: int) -> str:
    """A node name cut to `w`: its operation left out first (the op column shows it); then a dotted module path's
    words shortened to their first letter, the middle ones first, and the start of its last word cut
    (``b.1.l.0.~yer_norm``: the layer numbers stay, where ``block.1.layer.0.layer_norm`` and
    ``block.1.layer.1...`` both read ``block.1.~yer_norm``); any other name loses its middle, so that the start and
    the distinctive end stay (``...up_proj`` and ``...down_proj`` both ended ``model.layers.1.mlp.~``)."""
    base = name.split(" (", 1)[0]
    if len(base) < w:
        return base + "~"
    words = base.split(".")
    if len(words) > 2:
        for span in (range(1, len(words) - 1), range(1)):  # the middle words (alike in every row), then the first
            words = [x[0] if i in span and not x.isdigit() else x for i, x in enumerate(words)]
            if len(".".join(words)) <= w:
                return ".".join(words)
        prefix = ".".join(words[:-1]) + "."
        if w - len(prefix) - 1 >= 4:
            return prefix + "~" + words[-1][len(words[-1]) - (w - len(prefix) - 1):]
    head = max(1, (w - 1) // 2)
    return base[:head] + "~" + base[len(base) - max(0, w - 1 - head):] if w > 2 else base[: max(1, w - 1)] + "~"


def _span(widths: Sequence[int]) -> int:
    return sum(widths) + 2 * (len(widths) - 1)
