"""The package passes its own linter (ruff, configured in pyproject.toml): pyflakes, pycodestyle, import order
and bugbear's defect checks; and its type checker (mypy, configured there too)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing_in_the_package():
    ruff = shutil.which("ruff") or str(pathlib.Path(sys.executable).with_name("ruff"))
    if not pathlib.Path(ruff).exists():
        pytest.skip("ruff is not installed (it comes with the test extra)")
    proc = subprocess.run([ruff, "check", "bisect_ov", "--output-format", "concise"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_finds_nothing_in_the_package():
    # This interpreter's mypy: one from another environment would not see the packages' type information.
    mypy = pathlib.Path(sys.executable).with_name("mypy")
    if not mypy.exists():
        pytest.skip("mypy is not installed next to this Python (pip install mypy)")
    proc = subprocess.run([mypy, "bisect_ov"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
