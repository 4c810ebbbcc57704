"""The report's typed view: the verdict's kind for each kind of run, the records every rendering formats, one
HTML renderer for the page and Jupyter, and the terminal page fitted to any width from 40 columns.

Runs on saved reports (no OpenVINO run): schema 1 and 2 files, and variants of them made with
`dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
import html
import pathlib
import re

import pytest

from bisect_ov.core.records import Fidelity
from bisect_ov.report.html import render_fragment, render_page
from bisect_ov.report.report import Report
from bisect_ov.report.text import fit_table
from bisect_ov.report.view import COLUMNS, VERDICT_KINDS, view

DATA = pathlib.Path(__file__).parent / "data"
GOLDEN = pathlib.Path(__file__).resolve().parents[1] / "golden" / "avx512_bf16"  # saved reports, read as data
V1, V2 = Report.load(DATA / "report_v1.json"), Report.load(DATA / "report_v2.json")


def _wide(report: Report) -> Report:
    """`report` with every optional culprit column filled (NaN counts, kernels, samples) and long names."""
    runtime = {"target": {"precision": "f16", "kernel": "jit_avx512_core_f16_a_long_kernel_name", "fused": ["x"]}}
    spread = {"mean": 0.1, "p50": 0.1, "p90": 0.2, "max": 0.3, "worst_sample": 1, "count": 8, "over_tolerance": 5}
    nodes = tuple(dataclasses.replace(n, name=n.name + "/with/a/rather/long/module/path", runtime=runtime,
                                      over_samples=spread, local_error=n.local_error or 1e-3, impact=0.1)
                  if n.key in V1.ranking else n for n in report.nodes)
    return dataclasses.replace(report, nodes=nodes)


def _calm(report: Report, *, absorbed: bool) -> Report:
    """`report` with nothing over its tolerance at the outputs (and, unless `absorbed`, nowhere)."""
    roles = {k: ("absorbed" if absorbed else "ok") for k in report.ranking}
    nodes = tuple(dataclasses.replace(n, role=roles.get(n.key, n.role), first=False, rank=None,
                                      error=n.error if absorbed else n.tolerance / 2) for n in report.nodes)
    outputs = tuple(dataclasses.replace(o, error=o.tolerance / 2) for o in report.outputs)
    return dataclasses.replace(report, nodes=nodes, outputs=outputs, ranking=(), first_keys=())


def _unfaithful(report: Report, *, localized: bool) -> Report:
    """`report` whose taps the fidelity check rejected: localized by partitioned runs at its first node, or not."""
    first = report.first_divergences[0]
    fidelity = Fidelity(report.outputs[0].error, report.outputs[0].error / 100, 0.01, warning="taps changed it",
                        outcome="localized_by_partitions" if localized else "unfaithful",
                        node=first.name if localized else None, prefix_error=0.1, before_error=0.001,
                        partitioned_runs=7, reason="exposing tensors changed what ran; pieces do not either")
    keys = (first.key,) if localized else ()
    return dataclasses.replace(report, fidelity=fidelity, first_keys=keys, ranking=keys)


def test_without_a_single_source_there_is_no_first_divergence_and_the_verdict_says_why():
    # What the README says of report.first_divergence: None when nothing diverges, and in this case too.
    report = dataclasses.replace(V1, first_keys=())
    assert report.first_divergence is None and report.diverges and report.culprits
    verdict = report.to_text(width=10_000).splitlines()[2]
    assert verdict.startswith("Verdict: DIVERGES, but no single node creates the error")
    readme = " ".join((pathlib.Path(__file__).parents[2] / "README.md").read_text().split())
    assert '"DIVERGES, but no single node creates the error"' in readme


@pytest.mark.parametrize("report, kind", [
    (V1, "diverges"),
    (dataclasses.replace(V1, first_keys=()), "accumulates"),
    (_calm(V1, absorbed=True), "absorbed"),
    (_calm(V1, absorbed=False), "no_divergence"),
    (_unfaithful(V1, localized=True), "localized_by_partitions"),
    (_unfaithful(V1, localized=False), "unfaithful"),
], ids=VERDICT_KINDS)
def test_each_kind_of_verdict_is_a_kind_the_renderings_agree_on(report, kind):
    v = view(report)
    assert v.verdict.kind == kind and v.verdict.diverges == report.diverges
    text, page, fragment = report.to_text(width=10_000), render_page(report, plots=False), render_fragment(report)
    assert text.splitlines()[2] == f"Verdict: {v.verdict.text}"
    badge = "DIVERGES" if report.diverges else "NO DIVERGENCE"
    for shown in (page, fragment):
        assert f'{badge}</span>{html.escape(v.verdict.headline)}</div>' in shown
        assert all(html.escape(f.text) in shown for f in v.verdict.facts)
    assert all(f.text in text for f in v.verdict.facts)
    assert (len(v.verdict.first) > 0) == (kind in ("diverges", "localized_by_partitions"))


def test_the_first_divergence_carries_its_cause_records():
    first = view(V2).verdict.first
    assert [f.node.name for f in first] == ["inorm/sub", "inorm/sqdiff"]
    assert [[c.kind for c in f.causes] for f in first] == [["cancellation"], ["over_tolerance"]]
    assert first[0].ratio == pytest.approx(first[0].node.error / first[0].node.tolerance)
    assert first[0].text.endswith(first[0].causes[0].text + ".")


def test_sides_and_tolerance_say_the_same_in_every_rendering():
    bf16 = dataclasses.replace(V2.target, requested_precision="bf16")  # asked for bf16, ran f16
    report = dataclasses.replace(V2, target=bf16, tolerance=dataclasses.replace(
        V2.tolerance, per_node={"inorm/sub": 0.1}, quantization={"a": 0.01, "b": 0.02}))
    v = view(report)
    target = v.sides[1]
    assert (target.role, target.title, target.substituted, target.emulated, target.recorded) == (
        "target", "Target", "bf16", True, False)
    assert "(asked for bf16)" in target.text
    tol = v.tolerance
    assert (tol.model, tol.per_node, tol.quantized, tol.min_growth) == ("rounding", 1, 2, 2.0)
    assert "1 per-node override(s)" in tol.text and "at 2 nodes" in tol.text and "growth >= 2.0" in tol.text
    text, page = report.to_text(width=10_000), render_page(report, plots=False)
    assert f"target: {target.text}" in text and tol.text in text
    assert "(asked for bf16)" in page and html.escape(tol.text) in page


def test_jupyter_shows_the_page_sections_without_plots_or_document():
    page, fragment = render_page(V2, plots=False), render_fragment(V2)
    body = page[page.index('<main class="bisect-ov-report page">') + len('<main class="bisect-ov-report page">'):
                page.index("<footer>")]
    inner = fragment[fragment.index("</style>") + len("</style>"):fragment.rindex("</div>")]
    assert inner.strip() == body.strip()
    assert V2._repr_html_() == fragment
    # Every rule of the style sheet is scoped to the report, so none reaches the notebook around it.
    style = fragment[fragment.index("<style>") + 7:fragment.index("</style>")]
    selectors = [s.strip() for rule in re.findall(r"([^{}]+)\{", style) for s in rule.split(",")]
    assert selectors and all(s.startswith(".bisect-ov-report") for s in selectors), selectors


def _reports() -> list[Report]:
    return [V1, V2, _wide(V1), _wide(V2), Report.load(GOLDEN / "demo_samples.json"),
            Report.load(GOLDEN / "int8_twin.json")]


@pytest.mark.parametrize("report", _reports(), ids=["v1", "v2", "v1-wide", "v2-wide", "samples", "twin"])
def test_every_width_from_40_renders_and_no_line_is_longer(report):
    assert report.culprits
    for width in range(40, 141):
        text = report.to_text(width=width)
        long = [line for line in text.splitlines() if len(line) > width]
        assert not long, (width, long)
        assert "rank  node" in text and "Culprits (top" in text
    assert len(report.to_text(width=80).splitlines()) > 20


def test_a_narrow_table_keeps_rank_node_error_and_role():
    row = ("12", "model.layers.3.self_attn/" * 3, "SquaredDifference", "35", "5.8e-01", "4.0e-04", "3.9e-03",
           "1.46e+03x", "6.1e-01", "52x", "2.3e-01", "5/8", "-0.6", "source*", "1x16x32x32 f32", "0/0 -> 3/0",
           "f16 jit_avx512_core_f16_kernel +3 fused")
    header, rows = COLUMNS, [row, row]
    for width in (40, 60, 90):
        lines = fit_table(header, rows, width)
        kept = lines[0].split()
        assert {"rank", "node", "error", "role"} <= set(kept), kept
        assert all(len(line) <= width for line in lines), (width, lines)
    wide = fit_table(header, rows, 10_000)
    assert wide[0].split() == ["rank", "node", "op", "#", "error", "inputs", "tol", "growth", "local", "x", "rounding",
                               "impact", "over", "tol", "headroom", "role", "shape", "nan/inf", "target", "ran"]


def test_the_culprit_table_gives_no_column_more_room_than_its_cells():
    lines = V1.to_text(width=120).splitlines()
    header = next(line for line in lines if line.startswith("rank  node"))
    longest = max(len(n.label) for n in V1.culprits[:10])
    assert header.index(" op ") - header.index("node") == longest + 1  # the node column, then two spaces


def test_a_fix_that_does_not_solve_says_what_it_reached_and_that_the_tolerance_was_not_met():
    assert V2.fix is not None and V2.fix.solved
    unsolved = dataclasses.replace(V2, fix=dataclasses.replace(V2.fix, error_after=7.4e-2))
    text = " ".join(unsolved.to_text(width=120).split())
    assert "takes the final error from 1.2e-01 to 7.4e-02, still over its tolerance 7.2e-03 (not solved)" in text
    assert "NOT bring" not in text
    assert "brings the final error from 1.2e-01 to 2.7e-04 (tolerance 7.2e-03)" in " ".join(V2.to_text().split())


def test_the_run_s_cost_is_one_line_unless_asked_for_per_stage():
    short, full = V2.to_text(width=120).splitlines(), V2.to_text(width=120, costs=True).splitlines()
    assert [line for line in short if line.startswith(("Timings", "Compiles", "Cost per stage"))] == []
    assert [line for line in short if line.startswith("Cost:")] == [
        "Cost: 5.1s, compiles ref 23, target 18 (per stage: bisect-ov -v, report.to_text(costs=True))"]
    assert [line.split(":")[0] for line in full if line.startswith(("Timings", "Compiles", "Cost"))] == [
        "Timings", "Compiles", "Cost per stage"]


def test_a_cut_cell_is_explained_in_the_table_s_legend():
    narrow, wide = V2.to_text(width=120), V2.to_text(width=200)
    assert "1x16x32x32 ~" in narrow and "~ = cut to fit --width" in narrow
    assert "1x16x32x32 f32" in wide and "~ = cut" not in wide


@pytest.mark.parametrize("name, precision, emulated, label", [
    ("EMU:f16", "f16", True, "EMU:f16 (emulated)"), ("CPU:f32", "f32", False, "CPU:f32"),
    ("CPU", "f32", False, "CPU/f32"), ("CPU:bf16", "f32", False, "CPU:bf16/f32"), ("CPU:fp16", "f16", False, "CPU:fp16"),
    ("EMU:bf16-acc4", "bf16", True, "EMU:bf16-acc4 (emulated)")])
def test_a_side_s_label_does_not_repeat_the_precision_its_name_says(name, precision, emulated, label):
    side = dataclasses.replace(V2.target, name=name, precision=precision, emulated=emulated)
    assert side.label == label


def test_the_renderers_read_the_view_not_the_report():
    """The View carries what the pages show (final outputs, unmatched nodes, the run's facts, the notes) and no
    report: the terminal page and the HTML sections read its fields only; the report's attributes are read by the
    view and by the HTML page's plots alone (drawn from the nodes, handed in as HTML)."""
    import ast
    import dataclasses
    import inspect

    from bisect_ov.report import html, text
    from bisect_ov.report.view import View

    assert "report" not in {f.name for f in dataclasses.fields(View)}
    reading = set()
    for module in (text, html):
        for fn in ast.walk(ast.parse(inspect.getsource(module))):
            if isinstance(fn, ast.FunctionDef) and any(
                    isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name) and a.value.id == "report"
                    for a in ast.walk(fn)):
                reading.add(f"{module.__name__.rsplit('.', 1)[1]}.{fn.name}")
    assert reading == {"html._plots"}, reading


