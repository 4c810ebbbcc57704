"""Figures of a `Report`: error along depth, value scatter of one tensor, and a node's graph neighbourhood.

matplotlib is an optional dependency (``pip install matplotlib``, or the ``plot`` extra) and is imported inside each function.
Every function builds a `matplotlib.figure.Figure` directly (never pyplot's global state), so it is safe in
threads, in scripts without a display and under the Agg backend. The figures are `ReportFigure`s, which show
as PNG images when left as a cell's value in Jupyter, with or without ``%matplotlib inline``; save one with
``fig.savefig("errors.png")``.

Errors are drawn on a log scale: exact zeros are clipped to a floor below the smallest positive value shown, and
infinite or NaN errors are drawn as triangles at the top edge.
"""

from __future__ import annotations

import base64
import io
import math
from typing import TYPE_CHECKING

import numpy as np

from bisect_ov.analysis.headroom import NEAR
from bisect_ov.core.extras import install_hint

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from bisect_ov.report.report import NodeResult, Report

__all__ = ["plot_errors", "plot_headroom", "plot_values", "plot_neighbourhood", "figure_to_png_base64", "ROLE_COLORS"]

# Colours by role, shared with the HTML page.
ROLE_COLORS = {
    "source": "#c62828",     # red: error starts here
    "amplifier": "#ef6c00",  # orange: multiplies error it was given
    "inherits": "#8a8a8a",   # grey: only passes error on
    "ok": "#1565c0",         # blue: within tolerance
}
_MAX_POINTS = 20_000
MAX_NEIGHBOURS = 24  # boxes in a neighbourhood plot: what a person reads, and what draws in a second


