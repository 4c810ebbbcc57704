"""A `Report` as one standalone HTML page: no network, no scripts, plots embedded as PNG ``data:`` URIs.

The first screen answers "where does it start, how bad, why": a verdict box (the first divergence(s) with their
error against tolerance, inherited error, growth and causes; the final output's error; what each side ran with;
the fidelity check and any warnings), then the ranked culprit table. Below come the error-along-depth plot and the
graph around the first divergence (when matplotlib is installed), the final outputs, unmatched nodes and the run's
facts. The sentences are the terminal report's (`bisect_ov.report.text.verdict_lines`, `culprit_rows`), so the
two never disagree.

Every string that comes from the model or the run (node and tensor names, op types, device names, notes, the
model label) is escaped with `html.escape`: a node called ``<script>`` shows as text.
"""

from __future__ import annotations

import html
import logging
import math
import os
import pathlib
from typing import TYPE_CHECKING, Any, Iterable

from bisect_ov.core.fileio import write_text_atomic
from bisect_ov.report.text import COLUMNS, culprit_rows, experiment_lines, fmt, fmt_growth, kept_columns, samples_over, verdict_lines

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from bisect_ov.core.records import DeviceInfo
    from bisect_ov.report.report import NodeResult, Report

__all__ = ["render_page", "save_html"]

_VISIBLE_ROWS = 10


def e(value: Any) -> str:
    """Escape anything for HTML text and attribute values."""
    return html.escape(str(value), quote=True)


_CSS = """
:root { --source: #c62828; --amplifier: #ef6c00; --inherits: #757575; --ok: #2e7d32; --ink: #1f2328;
        --muted: #5f6b76; --line: #d8dee4; --bg-soft: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; background: #ffffff; color: var(--ink);
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 18px 24px 40px; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
              font-size: 0.93em; }
header { display: flex; align-items: baseline; flex-wrap: wrap; gap: 4px 16px; margin-bottom: 12px; }
header h1 { font-size: 20px; margin: 0; font-weight: 600; word-break: break-all; }
header .sub { color: var(--muted); }
h2 { font-size: 16px; margin: 26px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h2 small { color: var(--muted); font-weight: normal; font-size: 13px; }

/* verdict */
.verdict { border: 1px solid var(--line); border-left: 6px solid var(--ok); border-radius: 6px;
           background: #f3faf4; padding: 12px 16px; }
.verdict.diverges { border-left-color: var(--source); background: #fdf3f2; }
.headline { font-size: 17px; font-weight: 600; margin-bottom: 8px; }
.pill { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #fff; font-size: 12px;
        font-weight: 600; letter-spacing: 0.02em; vertical-align: 1px; white-space: nowrap; }
.pill.big { font-size: 14px; padding: 2px 10px; margin-right: 6px; }
.pill.source { background: var(--source); } .pill.amplifier { background: var(--amplifier); }
.pill.inherits { background: var(--inherits); } .pill.ok { background: var(--ok); }
.pill.emulated { background: #6a1b9a; } .pill.first { background: #fff; color: var(--source);
        border: 1px solid var(--source); }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 6px 0 10px; }
.card { flex: 1 1 340px; max-width: 600px; background: #fff; border: 1px solid var(--line);
        border-top: 4px solid var(--source); border-radius: 6px; padding: 8px 12px; }
.card.amplifier { border-top-color: var(--amplifier); }
.card .name { font-size: 15px; font-weight: 600; word-break: break-all; }
.card .op { color: var(--muted); font-size: 13px; margin-bottom: 6px; }
.metrics { display: grid; grid-template-columns: repeat(4, minmax(0, max-content)); gap: 4px 26px; margin: 0; }
.metrics div { min-width: 0; }
.metrics dt { color: var(--muted); font-size: 12px; }
.metrics dd { margin: 0; font-weight: 600; font-variant-numeric: tabular-nums; }
.metrics dd.bad { color: var(--source); }
.metrics dd small { font-weight: normal; color: var(--muted); }
.causes { margin-top: 6px; font-size: 13px; }
.facts { margin: 6px 0 0; padding: 0; list-style: none; }
.facts li { margin: 2px 0; }
.sides { display: flex; flex-wrap: wrap; gap: 4px 24px; margin-top: 8px; padding-top: 8px;
         border-top: 1px dashed var(--line); font-size: 13px; }
.sides b { font-weight: 600; }
.warn { margin-top: 8px; padding: 6px 10px; border-radius: 4px; background: #fff4e5; border: 1px solid #ffcc80;
        color: #5d4037; font-size: 13px; }
.small { font-size: 12px; color: var(--muted); }
.okline { margin-top: 6px; color: var(--muted); font-size: 13px; }

/* tables */
table { border-collapse: collapse; width: 100%; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 8px; border-bottom: 1px solid #eaeef2; text-align: right; vertical-align: top; }
th { background: var(--bg-soft); color: var(--muted); font-weight: 600; position: sticky; top: 0; }
td.l, th.l { text-align: left; }
td:not(.l) { white-space: nowrap; }  /* a figure never breaks inside (5.0e-\n01) */
td.node { word-break: break-all; min-width: 140px; }
td.small { font-size: 12px; color: var(--muted); }
tr.first td { font-weight: 600; }
tr.first td:first-child { box-shadow: inset 4px 0 0 var(--source); }
tr.role-source td.role { color: var(--source); font-weight: 600; }
tr.role-amplifier td.role { color: var(--amplifier); font-weight: 600; }
tr.role-inherits td.role { color: var(--inherits); }
td.over { color: var(--source); }
details { margin-top: 6px; }
details.fused { margin-top: 2px; font-size: 12px; color: var(--muted); }
details.fused summary { padding: 0; }
details summary { cursor: pointer; color: #0b57d0; padding: 4px 0; }
.note { color: var(--muted); font-size: 13px; margin: 6px 0; }
figure { margin: 8px 0; }
figure.graph img { max-width: 720px; }
figure img { max-width: 100%; height: auto; border: 1px solid #eaeef2; border-radius: 4px; }
figcaption { color: var(--muted); font-size: 12.5px; }
.chips code { display: inline-block; background: var(--bg-soft); border: 1px solid #eaeef2; border-radius: 4px;
              padding: 0 5px; margin: 2px 4px 2px 0; word-break: break-all; }
.kv { display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px; font-size: 13px; }
.kv dt { color: var(--muted); } .kv dd { margin: 0; word-break: break-word; }
footer { margin-top: 30px; color: var(--muted); font-size: 12px; }
"""