def test_a_cut_node_name_keeps_its_start_and_its_distinctive_end():
    # Cut at the end, an MLP's up_proj, down_proj and gate_proj all read "model.layers.1.mlp.~".
    from bisect_ov.report.text import fit_table

    names = [f"model.layers.1.mlp.{p}_proj (aten::linear -> MatMul)" for p in ("up", "down", "gate")]
    cut: set[str] = set()
    lines = fit_table(("node", "op"), [(n, "MatMul") for n in names], 30, cut=cut)
    cells = [line.split("  ")[0].rstrip() for line in lines[1:]]
    assert cells == ["model.l.1.m.up_proj", "model.l.1.m.down_proj", "model.l.1.m.gate_proj"], cells
    assert cut == {"node"}  # the text's legend then says names were cut
    # Narrower, a module path's words shorten to their first letter and its last word loses its start: the layer
    # numbers stay (block.1.layer.0 and block.1.layer.1 both read "block.1.~yer_norm" at the default width)
    names = [f"block.1.layer.{i}.layer_norm (aten::pow -> Power)" for i in (0, 1)]
    lines = fit_table(("node", "op"), [(n, "Power") for n in names], 24)
    cells = [line.split("  ")[0].rstrip() for line in lines[1:]]
    assert cells == ["b.1.l.0.~yer_norm", "b.1.l.1.~yer_norm"], cells


