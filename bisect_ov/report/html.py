"""A `Report` as HTML: one standalone page (no network, no scripts, plots embedded as PNG ``data:`` URIs), and
the same markup as a fragment for Jupyter (`render_fragment`, what ``Report._repr_html_`` shows).

The first screen answers "where does it start, how bad, why": a verdict box (the first divergence(s) with their
error against tolerance, inherited error, growth and causes; the final output's error; what each side ran with;
the fidelity check and any warnings), then the ranked culprit table. Below come the error-along-depth plot and the
graph around the first divergence (without matplotlib, a line saying they need it), the final outputs, unmatched nodes and the run's
facts. Both format the report's view (`bisect_ov.report.view`), as the terminal page does: the sentences and
numbers are the view's records, so the renderings never disagree, and none reads another's output. The Jupyter
fragment is the page's body without the plots (``report.plot_errors()`` draws them in the notebook) and without
the document around it; its style is scoped to the report's root element (`bisect_ov.report.style`).

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

from bisect_ov.analysis.headroom import NEAR
from bisect_ov.core.extras import install_hint
from bisect_ov.core.fileio import write_text_atomic
from bisect_ov.core.records import Fidelity
from bisect_ov.report.numbers import fmt, fmt_cosine, fmt_growth
from bisect_ov.report.style import PAGE_STYLE, ROOT, style
from bisect_ov.report.view import INSIDE_LEGEND, FirstDivergence, Side, View, view

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from bisect_ov.report.report import NodeResult, Report

__all__ = ["render_page", "render_fragment", "save_html"]

_VISIBLE_ROWS = 10


def e(value: Any) -> str:
    """Escape anything for HTML text and attribute values."""
    return html.escape(str(value), quote=True)




def render_page(report: "Report", *, top: int = 25, plots: bool = True, preface: str = "") -> str:
    """The report as a complete, self-contained HTML document (one string, no external resources).

    Parameters
    ----------
    report
        A `Report`.
    top
        How many ranked culprits to list: the first 10 are shown, the rest in a collapsed block.
    plots
        Embed the error-along-depth plot and the graph around the first divergence as PNG ``data:`` URIs.
        Without matplotlib the page says that its plots need it.
    preface
        HTML put before the report's sections (a pipeline's overview).

    Returns
    -------
    str
        The HTML document.
    """
    v = view(report)
    from bisect_ov import __version__

    footer = (f"<footer>Written by bisect_ov {e(__version__)}; schema version {e(v.run.schema_version)}. "
              "The JSON report (<code>report.save(path)</code>) holds every number on this page.</footer>")
    return _document(f"{v.title} | {v.run.ref_label} \u2192 {v.run.target_label}",
                     [preface, *_sections(v, top, _plots(report) if plots else ""), footer])


def render_pipeline_page(overview: str, title: str, report: "Report | None", *, top: int = 25) -> str:
    """A pipeline's page: its `overview` (components, tokens or images, as the text gives them) above the page of
    the component examined node by node (`report`; None: none was, and the page is the overview)."""
    section = f'<section class="pipeline"><h2>Pipeline</h2><pre>{e(overview)}</pre></section>'
    if report is not None:
        return render_page(report, top=top, preface=section)
    return _document(title, [f"<header><h1>{e(title)}</h1></header>", section])


def _document(title: str, parts: Iterable[str]) -> str:
    """A complete, self-contained HTML document of `parts` (HTML) under `title` (text), with the page's style."""
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(title)}</title>",
        f"<style>{PAGE_STYLE}\n{style()}</style></head><body>",
        f'<main class="{ROOT} page">', *(p for p in parts if p), "</main></body></html>",
    ])


def render_fragment(report: "Report", *, top: int = 25) -> str:
    """The page's body as an HTML fragment for Jupyter (``Report._repr_html_``): the same sections but the
    plots, which the notebook draws itself (``report.plot_errors()``), under a style scoped to the fragment."""
    return "\n".join([f'<div class="{ROOT} compact"><style>{style()}</style>', *_sections(view(report), top, ""),
                      "</div>"])


