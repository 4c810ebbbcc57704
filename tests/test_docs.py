"""The documentation runs: every Python block of README.md and docs/*.md is executed (or carries, on the line
before it, a ``<!-- not run by the tests: REASON -->`` comment saying why not), every ``expression  # 'value'``
line in a block that runs is checked, the attributes the pages name exist, and the package's doctests pass."""

from __future__ import annotations

import ast
import dataclasses
import doctest
import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"(?:<!-- not run by the tests: (?P<reason>[^>]*?) -->\n)?```python\n(?P<code>.*?)```", re.S)
# A line that states its value: `report.first_divergence.name     # 'inorm/sub'` (a literal before any ':').
_STATED = re.compile(r"^(?P<expr>[^#\n]+?)\s+#\s*(?P<value>'[^']*'|\[[^\]]*\]|\([^)]*\)|True|False|None)(?::|\s*$)")


def _blocks() -> list:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for n, m in enumerate(_BLOCK.finditer(text), 1):
            found.append(pytest.param(m.group("code"), m.group("reason"), id=f"{page.name}#{n}"))
    return found


BLOCKS = _blocks()


def test_the_pages_have_python_blocks_to_run():
    assert len(BLOCKS) >= 8 and any(p.values[1] is None for p in BLOCKS)


@pytest.mark.parametrize("code, reason", BLOCKS)
def test_python_block_runs_and_states_true_values(code, reason, tmp_path, monkeypatch):
    if reason is not None:
        pytest.skip(reason)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "<doc block>", "exec"), namespace)
    for line in code.splitlines():
        stated = _STATED.match(line)
        if stated:
            expected = ast.literal_eval(stated.group("value"))
            got = eval(stated.group("expr"), namespace)
            assert (tuple(got) if isinstance(expected, tuple) else got) == expected, line


_FILE_SUFFIXES = {"json", "html", "txt", "csv", "npz", "md", "png"}  # report.json is a file, not an attribute


def _report_attributes() -> set[str]:
    from bisect_ov import Report

    return {f.name for f in dataclasses.fields(Report)} | set(dir(Report))


def test_every_report_attribute_a_page_names_exists():
    from bisect_ov.core import records

    known = _report_attributes()
    missing = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        missing += [f"{page.name}: report.{name}" for name in re.findall(r"(?<![\w/.-])report\.([a-z_]+)", text)
                    if name not in known and name not in _FILE_SUFFIXES]
        # "`Fix`: `on_reference`, `error_before`, ...": the fields a page lists for a record.
        for record, listed in re.findall(r"`([A-Z]\w+)`: ((?:`\w+`(?:, )?)+)", text):
            cls = getattr(records, record, None)
            if cls is not None:
                missing += [f"{page.name}: {record}.{f}" for f in re.findall(r"`(\w+)`", listed) if not hasattr(cls, f)
                            and f not in {x.name for x in dataclasses.fields(cls)}]
    assert not missing, missing


def _modules_with_examples() -> list[str]:
    package = ROOT / "bisect_ov"
    return [".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            for p in sorted(package.rglob("*.py")) if ">>> " in p.read_text(encoding="utf-8")]


@pytest.mark.parametrize("module", _modules_with_examples())
def test_module_doctests_pass(module):
    found = doctest.testmod(importlib.import_module(module), raise_on_error=False, report=True,
                            optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert found.failed == 0, f"{found.failed} of {found.attempted} examples of {module} failed"


def test_every_page_is_linked_from_the_readme_documentation_table():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Documentation"):]
    linked = set(re.findall(r"\]\(((?:docs/)?[\w./-]+\.md)\)", table))
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")} | {"CHANGELOG.md"}
    assert pages <= linked, f"pages missing from README's documentation table: {sorted(pages - linked)}"


def test_the_install_page_lists_every_extra_with_what_it_brings():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([\w-]+)` \| ([^|]+) \|", (ROOT / "docs" / "install.md")
                                                         .read_text(encoding="utf-8"), re.M)}
    assert set(extras) <= set(rows), f"extras missing from docs/install.md: {sorted(set(extras) - set(rows))}"
    for extra, specs in extras.items():
        if extra == "test":
            continue
        names = {re.split(r"[<>=!~;\[ ]", s, maxsplit=1)[0] for s in specs}
        missing = [n for n in names if f"`{n}" not in rows[extra]]
        assert not missing, f"docs/install.md's row for '{extra}' does not name {missing}"


@pytest.mark.parametrize("page, topics", [
    ("faq.md", ("bf16", "absorbed", "Fidelity", "not measured", "dynamic shapes")),
    ("comparison.md", ("Polygraphy", "cross_check_tool", "OV_GPU_DUMP_TENSORS", "OV_CPU_BLOB_DUMP", "ENABLE_DEBUG_CAPS")),
    ("notebooks.md", ("jupyter lab", "jupyter nbconvert --to notebook --execute")),
    ("reports.md", ("no adapter for OpenVINO IR",)),
])
def test_the_pages_a_new_user_looks_for_cover_their_questions(page, topics):
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    assert [t for t in topics if t not in text] == []


def test_there_is_a_changelog():
    assert (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").startswith("# Changelog")


def test_the_license_file_is_the_one_the_package_declares():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["license"]["text"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert declared == "Apache-2.0" and "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the whole text, not a pointer to it
