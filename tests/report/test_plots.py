"""Figures of a report: what they draw, and that zero, infinite and NaN errors do not break them."""

from __future__ import annotations

import base64
import dataclasses
import math
import sys

import numpy as np
import pytest

pytest.importorskip("matplotlib")
from matplotlib.figure import Figure  # noqa: E402

from bisect_ov import bisect, inject_fault  # noqa: E402
from bisect_ov.core.errors import InputError  # noqa: E402
from bisect_ov.report.plots import figure_to_png_base64, plot_errors, plot_neighbourhood, plot_values  # noqa: E402
from bisect_ov.zoo import synthetic  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def report():
    m = synthetic.demo()
    return bisect(m, "CPU", "CPU:f32", target_model=inject_fault(m, "block1/conv1"), strategy="full", progress=False)


def _png(fig: Figure) -> bytes:
    data = base64.b64decode(figure_to_png_base64(fig))
    assert data[:8] == PNG
    return data


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_plot_errors_draws_error_tolerance_and_culprits(report):
    fig = plot_errors(report)
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    labels = [line.get_label() for line in ax.lines]
    measured = sum(n.local_error is not None for n in report.nodes)  # each node alone on the target
    assert labels == ["error (rel_l2)", "tolerance", f"local error ({measured} of {len(report.nodes)} measured)"]
    err_line = ax.lines[0]
    assert list(err_line.get_xdata()) == [n.index for n in report.nodes]
    # One scatter per role present (here every node within tolerance is exact, so "ok" has no points of its own),
    # the exact zeros, and the first-divergence ring.
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {n.role for n in report.nodes if n.error > 0} == {"inherits", "amplifier", "source"}
    for label in ("inherits", "amplifier", "source", "first divergence", "exact (0), drawn at floor"):
        assert label in legend
    assert "ok" not in legend
    assert "block1/conv1" in _texts(ax)  # the first divergence is named on the plot
    assert len(_png(fig)) > 10_000


def test_plot_errors_survives_zero_inf_and_nan(report):
    nodes = list(report.nodes)
    nodes[0] = dataclasses.replace(nodes[0], error=0.0, tolerance=0.0)
    nodes[1] = dataclasses.replace(nodes[1], error=math.inf)
    nodes[2] = dataclasses.replace(nodes[2], error=math.nan, growth=math.nan)
    bad = dataclasses.replace(report, nodes=tuple(nodes))
    fig = plot_errors(bad)
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    assert 0 < lo < hi and math.isfinite(hi)
    y = np.asarray(ax.lines[0].get_ydata())
    assert np.all(np.isfinite(y)) and np.all(y > 0)
    assert y[1] == y[2] == y.max()  # non-finite errors sit at the top
    assert y[0] == y.min()  # the exact match at the floor
    assert "NaN/Inf, drawn at top" in [t.get_text() for t in ax.get_legend().get_texts()]
    _png(fig)


def test_plot_errors_all_zero_and_empty(report):
    zero = dataclasses.replace(report, nodes=tuple(dataclasses.replace(n, error=0.0, role="ok", first=False)
                                                   for n in report.nodes), first_keys=(), ranking=())
    _png(plot_errors(zero))
    empty = dataclasses.replace(report, nodes=(), first_keys=(), ranking=())
    fig = plot_errors(empty)
    assert "no compared nodes" in _texts(fig.axes[0])


def test_plot_errors_into_given_axes_and_local_error(report):
    nodes = []
    for n in report.nodes:
        n = dataclasses.replace(n)
        object.__setattr__(n, "local_error", n.error / 2)  # a future NodeResult field
        nodes.append(n)
    fig = Figure()
    ax = fig.add_subplot(1, 2, 2)
    out = plot_errors(dataclasses.replace(report, nodes=tuple(nodes)), ax=ax)
    assert out is fig and len(fig.axes) == 1
    n = len(report.nodes)
    assert [line.get_label() for line in ax.lines] == ["error (rel_l2)", "tolerance", f"local error ({n} of {n} measured)"]


def test_unmeasured_local_errors_are_left_out_not_drawn_at_the_top(report):
    # Two nodes measured, one of them infinite (drawn at the top, as any non-finite value); the rest were not.
    nodes = list(report.nodes)
    nodes[3] = dataclasses.replace(nodes[3], local_error=1e-3)
    nodes[5] = dataclasses.replace(nodes[5], local_error=math.inf)
    nodes = [n if i in (3, 5) else dataclasses.replace(n, local_error=None) for i, n in enumerate(nodes)]
    fig = plot_errors(dataclasses.replace(report, nodes=tuple(nodes)))
    local = next(line for line in fig.axes[0].lines if line.get_label().startswith("local error"))
    assert local.get_label() == f"local error (2 of {len(nodes)} measured)"
    x, y = local.get_data()
    assert list(x) == [nodes[3].index, nodes[5].index]
    assert y[0] == pytest.approx(1e-3) and y[1] > 1e-3  # only the infinite one sits at the ceiling


