"""The synopsis in docs/cli.md, made from the parsers themselves (whose comparison flags come from the options
record, `bisect_ov.pipeline.options.BisectOptions`), so that the page cannot name a flag the command lacks or
miss one it has. `tests/test_cli_synopsis.py` fails when the page differs and names this command to remake it::

    python tests/cli_synopsis.py
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"
COMMAND = "python tests/cli_synopsis.py"
BEGIN = f"<!-- synopsis: made from the parsers by {COMMAND}; do not edit by hand -->"
_BLOCK = re.compile(re.escape(BEGIN) + r"\n```\n(.*?)```\n", re.S)
WIDTH = 116


def synopsis() -> str:
    """Each command's usage line as argparse writes it, wrapped at `WIDTH`."""
    sys.path.insert(0, str(ROOT))
    from bisect_ov.cli import build_capture_parser, build_demo_parser, build_parser, build_pipeline_parser, build_repro_parser

    out = []
    for build in (build_parser, build_demo_parser, build_capture_parser, build_repro_parser, build_pipeline_parser):
        parser = build()
        formatter = argparse.HelpFormatter(parser.prog, width=WIDTH)
        formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
        out.append(formatter.format_help().strip("\n"))
    return "\n".join(out) + "\n"


def page_block(text: str) -> str | None:
    """The synopsis block of docs/cli.md's `text`, or None without its marker."""
    found = _BLOCK.search(text)
    return found.group(1) if found else None


def write() -> None:
    text = PAGE.read_text(encoding="utf-8")
    if page_block(text) is None:
        raise SystemExit(f"{PAGE} has no line '{BEGIN}' followed by a code block")
    PAGE.write_text(_BLOCK.sub(lambda m: f"{BEGIN}\n```\n{synopsis()}```\n", text), encoding="utf-8")


if __name__ == "__main__":
    write()