def _sections(v: View, top: int, plots: str) -> list[str]:
    """The report's sections, in order: header, verdict, culprits, experiments, plots (drawn from the report by
    the caller, as HTML), outputs, unmatched, run."""
    parts = [_header(v), _verdict(v), _culprits(v, top), _experiments(v), plots, _outputs(v), _unmatched(v),
             _run_facts(v)]
    return [p for p in parts if p]


def save_html(report: "Report", path: str | os.PathLike, **kw: Any) -> pathlib.Path:
    """Write `render_page(report, **kw)` to `path` atomically (a temporary file renamed into place)."""
    return write_text_atomic(path, render_page(report, **kw))


# ----- sections ---------------------------------------------------------------------------------------------------

def _header(v: View) -> str:
    run = v.run
    sub = (f"{e(run.ref_label)} \u2192 {e(run.target_label)} \u00b7 {run.compared} node{'s' * (run.compared != 1)} compared "
           f"\u00b7 error = {e(run.metric)}")
    return f'<header><h1>{e(v.title)}</h1><div class="sub">{sub}</div></header>'


def _verdict(v: View) -> str:
    verdict = v.verdict
    out = [f'<section class="verdict{" diverges" if verdict.diverges else ""}" aria-label="verdict">']
    badge = ('<span class="pill big source">DIVERGES</span>' if verdict.diverges
             else '<span class="pill big ok">NO DIVERGENCE</span>')
    out.append(f'<div class="headline">{badge}{e(verdict.headline)}</div>')
    if verdict.first:
        out.append('<div class="cards">')
        out += [_card(f) for f in verdict.first]
        out.append("</div>")
        if verdict.more_first:
            more = ", ".join(f"<code>{e(n.name)}</code>" for n in verdict.more_first)
            out.append(f'<div class="note">Also starting independently: {more}.</div>')
    if verdict.facts:
        out.append('<ul class="facts">' + "".join(f"<li>{e(f.text)}</li>" for f in verdict.facts) + "</ul>")
    out.append('<div class="sides">' + "".join(_side(s) for s in v.sides) + "</div>")
    out.append(_fidelity(v.run.fidelity))
    out += [f'<div class="runnote">Note: {e(note)}</div>' for note in v.notes]  # as the text's; a warning is amber
    out.append("</section>")
    return "\n".join(o for o in out if o)


def _card(first: FirstDivergence) -> str:
    n, ratio = first.node, first.ratio
    role = n.role if n.role in ("source", "amplifier") else "source"
    over = f"error is {ratio:.3g}\u00d7 it" if math.isfinite(ratio) else "error is non-finite"
    shape = ", ".join("x".join(str(d) for d in s.shape) + f" {s.dtype}" for s in n.outputs if s.shape is not None)
    metrics = [
        ("error", e(fmt(n.error)), "bad"),
        ("tolerance", f"{e(fmt(n.tolerance))} <small>{e(over)}</small>", ""),
        ("its inputs carry", e(fmt(n.input_error)), ""),
        ("growth", e(fmt_growth(n.growth)), "bad" if n.growth >= 2 else ""),
    ]
    s = first.samples
    if s is not None:
        metrics.append(("over tolerance on", f"{s.over} of {s.count} samples <small>p90 {e(fmt(s.p90))}, max "
                        f"{e(fmt(s.max))} (#{s.worst_sample})</small>", "bad" if s.over else ""))
    dl = "".join(f'<div><dt>{e(k)}</dt><dd class="{cls}">{v}</dd></div>' for k, v, cls in metrics)
    causes = ""
    if first.causes:
        causes = '<div class="causes"><b>Why:</b> ' + "; ".join(e(c.text) for c in first.causes) + "</div>"
    if first.inside:
        causes += f'<div class="causes"><b>Inside a kernel:</b> {e(first.inside)}</div>'
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


def _side(s: Side) -> str:
    text = f"<span><b>{e(s.title)}:</b> <code>{e(s.device)}</code> ran <b>{e(s.precision)}</b>"
    if s.substituted:
        text += f" (asked for {e(s.substituted)})"
    if s.emulated:
        text += ' <span class="pill emulated">emulated</span>'
    if s.hardware:
        text += f" on {e(s.hardware)}"
    if s.note:
        text += f' <span class="small">[{e(s.note)}]</span>'
    return text + "</span>"