def test_plot_values_scatter_and_histogram():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((60, 1000)).astype(np.float32)
    target = ref + rng.standard_normal(ref.shape).astype(np.float32) * 1e-2
    target[0, :3] = [np.nan, np.inf, -np.inf]
    fig = plot_values(ref, target, title="block1/conv1")
    assert len(fig.axes) == 2
    scatter, hist = fig.axes
    points = scatter.collections[0].get_offsets()
    assert len(points) == 20_000  # subsampled
    again = plot_values(ref, target).axes[0].collections[0].get_offsets()
    assert np.array_equal(points, again)  # seeded
    assert "3 non-finite left out" in scatter.get_title()
    assert len(hist.patches) == 60
    assert fig._suptitle.get_text() == "block1/conv1"
    _png(fig)


def test_plot_values_edge_cases():
    same = np.ones((4, 4))
    fig = plot_values(same, same)  # zero difference, a single value
    assert len(fig.axes) == 2
    _png(fig)
    fig = plot_values(np.full(5, np.nan), np.full(5, np.nan))
    assert "no finite values" in _texts(fig.axes[0])
    with pytest.raises(ValueError, match="same size"):
        plot_values(np.zeros(3), np.zeros(4))


def test_plot_neighbourhood(report):
    fig = plot_neighbourhood(report, "block1/conv1")
    ax = fig.axes[0]
    assert len(fig.axes) == 2  # the graph and its colour bar
    boxes = [t for t in _texts(ax) if t]
    assert len(boxes) == 3
    assert any(t.startswith("stem/relu\n") for t in boxes)  # producer
    assert any(t.startswith("block1/bn1\n") for t in boxes)  # consumer
    centre = next(t for t in boxes if t.startswith("block1/conv1\n"))
    assert "Convolution" in centre and "[source*]" in centre
    arrows = [c for c in ax.get_children() if type(c).__name__ == "Annotation"]
    assert len(arrows) == 2
    _png(fig)

    wide = plot_neighbourhood(report, "inorm/sub", radius=2)
    texts = _texts(wide.axes[0])
    assert any(t.startswith("inorm/sqdiff\n") for t in texts) and any(t.startswith("block1/relu\n") for t in texts)
    alone = plot_neighbourhood(report, "inorm/sub", radius=0)
    assert len([t for t in _texts(alone.axes[0]) if t]) == 1


def test_plot_neighbourhood_marks_uncompared_and_nonfinite(report):
    # The demo's first node reads the model's parameter, which is not a compared node.
    first = report.nodes[0]
    nodes = (dataclasses.replace(first, error=math.inf),) + report.nodes[1:]
    fig = plot_neighbourhood(dataclasses.replace(report, nodes=nodes), first.name)
    texts = _texts(fig.axes[0])
    assert any("(not compared)" in t for t in texts)
    assert any("err inf" in t for t in texts)
    with pytest.raises(InputError):
        plot_neighbourhood(report, "no such node")


def test_missing_matplotlib_is_a_clear_error(report, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    for call in (lambda: plot_errors(report), lambda: plot_values(np.zeros(2), np.zeros(2)),
                 lambda: plot_neighbourhood(report, "block1/conv1")):
        with pytest.raises(ImportError, match=r"pip install matplotlib \(or, in a checkout of bisect_ov: pip install -e '\.\[plot\]'\)"):
            call()


def _star(report, n: int):
    """`report` with `n` nodes where one ('mask') feeds all the others, as a mask or positions feed every layer of
    an LLM; the chain's middle node is the first divergence."""
    from bisect_ov.report.report import NodeResult

    middle = n // 2
    nodes = [NodeResult("mask", "mask", "Convert", 0, 0.0, 0.0, 1e-3, 0.0, "ok", inputs=("x",))]
    for i in range(1, n):
        after = i >= middle
        nodes.append(NodeResult(f"layer{i}/add", f"layer{i}/add", "Add", i, 0.5 if after else 1e-5,
                                0.5 if i > middle else 1e-5, 1e-3, 5e4 if i == middle else 1.0,
                                "source" if i == middle else "inherits" if after else "ok", first=i == middle,
                                inputs=("mask",) + ((f"layer{i - 1}/add",) if i > 1 else ())))
    first = f"layer{middle}/add"
    return dataclasses.replace(report, nodes=tuple(nodes), first_keys=(first,), ranking=(first,), fix=None, curve=(),
                               delegation=None, sensitivity=())


def test_a_node_that_feeds_every_other_does_not_bring_them_all_into_the_neighbourhood(report):
    from bisect_ov.report.plots import MAX_NEIGHBOURS

    star = _star(report, 600)  # 3,000 such nodes took 65-72 s in save_html, drawing about 6,000 labels
    fig = plot_neighbourhood(star, "layer300/add", radius=2)
    boxes = [t for t in _texts(fig.axes[0]) if t]
    assert len(boxes) == MAX_NEIGHBOURS
    names = {b.split("\n")[0] for b in boxes}
    assert {"layer300/add", "mask", "layer299/add", "layer301/add", "layer302/add"} <= names  # centre and nearest
    assert "24 of the 601 nodes within it" in fig.axes[0].get_title("left")  # 600 and the model input
    small = plot_neighbourhood(report, "block1/conv1")
    title = small.axes[0].get_title("left")
    assert "of the" not in title and "radius 1" in title  # a neighbourhood that fits is drawn whole