def render_page(report: "Report", *, top: int = 25, plots: bool = True) -> str:
    """The report as a complete, self-contained HTML document (one string, no external resources).

    Parameters
    ----------
    report
        A `Report`.
    top
        How many ranked culprits to list: the first 10 are shown, the rest in a collapsed block.
    plots
        Embed the error-along-depth plot and the graph around the first divergence as PNG ``data:`` URIs.
        Left out silently when matplotlib is not installed.

    Returns
    -------
    str
        The HTML document.
    """
    title = f"bisect_ov: {report.model}" + (f" vs {report.target_model}" if report.target_model else "")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(title)} | {e(report.ref.label)} \u2192 {e(report.target.label)}</title>",
        f"<style>{_CSS}</style></head><body><main>",
        _header(report, title),
        _verdict(report),
        _culprits(report, top),
        _experiments(report),
    ]
    if plots:
        parts.append(_plots(report))
    parts += [_outputs(report), _unmatched(report), _run_facts(report)]
    from bisect_ov import __version__

    parts.append(f"<footer>Written by bisect_ov {e(__version__)}; schema version {e(report.schema_version)}. "
                 "The JSON report (<code>report.save(path)</code>) holds every number on this page.</footer>")
    parts.append("</main></body></html>")
    return "\n".join(p for p in parts if p)


def save_html(report: "Report", path: str | os.PathLike, **kw: Any) -> pathlib.Path:
    """Write `render_page(report, **kw)` to `path` atomically (a temporary file renamed into place)."""
    return write_text_atomic(path, render_page(report, **kw))


# ----- sections ---------------------------------------------------------------------------------------------------

def _header(report: "Report", title: str) -> str:
    sub = (f"{e(report.ref.label)} \u2192 {e(report.target.label)} \u00b7 {len(report.nodes)} nodes compared "
           f"\u00b7 error = {e(report.metric)}")
    return f'<header><h1>{e(title)}</h1><div class="sub">{sub}</div></header>'