def _fidelity(f: Fidelity | None) -> str:
    if f is None:
        return ""
    ratio = f.ratio
    detail = (f"final-output error {fmt(f.plain_error)} in the plain run, {fmt(f.tapped_error)} with "
              "the intermediate outputs exposed")
    if f.warning:
        # With an outcome, the verdict rests on partitioned runs or on nothing: say that, not what to try.
        return f'<div class="warn">\u26a0 Fidelity ratio {e(_num(ratio))}: {e(f.reason if f.outcome else f.warning)}</div>'
    if not (isinstance(ratio, (int, float)) and math.isfinite(ratio) and 0.5 <= ratio <= 2.0):
        return (f'<div class="warn">\u26a0 Fidelity ratio {e(_num(ratio))}: exposing intermediate tensors changed what '
                f"ran ({e(detail)}); the node errors may not be those of the plain model.</div>")
    return (f'<div class="okline">Fidelity {e(_num(ratio))} (1 means the taps did not change what ran): '
            f"{e(detail)}.</div>")


def _num(x: Any) -> str:
    if isinstance(x, (int, float)) and math.isfinite(x):
        return f"{x:.2f}"
    return fmt(x) if isinstance(x, float) else str(x)


def _culprits(v: View, top: int) -> str:
    table = v.table(top)
    if not table.rows:
        unfaithful = v.run.fidelity is not None and v.run.fidelity.outcome
        why = ("every compared node is within its tolerance" if v.verdict.kind != "unfaithful" else
               "none is named from the per-node errors: the taps changed what the target computed" if unfaithful else
               "every node measured is within its tolerance; what diverges is in the verdict")
        return f'<h2>Culprits</h2><p class="note">None: {why}.</p>'
    left = {"node", "op", "role", "shape", "target ran"}
    classes = {"node": "l node mono", "op": "l", "role": "l role", "shape": "l small", "target ran": "l small",
               "nan/inf": "small"}
    head = "".join(f'<th class="{"l" if h in left else ""}">{e(h)}</th>' for h in table.columns)

    def tr(n: "NodeResult", row: tuple[str, ...]) -> str:
        cells = []
        for h, value in zip(table.columns, row):
            cls = classes.get(h, "") + (" over" if h == "error" and n.error > n.tolerance else "")
            cells.append(f'<td class="{cls.strip()}">{e(value)}</td>')
        return f'<tr class="role-{e(n.role)}{" first" if n.first else ""}">' + "".join(cells) + "</tr>"

    body = [tr(r.node, cells) for r, cells in zip(table.rows, table.cells())]
    shown = min(len(body), _VISIBLE_ROWS)
    inside = f"; {e(INSIDE_LEGEND)}" if any(r.node.inside_kernel for r in table.rows) else ""
    out = [f"<h2>Culprits <small>ranked; top {len(body)} of {table.total}; * = first divergence{inside}; "
           f"error = {e(v.run.metric)}, inputs = largest error among the tensors it reads</small></h2>"]
    out.append(_table(head, body[:shown]))
    if len(body) > shown:
        out.append(f"<details><summary>{len(body) - shown} more culprits (ranks {shown + 1}\u2013{len(body)})"
                   f"</summary>{_table(head, body[shown:])}</details>")
    if table.total > len(body):
        out.append(f'<p class="note">{table.total - len(body)} more diverged nodes are not listed here '
                   "(raise <code>top</code>, or read them from the JSON report).</p>")
    out.append('<p class="note">Roles: <span class="pill source">source</span> error starts here \u00b7 '
               '<span class="pill amplifier">amplifier</span> multiplies error it was given \u00b7 '
               '<span class="pill inherits">inherits</span> only passes it on. '
               "growth = error / max(inputs, tol/10).</p>")
    return "\n".join(out)


