"""The standalone HTML page: self-contained, verdict first, every model-supplied string escaped."""

from __future__ import annotations

import base64
import dataclasses
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov import bisect, inject_fault
from bisect_ov.core.records import Cause, Fidelity
from bisect_ov.report.html import render_page, save_html
from bisect_ov.zoo import synthetic

EVIL = "<script>alert(1)</script>"
AMP = "a&b<i>"
EVIL_MODEL = "<b>evil model</b>"


@pytest.fixture(scope="module")
def fault_report():
    m = synthetic.demo()
    return bisect(m, "CPU", "CPU:f32", target_model=inject_fault(m, "block1/conv1"), strategy="full", progress=False)


@pytest.fixture(scope="module")
def clean_report():
    m = synthetic.demo()
    return bisect(m, "CPU", "CPU:f32", progress=False)


def _evil_model() -> ov.Model:
    rng = np.random.default_rng(0)
    x = ops.parameter([1, 8], np.float32, name="x")
    h = ops.matmul(x, ops.constant((rng.standard_normal((8, 8)) / 3).astype(np.float32)), False, False, name=EVIL)
    h.output(0).get_tensor().set_names({EVIL})
    h = ops.tanh(h, name=AMP)
    h = ops.relu(h, name="out<1>")
    return ov.Model([h.output(0)], [x], EVIL_MODEL)


@pytest.fixture(scope="module")
def evil_report():
    m = _evil_model()
    return bisect(m, "CPU", "CPU:f32", target_model=inject_fault(m, EVIL), progress=False)


def test_page_is_one_self_contained_document(fault_report):
    page = render_page(fault_report)
    assert page.startswith("<!DOCTYPE html>")
    assert page.rstrip().endswith("</html>")
    assert page.count("<html") == 1 and page.count("<body") == 1
    # Nothing fetched from anywhere: no URLs, no scripts, no stylesheets or fonts by reference.
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page.lower()
    assert "<link" not in page.lower() and "@import" not in page and "url(" not in page
    srcs = re.findall(r'src="([^"]*)"', page)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    png = base64.b64decode(srcs[0].split(",", 1)[1])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_page_answers_where_how_bad_why_first(fault_report):
    page = render_page(fault_report)
    first = fault_report.first_divergence
    assert first is not None and first.name == "block1/conv1"
    verdict = page.index('class="verdict diverges"')
    assert "DIVERGES" in page[verdict:verdict + 400]
    card = page[verdict:page.index("<h2>Culprits")]
    # where, how bad, why: the node, its op and index, its error and tolerance, inherited error and growth
    assert "block1/conv1" in card and "Convolution" in card and "#14" in card
    assert "5.0e-01" in card and "1.3e-06" in card and "0.0e+00" in card and "3.75e+06x" in card
    assert "Final output" in card and fault_report.outputs[0].name in card
    assert "Reference:" in card and "Target:" in card and "Fidelity 1.00" in card
    # Order of sections: verdict, culprits, plots, final outputs, unmatched, run facts.
    order = [page.index(s) for s in ('class="verdict', "<h2>Culprits", "<h2>Error along depth", "<h2>Final outputs",
                                     "<h2>Unmatched nodes", "<h2>Run</h2>")]
    assert order == sorted(order)
    assert "block1/conv1/before_fault" in page  # the unmatched node
    assert "OpenVINO" in page and "unit roundoff of f32" in page
    # One total for the run, the text's: the stages' (the timers overlap; their sum counted a compile twice)
    total = sum(c.seconds for c in fault_report.costs.values())
    assert f"(total {total:.2f}s over the stages)" in page and f"Cost: {total:.1f}s" in fault_report.to_text()


def test_default_strategy_page(fault_report):
    m = synthetic.demo()
    report = bisect(m, "CPU", "CPU:f32", target_model=inject_fault(m, "block1/conv1"), progress=False)
    page = render_page(report, plots=False)
    assert report.first_divergence.name == "block1/conv1"
    assert page.count("<code>block1/conv1</code>") >= 1 and "DIVERGES" in page
    assert f"<dd>{report.strategy}</dd>" in page