def test_many_final_outputs_are_listed_up_to_eight_and_every_one_over_its_tolerance():
    # A stateful LLM has one output per KV state: 49 of them took 98 lines of every report.
    from dataclasses import replace

    from bisect_ov.report.text import output_lines
    from bisect_ov.report.view import view

    one = V2.outputs[0]
    outputs = tuple(replace(one, name=f"state:{i}", error=one.tolerance * (3 if i == 20 else 0.1)) for i in range(30))
    lines = output_lines(view(replace(V2, outputs=outputs)), limit=8)
    assert [line.split(":")[1] for line in lines[:-1]] == [str(i) for i in range(8)] + ["20"], lines
    assert lines[-1] == "... and 21 more within their tolerance (report.outputs)"


def test_ops_sharing_a_name_are_told_apart_in_the_text_and_a_shared_name_is_refused():
    # Every op of a model named 'same': the table printed 'same' 21 times, and report.node('same') (so
    # `repro --node same`) silently took the first, a Multiply within its tolerance.
    nodes = tuple(dataclasses.replace(n, name="same", key="same" if i == 0 else f"same#{i + 1}")
                  for i, n in enumerate(V2.nodes))
    report = dataclasses.replace(V2, nodes=nodes)
    assert [n.label for n in nodes[:3]] == ["same", "same#2", "same#3"]
    with pytest.raises(Exception, match=r"compared nodes are named 'same': 'same' \(.*'same#2' .*its index"):
        report.node("same")
    assert report.node("same#2") is nodes[1] and report.node(f"#{nodes[2].index}") is nodes[2]
    assert "same#2" in report.to_text(top=len(nodes))


def test_the_headline_output_is_the_models_own_before_a_variable_unless_only_a_variable_is_over():
    # A 32-layer stateful Llama's verdict read "Final output 'state:past_key_values.25.keypresent.25.key'" above its
    # logits, both within their tolerance.
    out = V2.outputs[0]
    logits = dataclasses.replace(out, name="logits", error=1e-3, tolerance=4e-3)
    state = dataclasses.replace(out, name="state:past_key_values.25.key", error=2e-3, tolerance=4e-3)
    assert view(dataclasses.replace(V2, outputs=(state, logits))).verdict.worst_output.name == "logits"
    over = dataclasses.replace(state, error=9e-3)
    assert view(dataclasses.replace(V2, outputs=(over, logits))).verdict.worst_output.name == over.name
