"""The look of the HTML report: one style sheet, every rule scoped to the report's root element.

The page (`bisect_ov.report.html.render_page`) and its Jupyter form (`render_fragment`) are the same markup
inside an element of class ``bisect-ov-report``; scoping every selector to it keeps the style from leaking
into a notebook around it. Plain CSS (no fonts, images or imports by reference): the page stays one file.
"""

from __future__ import annotations

import re

__all__ = ["ROOT", "style", "PAGE_STYLE"]

ROOT = "bisect-ov-report"

# The report's own rules, written without the root; `style` scopes every selector to it.
_RULES = """
code, .mono, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
                   font-size: 0.93em; }
pre { margin: 4px 0; overflow-x: auto; }
header { display: flex; align-items: baseline; flex-wrap: wrap; gap: 4px 16px; margin-bottom: 12px; }
header h1 { font-size: 20px; margin: 0; font-weight: 600; word-break: break-all; }
header .sub { color: var(--muted); }
h2 { font-size: 16px; margin: 26px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h2 small { color: var(--muted); font-weight: normal; font-size: 13px; }

/* verdict */
.verdict { border: 1px solid var(--line); border-left: 6px solid var(--ok); border-radius: 6px;
           background: var(--ok-bg); padding: 12px 16px; }
.verdict.diverges { border-left-color: var(--source); background: var(--bad-bg); }
.headline { font-size: 17px; font-weight: 600; margin-bottom: 8px; }
.pill { display: inline-block; padding: 1px 8px; border-radius: 10px; color: #fff; font-size: 12px;
        font-weight: 600; letter-spacing: 0.02em; vertical-align: 1px; white-space: nowrap; }
.pill.big { font-size: 14px; padding: 2px 10px; margin-right: 6px; }
.pill.source { background: var(--source); } .pill.amplifier { background: var(--amplifier); }
.pill.inherits { background: var(--inherits); } .pill.ok { background: var(--ok); }
.pill.emulated { background: #6a1b9a; } .pill.first { background: var(--bg); color: var(--source);
        border: 1px solid var(--source); }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 6px 0 10px; }
.card { flex: 1 1 340px; min-width: 0; max-width: 600px; background: var(--bg); border: 1px solid var(--line);
        border-top: 4px solid var(--source); border-radius: 6px; padding: 8px 12px; }
.card.amplifier { border-top-color: var(--amplifier); }
.card .name { font-size: 15px; font-weight: 600; word-break: break-all; }
.card .op { color: var(--muted); font-size: 13px; margin-bottom: 6px; }
.metrics { display: flex; flex-wrap: wrap; gap: 4px 26px; margin: 0; }  /* four across, fewer on a phone */
.metrics dt { color: var(--muted); font-size: 12px; }
.metrics dd { margin: 0; font-weight: 600; font-variant-numeric: tabular-nums; white-space: nowrap; }
.metrics dd.bad { color: var(--source); }
.metrics dd small { font-weight: normal; color: var(--muted); }
.causes { margin-top: 6px; font-size: 13px; }
.facts { margin: 6px 0 0; padding: 0; list-style: none; }
.facts li { margin: 2px 0; }
.sides { display: flex; flex-wrap: wrap; gap: 4px 24px; margin-top: 8px; padding-top: 8px;
         border-top: 1px dashed var(--line); font-size: 13px; }
.sides b { font-weight: 600; }
.warn { margin-top: 8px; padding: 6px 10px; border-radius: 4px; background: var(--warn-bg); border: 1px solid var(--amplifier);
        color: var(--ink); font-size: 13px; }
.runnote { margin-top: 6px; padding: 2px 10px; border-left: 3px solid var(--line); color: var(--ink); font-size: 13px; }
.small { font-size: 12px; color: var(--muted); }
.okline { margin-top: 6px; color: var(--muted); font-size: 13px; }

/* tables: each in a box that scrolls sideways on its own, so the page never does */
.scroll { max-width: 100%; overflow-x: auto; -webkit-overflow-scrolling: touch; }
table { border-collapse: collapse; width: 100%; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line-soft); text-align: right; vertical-align: top; }
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
details summary { cursor: pointer; color: var(--link); padding: 4px 0; }
.note { color: var(--muted); font-size: 13px; margin: 6px 0; }
figure { margin: 8px 0; }
figure.graph img { max-width: min(720px, 100%); }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line-soft); border-radius: 4px; }
figcaption { color: var(--muted); font-size: 12.5px; }
.chips code { display: inline-block; background: var(--bg-soft); border: 1px solid var(--line-soft); border-radius: 4px;
              padding: 0 5px; margin: 2px 4px 2px 0; word-break: break-all; }
.kv { display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px; font-size: 13px; }
.kv dt { color: var(--muted); } .kv dd { margin: 0; word-break: break-word; }
footer { margin-top: 30px; color: var(--muted); font-size: 12px; }
"""