def _verdict(report: "Report") -> str:
    lines = verdict_lines(report)
    firsts = list(report.first_divergences)
    out = [f'<section class="verdict{" diverges" if report.diverges else ""}" aria-label="verdict">']
    head = lines[0] if lines else ""
    head = head[len("Verdict: "):] if head.startswith("Verdict: ") else head
    if report.diverges:
        for prefix in ("DIVERGES. ", "DIVERGES, "):
            if head.startswith(prefix):
                head = head[len(prefix):]
                head = head[:1].upper() + head[1:]
        badge = '<span class="pill big source">DIVERGES</span>'
    else:
        badge = '<span class="pill big ok">NO DIVERGENCE</span>'
        for prefix in ("no divergence. ", "No divergence. "):
            if head.startswith(prefix):
                head = head[len(prefix):]
    out.append(f'<div class="headline">{badge}{e(head)}</div>')

    if firsts:
        out.append('<div class="cards">')
        out += [_card(n) for n in firsts[:3]]
        out.append("</div>")
        if len(firsts) > 3:
            more = ", ".join(f"<code>{e(n.name)}</code>" for n in firsts[3:])
            out.append(f'<div class="note">Also starting independently: {more}.</div>')
    # The remaining sentences of the terminal verdict; the per-node lines are the cards above.
    rest = [ln for ln in lines[1:] if not (firsts and ln.startswith("  "))]
    if rest:
        out.append('<ul class="facts">' + "".join(f"<li>{e(ln.strip())}</li>" for ln in rest) + "</ul>")
    out.append('<div class="sides">' + "".join(_side(role, info) for role, info in
                                               (("Reference", report.ref), ("Target", report.target))) + "</div>")
    out.append(_fidelity(report))
    out += [f'<div class="warn">\u26a0 {e(note)}</div>' for note in report.notes]
    out.append("</section>")
    return "\n".join(o for o in out if o)


def _card(n: "NodeResult") -> str:
    role = n.role if n.role in ("source", "amplifier") else "source"
    ratio = n.error / n.tolerance if n.tolerance and math.isfinite(n.error) else math.inf
    over = f"error is {ratio:.3g}\u00d7 it" if math.isfinite(ratio) else "error is non-finite"
    shape = ", ".join("x".join(str(d) for d in s.shape) + f" {s.dtype}" for s in n.outputs if s.shape is not None)
    metrics = [
        ("error", e(fmt(n.error)), "bad"),
        ("tolerance", f"{e(fmt(n.tolerance))} <small>{e(over)}</small>", ""),
        ("its inputs carry", e(fmt(n.input_error)), ""),
        ("growth", e(fmt_growth(n.growth)), "bad" if n.growth >= 2 else ""),
    ]
    counts = samples_over(n)
    if counts is not None:
        spread = n.over_samples
        metrics.append(("over tolerance on", f"{counts[0]} of {counts[1]} samples <small>p90 "
                        f"{e(fmt(spread['p90']))}, max {e(fmt(spread['max']))} (#{int(spread['worst_sample'])})"
                        "</small>", "bad" if counts[0] else ""))
    dl = "".join(f'<div><dt>{e(k)}</dt><dd class="{cls}">{v}</dd></div>' for k, v, cls in metrics)
    causes = ""
    if n.causes:
        causes = '<div class="causes"><b>Why:</b> ' + "; ".join(e(c) for c in n.causes) + "</div>"
    ran_line = _ran_line(n)
    group = [str(g) for g in getattr(n, "group", ()) or () if g != n.name]
    if group:
        shown = ", ".join(f"<code>{e(g)}</code>" for g in group[:6])
        if len(group) > 6:
            shown += f" and {len(group) - 6} more"
        ran_line += (f'<div class="causes">Measured as one with {len(group)} node(s) the target fused or folded into '
                     f"it: {shown}.</div>")
    return (
        f'<div class="card {role}"><div class="name">'
        + (f'<code>{e(n.name)}</code>' if n.label == n.name else f'<code title="{e(n.name)}">{e(n.label)}</code>')
        + ' '
        f'<span class="pill {role}">{e(n.role)}</span> <span class="pill first">first divergence</span></div>'
        f'<div class="op">{e(n.op_type)} \u00b7 node #{e(n.index)}' + (f" \u00b7 {e(shape)}" if shape else "")
        + f'</div><dl class="metrics">{dl}</dl>{causes}{ran_line}</div>'
    )