def _experiments(v: View) -> str:
    """The fix, the delegation range, the curve, the samples, kernel differences and noise, as in the text."""
    items = []
    for block in v.experiments:
        # A block's first line is its item; its indented lines (what to apply, its cost, the nodes kept, the nodes
        # listed) belong to it, as a list inside it.
        head, *rest = [line for line in block.lines if line.strip()] or [""]
        if not head:
            continue
        if block.kind == "steps":  # a table in columns: kept as the text aligns it
            items.append(f"<li>{e(head)}<pre>{e(chr(10).join(rest))}</pre></li>")
            continue
        inner = "".join(f"<li>{e(line.strip())}</li>" for line in rest)
        items.append(f"<li>{e(head)}" + (f"<ul>{inner}</ul>" if inner else "") + "</li>")
    if not items:
        return ""
    return f"<h2>Experiments <small>partitioned runs, samples and noise</small></h2><ul>{''.join(items)}</ul>"


def _plots(report: "Report") -> str:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return ('<p class="note plots-missing">No plots on this page: they need matplotlib, which is not installed '
                f'where it was written. Install it (<code>{e(install_hint("plot"))}</code>) and save the page '
                "again to see the error along depth and the graph around the first divergence.</p>")
    from bisect_ov.report.plots import MAX_NEIGHBOURS, figure_to_png_base64, plot_errors, plot_headroom, plot_neighbourhood

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
    if report.f16_target and report.headroom(NEAR):
        try:
            img = figure_to_png_base64(plot_headroom(report))
            out.append('<h2>f16 headroom</h2><figure><img alt="f16 headroom of every compared node along the '
                       f'topological order" src="data:image/png;base64,{img}"><figcaption>Powers of two between each '
                       "node's largest magnitude on the reference and 65,504, the largest f16 value; red points are "
                       "within 2x of it or over (below 0 the values do not fit f16).</figcaption></figure>")
        except Exception as err:
            log.warning("The headroom plot of the HTML report failed: %s", err, exc_info=True)
            out.append(f'<p class="note">The headroom plot could not be drawn: {e(type(err).__name__)}: {e(err)}</p>')
    first = report.first_divergence
    if first is not None:
        try:
            img = figure_to_png_base64(plot_neighbourhood(report, first.key, radius=2))
            out.append(f"<h2>Around the first divergence <small><code>{e(first.name)}</code></small></h2>"
                       f'<figure class="graph"><img alt="graph neighbourhood of {e(first.name)}" '
                       f'src="data:image/png;base64,{img}"><figcaption>Producers and consumers up to two edges '
                       f"away (at most {MAX_NEIGHBOURS}: the closest and the furthest over their tolerance), filled by "
                       "log error; the thick border marks the first divergence.</figcaption></figure>")
        except Exception as err:
            log.warning("The neighbourhood plot of the HTML report failed: %s", err, exc_info=True)
            out.append(f'<p class="note">The neighbourhood plot could not be drawn: {e(type(err).__name__)}: '
                       f"{e(err)}</p>")
    return "\n".join(out)


def _outputs(v: View) -> str:
    if not v.outputs:
        return ""
    head = ("output", "error", "tolerance", "state", "max abs", "mean abs", "cosine", "SQNR dB", "mismatches",
            "NaN/Inf ref \u2192 target")
    rows = []
    for o in v.outputs:
        s = o.stats
        state = '<td class="l over">over</td>' if o.diverged else '<td class="l">within</td>'
        nan_inf = f"{s.ref_nan}/{s.ref_inf} \u2192 {s.target_nan}/{s.target_inf}"
        rows.append(
            f'<tr><td class="l node mono">{e(o.name)}</td><td class="{"over" if o.diverged else ""}">{e(fmt(o.error))}'
            f"</td><td>{e(fmt(o.tolerance))}</td>{state}<td>{e(fmt(s.max_abs))}</td><td>{e(fmt(s.mean_abs))}</td>"
            f"<td>{e(fmt_cosine(s.cosine))}</td><td>{e(_db(s.sqnr_db))}</td><td>{e(s.mismatches)}/{e(s.numel)}</td>"
            f"<td>{e(nan_inf)}</td></tr>"
        )
    ths = "".join(f'<th class="{"l" if h in ("output", "state") else ""}">{e(h)}</th>' for h in head)
    return f"<h2>Final outputs <small>error = {e(v.run.metric)}</small></h2>{_table(ths, rows)}"