# The palette. Each colour the report uses is the notebook's own theme variable where one exists (JupyterLab's
# --jp-*, VS Code's --vscode-*, both dark in a dark theme), else a fallback (--fb-*): light, or dark where the
# standalone page is shown to a reader who prefers a dark colour scheme. Text is never given a colour without the
# background it is read on: the root sets both.
_LIGHT = {"ink": "#1f2328", "muted": "#5f6b76", "bg": "#ffffff", "bg-soft": "#f6f8fa", "line": "#d8dee4",
          "line-soft": "#eaeef2", "link": "#0b57d0", "source": "#c62828", "amplifier": "#ef6c00", "inherits": "#757575",
          "ok": "#2e7d32"}
_DARK = {"ink": "#e6edf3", "muted": "#9aa6b2", "bg": "#0d1117", "bg-soft": "#161b22", "line": "#3d444d",
         "line-soft": "#2a3038", "link": "#6cb6ff", "source": "#f47067", "amplifier": "#f69d50", "inherits": "#9aa6b2",
         "ok": "#57ab5a"}
_THEMED = {
    "ink": ("--jp-content-font-color1", "--vscode-editor-foreground"),
    "muted": ("--jp-content-font-color2", "--vscode-descriptionForeground"),
    "bg": ("--jp-layout-color0", "--vscode-editor-background"),
    "bg-soft": ("--jp-layout-color2", "--vscode-editorWidget-background"),
    "line": ("--jp-border-color1", "--vscode-panel-border"),
    "line-soft": ("--jp-border-color2", "--vscode-editorWidget-border"),
    "link": ("--jp-content-link-color", "--vscode-textLink-foreground"),
    "source": ("--jp-error-color1", "--vscode-errorForeground"),
    "amplifier": ("--jp-warn-color1", "--vscode-editorWarning-foreground"),
    "ok": ("--jp-success-color1", "--vscode-testing-iconPassed"),
}


def _fallbacks(colours: dict[str, str]) -> str:
    return " ".join(f"--fb-{name}: {value};" for name, value in colours.items())


def _palette() -> str:
    """The variables every rule reads: the theme's where it has one, else the fallback."""
    out = []
    for name in _LIGHT:
        value = f"var(--fb-{name})"
        for theme in reversed(_THEMED.get(name, ())):
            value = f"var({theme}, {value})"
        out.append(f"--{name}: {value};")
    # Tinted boxes: a little of the role's colour over whatever background the theme has.
    out += ["--ok-bg: color-mix(in srgb, var(--ok) 9%, var(--bg));",
            "--bad-bg: color-mix(in srgb, var(--source) 9%, var(--bg));",
            "--warn-bg: color-mix(in srgb, var(--amplifier) 12%, var(--bg));"]
    return " ".join(out)


# What only the standalone page sets: the document's margins and background, the dark fallbacks for a reader who
# prefers a dark colour scheme, and on a phone less padding around the page (the report's rules already wrap the
# cards and scroll the tables).
PAGE_STYLE = (f"body {{ margin: 0; background: {_LIGHT['bg']}; }}\n"
              f"@media (prefers-color-scheme: dark) {{ body {{ background: {_DARK['bg']}; }} "
              f".{ROOT}.page {{ {_fallbacks(_DARK)} }} }}\n"
              ":root { color-scheme: light dark; }\n"
              f"@media (max-width: 600px) {{ .{ROOT}.page {{ padding: 10px 10px 30px; }} }}")

# A notebook front end styles the HTML outputs it renders (JupyterLab's .jp-RenderedHTMLCommon floats dt and dd,
# pads every ul, fixes table layouts): these rules undo that for the report's own elements, under a doubled root
# so that they outrank the front end's selectors.
_RESETS = """
.metrics dt, .metrics dd, .kv dt, .kv dd { float: none; width: auto; padding: 0; }
.facts { padding-left: 0; }
table { table-layout: auto; margin: 0; }
"""

_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_RULE = re.compile(r"([^{}]+)\{([^{}]*)\}")


def style() -> str:
    """The style sheet, every selector under ``.bisect-ov-report``."""
    root = f".{ROOT}"
    head = (f"{root} {{ {_fallbacks(_LIGHT)} {_palette()} color: var(--ink); background: var(--bg); "
            'font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }\n'
            f"{root}, {root} * {{ box-sizing: border-box; }}\n"
            f"{root}.page {{ max-width: 1240px; margin: 0 auto; padding: 18px 24px 40px; }}\n"
            f"{root}.compact {{ padding: 4px 0; }}\n")

    def scope(match: re.Match) -> str:
        selectors = ", ".join(f"{root} {s.strip()}" for s in match.group(1).split(","))
        return f"\n{selectors} {{{match.group(2)}}}"

    def reset(match: re.Match) -> str:
        selectors = ", ".join(f"{root}{root} {s.strip()}" for s in match.group(1).split(","))
        return f"\n{selectors} {{{match.group(2)}}}"

    return (head + _RULE.sub(scope, _COMMENT.sub("", _RULES)).strip() + "\n"
            + _RULE.sub(reset, _RESETS).strip() + "\n")
