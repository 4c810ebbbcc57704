"""The notebooks as pages a reader browses without Jupyter: `docs/notebooks/<name>.md`, with the outputs of a run.

The notebooks are stored without outputs (so that a diff shows code, not numbers). Each page holds a notebook's
markdown, its code and what the code printed or showed (text, and figures as PNG files beside the page), and
records the sha256 of the notebook's cells it was made from: `tests/test_notebooks.py` fails when a notebook
changed after its page was made, and names this command to make them again::

    python tests/notebook_pages.py              # every notebook (a few minutes: each runs in a fresh kernel)
    python tests/notebook_pages.py 01_quickstart

Outputs are shown as a run on the machine that made the page gave them (what the code printed and showed; not
what went to stderr: other packages' warnings and progress bars); paths of temporary folders are written as
``<tmp>``. Pages are written only by this script, never by the tests.
"""

from __future__ import annotations

import base64
import hashlib
import json
import pathlib
import re
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
PAGES = ROOT / "docs" / "notebooks"
COMMAND = "python tests/notebook_pages.py"
_DIGEST = re.compile(r"<!-- made from cells sha256 ([0-9a-f]{64}) by " + re.escape(COMMAND) + " -->")


def cells_digest(path: pathlib.Path) -> str:
    """sha256 over the notebook's cells as stored: their kind and source (what the page shows and runs)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    h = hashlib.sha256()
    for cell in nb["cells"]:
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        h.update(cell["cell_type"].encode() + b"\0" + source.encode() + b"\0")
    return h.hexdigest()


def recorded_digest(page: pathlib.Path) -> str | None:
    """The digest a page records (None when the page has none)."""
    found = _DIGEST.search(page.read_text(encoding="utf-8"))
    return found.group(1) if found else None


def page_path(notebook: pathlib.Path) -> pathlib.Path:
    return PAGES / f"{notebook.stem}.md"


def _text(value) -> str:
    return value if isinstance(value, str) else "".join(value)


_WARNING = re.compile(r"^\S+\.py:\d+: \w*Warning: .*(?:\n(?!\S+\.py:\d+:).*)*?\n  warnings\.warn\(.*\)\n?",
                      re.M)


def _clean(text: str) -> str:
    """Output text as the page shows it: other packages' warnings left out, temporary folders as <tmp>, no
    trailing blank lines."""
    text = _WARNING.sub("", text)
    tmp = re.escape(tempfile.gettempdir())
    text = re.sub(tmp + r"/[^\s'\"]*", "<tmp>", text)
    return text.rstrip("\n")


def render(nb, notebook: pathlib.Path) -> tuple[str, dict[str, bytes]]:
    """The page of an executed notebook, and its figures by file name."""
    stem = notebook.stem
    lines = [f"<!-- made from cells sha256 {cells_digest(notebook)} by {COMMAND} -->",
             f"*The notebook [`notebooks/{notebook.name}`](../../notebooks/{notebook.name}) with the outputs of one "
             f"run. Run it yourself in Jupyter, or make this page again with `{COMMAND} {stem}`.*", ""]
    images: dict[str, bytes] = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            lines += [_text(cell.source), ""]
            continue
        if cell.cell_type != "code":
            continue
        lines += ["```python", _text(cell.source).rstrip("\n"), "```", ""]
        for out in cell.get("outputs", []):
            kind = out.get("output_type")
            if kind == "stream":
                if out.get("name") == "stderr":  # warnings of other packages and progress bars, not the notebook's
                    continue
                shown = _clean(_text(out.get("text", "")))
            elif kind in ("execute_result", "display_data"):
                data = out.get("data", {})
                if "image/png" in data:
                    name = f"{stem}-{len(images) + 1}.png"
                    images[name] = base64.b64decode(_text(data["image/png"]))
                    lines += [f"![figure {len(images)} of {stem}]({name})", ""]
                    continue
                shown = _clean(_text(data.get("text/plain", "")))
            elif kind == "error":
                shown = _clean(f"{out.get('ename')}: {out.get('evalue')}")
            else:
                continue
            if shown:
                lines += ["```text", shown, "```", ""]
    return "\n".join(lines).rstrip("\n") + "\n", images


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    import nbformat

    from tests.test_notebooks import NOTEBOOKS, _execute

    chosen = [p for p in NOTEBOOKS if not argv or p.stem in argv]
    if not chosen:
        print(f"No notebook named {argv}; the notebooks: {[p.stem for p in NOTEBOOKS]}", file=sys.stderr)
        return 2
    PAGES.mkdir(parents=True, exist_ok=True)
    for notebook in chosen:
        nb = nbformat.read(notebook, as_version=4)
        _execute(nb, notebook)
        page, images = render(nb, notebook)
        for old in PAGES.glob(f"{notebook.stem}-*.png"):
            old.unlink()
        for name, data in images.items():
            (PAGES / name).write_bytes(data)
        page_path(notebook).write_text(page, encoding="utf-8")
        print(f"{page_path(notebook).relative_to(ROOT)}: {len(page.splitlines())} lines, {len(images)} figure(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