def _db(x: float) -> str:
    return f"{x:.1f}" if isinstance(x, float) and math.isfinite(x) else fmt(x)


def _unmatched(v: View) -> str:
    if not v.unmatched:
        return ""
    out = ["<h2>Unmatched nodes <small>present on one side only, so not compared</small></h2>"]
    for side, names in v.unmatched:
        chips = "".join(f"<code>{e(n)}</code>" for n in names[:30])
        out.append(f'<div class="chips"><b>{e(side)}</b> ({len(names)}): {chips}</div>')
        if len(names) > 30:
            rest = "".join(f"<code>{e(n)}</code>" for n in names[30:])
            out.append(f'<details><summary>{len(names) - 30} more</summary><div class="chips">{rest}</div></details>')
    return "\n".join(out)


def _run_facts(v: View) -> str:
    run = v.run
    out = ["<h2>Run</h2>"]
    head = ("side", "device", "ran", "asked", "hardware", "config", "precision of runtime ops", "note")
    rows = []
    for s in v.sides:
        config = ", ".join(f"{k}={val}" for k, val in s.config) or "-"
        counts = ", ".join(f"{k} {n}" for k, n in s.kernels) or "-"
        ran = e(s.precision) + (' <span class="pill emulated">emulated</span>' if s.emulated else "")
        asked = s.requested or "-"
        rows.append(f'<tr><td class="l">{e(s.title.lower())}</td><td class="l mono">{e(s.device)}</td>'
                    f'<td class="l">{ran}</td><td class="l">{e(asked)}</td><td class="l">{e(s.hardware or "-")}'
                    f'</td><td class="l small mono">{e(config)}</td><td class="l small">{e(counts)}</td>'
                    f'<td class="l small">{e(s.note or "-")}</td></tr>')
    ths = "".join(f'<th class="l">{e(h)}</th>' for h in head)
    out.append(_table(ths, rows))

    facts: list[tuple[str, str]] = [("model", e(run.model))]
    if run.target_model:
        facts.append(("target model", e(run.target_model)))
    if run.model_hash:
        facts.append(("model hash", f"<code>{e(run.model_hash)}</code>"))
    facts.append(("metric", e(run.metric)))
    if run.strategy:
        facts.append(("strategy", e(run.strategy)))
    facts.append(("tolerance", e(v.tolerance.text)))
    if v.coverage is not None:
        facts.append(("coverage", e(v.coverage.value)))
    if run.inputs:
        facts.append(("inputs", _join(f"<code>{e(name)}</code> {e('x'.join(str(d) for d in shape))} {e(dtype)}"
                                      for name, shape, dtype in run.inputs)))
    timings, compiles, costs = v.fact("timings"), v.fact("compiles"), v.fact("costs")
    if timings is not None:
        # The timers overlap (a compile inside "experiments"); the stages do not: the total is theirs, as the text's
        total = f" (total {run.seconds:.2f}s over the stages)" if run.seconds is not None else ""
        facts.append(("timings", e(f"{timings.value}{total}")))
    if compiles is not None:
        facts.append(("compiles", e(compiles.value)))
    if costs is not None:
        facts.append(("cost per stage", e(costs.value)))
    if run.fidelity is not None:
        f = run.fidelity
        facts.append(("fidelity", e(f"plain_error {fmt(f.plain_error)}, tapped_error {fmt(f.tapped_error)}, "
                                    f"ratio {_num(f.ratio)}")))
    versions = dict(run.openvino_versions)
    if len(versions) > 1:
        facts.append(("OpenVINO", e(f"reference {versions['reference']}, target {versions['target']} (different "
                                    "releases)")))
    elif run.openvino_version:
        facts.append(("OpenVINO", e(run.openvino_version)))
    out.append('<dl class="kv">' + "".join(f"<dt>{e(k)}</dt><dd>{val}</dd>" for k, val in facts) + "</dl>")
    return "\n".join(out)


def _table(head: str, rows: Iterable[str]) -> str:
    """A table in a box of its own that scrolls sideways when the table is wider than the page (a phone):
    the page itself never does."""
    return (f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
            "</div>")


def _join(parts: Iterable[str]) -> str:
    return "; ".join(parts)
