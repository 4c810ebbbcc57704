"""Install hints: every one names something pip can install from a checkout, and the extras table matches
pyproject.toml."""

from __future__ import annotations

import pathlib
import re

import pytest

from bisect_ov.core.extras import EXTRAS, install_hint

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _requirement_name(spec: str) -> str:
    return re.split(r"[<>=!~; ]", spec, maxsplit=1)[0]


def test_extras_table_matches_pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for extra, packages in EXTRAS.items():
        assert extra in declared, f"pyproject.toml has no extra '{extra}'"
        names = {_requirement_name(spec) for spec in declared[extra]} - {"openvino"}
        assert set(packages) == names, f"extra '{extra}': EXTRAS says {sorted(packages)}, pyproject {sorted(names)}"
    assert set(declared) - set(EXTRAS) == {"test"}, "an extra of pyproject.toml is missing from EXTRAS"


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_hint_is_quoted_for_zsh_and_installs_from_a_checkout(extra):
    hint = install_hint(extra)
    assert f"pip install -e '.[{extra}]'" in hint
    # every bracket sits inside single quotes, so zsh does not glob it
    unquoted = re.sub(r"'[^']*'", "", hint)
    assert "[" not in unquoted


def test_no_hint_names_the_unpublished_package_with_an_extra():
    """`pip install bisect_ov[plot]` cannot work: the project is not on a package index."""
    files = [*(ROOT / "bisect_ov").rglob("*.py"), ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
             *(ROOT / "notebooks").glob("*.ipynb")]
    found = [f"{path.relative_to(ROOT)}:{n}" for path in files
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"bisect_ov\[", line)]
    assert not found, f"install hints naming bisect_ov[...]: {found}"
