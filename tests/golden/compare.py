"""Reports as comparable data: a saved report's dict with the timings taken out, the machine facts it depends
on, and a field-by-field difference of two reports.

What a report claims is of two kinds. Its structure (the verdict, the first divergences, every node's role, the
ranking, which nodes were compared) is what the tool decided: `structure` takes it out of a report, and it must
match exactly. Its numbers are measurements: two CPUs that run the same kernels (the same OpenVINO release and
oneDNN ISA level, `set_name`) still differ in the last digits, and so do two formulas for the same statistic
(a cosine from a dot product or from sums of squares), so numbers compare within `RTOL` (relative) or `ATOL`
(absolute, for values at f32-noise level, where any relative difference is noise); counts and strings exactly,
and a number printed inside a sentence within one unit of its last printed digit.

A saved report of an older schema version is compared through the upgrade: both sides are read back with
`Report.from_dict` (which upgrades the saved one) and normalized again, so that renamed and typed fields
compare as the current schema writes them. What an older schema did not record is left out of both sides
(`_NEW_IN`), never guessed.
"""

from __future__ import annotations

import json
import math
import pathlib
import re
from typing import Any

FOLDER = pathlib.Path(__file__).resolve().parent
# What varies from run to run without changing what the tool found (a remedy's `cost` is its measured latency).
TIMING_KEYS = {"timings", "seconds", "cost"}
# Names OpenVINO makes up from a process-wide counter (`Multiply_272946`): they depend on what ran before.
AUTO_NAME = re.compile(r"\b([A-Z][A-Za-z]*_?)\d+\b")
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "amx_bf16", "amx_tile", "avx_vnni")
# Numbers within this share of each other are the same measurement. Measured: the same cases on two CPUs of one
# ISA level, saved before the cosine moved to sums of squares, differ by at most 1.1e-4 (a cosine of 0.16); an
# AVX2 and an AVX-512 CPU (other kernels, another set) by up to 4e-3 in a rounding-level local error.
RTOL = 2e-3
ATOL = 1e-7  # below f32-level agreement on a unit-scale tensor: noise
# The oneDNN ISA levels the CPU plugin dispatches on, widest first, as the ISA flags that select each: a machine's
# kernels (and so its numbers) are those of the first level it has. avx_vnni without AVX-512 is its own level;
# beside avx512_vnni it selects nothing.
LEVELS = ("amx_bf16", "avx512_fp16", "avx512_bf16", "avx512_vnni", "avx512f", "avx_vnni", "avx2")


ROOT = FOLDER.parents[1]


def run_in_fresh_process(name: str, out: pathlib.Path) -> str:
    """Run golden case `name` in a new interpreter (`run_case.py`), its normalized report written to `out`;
    returns what it printed (the report's one-line repr)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "tests.golden.run_case", name, str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"golden case {name} failed:\n{proc.stderr[-4000:]}")
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""


def set_name(facts: dict[str, Any]) -> str:
    """The folder a machine's golden reports live in: the widest oneDNN ISA level it has (`LEVELS`: ``amx_bf16``,
    ``avx512_bf16``, ``avx2``, ...) or ``baseline``; the saved numbers depend on the kernels that level runs."""
    isa = set(facts["isa"])
    return next((flag for flag in LEVELS if flag in isa), "baseline")


def kind(facts: dict[str, Any]) -> dict[str, Any]:
    """What decides the kernels and precisions a machine runs: the OpenVINO build, the CPU plugin's capabilities
    and the ISA level (`set_name`). Flags that select no other kernel (avx_vnni beside avx512_vnni) are not in it."""
    return {"openvino": facts["openvino"], "capabilities": sorted(facts["capabilities"]), "level": set_name(facts)}


def saved_set(facts: dict[str, Any]) -> pathlib.Path | None:
    """The folder of golden reports saved on a machine of this one's kind (`kind`), or None."""
    for folder in sorted(p.parent for p in FOLDER.glob("*/machine.json")):
        if kind(json.loads((folder / "machine.json").read_text())) == kind(facts):
            return folder
    return None


def saved_sets() -> list[pathlib.Path]:
    """Every folder of saved golden reports."""
    return sorted(p.parent for p in FOLDER.glob("*/machine.json"))


def structure(report: dict[str, Any]) -> dict[str, Any]:
    """What a normalized report decided, without what it measured: the verdict (which final outputs are over their
    tolerance), the first divergences, the ranking, each compared node's role, the strategy. These come from the
    rules, not from the last digits of a kernel: they must be the same on every machine that runs the case's
    precisions the same way."""
    return {
        "first_divergence": report.get("first_divergence"),
        "ranking": report.get("ranking"),
        "roles": {n["key"]: n["role"] for n in report.get("nodes", ())},
        "outputs_over": {o["name"]: not o["error"] <= o["tolerance"] for o in report.get("outputs", ())},
        "strategy": report.get("strategy"),
    }


