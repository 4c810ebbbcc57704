"""The notebooks in `notebooks/` run top to bottom, show what they promise, and are stored without outputs; their
pages with outputs (`docs/notebooks/`, made by `tests/notebook_pages.py`) are made from the notebooks as they are.

Each notebook is executed in a fresh Jupyter kernel (nbclient) with the notebook's folder as working
directory, as Jupyter would. The kernel needs ipykernel, which the ``test`` extra installs: a missing kernel is
a failure with a clear message, never a skip, so that a broken install cannot hide stale notebooks.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
INSTALL = 'install the test extra: pip install -e ".[test]"'

# Text each notebook's outputs must contain: the diagnosis it exists to show.
EXPECTED = {
    "01_quickstart": ["inorm/sub", "injected at: block1/conv2 | found: block1/conv2", "reloaded equals original: True",
                      "solved: True"],
    "02_case1_softmax": ["expected f16 rounding", "long reduction"],
    # The verified fix keeps four nodes: the two first divergences alone leave the error over the tolerance
    "03_case2_face_delegate": ["inorm/sub", "cancellation", "f16: first divergences inorm/sub, inorm/sqdiff; keep in f32 "
                               "(verified fix): inorm/offset, inorm/mean, inorm/sub, inorm/sqdiff"],
    "04_case3_int8_cpus": ["first divergence: stem/", "stem/conv", "coverage 100%"],
    # How far the f32 reference is off depends on the CPU's kernels (1,927 with AVX-512, 7 with AVX2 only).
    "05_case4_int_conv": ["179,209,319", "65,504", "reference off by "],
    "06_case5_llm_overflow": ["first divergence: model.layers.0.input_layernorm (aten::pow -> Power)", "x*x = 1.6e+05",
                              "solved: True", "pattern: __module.model.layers.*.input_layernorm/aten::pow/Power"],
}


def _require(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"Running the notebooks needs '{module}', which is not installed: {INSTALL}.", pytrace=False)


def _load(path: pathlib.Path):
    _require("nbformat")
    import nbformat

    return nbformat.read(path, as_version=4)


def _text(outputs) -> str:
    """Everything a cell showed: printed streams, values and displays (plain text and HTML)."""
    parts = []
    for out in outputs:
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif out.get("output_type") in ("execute_result", "display_data"):
            data = out.get("data", {})
            parts += [data.get("text/plain", ""), data.get("text/html", "")]
    return "\n".join(p if isinstance(p, str) else "".join(p) for p in parts)


def _execute(nb, path: pathlib.Path):
    """Run `nb` in a new python3 kernel from the notebook's folder; retry when the kernel fails to start.

    Kernels started at once by several pytest-xdist workers can collide on a port between jupyter_client
    choosing it and the kernel binding it; a start that fails before any cell ran is retried.
    """
    for module in ("nbclient", "ipykernel"):
        _require(module)
    from jupyter_client.kernelspec import NoSuchKernel
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    attempts = 3
    for attempt in range(1, attempts + 1):
        client = NotebookClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}},
            # One in-memory IPython history per kernel: parallel kernels do not contend for history.sqlite.
            extra_arguments=["--HistoryManager.hist_file=:memory:"],
        )
        try:
            return client.execute()
        except CellExecutionError as err:
            pytest.fail(f"{path.name} raised in a cell:\n{err}", pytrace=False)
        except NoSuchKernel as err:
            pytest.fail(f"No 'python3' Jupyter kernel to run {path.name} ({err}): {INSTALL}.", pytrace=False)
        except Exception as err:
            started = any(c.get("execution_count") for c in nb.cells if c.cell_type == "code")
            if started or attempt == attempts:
                what = "failed while running" if started else f"could not start a kernel ({attempts} attempts)"
                pytest.fail(f"{path.name} {what}: {type(err).__name__}: {err}. If the kernel is missing, {INSTALL}.",
                            pytrace=False)


def test_notebooks_are_found():
    assert len(NOTEBOOKS) >= 5, [p.name for p in NOTEBOOKS]
    assert {p.stem for p in NOTEBOOKS} >= set(EXPECTED)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    nb = _load(path)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    dirty = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} have stored outputs; clear them before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_page_with_outputs_is_made_from_the_notebook_as_it_is(path):
    from tests.notebook_pages import COMMAND, cells_digest, page_path, recorded_digest

    page = page_path(path)
    again = f"make it again with: {COMMAND} {path.stem}"
    assert page.is_file(), f"{path.name} has no page with outputs ({page.relative_to(ROOT)}): {again}"
    assert recorded_digest(page) == cells_digest(path), f"{page.relative_to(ROOT)} is stale ({path.name} changed): {again}"
    text = page.read_text(encoding="utf-8")
    missing = [e for e in EXPECTED.get(path.stem, []) if e not in text]
    assert not missing, f"{page.relative_to(ROOT)} does not show {missing}: {again}"
    figures = re.findall(r"!\[[^]]*\]\(([^)]+)\)", text)
    assert all((page.parent / f).is_file() for f in figures), f"{page.relative_to(ROOT)} lacks a figure: {again}"
    assert not re.search(r"(/tmp/|/home/|/root/|/work/)", text), f"{page.relative_to(ROOT)} shows a machine path"


def test_a_changed_notebook_makes_its_page_stale(tmp_path):
    from tests.notebook_pages import cells_digest

    path = NOTEBOOKS[0]
    nb = json.loads(path.read_text(encoding="utf-8"))
    copy = tmp_path / path.name
    copy.write_text(json.dumps(nb), encoding="utf-8")
    assert cells_digest(copy) == cells_digest(path)  # the stored form (indentation, outputs) does not count
    nb["cells"][-1]["source"] = ["print('changed')"]
    copy.write_text(json.dumps(nb), encoding="utf-8")
    assert cells_digest(copy) != cells_digest(path)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path):
    nb = _load(path)
    before = sorted(p.name for p in NOTEBOOK_DIR.iterdir())
    _execute(nb, path)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), f"{path.name}: not every code cell ran"
    errors = [(i, o.get("ename"), o.get("evalue")) for i, c in enumerate(nb.cells) if c.cell_type == "code"
              for o in c.outputs if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: error outputs {errors}"
    shown = "\n".join(_text(c.outputs) for c in code)
    for expected in EXPECTED.get(path.stem, []):
        assert expected in shown, f"{path.name}: no output contains {expected!r}"
    # Notebooks write only to temporary folders, never next to themselves.
    assert sorted(p.name for p in NOTEBOOK_DIR.iterdir()) == before


def test_the_llm_notebook_without_the_zoo_extra_says_which_extra_to_install(tmp_path, monkeypatch):
    # Notebook 06 builds its Llama with transformers: without them it stopped on a bare "No module named 'torch'".
    import sys

    from bisect_ov.zoo import llm_cases

    monkeypatch.setenv("BISECT_OV_ZOO_CACHE", str(tmp_path))  # nothing built yet
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError, as when not installed
    with pytest.raises(ModuleNotFoundError, match=r"needs the zoo extra, and 'torch' is not installed: pip install torch "
                                                  r".* \(or, in a checkout of bisect_ov: pip install -e '\.\[zoo\]'\)"):
        llm_cases.massive_llama(layers=1)
    first = _load(NOTEBOOK_DIR / "06_case5_llm_overflow.ipynb").cells[0].source
    assert 'pip install -e ".[zoo]"' in first  # and the notebook says so before its first cell runs
