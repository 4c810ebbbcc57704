"""The package's layering, read from its source: no module-level import cycle, no private names imported
across modules, and the lower layers import nothing from the orchestration modules above them."""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "bisect_ov"
# One area per folder (and `cli`, `__main__` at the top). Which areas each may import besides itself and the
# shared leaves (`core`): arrows point down, from the command line to the pipeline, the pipeline's parts, the
# devices and the model.
ALLOWED = {
    "core": set(),
    "model": set(),
    "analysis": {"model"},
    "run": {"model", "analysis"},
    "frameworks": {"model", "run", "analysis"},
    "capture": {"model", "run", "analysis", "frameworks"},
    "report": {"analysis"},
    "zoo": {"model", "run", "analysis"},
    "engine": {"model", "run", "analysis"},
    "search": {"engine", "model", "run", "analysis"},
    "experiments": {"engine", "search", "model", "run", "analysis"},
    "samples": {"engine", "model", "run", "analysis"},
    "repro": {"engine", "capture", "model", "run", "analysis"},
    "pipeline": {"repro", "samples", "experiments", "search", "engine", "capture", "frameworks", "report", "model",
                 "run", "analysis"},
    "components": {"pipeline", "report", "model", "run", "analysis"},
    "cli": {"components", "pipeline", "repro", "samples", "experiments", "search", "engine", "capture", "frameworks", "report",
            "model", "run",
            "analysis", "zoo"},
    "__main__": {"cli"},
}
# The tiers that run a comparison: nothing below them imports them.
ORCHESTRATION = {"engine", "search", "experiments", "samples", "repro", "pipeline", "components", "cli"}
TOP_LEVEL = {"__init__", "__main__", "cli"}  # besides the folders, at most four modules at the top

def _modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = ast.parse(path.read_text(encoding="utf-8"))
    return found


def _area(module: str) -> str:
    """The folder a module lives in (``cli`` and ``__main__`` are their own areas; the package itself is
    ``package``)."""
    parts = module.split(".")
    return "package" if len(parts) == 1 else parts[1]


MODULES = _modules()


def _imports(tree: ast.Module, *, top_level: bool) -> list[tuple[str, str | None]]:
    """(module, imported name) pairs of bisect_ov imports; only the module's own statements if `top_level`."""
    nodes = tree.body if top_level else list(ast.walk(tree))
    pairs: list[tuple[str, str | None]] = []
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bisect_ov"):
            pairs += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            pairs += [(a.name, None) for a in node.names if a.name.startswith("bisect_ov")]
    return pairs


def _deps(name: str) -> set[str]:
    deps = set()
    for module, imported in _imports(MODULES[name], top_level=True):
        sub = f"{module}.{imported}" if imported else None
        deps.add(sub if sub in MODULES else module)
    return {d for d in deps if d in MODULES and d != name and d != "bisect_ov"}


def test_no_import_cycle_at_module_level():
    import networkx as nx

    graph = nx.DiGraph([(name, dep) for name in MODULES for dep in _deps(name)])
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c + [c[0]]) for c in cycles[:3])
    assert graph.number_of_edges() > 20  # the walk saw the package's imports


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_private_names_imported_from_another_module(name):
    private = [f"{m}.{n}" for m, n in _imports(MODULES[name], top_level=False)
               if n and n.startswith("_") and not n.startswith("__")]
    assert not private, f"{name} imports private names {private}"


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _area(n) not in ORCHESTRATION | {"package", "core", "__main__"}))
def test_lower_layers_do_not_import_the_orchestration(name):
    upward = {m for m, _ in _imports(MODULES[name], top_level=False) if _area(m) in ORCHESTRATION}
    assert not upward, f"{name} imports {sorted(upward)}"


def test_devices_know_no_recorded_runs():
    """Recorded runs register their device names; the device module does not import them (no cycle)."""
    assert not any(m.startswith("bisect_ov.capture") for m, _ in _imports(MODULES["bisect_ov.run.devices"], top_level=False))


def test_records_and_codec_need_only_the_standard_library():
    for name in ("bisect_ov.core.records", "bisect_ov.core.codec"):
        imported = {a.name.split(".")[0] for node in ast.walk(MODULES[name]) if isinstance(node, ast.Import)
                    for a in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(MODULES[name])
                     if isinstance(node, ast.ImportFrom) and node.module}
        assert imported <= {"__future__", "dataclasses", "functools", "math", "types", "typing", "bisect_ov"}, imported


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _area(n) not in ("package", "core")))
def test_imports_point_down(name):
    """Each area imports only its own modules, the leaves and the areas below it (`ALLOWED`)."""
    area = _area(name)
    allowed = ALLOWED[area] | {area, "core"}
    for module, _ in _imports(MODULES[name], top_level=False):
        if module != "bisect_ov":  # `from bisect_ov import __version__`
            assert _area(module) in allowed, f"{name} ({area}) imports {module} ({_area(module)})"


def test_every_area_is_a_folder_or_a_top_level_module_we_know():
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top <= TOP_LEVEL, f"modules at the top of the package: {sorted(top - TOP_LEVEL)}"
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders | (top - {"__init__"}) == set(ALLOWED), sorted(folders ^ set(ALLOWED))


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_module_is_much_over_500_lines(name):
    path = PACKAGE.parent.joinpath(*name.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= 560, f"{name} has {lines} lines: split it by topic"


def test_the_package_and_a_saved_report_load_without_openvino(tmp_path):
    """`import bisect_ov` is lazy: a report saved on a server reads on a laptop without OpenVINO."""
    import json

    saved = tmp_path / "r.json"
    saved.write_text((pathlib.Path(__file__).parent / "report" / "data" / "report_v1.json").read_text())
    from tests.conftest import run_without_openvino

    code = ("from bisect_ov import Report\n"
            f"r = Report.load({str(saved)!r})\n"
            "print(r.to_text().splitlines()[0])\n"
            "print('openvino' in sys.modules)\n")
    proc = run_without_openvino(code, cwd=PACKAGE.parent)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False"
    assert json.loads(saved.read_text())  # the file read is the saved report


def test_every_compile_and_count_goes_through_the_runner():
    """One object through which compiles and inferences are counted: only `engine/runner.py` reads or writes the
    ledger (the pipeline makes one for its runner); every other module asks the runner."""
    touching = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if any(isinstance(n, ast.Attribute) and n.attr == "ledger" for n in ast.walk(tree)):
            touching.add(path.relative_to(PACKAGE).as_posix())
    assert touching == {"engine/runner.py"}, touching
