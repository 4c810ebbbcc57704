"""The package passes its own linter (ruff, configured in pyproject.toml): pyflakes, pycodestyle, import order
and bugbear's defect checks."""

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
