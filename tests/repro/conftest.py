"""Running a reproducer folder's run.py as a user would: a fresh interpreter, outside the repository, with
bisect_ov (and the libraries only it needs) unimportable, so what it uses is OpenVINO, numpy and the standard
library alone."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

# The libraries bisect_ov brings that a runtime team filing the report would not have.
NOT_THERE = ("bisect_ov", "networkx", "tqdm", "rich", "scipy", "pandas", "matplotlib", "torch", "onnx", "nncf", "tests")

_PRELUDE = """
import json, sys
class Block:
    def find_spec(self, name, *a):
        if name.split('.')[0] in {blocked!r}:
            raise ImportError('not installed here: ' + name)
sys.meta_path.insert(0, Block())
import runpy
sys.argv = [{script!r}, '--json']
code = 0
try:
    runpy.run_path({script!r}, run_name='__main__')
except SystemExit as stop:
    code = stop.code
used = sorted({{m.split('.')[0] for m in sys.modules}} - set(sys.stdlib_module_names))
print(json.dumps({{"exit": code, "modules": used}}), file=sys.stderr)
"""


def run_fresh(folder: pathlib.Path, tmp_path: pathlib.Path) -> dict:
    """Run `folder`/run.py in a fresh interpreter (see the module docstring); its JSON result, exit code and
    the top-level modules it imported."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = _PRELUDE.format(blocked=NOT_THERE, script=str(folder / "run.py"))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "{}"
    tail = json.loads(last)
    assert proc.stdout.strip(), f"run.py printed nothing; stderr:\n{proc.stderr[-2000:]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return {**result, "exit": tail["exit"], "modules": tail["modules"]}