def _ran_line(n: "NodeResult") -> str:
    """What each side ran the node with; the (often long) list of fused ops collapsed."""
    parts, fused_all = [], []
    for side, label in (("target", "target"), ("ref", "reference")):
        rt = (n.runtime or {}).get(side) or {}
        if not rt:
            continue
        text = " ".join(str(p) for p in (rt.get("precision"), rt.get("kernel")) if p) or "?"
        fused = [str(f) for f in rt.get("fused") or [] if f != n.name]
        if fused:
            text += f" +{len(fused)} fused"
            fused_all.append((label, fused))
        parts.append(f"{e(label)} <code>{e(text)}</code>")
    if not parts:
        return ""
    line = '<div class="causes">Ran as: ' + ", ".join(parts) + "</div>"
    if fused_all:
        lists = "".join(f"<div><b>{e(label)}</b>: " + ", ".join(f"<code>{e(f)}</code>" for f in fused) + "</div>"
                        for label, fused in fused_all)
        line += f'<details class="fused"><summary>fused ops</summary>{lists}</details>'
    return line


def _side(role: str, info: "DeviceInfo") -> str:
    text = f"<span><b>{e(role)}:</b> <code>{e(info.name)}</code> ran <b>{e(info.precision)}</b>"
    if info.requested_precision and info.requested_precision != info.precision:
        text += f" (asked for {e(info.requested_precision)})"
    if info.emulated:
        text += ' <span class="pill emulated">emulated</span>'
    if info.full_name:
        text += f" on {e(info.full_name)}"
    if info.note:
        text += f' <span class="small">[{e(info.note)}]</span>'
    return text + "</span>"


def _fidelity(report: "Report") -> str:
    f = report.fidelity
    if f is None:
        return ""
    ratio = f.ratio
    detail = (f"final-output error {fmt(f.plain_error)} in the plain run, {fmt(f.tapped_error)} with "
              "the intermediate outputs exposed")
    if f.warning:
        return f'<div class="warn">\u26a0 Fidelity ratio {e(_num(ratio))}: {e(f.warning)}</div>'
    if not (isinstance(ratio, (int, float)) and math.isfinite(ratio) and 0.5 <= ratio <= 2.0):
        return (f'<div class="warn">\u26a0 Fidelity ratio {e(_num(ratio))}: exposing intermediate tensors changed what '
                f"ran ({e(detail)}); the node errors may not be those of the plain model.</div>")
    return (f'<div class="okline">Fidelity {e(_num(ratio))} (1 means the taps did not change what ran): '
            f"{e(detail)}.</div>")


def _num(x: Any) -> str:
    if isinstance(x, (int, float)) and math.isfinite(x):
        return f"{x:.2f}"
    return fmt(x) if isinstance(x, float) else str(x)


def _culprits(report: "Report", top: int) -> str:
    culprits = report.culprits[: max(0, top)]
    rows = culprit_rows(report, len(culprits))
    if not rows:
        return '<h2>Culprits</h2><p class="note">None: every compared node is within its tolerance.</p>'
    keep = kept_columns(COLUMNS, rows)
    header = [COLUMNS[i] for i in keep]
    left = {"node", "op", "role", "shape", "target ran"}
    head = "".join(f'<th class="{"l" if h in left else ""}">{e(h)}</th>' for h in header)

    def tr(n: "NodeResult", row: tuple[str, ...]) -> str:
        cells = []
        for i in keep:
            h, v = COLUMNS[i], row[i]
            cls = {"node": "l node mono", "op": "l", "role": "l role", "shape": "l small", "target ran": "l small",
                   "nan/inf": "small"}.get(h, "")
            if h == "error" and n.error > n.tolerance:
                cls += " over"
            cells.append(f'<td class="{cls.strip()}">{e(v)}</td>')
        classes = f"role-{e(n.role)}" + (" first" if n.first else "")
        return f'<tr class="{classes}">' + "".join(cells) + "</tr>"

    body = [tr(n, r) for n, r in zip(culprits, rows)]
    shown = min(len(body), _VISIBLE_ROWS)
    out = [f"<h2>Culprits <small>ranked; top {len(body)} of {len(report.ranking)}; * = first divergence; "
           f"error = {e(report.metric)}, inputs = largest error among the tensors it reads</small></h2>"]
    out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body[:shown])}</tbody></table>")
    if len(body) > shown:
        out.append(f"<details><summary>{len(body) - shown} more culprits (ranks {shown + 1}\u2013{len(body)})"
                   f"</summary><table><thead><tr>{head}</tr></thead><tbody>{''.join(body[shown:])}</tbody></table>"
                   "</details>")
    if len(report.ranking) > len(body):
        out.append(f'<p class="note">{len(report.ranking) - len(body)} more diverged nodes are not listed here '
                   "(raise <code>top</code>, or read them from the JSON report).</p>")
    out.append('<p class="note">Roles: <span class="pill source">source</span> error starts here \u00b7 '
               '<span class="pill amplifier">amplifier</span> multiplies error it was given \u00b7 '
               '<span class="pill inherits">inherits</span> only passes it on. '
               "growth = error / max(inputs, tol/10).</p>")
    return "\n".join(out)


