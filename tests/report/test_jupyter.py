"""A report in Jupyter, as a user sees it: executed in a fresh kernel (nbclient, no ``%matplotlib inline``).

The report's HTML display must hold what ``to_text()`` holds (the run's notes, the fidelity line, unmatched
nodes, the final outputs, the run's facts), and the figures of ``plot_errors()`` and ``plot_neighbourhood()``
must show as images, not as ``<Figure size ...>``.
"""

from __future__ import annotations

import dataclasses
import html
import importlib.util
import pathlib

import pytest

from bisect_ov import Report
from bisect_ov.report.text import fmt

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
    text = report.to_text(width=100_000)
    for note in NOTES:
        assert html.escape(note) in page, note
    assert "Note: " + html.escape(NOTES[0]) in page
    assert "Unmatched in target: extra/op, extra/&lt;op2&gt;" in page
    assert "Fidelity: final-output error" in page and "Timings:" in page and "Compiles:" in page
    assert "OpenVINO 2026.4.1" in page
    # every line of prose the terminal shows is in the HTML (tables compared cell by cell below)
    table = {"Culprits", "Final outputs:", "rank  node"}
    prose = [line.strip() for line in text.splitlines()[2:]
             if line.strip() and not line.startswith(" " * 2 + report.outputs[0].name)
             and not any(line.startswith(t) for t in table) and not line[:1].isdigit() and "  " not in line.strip()]
    missing = [line for line in prose if html.escape(line) not in page]
    assert not missing, missing
    for o in report.outputs:
        assert f"<td>{html.escape(o.name)}</td><td>{fmt(o.error)}</td>" in page
    for n in report.culprits[:10]:
        assert f"<td>{html.escape(n.name)}</td>" in page


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