def _require_matplotlib():
    """The Figure class every plot is made of (`ReportFigure`), or ImportError saying how to install matplotlib."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError as err:  # pragma: no cover - exercised by monkeypatching in the tests
        raise ImportError(
            "Plotting needs matplotlib, which is not installed: " + install_hint("plot")
        ) from err
    return _report_figure()


_FIGURE_CLASS = None


def _report_figure():
    """`ReportFigure`, made on first use so that importing this module does not import matplotlib."""
    global _FIGURE_CLASS
    if _FIGURE_CLASS is None:
        from matplotlib.figure import Figure

        class ReportFigure(Figure):
            """A matplotlib Figure that shows itself as a PNG in Jupyter.

            Figures made without pyplot are not known to IPython's matplotlib integration, so a fresh kernel
            (no ``%matplotlib inline``, no pyplot imported) would print ``<Figure size ...>``. With that
            integration active, its own PNG formatter takes precedence over `_repr_png_`: one image either way.
            """

            def _repr_png_(self) -> bytes:
                buf = io.BytesIO()
                self.savefig(buf, format="png", dpi=100, facecolor="white")
                return buf.getvalue()

        # Found again by name (pickling, copying) through the module's __getattr__.
        ReportFigure.__module__ = __name__
        ReportFigure.__qualname__ = "ReportFigure"
        _FIGURE_CLASS = ReportFigure
    return _FIGURE_CLASS


def __getattr__(name: str):
    if name == "ReportFigure":
        return _report_figure()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _finite_positive(values) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]


def _log_limits(values) -> tuple[float, float]:
    """Floor (where zeros are drawn) and ceiling (where non-finite values are drawn) for a log axis."""
    pos = _finite_positive(values)
    if not pos:
        return 1e-12, 1.0
    lo, hi = min(pos), max(pos)
    floor = 10 ** (math.floor(math.log10(lo)) - 1)
    ceiling = 10 ** (math.ceil(math.log10(hi)) + 1)
    return floor, ceiling


def _clip(values, floor: float, ceiling: float) -> np.ndarray:
    out = np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    nonfinite = ~np.isfinite(out)
    out[nonfinite] = ceiling
    out[out < floor] = floor
    return out


def plot_errors(report: "Report", ax: "Axes | None" = None) -> "Figure":
    """Each compared node's error along the topological order, with its tolerance and the culprits marked.

    x is the node's topological index in the model graph, y its error under the report's metric (log scale).
    The grey dashed step line is each node's tolerance; points over it are coloured by role (source red,
    amplifier orange, inherits grey) and the first divergences and sources are labelled with their names.
    The local errors (the error a node adds from exact inputs) are drawn as a second series, for the nodes whose
    local error was measured only (the legend says how many). Zero errors are drawn at the axis floor,
    infinite/NaN ones as triangles at the top.

    Parameters
    ----------
    report
        A `Report`.
    ax
        Draw into this matplotlib Axes; a new Figure is made when None.

    Returns
    -------
    matplotlib.figure.Figure
        The figure holding the axes.
    """
    Figure = _require_matplotlib()
    if ax is None:
        fig = Figure(figsize=(10, 3.6), layout="constrained")
        ax = fig.add_subplot(1, 1, 1)
    else:
        fig = ax.figure
    nodes = list(report.nodes)
    if not nodes:
        ax.text(0.5, 0.5, "no compared nodes", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig

    x = np.array([n.index for n in nodes], dtype=np.float64)
    local = [getattr(n, "local_error", None) for n in nodes]
    has_local = any(v is not None for v in local)
    floor, ceiling = _log_limits(
        [n.error for n in nodes] + [n.tolerance for n in nodes] + (local if has_local else [])
    )
    err = _clip([n.error for n in nodes], floor, ceiling)
    tol = _clip([n.tolerance for n in nodes], floor, ceiling)

    ax.set_yscale("log")
    ax.plot(x, err, color="#78909c", linewidth=1.1, label=f"error ({report.metric})", zorder=3)
    ax.plot(x, tol, color="#616161", linestyle="--", linewidth=1.0, drawstyle="steps-mid", label="tolerance", zorder=2)
    if has_local:
        # Only the nodes whose local error was measured: an unmeasured one (None) is no point, never the ceiling.
        measured = [i for i, v in enumerate(local) if v is not None]
        loc = _clip([local[i] for i in measured], floor, ceiling)
        ax.plot(x[measured], loc, color="#7b1fa2", linewidth=1.0, linestyle=":", marker=".", markersize=3,
                label=f"local error ({len(measured)} of {len(nodes)} measured)", zorder=3)

    zero = [i for i, n in enumerate(nodes) if n.error == 0]
    for role in ("ok", "inherits", "amplifier", "source"):
        sel = [i for i, n in enumerate(nodes) if n.role == role and i not in zero]
        if sel:
            ax.scatter(x[sel], err[sel], s=14 if role in ("ok", "inherits") else 40, color=ROLE_COLORS[role],
                       edgecolors="white", linewidths=0.5, label=role, zorder=4)
    if zero:
        ax.scatter(x[zero], err[zero], marker="v", s=22, facecolors="none", edgecolors=ROLE_COLORS["ok"],
                   linewidths=0.9, label="exact (0), drawn at floor", zorder=4)
    nonfinite = [i for i, n in enumerate(nodes) if not math.isfinite(n.error)]
    if nonfinite:
        ax.scatter(x[nonfinite], err[nonfinite], marker="^", s=70, color="#b71c1c", label="NaN/Inf, drawn at top",
                   zorder=5)
    firsts = [i for i, n in enumerate(nodes) if n.first]
    if firsts:
        ax.scatter(x[firsts], err[firsts], s=130, facecolors="none", edgecolors="#b71c1c", linewidths=1.6,
                   label="first divergence", zorder=5)

    # Name the first divergences and the other sources (at most 6 labels): highest first, alternating above and
    # below the point, so neighbouring labels do not sit on each other.
    labelled = firsts + [i for i, n in enumerate(nodes) if n.role == "source" and not n.first]
    labelled = sorted(labelled[:6], key=lambda i: -err[i])
    middle = (float(x.min()) + float(x.max())) / 2 if len(x) else 0.0
    for k, i in enumerate(labelled):
        n = nodes[i]
        # Toward the plot's middle, so that no label runs past the frame on the right.
        right = x[i] <= middle
        offset = (10 if right else -10, 12 + 5 * k) if k % 2 == 0 else (10 if right else -10, -20 - 5 * k)
        ax.annotate(
            _short(n.name, n.op_type), (x[i], err[i]), xytext=offset, textcoords="offset points",
            ha="left" if right else "right", fontsize=8, color=ROLE_COLORS.get(n.role, "#333333"),
            fontweight="bold" if n.first else "normal", parse_math=False,
            arrowprops={"arrowstyle": "-", "color": "#9e9e9e", "linewidth": 0.6},
        )
    ax.set_ylim(floor / 2, ceiling * 4)
    ax.set_xlabel("topological index of the node")
    ax.set_ylabel(f"{report.metric} (log)")
    ax.grid(True, which="major", axis="y", color="#eeeeee")
    ax.set_title(f"Error along depth: {report.ref.label} \u2192 {report.target.label}", fontsize=10, loc="left",
                 parse_math=False)
    # Below the axes: the labels of the highest points (where NaN/Inf are drawn) sit where a legend inside would.
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=4, frameon=False)
    return fig


def plot_headroom(report: "Report", ax: "Axes | None" = None) -> "Figure":
    """Each compared node's f16 headroom along the topological order (`NodeResult.f16_headroom`: powers of two
    between its largest magnitude on the reference and 65,504).

    A line at 0 (the f16 limit) and a dotted one at 1 (within 2x of it); points under 1 are red and the lowest
    are labelled. Nodes without floating outputs are left out; all-zero ones (infinite headroom) are drawn at the
    top. Meaningful for any target (what the reference computes), written for f16 ones.
    """
    Figure = _require_matplotlib()
    if ax is None:
        fig = Figure(figsize=(10, 3.2), layout="constrained")
        ax = fig.add_subplot(1, 1, 1)
    else:
        fig = ax.figure
    nodes = [n for n in report.nodes if not math.isnan(n.f16_headroom)]
    if not nodes:
        ax.text(0.5, 0.5, "no compared node with floating outputs", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    finite = [n.f16_headroom for n in nodes if math.isfinite(n.f16_headroom)]
    top = max(finite + [NEAR + 1.0]) + 1.0
    bottom = min(finite + [0.0]) - 1.0
    x = np.array([n.index for n in nodes], dtype=np.float64)
    y = np.array([min(max(n.f16_headroom, bottom), top) for n in nodes], dtype=np.float64)
    ax.plot(x, y, color="#78909c", linewidth=1.0, marker=".", markersize=3, label="headroom (powers of two)", zorder=3)
    near = [i for i, n in enumerate(nodes) if n.f16_headroom < NEAR]
    if near:
        ax.scatter(x[near], y[near], s=36, color=ROLE_COLORS["source"], edgecolors="white", linewidths=0.5,
                   label=f"within 2x of 65,504 or over ({len(near)})", zorder=4)
    ax.axhline(0.0, color="#b71c1c", linewidth=1.0, label="f16 limit (65,504)", zorder=2)
    ax.axhline(NEAR, color="#b71c1c", linewidth=0.8, linestyle=":", zorder=2)
    middle = (float(x.min()) + float(x.max())) / 2
    for k, i in enumerate(sorted(near, key=lambda i: y[i])[:4]):
        right = x[i] <= middle
        ax.annotate(_short(nodes[i].name, nodes[i].op_type), (x[i], y[i]), xytext=(10 if right else -10, -14 - 6 * k),
                    textcoords="offset points", ha="left" if right else "right", fontsize=8,
                    color=ROLE_COLORS["source"], parse_math=False,
                    arrowprops={"arrowstyle": "-", "color": "#9e9e9e", "linewidth": 0.6})
    ax.set_ylim(bottom, top)
    ax.set_xlabel("topological index of the node")
    ax.set_ylabel("log2(65,504 / max |x|)")
    ax.grid(True, which="major", axis="y", color="#eeeeee")
    ax.set_title(f"f16 headroom on the reference ({report.ref.label})", fontsize=10, loc="left", parse_math=False)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncols=3, frameon=False)
    return fig


def _short(name: str, op_type: str = "", width: int = 36) -> str:
    """A node's name for a plot label: its module path and op type for PyTorch names (``block.1.layer.0.layer_norm
    Power``), cut in the middle so that its start and its distinctive end stay."""
    from bisect_ov.analysis.names import parse_name
    from bisect_ov.report.text import printable  # a control character in a name has no glyph: its escape has

    parsed = parse_name(name)
    label = printable(f"{parsed.module} {op_type}".strip() if parsed is not None and parsed.module else name)
    if len(label) <= width:
        return label
    head = (width - 1) // 2
    return label[:head] + "\u2026" + label[len(label) - (width - 1 - head):]


def plot_values(ref: np.ndarray, target: np.ndarray, *, title: str = "") -> "Figure":
    """Reference values against target values for one tensor, and a histogram of their difference.

    Parameters
    ----------
    ref, target
        Arrays with the same number of elements (any shape, any numeric dtype). At most 20,000 pairs are drawn,
        chosen with a fixed seed so the figure is reproducible; non-finite pairs are counted, not drawn.
    title
        Shown above the two panels (e.g. the node's name).

    Returns
    -------
    matplotlib.figure.Figure
        Two axes: the scatter (with the line target = reference) and the histogram of target - reference.
    """
    Figure = _require_matplotlib()
    r = np.asarray(ref).reshape(-1).astype(np.float64)
    t = np.asarray(target).reshape(-1).astype(np.float64)
    if r.size != t.size:
        raise ValueError(f"plot_values needs arrays of the same size; got {r.size} and {t.size} elements.")
    finite = np.isfinite(r) & np.isfinite(t)
    n_bad = int(r.size - finite.sum())
    r, t = r[finite], t[finite]
    if r.size > _MAX_POINTS:
        pick = np.sort(np.random.default_rng(0).choice(r.size, _MAX_POINTS, replace=False))
        r_s, t_s = r[pick], t[pick]
    else:
        r_s, t_s = r, t

    fig = Figure(figsize=(9, 3.8), layout="constrained")
    ax_sc, ax_h = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    if r_s.size:
        ax_sc.scatter(r_s, t_s, s=4, alpha=0.5, color=ROLE_COLORS["ok"], linewidths=0, rasterized=True)
        lo, hi = float(min(r_s.min(), t_s.min())), float(max(r_s.max(), t_s.max()))
        if lo == hi:
            lo, hi = lo - 1, hi + 1
        ax_sc.plot([lo, hi], [lo, hi], color="#c62828", linewidth=0.8, linestyle="--", label="target = reference")
        ax_sc.legend(fontsize=7, loc="upper left", frameon=False)
        diff = t - r
        bins = 60 if np.ptp(diff) > 0 else 1
        ax_h.hist(diff, bins=bins, color="#546e7a")
        ax_h.set_yscale("log")
        ax_h.axvline(0.0, color="#c62828", linewidth=0.8)
    else:
        for a in (ax_sc, ax_h):
            a.text(0.5, 0.5, "no finite values", ha="center", va="center", transform=a.transAxes)
    shown = f"{r_s.size} of {r.size} finite pairs" if r_s.size < r.size else f"{r.size} pairs"
    ax_sc.set_title(shown + (f"; {n_bad} non-finite left out" if n_bad else ""), fontsize=9)
    ax_sc.set_xlabel("reference")
    ax_sc.set_ylabel("target")
    ax_h.set_title("target \u2212 reference", fontsize=9)
    ax_h.set_xlabel("difference")
    ax_h.set_ylabel("count (log)")
    if title:
        fig.suptitle(title, fontsize=10, parse_math=False)
    return fig


def _graph(report: "Report"):
    import networkx as nx

    g = nx.DiGraph()
    holder = {m: n.name for n in report.nodes for m in getattr(n, "group", ()) or () if m != n.key}
    for n in report.nodes:
        g.add_node(n.key, result=n)
    for n in report.nodes:
        for src in n.inputs:
            if src not in g:
                # a parameter, or a node measured only as part of a fused group, or one that was not compared
                g.add_node(src, result=None, holder=holder.get(src))
            g.add_edge(src, n.key)
    return g


def plot_neighbourhood(report: "Report", name: str, *, radius: int = 1) -> "Figure":
    """The graph around one node: its producers and consumers up to `radius` edges away, coloured by error.

    At most `MAX_NEIGHBOURS` boxes: beyond that (a node that feeds every layer, as an LLM's attention mask) the
    centre, its direct producers and consumers and the nodes furthest over their tolerance are shown, and the
    title says how many of how many.

    Drawn top to bottom in data-flow order (layers from the neighbourhood's topological generations), each box
    showing the node's name, op type and error, filled by log10 of the error (white when it was not compared;
    the node asked for has a thick border). Producers come from `NodeResult.inputs`; consumers are the nodes
    whose inputs hold the node's key.

    Parameters
    ----------
    report
        A `Report`.
    name
        Key, friendly name, tensor name or topological index of a compared node (as `Report.node` takes).
    radius
        How many edges away, in either direction, to include.

    Returns
    -------
    matplotlib.figure.Figure
    """
    Figure = _require_matplotlib()
    import networkx as nx
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import LogNorm

    centre = report.node(name)
    g = _graph(report)
    sub = nx.ego_graph(g, centre.key, radius=max(0, int(radius)), undirected=True)
    reach = sub.number_of_nodes()
    sub = sub.subgraph(_readable(sub, centre.key)).copy()
    order = {n.key: n.index for n in report.nodes}
    # Layers: each node's depth in the whole graph (longest path from an input), compressed to the depths present
    # here, so a node keeps its place in the data flow even when its own producers are outside the neighbourhood.
    depth: dict[str, int] = {}
    for key in nx.topological_sort(g):
        depth[key] = max((depth[u] + 1 for u in g.predecessors(key)), default=0)
    levels = sorted({depth[k] for k in sub})
    layers = [sorted((k for k in sub if depth[k] == lv), key=lambda k: (order.get(k, -1), k)) for lv in levels]
    row = {k: i for i, layer in enumerate(layers) for k in layer}

    errors = [n.error for n in report.nodes]
    floor, ceiling = _log_limits(errors)
    pos_err = _finite_positive(errors)
    vmin, vmax = (min(pos_err), max(pos_err)) if pos_err else (floor, 1.0)
    if vmin == vmax:
        vmin, vmax = vmin / 10, vmax * 10
    norm = LogNorm(vmin=vmin, vmax=vmax)
    cmap = colormaps["YlOrRd"]

    widest = max(len(layer) for layer in layers)
    fig = Figure(figsize=(max(5.0, 2.9 * widest + 1.2), max(2.6, 1.25 * len(layers) + 0.6)), layout="constrained")
    ax = fig.add_subplot(1, 1, 1)
    xy = {}
    for level, layer in enumerate(layers):
        for j, key in enumerate(layer):
            xy[key] = (j - (len(layer) - 1) / 2, -level)
    for src, dst in sub.edges():
        # An edge that jumps layers is bent away from the boxes of the layers it crosses, so that it does not run
        # through them; arc3 with a positive rad bends left when going down.
        rad = 0.0
        if row[dst] - row[src] > 1:
            between = [xy[k][0] for layer in layers[row[src] + 1:row[dst]] for k in layer]
            middle = (xy[src][0] + xy[dst][0]) / 2
            rad = 0.3 if middle < sum(between) / len(between) else -0.3
        ax.annotate("", xy=xy[dst], xytext=xy[src],
                    arrowprops={"arrowstyle": "-|>", "color": "#607d8b", "linewidth": 1.0, "shrinkA": 16,
                                "shrinkB": 16, "connectionstyle": f"arc3,rad={rad}"})
    face: str | tuple[float, float, float, float]  # a colour name, or the colour map's RGBA
    for key, (px, py) in xy.items():
        res: NodeResult | None = sub.nodes[key].get("result")
        if res is None:
            within = sub.nodes[key].get("holder")
            note = f"(measured within\n{_short(within, width=28)})" if within else "(not compared)"
            face, label, edge, lw = "#ffffff", f"{_short(key, width=28)}\n{note}", "#b0bec5", 1.0
        else:
            e = res.error
            if not math.isfinite(e):
                face, etext = cmap(1.0), "inf" if e > 0 else "nan"
            else:
                face, etext = cmap(norm(max(e, vmin))), f"{e:.1e}"
            over = "" if not res.diverged else f" [{res.role}{'*' if res.first else ''}]"
            label = f"{_short(res.name, width=28)}\n{res.op_type}  #{res.index}\nerr {etext}  tol {res.tolerance:.0e}{over}"
            edge = "#000000" if key == centre.key else ROLE_COLORS.get(res.role, "#607d8b")
            lw = 2.4 if key == centre.key else 1.0
        lum = 0.0
        if isinstance(face, tuple):
            lum = 0.299 * face[0] + 0.587 * face[1] + 0.114 * face[2]
        ax.text(px, py, label, ha="center", va="center", fontsize=7.5, family="monospace", parse_math=False,
                color="white" if isinstance(face, tuple) and lum < 0.45 else "black",
                bbox={"boxstyle": "round,pad=0.4", "facecolor": face, "edgecolor": edge, "linewidth": lw})
    xs = [p[0] for p in xy.values()]
    ax.set_xlim(min(xs) - 0.7, max(xs) + 0.7)
    ax.set_ylim(-(len(layers) - 1) - 0.6, 0.6)
    ax.set_axis_off()
    shown = "" if reach == len(xy) else f"; {len(xy)} of the {reach:,} nodes within it, the closest and worst"
    ax.set_title(f"Around '{_short(centre.name, centre.op_type, width=56)}' (radius {radius}{shown})", fontsize=10, loc="left",
                 parse_math=False)
    sm = ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, ax=ax, fraction=0.035, aspect=25, pad=0.01, label=f"{report.metric} (log)")
    return fig


def _readable(sub, centre: str) -> list[str]:
    """At most `MAX_NEIGHBOURS` nodes of the neighbourhood `sub`, as many as a person reads in one figure: the
    centre, then its direct producers and consumers, then the rest; within each, the nodes furthest over their
    tolerance first. A node that feeds every layer (an LLM's mask or positions) otherwise brings thousands."""
    if sub.number_of_nodes() <= MAX_NEIGHBOURS:
        return list(sub)

    def badness(key: str) -> float:
        res = sub.nodes[key].get("result")
        if res is None:
            return -1.0
        if not math.isfinite(res.error):
            return math.inf
        return res.error / res.tolerance if res.tolerance else (math.inf if res.error else 0.0)

    near = set(sub.predecessors(centre)) | set(sub.successors(centre))
    ranked = sorted((k for k in sub if k != centre), key=lambda k: (k not in near, -badness(k), k))
    return [centre] + ranked[:MAX_NEIGHBOURS - 1]


def figure_to_png_base64(fig: "Figure", *, dpi: int = 110) -> str:
    """The figure as a base64-encoded PNG, ready for ``<img src="data:image/png;base64,...">``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, facecolor="white")
    return base64.b64encode(buf.getvalue()).decode("ascii")