def _experiments(report: "Report") -> str:
    """The fix, the delegation range, the curve, the samples, kernel differences and noise, as in the text."""
    lines = [line for line in experiment_lines(report) if line.strip()]
    if not lines:
        return ""
    items = "".join(f"<li>{e(line)}</li>" for line in lines)
    return f"<h2>Experiments <small>partitioned runs, samples and noise</small></h2><ul>{items}</ul>"


def _plots(report: "Report") -> str:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return ""
    from bisect_ov.report.plots import figure_to_png_base64, plot_errors, plot_neighbourhood

    out = []
    try:
        img = figure_to_png_base64(plot_errors(report))
        out.append('<h2>Error along depth</h2><figure><img alt="error of every compared node along the topological '
                   f'order, with its tolerance" src="data:image/png;base64,{img}"><figcaption>Each compared node\'s '
                   f"{e(report.metric)} in topological order (log scale) against its tolerance (dashed); exact "
                   "matches sit at the floor, NaN/Inf at the top.</figcaption></figure>")
    except Exception as err:  # a plotting problem must not cost the user the page
        log.warning("The error plot of the HTML report failed: %s", err, exc_info=True)
        out.append(f'<p class="note">The error plot could not be drawn: {e(type(err).__name__)}: {e(err)}</p>')
    first = report.first_divergence
    if first is not None:
        try:
            img = figure_to_png_base64(plot_neighbourhood(report, first.key, radius=2))
            out.append(f"<h2>Around the first divergence <small><code>{e(first.name)}</code></small></h2>"
                       f'<figure class="graph"><img alt="graph neighbourhood of {e(first.name)}" '
                       f'src="data:image/png;base64,{img}"><figcaption>Producers and consumers up to two edges '
                       "away, filled by log error; the thick border marks the first divergence.</figcaption></figure>")
        except Exception as err:
            log.warning("The neighbourhood plot of the HTML report failed: %s", err, exc_info=True)
            out.append(f'<p class="note">The neighbourhood plot could not be drawn: {e(type(err).__name__)}: '
                       f"{e(err)}</p>")
    return "\n".join(out)


