"""Renderings of a `Report` for people: a terminal page and the same content as HTML for Jupyter.

Both start with the verdict (does it diverge, where does it start, how bad, why), then the final outputs,
then the ranked culprit table, then what each side ran with and how long each stage took. Every
model-supplied string that goes into HTML is escaped; in text, control characters (an ANSI escape in a node
name could move the cursor and erase the verdict) are shown as Python escapes (`printable`).
"""

from __future__ import annotations

import html
import math
import re
import textwrap
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from bisect_ov.report.report import NodeResult, Report

__all__ = ["render_text", "render_html", "verdict_lines", "culprit_rows", "output_lines", "unmatched_lines",
           "footer_lines", "printable", "samples_over", "kept_columns", "COLUMNS", "OPTIONAL_COLUMNS"]

COLUMNS = ("rank", "node", "op", "#", "error", "inputs", "tol", "growth", "local", "impact", "over tol", "role",
           "shape", "nan/inf", "target ran")
# Left out when no culprit has a value; "over tol": on how many of the samples the node is over its tolerance.
OPTIONAL_COLUMNS = ("local", "impact", "over tol", "nan/inf", "target ran")
_SHORT_DTYPES = {"float32": "f32", "float16": "f16", "float64": "f64", "int32": "i32", "int64": "i64", "int8": "i8",
                 "uint8": "u8", "bool": "bool"}


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


def fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and (math.isinf(x) or math.isnan(x)):
        return {math.inf: "inf", -math.inf: "-inf"}.get(x, "nan")
    return f"{x:.1e}"


def fmt_growth(g: float) -> str:
    if math.isinf(g):
        return "inf"
    return f"{g:.3g}x"


def _runtime_str(n: "NodeResult", side: str = "target") -> str:
    rt = n.runtime.get(side) if n.runtime else None
    if not rt:
        return "-"
    parts = [rt.get("precision") or "?", rt.get("kernel") or ""]
    fused = [f for f in rt.get("fused", []) if f != n.name]
    text = " ".join(p for p in parts if p)
    if fused:
        text += f" +{len(fused)} fused"
    return text


def _nan_inf(n: "NodeResult") -> str:
    c = n.nan_inf
    if not any(c.values()):
        return "-"
    return f"{c['ref_nan']}/{c['ref_inf']} -> {c['target_nan']}/{c['target_inf']}"


def culprit_rows(report: "Report", top: int) -> list[tuple[str, ...]]:
    """One row of `COLUMNS` per ranked culprit."""
    rows: list[tuple[str, ...]] = []
    for n in report.culprits[:top]:
        shape = "x".join(str(d) for d in n.shapes[0]) if n.shapes and n.shapes[0] is not None else "?"
        dtypes = ",".join(sorted({_SHORT_DTYPES.get(d, d) for d in n.dtypes}))
        rows.append((
            str(n.rank), n.label, n.op_type, str(n.index), fmt(n.error), fmt(n.input_error), fmt(n.tolerance),
            fmt_growth(n.growth), fmt(getattr(n, "local_error", None)), fmt(getattr(n, "impact", None)),
            _over_samples(n), n.role + ("*" if n.first else ""), f"{shape} {dtypes}", _nan_inf(n), _runtime_str(n),
        ))
    return rows


def samples_over(n: "NodeResult") -> tuple[int, int] | None:
    """(k, N): the node is over its tolerance on k of the N samples; None without a per-node pass over samples."""
    spread = getattr(n, "over_samples", None) or {}
    if "over_tolerance" not in spread or not spread.get("count"):
        return None
    return int(spread["over_tolerance"]), int(spread["count"])


def _over_samples(n: "NodeResult") -> str:
    """'k/N': over its tolerance on k of the N samples ('-' without samples)."""
    counts = samples_over(n)
    return "-" if counts is None else f"{counts[0]}/{counts[1]}"


def kept_columns(header: Sequence[str], rows: Sequence[tuple[str, ...]]) -> list[int]:
    """Positions of the columns to show: all but the `OPTIONAL_COLUMNS` no row has anything in."""
    return [i for i, h in enumerate(header) if h not in OPTIONAL_COLUMNS or any(r[i] != "-" for r in rows)]


def _drop_empty_columns(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]
                        ) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """Leave out the `OPTIONAL_COLUMNS` when no row has anything in them."""
    keep = kept_columns(header, rows)
    return tuple(header[i] for i in keep), [tuple(r[i] for i in keep) for r in rows]


