"""docs/cli.md's synopsis is what the parsers offer: every flag the command has, none it lacks."""

from __future__ import annotations

import re

from tests.cli_synopsis import COMMAND, PAGE, page_block, synopsis


def test_the_page_s_synopsis_is_the_parsers():
    block = page_block(PAGE.read_text(encoding="utf-8"))
    assert block is not None, f"{PAGE.name} lost its synopsis marker: restore it and run {COMMAND}"
    assert block == synopsis(), f"{PAGE.name}'s synopsis differs from the parsers: run {COMMAND}"


def test_the_synopsis_names_the_flags_the_issue_found_missing():
    flags = set(re.findall(r"--[a-z][a-z-]*", synopsis()))
    assert {"--no-baseline", "--truth", "--prompt-lengths", "--classifier-output", "--batch-retries"} <= flags
