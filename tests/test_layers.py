"""The package's layering, read from its source: no module-level import cycle, no private names imported
across modules, and the lower layers import nothing from the orchestration modules above them."""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "bisect_ov"
ORCHESTRATION = {"bisect_ov.api", "bisect_ov.session", "bisect_ov.strategies", "bisect_ov.mixed", "bisect_ov.samples",
                 "bisect_ov.distributed", "bisect_ov.twin",
                 "bisect_ov.options", "bisect_ov.stages", "bisect_ov.steps", "bisect_ov.assemble", "bisect_ov.cli"}
LOWER = ("bisect_ov.model", "bisect_ov.run", "bisect_ov.analysis", "bisect_ov.capture", "bisect_ov.report",
         "bisect_ov.records", "bisect_ov.codec", "bisect_ov.fileio", "bisect_ov.errors", "bisect_ov.numeric")
# Which areas each area may import, besides itself and the shared leaves: arrows point down.
LEAVES = {"records", "codec", "fileio", "errors", "numeric"}
ALLOWED = {
    "model": set(),
    "analysis": {"model"},
    "run": {"model", "analysis"},
    "capture": {"model", "run", "analysis"},
    "report": {"analysis"},
    "zoo": {"model", "run", "analysis"},
    "orchestration": {"model", "run", "analysis", "capture", "report"},
    "cli": {"model", "run", "analysis", "capture", "report", "orchestration", "zoo"},
    "__main__": {"cli"},
}


def _modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = ast.parse(path.read_text(encoding="utf-8"))
    return found


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


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n.startswith(LOWER)))
def test_lower_layers_do_not_import_the_orchestration(name):
    upward = {m for m, _ in _imports(MODULES[name], top_level=False)} & ORCHESTRATION
    assert not upward, f"{name} imports {sorted(upward)}"


def test_devices_know_no_recorded_runs():
    """Recorded runs register their device names; the device module does not import them (no cycle)."""
    assert not any(m.startswith("bisect_ov.capture") for m, _ in _imports(MODULES["bisect_ov.run.devices"], top_level=False))


def test_records_and_codec_need_only_the_standard_library():
    for name in ("bisect_ov.records", "bisect_ov.codec"):
        imported = {a.name.split(".")[0] for node in ast.walk(MODULES[name]) if isinstance(node, ast.Import)
                    for a in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(MODULES[name])
                     if isinstance(node, ast.ImportFrom) and node.module}
        assert imported <= {"__future__", "dataclasses", "functools", "math", "types", "typing", "bisect_ov"}, imported


def _area(module: str) -> str:
    if module in ORCHESTRATION - {"bisect_ov.cli"}:
        return "orchestration"
    parts = module.split(".")
    return "package" if len(parts) == 1 else ("leaf" if parts[1] in LEAVES else parts[1])


@pytest.mark.parametrize("name", sorted(n for n in MODULES if _area(n) not in ("package", "leaf")))
def test_imports_point_down(name):
    """Each area imports only its own modules, the leaves and the areas below it (`ALLOWED`)."""
    area = _area(name)
    allowed = ALLOWED[area] | {area, "leaf"}
    for module, _ in _imports(MODULES[name], top_level=False):
        if module != "bisect_ov":  # `from bisect_ov import __version__`
            assert _area(module) in allowed, f"{name} ({area}) imports {module} ({_area(module)})"