def verdict_lines(report: "Report") -> list[str]:
    """The answer in a few sentences: where it starts, how bad, why."""
    lines = []
    worst = max(report.outputs, key=lambda o: o.error, default=None)
    first = report.first_divergences
    absorbed = [n for n in report.nodes if n.absorbed]
    if not report.diverges and absorbed:
        worst_absorbed = max(absorbed, key=lambda n: n.error / n.tolerance if n.tolerance else math.inf)
        lines.append(f"Verdict: no divergence. Every final output is within its tolerance; {len(absorbed)} node(s) "
                     f"exceed theirs but the network absorbs the error (the largest, '{worst_absorbed.label}' "
                     f"({worst_absorbed.op_type}), at {report.metric} {fmt(worst_absorbed.error)} > "
                     f"{fmt(worst_absorbed.tolerance)}): absorbed, not culprits.")
    elif not report.diverges:
        precision = report.tolerance.get("precision") or "f32"
        line = f"Verdict: no divergence. Every compared node is within what {precision} rounding predicts"
        closest = max((n for n in report.nodes if n.tolerance > 0), key=lambda n: n.error / n.tolerance, default=None)
        if closest is not None and closest.error > 0:
            line += (f"; the largest error is {closest.error / closest.tolerance:.0%} of its tolerance "
                     f"({report.metric} {fmt(closest.error)} at '{closest.name}'): expected rounding, not a culprit")
        lines.append(line + ".")
    elif first:
        names = ", ".join(f"'{n.label}' ({n.op_type}, #{n.index})" for n in first[:3])
        more = f" and {len(first) - 3} more" if len(first) > 3 else ""
        lines.append(f"Verdict: DIVERGES. Error starts at {names}{more}.")
        for n in first[:3]:
            why = f"; {'; '.join(n.causes)}" if n.causes else ""
            lines.append(
                f"  '{n.label}': {report.metric} {fmt(n.error)} > tolerance {fmt(n.tolerance)}, "
                f"its inputs carry {fmt(n.input_error)} (growth {fmt_growth(n.growth)}){why}."
            )
            counts = samples_over(n)
            if counts is not None:
                spread = n.over_samples
                lines.append(
                    f"    Over the {counts[1]} samples it is over its tolerance on {counts[0]}: {report.metric} p50 "
                    f"{fmt(spread['p50'])}, p90 {fmt(spread['p90'])}, max {fmt(spread['max'])} "
                    f"(sample #{int(spread['worst_sample'])})."
                )
    else:
        lines.append(
            "Verdict: DIVERGES, but no single node creates the error: it accumulates through depth "
            "(each node adds less than the tolerance). See the nodes that inherit it below."
        )
    if worst is not None:
        state = "over" if worst.diverged else "within"
        lines.append(
            f"Final output '{worst.name}': {report.metric} {fmt(worst.error)} ({state} tolerance {fmt(worst.tolerance)}), "
            f"max abs {fmt(worst.stats.max_abs)}, cosine {worst.stats.cosine:.6f}."
        )
    if report.diverges and absorbed:
        lines.append(f"Absorbed: {len(absorbed)} node(s) over their tolerance whose error the network takes out again "
                     "(not first divergences): " + ", ".join(f"'{n.label}'" for n in absorbed[:3])
                     + (" ..." if len(absorbed) > 3 else "") + ".")
    from bisect_ov.analysis.names import layer_of

    layers = {k: v for k, v in report.by_layer().items() if layer_of(v[0].name) is not None}
    if len(layers) > 1 and len(report.culprits) > 3:
        lines.append("By layer: " + "; ".join(f"{k}: {len(v)}" for k, v in list(layers.items())[:6])
                     + (f"; ... ({len(layers)} groups)" if len(layers) > 6 else "") + ".")
    amplifiers = [n for n in report.culprits if n.role == "amplifier"]
    inheritors = [n for n in report.culprits if n.role == "inherits"]
    if amplifiers or inheritors:
        lines.append(
            f"Downstream: {len(amplifiers)} node(s) amplify inherited error, {len(inheritors)} only pass it on."
        )
    return lines


def step_lines(report: "Report") -> list[str]:
    """Generation steps: per-step error with each side's own cache, with the reference's cache, token flips."""
    if not report.steps:
        return []
    flips = sum(s.flipped for s in report.steps)
    lines = ["", f"Generation: prefill + {len(report.steps) - 1} decode step(s), both sides fed the reference's token; "
                 f"{flips} token flip(s)."]
    lines.append("  step  token  target   error  own-step  cache     tol")
    for s in report.steps:
        mark = " flip" if s.flipped else ""
        over = "*" if s.diverged else " "
        lines.append(f"  {s.step:>4}  {s.token:>5}  {s.target_token:>6}  {fmt(s.error)}{over} {fmt(s.local_error):>8}"
                     f"  {fmt(s.cache_error)} {fmt(s.tolerance)}{mark}")
    return lines