def _outputs(report: "Report") -> str:
    if not report.outputs:
        return ""
    head = ("output", "error", "tolerance", "state", "max abs", "mean abs", "cosine", "SQNR dB", "mismatches",
            "NaN/Inf ref \u2192 target")
    rows = []
    for o in report.outputs:
        s = o.stats
        state = '<td class="l over">over</td>' if o.diverged else '<td class="l">within</td>'
        nan_inf = f"{s.ref_nan}/{s.ref_inf} \u2192 {s.target_nan}/{s.target_inf}"
        rows.append(
            f'<tr><td class="l node mono">{e(o.name)}</td><td class="{"over" if o.diverged else ""}">{e(fmt(o.error))}'
            f"</td><td>{e(fmt(o.tolerance))}</td>{state}<td>{e(fmt(s.max_abs))}</td><td>{e(fmt(s.mean_abs))}</td>"
            f"<td>{e(_cos(s.cosine))}</td><td>{e(_db(s.sqnr_db))}</td><td>{e(s.mismatches)}/{e(s.numel)}</td>"
            f"<td>{e(nan_inf)}</td></tr>"
        )
    ths = "".join(f'<th class="{"l" if h in ("output", "state") else ""}">{e(h)}</th>' for h in head)
    return (f"<h2>Final outputs <small>error = {e(report.metric)}</small></h2><table><thead><tr>{ths}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _cos(x: float) -> str:
    return f"{x:.6f}" if isinstance(x, float) and math.isfinite(x) else fmt(x)


def _db(x: float) -> str:
    return f"{x:.1f}" if isinstance(x, float) and math.isfinite(x) else fmt(x)


def _unmatched(report: "Report") -> str:
    unmatched = {k: v for k, v in (report.unmatched or {}).items() if v}
    if not unmatched:
        return ""
    out = ["<h2>Unmatched nodes <small>present on one side only, so not compared</small></h2>"]
    for side, names in unmatched.items():
        chips = "".join(f"<code>{e(n)}</code>" for n in names[:30])
        out.append(f'<div class="chips"><b>{e(side)}</b> ({len(names)}): {chips}</div>')
        if len(names) > 30:
            rest = "".join(f"<code>{e(n)}</code>" for n in names[30:])
            out.append(f'<details><summary>{len(names) - 30} more</summary><div class="chips">{rest}</div></details>')
    return "\n".join(out)


def _run_facts(report: "Report") -> str:
    out = ["<h2>Run</h2>"]
    head = ("side", "device", "ran", "asked", "hardware", "config", "precision of runtime ops", "note")
    rows = []
    for role, info in (("reference", report.ref), ("target", report.target)):
        config = ", ".join(f"{k}={v}" for k, v in (info.config or {}).items()) or "-"
        counts = ", ".join(f"{k} {v}" for k, v in (info.precision_counts or {}).items()) or "-"
        ran = e(info.precision) + (' <span class="pill emulated">emulated</span>' if info.emulated else "")
        rows.append(f'<tr><td class="l">{e(role)}</td><td class="l mono">{e(info.name)}</td><td class="l">{ran}</td>'
                    f'<td class="l">{e(info.requested_precision or "-")}</td><td class="l">{e(info.full_name or "-")}'
                    f'</td><td class="l small mono">{e(config)}</td><td class="l small">{e(counts)}</td>'
                    f'<td class="l small">{e(info.note or "-")}</td></tr>')
    ths = "".join(f'<th class="l">{e(h)}</th>' for h in head)
    out.append(f"<table><thead><tr>{ths}</tr></thead><tbody>{''.join(rows)}</tbody></table>")

    facts: list[tuple[str, str]] = [("model", e(report.model))]
    if report.target_model:
        facts.append(("target model", e(report.target_model)))
    if report.model_hash:
        facts.append(("model hash", f"<code>{e(report.model_hash)}</code>"))
    facts.append(("metric", e(report.metric)))
    if getattr(report, "strategy", None):
        facts.append(("strategy", e(report.strategy)))
    facts.append(("tolerance", e(_tolerance_text(report.tolerance))))
    if report.inputs:
        facts.append(("inputs", _join(f"<code>{e(i.get('name', '?'))}</code> {e(_shape(i.get('shape')))} "
                                      f"{e(i.get('dtype', ''))}" for i in report.inputs)))
    if report.timings:
        total = sum(v for v in report.timings.values() if isinstance(v, (int, float)))
        facts.append(("timings", e(", ".join(f"{k} {v:.2f}s" for k, v in report.timings.items())
                                   + f" (sum {total:.2f}s)")))
    if report.compiles:
        facts.append(("compiles", e(", ".join(f"{k} {v}" for k, v in report.compiles.items()))))
    if report.fidelity is not None:
        f = report.fidelity
        values = {"plain_error": f.plain_error, "tapped_error": f.tapped_error, "ratio": f.ratio}
        shown = [f"{k} {_num(v) if k == 'ratio' else fmt(v) if isinstance(v, float) else v}" for k, v in values.items()]
        facts.append(("fidelity", e(", ".join(shown))))
    if report.openvino_version:
        facts.append(("OpenVINO", e(report.openvino_version)))
    out.append('<dl class="kv">' + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>")
    return "\n".join(out)


def _join(parts: Iterable[str]) -> str:
    return "; ".join(parts)


def _shape(shape: Any) -> str:
    if isinstance(shape, (list, tuple)):
        return "x".join(str(d) for d in shape)
    return str(shape) if shape is not None else ""


def _tolerance_text(t: dict[str, Any]) -> str:
    if not t:
        return "-"
    if t.get("value") is not None:
        text = f"fixed {t['value']}"
    else:
        text = (f"{t.get('factor')} \u00d7 unit roundoff of {t.get('precision')} \u00d7 (1 + log2(K)/4), "
                f"floor {t.get('floor')}")
    if t.get("per_node"):
        text += f"; {len(t['per_node'])} per-node override(s)"
    if t.get("min_growth") is not None:
        text += f"; a source needs growth \u2265 {t['min_growth']}"
    return text