def machine() -> dict[str, Any]:
    """What the saved numbers depend on: the OpenVINO build, the CPU plugin's capabilities, the ISA flags."""
    import openvino as ov

    core = ov.Core()
    flags: set[str] = set()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    return {"openvino": ov.get_version(),
            "capabilities": sorted(str(c) for c in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")),
            "isa": sorted(f for f in ISA_FLAGS if f in flags)}


def normalized(report) -> dict[str, Any]:
    """`report.to_dict()` without timings and counter-made names, as JSON would give it back."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            kept = {k: strip(v) for k, v in value.items() if k not in TIMING_KEYS and not k.endswith("_seconds")}
            if "model_hash" in kept and AUTO_NAME.fullmatch(str(value.get("model", ""))):
                kept["model_hash"] = "(of a model with a counter-made name)"
            return kept
        if isinstance(value, list):
            return [strip(v) for v in value]
        if isinstance(value, str):
            return AUTO_NAME.sub(r"\1#", value)
        return value

    return strip(json.loads(json.dumps(report.to_dict())))


# Fields a schema version added that a report saved by an older one cannot hold, by that version: schema 3 gave
# each cause its numbers (the cause's sentence, compared, holds them as written).
_NEW_IN = {3: (("nodes", "diagnosis", "numbers"),)}
# Fields added since with a default (no new schema version): left out of both sides when the saved report was
# written before them, as the upgrade fills in the default rather than what the run would have recorded.
_ADDED = (("ref", "openvino_version"), ("target", "openvino_version"), ("fix", "minimal"), ("ref", "recorded"),
          ("target", "recorded"), ("nodes", "ref_absmax_samples"), ("fix", "error_on_target"),
          ("nodes", "outputs", "max_elem_rel"), ("outputs", "stats", "max_elem_rel"))


def comparable(saved: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both normalized reports as the current schema writes them, through `Report.from_dict` (the upgrade)."""
    from bisect_ov.core import codec
    from bisect_ov.report.report import Report
    from bisect_ov.report.upgrade import upgrade

    version = saved.get("schema_version")
    absent = [path for path in _ADDED if not _has(saved, path)]
    # Decoded without `Report.from_dict`'s check of unique node keys: normalized names (`Multiply_#`) can repeat.
    saved, new = (normalized(codec.from_dict(Report, upgrade(d, d["schema_version"]), where="report"))
                  for d in (saved, new))
    for path in absent:
        for d in (saved, new):
            _drop(d, path)
    for since, paths in _NEW_IN.items():
        if isinstance(version, int) and version < since:
            for path in paths:
                for d in (saved, new):
                    _drop(d, path)
    return saved, new


def _has(value: Any, path: tuple[str, ...]) -> bool:
    """Whether `value` holds the key at the end of `path`, walking every item of the lists on the way."""
    if isinstance(value, list):
        return any(_has(item, path) for item in value)
    if not isinstance(value, dict) or path[0] not in value:
        return False
    return len(path) == 1 or _has(value[path[0]], path[1:])


def _drop(value: Any, path: tuple[str, ...]) -> None:
    """Remove the key at the end of `path` from `value`, walking every item of the lists on the way."""
    if isinstance(value, list):
        for item in value:
            _drop(item, path)
    elif isinstance(value, dict) and path:
        if len(path) == 1:
            value.pop(path[0], None)
        elif path[0] in value:
            _drop(value[path[0]], path[1:])


_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _close(a: float, b: float, rtol: float, atol: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=rtol, abs_tol=atol)


def _same_text(saved: str, new: str, rtol: float, atol: float) -> bool:
    """Whether two sentences say the same: the same words, and each number within `rtol` or one unit of the last
    digit it was printed with ('8.6e-01' and '8.7e-01' may both be 0.865)."""
    if saved == new:
        return True
    words = _NUMBER.split(saved), _NUMBER.split(new)
    numbers = _NUMBER.findall(saved), _NUMBER.findall(new)
    if words[0] != words[1] or len(numbers[0]) != len(numbers[1]):
        return False
    for a, b in zip(*numbers):
        if "." not in a + b and "e" not in (a + b).lower():
            if a != b:  # counts, indices, shapes: exact
                return False
            continue
        x, y = float(a), float(b)
        mantissa = a.lower().split("e")[0]
        digits = len(mantissa.split(".")[1]) if "." in mantissa else 0
        exponent = int(a.lower().split("e")[1]) if "e" in a.lower() else 0
        if not _close(x, y, rtol, max(atol, 1.01 * 10.0 ** (exponent - digits))):
            return False
    return True


def differences(saved: Any, new: Any, path: str = "", *, rtol: float = RTOL, atol: float = ATOL) -> list[str]:
    """Where two normalized reports differ (numbers within `rtol`/`atol` count as equal); whole reports (with
    a ``schema_version``) are compared through the upgrade (`comparable`)."""
    if not path and isinstance(saved, dict) and isinstance(new, dict) and "schema_version" in saved:
        saved, new = comparable(saved, new)
    if isinstance(saved, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(saved) | set(new)):
            if key not in new:
                out.append(f"{path}.{key}: missing from the new report")
            elif key not in saved:
                out.append(f"{path}.{key}: not in the saved report")
            else:
                out += differences(saved[key], new[key], f"{path}.{key}", rtol=rtol, atol=atol)
        return out
    if isinstance(saved, list) and isinstance(new, list):
        if len(saved) != len(new):
            return [f"{path}: {len(saved)} items saved, {len(new)} now"]
        return [d for i, (a, b) in enumerate(zip(saved, new)) for d in differences(a, b, f"{path}[{i}]", rtol=rtol, atol=atol)]
    if isinstance(saved, (int, float)) and isinstance(new, (int, float)) and not isinstance(saved, bool):
        if isinstance(new, bool):
            return [f"{path}: {saved!r} saved, {new!r} now"]
        if isinstance(saved, int) and isinstance(new, int):  # counts: exact
            return [] if saved == new else [f"{path}: {saved!r} saved, {new!r} now"]
        if _close(float(saved), float(new), rtol, atol):
            return []
        return [f"{path}: {saved!r} saved, {new!r} now"]
    if isinstance(saved, str) and isinstance(new, str):
        return [] if _same_text(saved, new, rtol, atol) else [f"{path}: {saved!r} saved, {new!r} now"]
    return [] if saved == new else [f"{path}: {saved!r} saved, {new!r} now"]