def experiment_lines(report: "Report") -> list[str]:
    """The fix, the delegation range, the contribution curve and the noise floor, when they were run."""
    lines: list[str] = step_lines(report)
    fix = report.fix
    if fix is not None:
        keep = fix.keep
        verdict = "brings" if fix.solved else "does NOT bring"
        lines += ["", f"Fix: keeping {len(keep)} node(s) on the reference ({report.ref.precision}) {verdict} the final error "
                      f"from {fmt(fix.error_before)} to {fmt(fix.error_after)} (tolerance {fmt(fix.tolerance)}), "
                      f"verified by partitioned runs ({fix.runs} in all):"]
        if fix.patterns:
            lines.append("  as patterns (the same op in each repeated block): " + "; ".join(fix.patterns))
        lines.append("  keep: " + ", ".join(keep[:12]) + (f" ... ({len(keep)} in all)" if len(keep) > 12 else ""))
        if fix.patched_model:
            lines.append(f"  patched model (disable_fp16_compression on those nodes, for GPU/NPU): {fix.patched_model}")
        if report.target_model and keep:
            lines.append(f"  NNCF: ignored_scope=nncf.IgnoredScope(names={report.ignored_scope()!r})")
    if report.sensitivity:
        lines += ["", f"Layer sensitivity ({len(report.sensitivity)} quantized layers; impact = final error when only "
                      "that layer is quantized; local = its own error fed with reference inputs):"]
        for s in report.sensitivity[:10]:
            lines.append(f"  {fmt(s.impact)} impact, {fmt(s.local_error)} local  {s.name} ({s.op_type}): {s.quantization}")
    delegation = report.delegation
    if delegation is not None and delegation.first is not None:
        span = (f"'{delegation.first}'" if delegation.nodes == 1
                else f"'{delegation.first}' .. '{delegation.last}' ({delegation.nodes} nodes)")
        lines += ["", f"Delegation: running only {span} on the target gives a final error of {fmt(delegation.error)}, "
                      f"{delegation.error / delegation.full_error:.0%} of the {fmt(delegation.full_error)} "
                      "with everything on the target."]
    if report.curve:
        points = ", ".join(f"{p.fraction:.0%}: {fmt(p.error)}" for p in report.curve)
        lines.append(f"Error contribution curve (share of the graph on the target: final error): {points}")
    differ = report.kernel_differences if hasattr(report, "kernel_differences") else []
    if differ:
        shown = ", ".join(f"'{n.name}'" + ("*" if n.diverged else "") for n in differ[:8])
        lines += ["", f"Kernels differ between the sides on {len(differ)} of {len(report.nodes)} nodes "
                      f"(* = diverged): {shown}" + (" ..." if len(differ) > 8 else "")]
    samples = report.samples
    if samples is not None:
        line = (f"Samples: {samples.count} run on both sides; final error mean {fmt(samples.error_mean)}, "
                f"max {fmt(samples.error_max)} (sample #{samples.worst}, on which the search ran)")
        if samples.classifier:
            line += (f"; top-1 answer differs on {samples.top1_flips} of {samples.count}"
                     f", reference top-1 outside the target's top-{samples.k} on {samples.topk_misses}")
            if samples.class_outputs:
                line += f" (class scores: {', '.join(samples.class_outputs)})"
        if getattr(samples, "partial", False):
            line += (f"; PARTIAL: {len(samples.missing)} of {samples.given} not measured, "
                     f"{len(samples.spread_missing)} missing from the per-node spread")
        lines += ["", line + "."]
    noise = report.noise
    if noise is not None:
        what = " and two compiles" if noise.compile_to_compile is not None else ""
        if not noise.floor:
            lines.append(f"Noise: the target gave bit-identical outputs across two runs{what}.")
        else:
            lines.append("Noise: the target's outputs differ by "
                         + ", ".join(f"{fmt(v)} {k.replace('_', ' ')}" for k, v in noise.items()) + ".")
    return lines


def _sides(report: "Report") -> list[str]:
    out = []
    for role, info in (("ref", report.ref), ("target", report.target)):
        text = f"{role:>6}: {info.name} ran {info.precision}"
        if info.emulated:
            text += " (emulated)"
        if info.full_name:
            text += f" on {info.full_name}"
        if info.note:
            text += f" [{info.note}]"
        out.append(text)
    return out


