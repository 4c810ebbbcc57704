"""A report in Jupyter, as a user sees it: executed in a fresh kernel (nbclient, no ``%matplotlib inline``).

The report's HTML display is the HTML page's renderer in its compact form and must hold what ``to_text()``
holds (the run's notes, the verdict, the causes, unmatched nodes, the final outputs, the experiments, the run's
facts: the records of the report's view), and the figures of ``plot_errors()`` and ``plot_neighbourhood()``
must show as images, not as ``<Figure size ...>``.
"""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import pathlib

import pytest

from bisect_ov import Report
from bisect_ov.report.html import render_fragment
from bisect_ov.report.numbers import fmt
from bisect_ov.report.view import view

ROOT = pathlib.Path(__file__).resolve().parents[2]
SAVED = pathlib.Path(__file__).parent / "data" / "report_v1.json"
NOTES = ("Fidelity: exposing taps changed the final error by 3.1x <b>bold</b>; the fusion strategy was used",
         "The target is not deterministic: two runs differ by 2.0e-07")


def _require(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.fail(f"needs {missing}: install the test extra: pip install -e \".[test]\"", pytrace=False)


def _report() -> Report:
    report = Report.load(SAVED)
    return dataclasses.replace(report, notes=NOTES, unmatched={"target": ["extra/op", "extra/<op2>"]})


def _run(cells: list[str], tmp_path: pathlib.Path):
    _require("nbformat", "nbclient", "ipykernel", "matplotlib")
    import nbformat
    from nbclient import NotebookClient

    setup = (f"import sys, dataclasses\nsys.path.insert(0, {str(ROOT)!r})\nimport bisect_ov\n"
             f"assert bisect_ov.__file__.startswith({str(ROOT)!r}), bisect_ov.__file__\n"
             "from bisect_ov import Report\n"
             f"report = dataclasses.replace(Report.load({str(SAVED)!r}), notes={NOTES!r}, "
             "unmatched={'target': ['extra/op', 'extra/<op2>']})")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in [setup, *cells]])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
                   extra_arguments=["--HistoryManager.hist_file=:memory:"]).execute()
    errors = [o for c in nb.cells for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    return nb.cells[1:]


def _results(cell) -> list[dict]:
    return [o["data"] for o in cell.outputs if o.output_type in ("execute_result", "display_data")]


def test_the_html_display_holds_what_the_text_holds(tmp_path):
    cell, = _run(["report"], tmp_path)
    data, = _results(cell)
    page = data["text/html"]
    report = _report()
    text = report.to_text(width=100_000, costs=True)  # with each stage's cost, as the page shows them
    # The page's renderer, in its compact form: the page's sections without the plots and the document.
    assert page == render_fragment(report) and page.startswith('<div class="bisect-ov-report compact">')
    assert "<img" not in page and "<html" not in page
    v = view(report)
    # Every sentence and figure of the report's view is in both renderings: both format the same records.
    both = [*NOTES, "extra/op", "extra/<op2>", *(f.text for f in v.verdict.facts), v.tolerance.text,
            *(c.text for f in v.verdict.first for c in f.causes), *(f.node.label for f in v.verdict.first),
            *(line.strip() for b in v.experiments for line in b.lines),
            *(x for s in v.sides for x in (s.device, s.precision, s.hardware, s.note) if x),
            *(f.value for f in v.footer if f.value and f.kind != "cost"), report.openvino_version.split("-")[0],
            fmt(report.fidelity.plain_error), fmt(report.fidelity.tapped_error)]
    assert html.escape(v.verdict.headline) in page and f"Verdict: {v.verdict.text}" in text
    missing = [s for s in both if html.escape(s) not in page or s not in text]
    assert not missing, missing
    for o in report.outputs:
        assert f'<td class="l node mono">{html.escape(o.name)}</td><td class="over">{fmt(o.error)}</td>' in page
    for n in report.culprits[:10]:
        assert f'<td class="l node mono">{html.escape(n.label)}</td>' in page and n.label in text


def test_plots_display_as_images_in_a_fresh_kernel(tmp_path):
    cells = _run(["'matplotlib.pyplot' in sys.modules", "report.plot_errors()",
                  "report.plot_neighbourhood(report.first_divergence.name)"], tmp_path)
    (pyplot,), errors, around = (_results(c) for c in cells)
    assert pyplot["text/plain"] == "False"  # nothing imported pyplot or set up the inline backend
    for shown in (errors, around):
        assert len(shown) == 1, [list(d) for d in shown]
        assert "image/png" in shown[0], list(shown[0])
        import base64

        assert base64.b64decode(shown[0]["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_display_once_with_the_inline_backend(tmp_path):
    cells = _run(["%matplotlib inline", "report.plot_errors()"], tmp_path)
    shown = _results(cells[1])
    assert len(shown) == 1 and "image/png" in shown[0]