def test_culprit_table_shows_ten_and_collapses_the_rest(fault_report):
    assert len(fault_report.ranking) > 12
    page = render_page(fault_report, top=12, plots=False)
    section = page[page.index("<h2>Culprits"):page.index("<h2>Final outputs")]
    visible, _, collapsed = section.partition("<details>")
    assert visible.count("<tr class=") == 10
    assert collapsed.count("<tr class=") == 2
    assert "2 more culprits" in collapsed
    assert f"{len(fault_report.ranking) - 12} more diverged nodes" in section
    # Rows are coloured by role, and the first divergence is marked.
    assert '<tr class="role-source first">' in visible and "role-amplifier" in visible and "role-inherits" in visible


def test_without_matplotlib_the_page_says_its_plots_need_it(fault_report, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    page = render_page(fault_report)
    assert "<img" not in page and "Error along depth" not in page
    assert "No plots on this page: they need matplotlib" in page and "pip install matplotlib" in page
    assert "block1/conv1" in page and "<h2>Final outputs" in page
    unasked = render_page(fault_report, plots=False)  # plots not asked for: nothing to explain
    assert "<img" not in unasked and "No plots on this page" not in unasked


def test_no_divergence_page(clean_report):
    assert not clean_report.diverges
    page = render_page(clean_report, plots=False)
    assert "NO DIVERGENCE" in page and 'class="verdict"' in page
    assert "DIVERGES" not in page and 'class="card' not in page
    assert "None: every compared node is within its tolerance." in page


def test_save_html_is_atomic_and_matches_render(fault_report, tmp_path):
    path = save_html(fault_report, tmp_path / "report.html", plots=False)
    assert path == tmp_path / "report.html"
    assert path.read_text(encoding="utf-8") == render_page(fault_report, plots=False)
    assert sorted(os.listdir(tmp_path)) == ["report.html"]  # no temporary file left behind
    save_html(fault_report, path, plots=False, top=3)  # overwrites in place
    assert path.read_text(encoding="utf-8").count("<tr class=") == 3


def test_hostile_names_are_escaped(evil_report):
    assert evil_report.first_divergence.name == EVIL
    page = render_page(evil_report)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "a&amp;b&lt;i&gt;" in page and "out&lt;1&gt;" in page
    assert "&lt;b&gt;evil model&lt;/b&gt;" in page
    assert "<script" not in page.lower()
    for raw in (EVIL, AMP, EVIL_MODEL, "out<1>"):
        assert raw not in page


def test_every_other_report_string_is_escaped(fault_report):
    hostile = '<img src=x onerror="alert(2)">'
    runtime = {"target": {"precision": hostile, "kernel": hostile, "fused": [hostile]}}
    nodes = tuple(dataclasses.replace(n, op_type=hostile, diagnosis=(Cause("note", hostile),), group=(hostile,),
                                      runtime=runtime)
                  if n.first else n for n in fault_report.nodes)
    report = dataclasses.replace(
        fault_report, nodes=nodes, notes=(hostile,), model=hostile, target_model=hostile,
        ref=dataclasses.replace(fault_report.ref, name=hostile, full_name=hostile, note=hostile),
        target=dataclasses.replace(fault_report.target, name=hostile, emulated=True, config={hostile: hostile}),
        unmatched={hostile: [hostile]}, metric=hostile,
        outputs=tuple(dataclasses.replace(o, name=hostile) for o in fault_report.outputs),
    )
    page = render_page(report, plots=False)
    assert "<img" not in page and "onerror=\"" not in page
    assert page.count("&lt;img src=x onerror=&quot;alert(2)&quot;&gt;") >= 10
    assert 'class="pill emulated"' in page
    assert 'class="runnote">Note: ' in page  # the note, as the text gives it (an amber warning box said "no divergence" too)


def test_fidelity_outside_range_is_a_warning(fault_report):
    good = render_page(fault_report, plots=False)
    assert "Fidelity 1.00" in good and "Fidelity ratio" not in good
    bad = dataclasses.replace(fault_report, fidelity=Fidelity(plain_error=1e-3, tapped_error=5e-3, ratio=5.0))
    page = render_page(bad, plots=False)
    verdict = page[page.index('class="verdict'):page.index("<h2>Culprits")]
    assert '<div class="warn">' in verdict and "Fidelity ratio 5.00" in verdict
    told = dataclasses.replace(bad, fidelity=dataclasses.replace(bad.fidelity, warning="taps <changed> the run"))
    assert "taps &lt;changed&gt; the run" in render_page(told, plots=False)


def _browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def test_page_renders_in_a_headless_browser(fault_report, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip("no chromium, chromium-browser or google-chrome on PATH to render the page")
    page = save_html(fault_report, tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    profile = tmp_path / "profile"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,1200",
           f"--screenshot={shot}", "--disable-background-networking", "--disable-component-update", "--no-first-run",
           f"--user-data-dir={profile}", page.as_uri()]
    try:
        subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("the headless browser did not finish rendering the page in 120 s")
    assert shot.is_file(), "the browser wrote no screenshot"
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(shot) as im:
        rgb = im.convert("RGB")
        assert rgb.size == (1280, 1200)
        colours = rgb.getcolors(maxcolors=1 << 20)
        assert colours is not None and len(colours) > 100  # text, tables and the plot, not a blank page
        # The verdict box's red left border is drawn near the top-left of the page.
        top_left = rgb.crop((0, 0, 200, 300)).getcolors(maxcolors=1 << 16)
        assert any(c == (0xC6, 0x28, 0x28) for _, c in top_left)


def test_fix_and_samples_appear_on_the_page():
    from bisect_ov import bisect
    from bisect_ov.zoo import synthetic

    model = synthetic.demo()
    report = bisect(model, "CPU", "EMU:f16", synthetic.sample_inputs(model, seed=1), fix=True, progress=False)
    page = render_page(report, plots=False)
    assert "<h2>Experiments" in page and "Fix: keeping" in page and "inorm/sub" in page
    assert "Fix: keeping" in report._repr_html_()
    # The fix's own lines (the nodes kept, its run on the target, its cost) are a list inside its item, not items
    # of their own beside it.
    item = page[page.index("<li>Fix: keeping"):]
    item = item[:item.index("</ul></li>") + len("</ul></li>")]
    assert "<ul><li>keep: inorm/" in item and "<li>cost: " in item


def test_columns_no_culprit_fills_are_left_out():
    m = synthetic.demo()
    report = bisect(m, "CPU", "CPU:f32", target_model=inject_fault(m, "block1/conv1"), strategy="full", impact=0,
                    progress=False)
    page = render_page(report, plots=False)
    culprits = page[page.index("<h2>Culprits"):page.index("Roles:")]
    assert all(n.impact is None for n in report.culprits)  # no impact runs asked for
    assert ">impact</th>" not in culprits and ">local</th>" in culprits


def test_figures_never_break_across_lines_in_a_browser(fault_report, tmp_path):
    from tests.report.cdp import Chromium, browser

    if browser() is None:
        pytest.skip("no chromium, chromium-browser or google-chrome on PATH to render the page")
    page = save_html(fault_report, tmp_path / "report.html")
    with Chromium(tmp_path / "profile", width=1280, height=1000) as chrome:
        chrome.open(page.as_uri())
        chrome.wait_for("document.readyState == 'complete'")
        # Every right-aligned (numeric) cell whose text the browser laid out on more than one line.
        broken = chrome.evaluate("""Array.from(document.querySelectorAll('td:not(.l)')).filter(td => {
            if (!td.textContent.trim()) return false;
            const r = document.createRange(); r.selectNodeContents(td);
            return new Set(Array.from(r.getClientRects()).map(b => Math.round(b.top))).size > 1;
        }).map(td => td.textContent)""")
    assert broken == [], broken


def test_every_table_sits_in_a_box_of_its_own_that_scrolls_sideways(fault_report):
    page = render_page(fault_report, plots=False)
    assert page.count("<table>") >= 3 and page.count("<table>") == page.count('<div class="scroll"><table>')
    assert re.search(r"\.bisect-ov-report \.scroll \{[^}]*overflow-x: auto", page)
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page


def test_on_a_phone_the_page_never_scrolls_sideways_and_its_tables_do(fault_report, tmp_path):
    from tests.report.cdp import Chromium, browser

    if browser() is None:
        pytest.skip("no chromium, chromium-browser or google-chrome on PATH to render the page")
    page = save_html(fault_report, tmp_path / "report.html")
    with Chromium(tmp_path / "profile", width=390, height=844, mobile=True) as phone:  # a phone's CSS width
        phone.open(page.as_uri())
        phone.wait_for("document.readyState == 'complete' && document.images.length > 0 && "
                       "Array.from(document.images).every(i => i.complete)")
        seen = phone.evaluate("""(() => {
            const width = document.documentElement.clientWidth;
            const lines = el => { const r = document.createRange(); r.selectNodeContents(el);  // smaller text on
                const tops = Array.from(r.getClientRects()).map(b => b.top);  // one line sits a few px lower
                return tops.length ? 1 + Math.floor((Math.max(...tops) - Math.min(...tops)) / 10) : 0; };
            const culprits = document.querySelector('.scroll');
            return {
                width, page: document.documentElement.scrollWidth,
                // Outside the tables' own boxes, nothing reaches past the screen's right edge.
                outside: Array.from(document.querySelectorAll('main *')).filter(el => !el.closest('.scroll')
                    && el.getBoundingClientRect().right > width + 1).map(el => el.tagName + '.' + el.className),
                images: Array.from(document.images).map(i => i.getBoundingClientRect().right <= width + 1),
                culprits: [culprits.scrollWidth, culprits.clientWidth, getComputedStyle(culprits).overflowX],
                broken: Array.from(document.querySelectorAll('td:not(.l), .metrics dd'))
                    .filter(el => el.textContent.trim() && lines(el) > 1).map(el => el.textContent),
            };
        })()""")
    assert seen["width"] == 390 and seen["page"] == 390, seen  # no sideways scroll of the page
    assert seen["outside"] == [], seen["outside"]
    assert seen["images"] and all(seen["images"])  # the plots are scaled down to the screen
    wide, box, overflow = seen["culprits"]
    assert wide > box and overflow == "auto"  # the culprit table is wider than the phone: it scrolls in its box
    assert seen["broken"] == [], seen["broken"]  # no figure broken mid-value ("8.7e-" / "01")


# The contrast of each heading's text against the background it is drawn on (the first ancestor that paints
# one), colours normalised through a canvas so that rgb(), color(srgb ...) and color-mix() all read the same.
_CONTRAST = """(() => {
    const ctx = document.createElement('canvas').getContext('2d');
    const rgba = c => { ctx.clearRect(0, 0, 1, 1); ctx.fillStyle = '#000'; ctx.fillStyle = c; ctx.fillRect(0, 0, 1, 1);
                        return Array.from(ctx.getImageData(0, 0, 1, 1).data); };
    const luminance = ([r, g, b]) => [r, g, b].map(v => { v /= 255; return v <= 0.03928 ? v / 12.92
                                                          : Math.pow((v + 0.055) / 1.055, 2.4); })
                                       .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
    const background = el => { for (; el; el = el.parentElement) { const c = rgba(getComputedStyle(el).backgroundColor);
                                    if (c[3] > 0) return c; }
                                return [255, 255, 255, 255]; };
    return Array.from(document.querySelectorAll('h1, h2, .headline, .card .name, th')).map(el => {
        const [a, b] = [luminance(rgba(getComputedStyle(el).color)), luminance(background(el))];
        return {text: el.textContent.slice(0, 40), contrast: (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05),
                background: luminance(background(el))};
    });
})()"""

# A notebook's dark theme as its front end defines it: JupyterLab's theme variables (from its dark theme) and
# VS Code's (from its Dark Modern theme), set on the page around the output, which they paint dark.
_DARK_THEMES = {
    "jupyterlab-dark": "--jp-layout-color0: #111111; --jp-layout-color1: #212121; --jp-layout-color2: #424242; "
                       "--jp-content-font-color1: rgba(255,255,255,1); --jp-content-font-color2: rgba(255,255,255,0.7); "
                       "--jp-border-color1: #616161; --jp-border-color2: #424242; --jp-error-color1: #d32f2f; "
                       "background: #111111; color: rgba(255,255,255,1);",
    "vscode-dark": "--vscode-editor-background: #1f1f1f; --vscode-editor-foreground: #cccccc; "
                   "--vscode-descriptionForeground: #9d9d9d; --vscode-editorWidget-background: #202020; "
                   "--vscode-panel-border: #2b2b2b; background: #1f1f1f; color: #cccccc;",
}


def _headings(chrome, url: str, scheme: str) -> list[dict]:
    chrome.open("about:blank")
    chrome.send("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]})
    chrome.send("Page.navigate", {"url": url})
    chrome.wait_for("document.readyState == 'complete' && document.querySelectorAll('h2').length > 0")
    return chrome.evaluate(_CONTRAST)


def test_headings_are_readable_in_light_and_dark_schemes_and_notebook_themes(fault_report, tmp_path):
    from tests.report.cdp import Chromium, browser

    if browser() is None:
        pytest.skip("no chromium, chromium-browser or google-chrome on PATH to render the page")
    page = save_html(fault_report, tmp_path / "report.html", plots=False)
    pages = {}
    for theme, variables in _DARK_THEMES.items():
        pages[theme] = tmp_path / f"{theme}.html"
        pages[theme].write_text(f'<!doctype html><html><body style="{variables}">{fault_report._repr_html_()}</body></html>',
                                encoding="utf-8")
    with Chromium(tmp_path / "profile", width=1280, height=1000) as chrome:
        seen = {scheme: _headings(chrome, page.as_uri(), scheme) for scheme in ("light", "dark")}
        # The notebook's theme decides, whatever the browser prefers.
        seen.update({theme: _headings(chrome, path.as_uri(), "light") for theme, path in pages.items()})
    for where, headings in seen.items():
        assert len(headings) >= 5, (where, headings)
        unreadable = [h for h in headings if h["contrast"] < 4.5]  # WCAG AA for text
        assert not unreadable, (where, unreadable)
    # The standalone page follows the reader's scheme: dark behind its headings when dark is preferred.
    assert all(h["background"] > 0.8 for h in seen["light"]) and all(h["background"] < 0.1 for h in seen["dark"])
    assert all(h["background"] < 0.1 for theme in _DARK_THEMES for h in seen[theme])


# What JupyterLab's stylesheet does to the HTML outputs it renders (its .jp-RenderedHTMLCommon rules): floated
# definition lists, padded lists, fixed table layouts.
_JUPYTERLAB_RULES = (".jp-RenderedHTMLCommon dt { float: left; width: 20%; font-weight: bold; } "
                     ".jp-RenderedHTMLCommon dd { float: left; width: 80%; margin: 0; } "
                     ".jp-RenderedHTMLCommon ul:not(.list-inline) { padding-left: 2em; } "
                     ".jp-RenderedHTMLCommon table { table-layout: fixed; margin-left: auto; margin-right: auto; }")


def test_inside_jupyterlab_s_output_styles_the_cards_keep_their_layout(fault_report, tmp_path):
    from tests.report.cdp import Chromium, browser

    if browser() is None:
        pytest.skip("no chromium, chromium-browser or google-chrome on PATH to render the page")
    page = tmp_path / "jupyterlab.html"
    page.write_text(f"<!doctype html><html><head><style>{_JUPYTERLAB_RULES}</style></head><body>"
                    f'<div class="jp-RenderedHTMLCommon">{fault_report._repr_html_()}</div></body></html>', encoding="utf-8")
    with Chromium(tmp_path / "profile", width=1280, height=1000) as chrome:
        chrome.open(page.as_uri())
        chrome.wait_for("document.readyState == 'complete'")
        seen = chrome.evaluate("""(() => {
            const box = el => el.getBoundingClientRect();
            const overlaps = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
            return {
                overlapping: Array.from(document.querySelectorAll('.metrics > div')).filter(d => {
                    const [dt, dd] = [d.querySelector('dt'), d.querySelector('dd')];
                    return overlaps(box(dt), box(dd)); }).map(d => d.textContent),
                facts: getComputedStyle(document.querySelector('.facts')).paddingLeft,
                layout: getComputedStyle(document.querySelector('table')).tableLayout,
            };
        })()""")
    assert seen == {"overlapping": [], "facts": "0px", "layout": "auto"}, seen