def render_text(report: "Report", *, top: int = 10, width: int = 120) -> str:
    title = f"bisect_ov: {report.model}"
    if report.target_model:
        title += f" vs {report.target_model}"
    title += f" | {report.ref.label} -> {report.target.label} | {len(report.nodes)} nodes compared"
    title = printable(title)
    lines = [title, "=" * min(width, len(title))]
    lines += verdict_lines(report)
    lines.append("")
    rows = culprit_rows(report, top)
    table: list[str] = []
    if rows:
        lines.append(f"Culprits (top {len(rows)} of {len(report.ranking)}; * = first divergence; error = {report.metric}):")
        table = _table(*_drop_empty_columns(COLUMNS, [tuple(map(printable, r)) for r in rows]), width)
        lines += table
    else:
        lines.append("Culprits: none.")
    if len(report.outputs) > 1 or (report.outputs and report.diverges):
        lines.append("")
        lines.append("Final outputs:")
        lines += ["  " + line for line in output_lines(report)]
    if report.target_model and report.coverage is not None:
        lines += ["", f"Coverage: {report.coverage:.0%} of the model's compute nodes compared with the twin "
                      "(directly or inside a kernel the target fused)"]
    unmatched = unmatched_lines(report)
    if unmatched:
        lines.append("")
        lines += unmatched
    lines += experiment_lines(report)
    lines.append("")
    lines += _sides(report)
    lines += [f"Note: {note}" for note in report.notes]
    footer = footer_lines(report)
    wrapped: list[str] = []
    for line in lines + footer:
        line = printable(line)
        # Table rows are already fitted; prose wraps instead of being cut.
        fitted = len(line) <= width or line in table
        wrapped += [line] if fitted else textwrap.wrap(line, width, subsequent_indent="    ")
    return "\n".join(wrapped)


def output_lines(report: "Report") -> list[str]:
    """One line per final output: its error against its tolerance, max abs, SQNR, mismatches."""
    return [f"{o.name}: {report.metric} {fmt(o.error)} (tol {fmt(o.tolerance)}), max abs {fmt(o.stats.max_abs)}, "
            f"SQNR {o.stats.sqnr_db:.1f} dB, mismatches {o.stats.mismatches}/{o.stats.numel}"
            for o in report.outputs]


def unmatched_lines(report: "Report") -> list[str]:
    """The nodes of either model that have no counterpart in the other (with a `target_model`)."""
    lines = []
    for side, names in report.unmatched.items():
        if names:
            shown = ", ".join(names[:8]) + (f" ... ({len(names)} in all)" if len(names) > 8 else "")
            lines.append(f"Unmatched in {side}: {shown}")
    return lines


def footer_lines(report: "Report") -> list[str]:
    """The run's facts: the fidelity check, timings, compiles, OpenVINO version and tolerance model."""
    footer = []
    if report.fidelity is not None:
        f = report.fidelity
        footer.append(
            f"Fidelity: final-output error {fmt(f.plain_error)} plain, {fmt(f.tapped_error)} with taps "
            f"(ratio {f.ratio:.2f}; 1 means the taps did not change what ran)"
        )
    if report.timings:
        footer.append("Timings: " + ", ".join(f"{k} {v:.2f}s" for k, v in report.timings.items()))
    if report.compiles:
        footer.append("Compiles: " + ", ".join(f"{k} {v}" for k, v in report.compiles.items()))
    if report.costs:
        footer.append("Cost per stage: " + "; ".join(_cost(name, c) for name, c in report.costs.items()))
    if report.openvino_version:
        footer.append(f"OpenVINO {report.openvino_version.split('-')[0]}; tolerance: {_tol_str(report)}")
    return footer


def _tol_str(report: "Report") -> str:
    t = report.tolerance
    if t.get("value") is not None:
        return f"fixed {t['value']}"
    text = f"{t.get('factor')} x unit roundoff of {t.get('precision')} x (1 + log2(K)/4), floor {t.get('floor')}"
    if t.get("quantization"):
        text += (f"; twin: {t.get('quant_factor')} x the expected quantization error at {len(t['quantization'])} "
                 "nodes (bits, group size, reduction length)")
    return text


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]], width: int) -> list[str]:
    cols = list(zip(header, *rows))
    widths = [max(len(c) for c in col) for col in cols]
    name_col = header.index("node")
    # Shrink the last column (kernel names), the node names, then the op types, when the table is too wide;
    # as a last resort the last column goes. Rows are never wrapped.
    for col, least in ((len(widths) - 1, 12), (name_col, 16), (header.index("op"), 8)):
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        if excess > 0:
            widths[col] = max(least, widths[col] - excess)
    if sum(widths) + 2 * (len(widths) - 1) > width and len(header) > 10:
        return _table(header[:-1], [r[:-1] for r in rows], width)

    def cell(text: str, w: int, i: int) -> str:
        text = text if len(text) <= w else text[: max(1, w - 1)] + "~"
        left = (name_col, header.index("op"), header.index("role"), len(header) - 1)
        return text.ljust(w) if i in left else text.rjust(w)

    out = ["  ".join(cell(h, w, i) for i, (h, w) in enumerate(zip(header, widths))).rstrip()]
    out += ["  ".join(cell(c, w, i) for i, (c, w) in enumerate(zip(row, widths))).rstrip() for row in rows]
    return out


def render_html(report: "Report", *, top: int = 25) -> str:
    """The same content as `render_text`, as an HTML fragment for Jupyter (every model-supplied string escaped).

    Verdict, the run's notes (fidelity warnings, non-determinism: shown next to the verdict, where they
    matter), ranked culprits, final outputs, unmatched nodes, experiments, what each side ran with and the
    run's facts (fidelity, timings, compiles, OpenVINO and tolerance).
    """
    e = html.escape
    small = 'style="font-size:smaller"'
    parts = ['<div class="bisect-ov-report" style="font-family:sans-serif">']
    title = f"bisect_ov: {report.model}" + (f" vs {report.target_model}" if report.target_model else "")
    parts.append(f"<h3>{e(title)}</h3>")
    parts.append(f"<p>{e(report.ref.label)} &rarr; {e(report.target.label)}, {len(report.nodes)} nodes compared</p>")
    color = "#b00020" if report.diverges else "#1b5e20"
    parts.append(f'<div style="border-left:4px solid {color};padding-left:8px">')
    parts += [f"<div>{e(line)}</div>" for line in verdict_lines(report)]
    parts.append("</div>")
    parts += [f'<div style="border-left:4px solid #ef6c00;padding-left:8px;margin-top:4px">Note: {e(note)}</div>'
              for note in report.notes]
    header, rows = _drop_empty_columns(COLUMNS, culprit_rows(report, top))

    def table(head: tuple[str, ...], body: Sequence[tuple[str, ...]]) -> str:
        cells = "".join(f"<th>{e(h)}</th>" for h in head)
        trs = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in body)
        return f"<table {small}><thead><tr>{cells}</tr></thead><tbody>{trs}</tbody></table>"

    if rows:
        parts.append(f"<div><b>Culprits</b> (top {len(rows)} of {len(report.ranking)}; * = first divergence; "
                     f"error = {e(report.metric)})</div>")
        parts.append(table(header, rows[:10]))
        if len(rows) > 10:
            parts.append(f"<details><summary>{len(rows) - 10} more culprits</summary>{table(header, rows[10:])}"
                         "</details>")
    else:
        parts.append("<div>Culprits: none.</div>")
    if report.outputs:
        out_rows = [(o.name, fmt(o.error), fmt(o.tolerance), "over" if o.diverged else "within",
                     fmt(o.stats.max_abs), f"{o.stats.sqnr_db:.1f} dB", f"{o.stats.mismatches}/{o.stats.numel}")
                    for o in report.outputs]
        parts.append("<div><b>Final outputs</b></div>")
        parts.append(table(("output", report.metric, "tol", "", "max abs", "SQNR", "mismatches"), out_rows))
    parts += [f"<div>{e(line)}</div>" for line in unmatched_lines(report)]
    parts += [f"<div>{e(line)}</div>" for line in experiment_lines(report) if line.strip()]
    parts += [f"<div><small>{e(line)}</small></div>" for line in _sides(report) + footer_lines(report)]
    parts.append("</div>")
    return "".join(parts)


def _cost(name: str, cost: dict) -> str:
    """``capture 1.20s (target 1 compile, 1 run)``: what one pipeline stage cost."""
    parts = []
    for side in ("ref", "target"):
        compiles, runs = int(cost.get(f"{side}_compiles", 0)), int(cost.get(f"{side}_infers", 0))
        if compiles or runs:
            parts.append(f"{side} {compiles} compile{'s' * (compiles != 1)}, {runs} run{'s' * (runs != 1)}")
    return f"{name} {float(cost.get('seconds', 0.0)):.2f}s" + (f" ({'; '.join(parts)})" if parts else "")
