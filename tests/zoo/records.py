"""Figures measured by the zoo tier (coverage, fidelity, verdicts, times, hit rates), gathered for a summary.

Each test appends one JSON line to a file named after the test run; the controller prints the table at the
end of the session (``pytest -n auto`` included: workers inherit the controller's environment, where
`configure` put the run's file and the build cache).
"""

from __future__ import annotations

import getpass
import json
import os
import pathlib
import tempfile
import time
import uuid

CACHE_ENV = "BISECT_OV_ZOO_CACHE"
RESULTS_ENV = "BISECT_OV_ZOO_RESULTS"


def configure(config) -> None:
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller has set everything
    if not os.environ.get(CACHE_ENV):
        cache = getattr(config, "cache", None)
        # Without pytest's cache (-p no:cacheprovider) one folder per user under the temporary directory, reused
        # by the next run: a new folder each run left tens of MB behind every time.
        folder = (cache.mkdir("bisect_ov_zoo") if cache is not None
                  else pathlib.Path(tempfile.gettempdir()) / f"bisect_ov_zoo-{getpass.getuser()}")
        os.environ[CACHE_ENV] = str(folder)
    if not os.environ.get(RESULTS_ENV):
        results = pathlib.Path(os.environ[CACHE_ENV]) / "results"
        results.mkdir(parents=True, exist_ok=True)
        os.environ[RESULTS_ENV] = str(results / f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}.jsonl")
    config._bisect_ov_zoo_start = time.perf_counter()


def record(kind: str, model: str, **fields) -> None:
    """Append one measurement (what was run on which model, and its figures) to this run's results file."""
    path = os.environ.get(RESULTS_ENV)
    if not path:
        return
    line = json.dumps({"kind": kind, "model": model, **fields}, default=str)
    with open(path, "a", encoding="utf-8") as f:  # one short append per line: safe across workers
        f.write(line + "\n")


def load(path: str | os.PathLike | None = None) -> list[dict]:
    path = pathlib.Path(path or os.environ.get(RESULTS_ENV, ""))
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def table(rows: list[dict]) -> list[str]:
    """One line per zoo model: converter, ops, nodes compared, coverage, fidelity, time, verdicts, hit rate."""
    by_model: dict[str, dict] = {}
    for r in rows:
        m = by_model.setdefault(r["model"], {})
        if r["kind"] == "bisect":
            m.setdefault("converter", r.get("converter", ""))
            m.setdefault("ops", r.get("ops"))
            m[r["target"]] = r
        elif r["kind"] == "faults":
            m["faults"] = r
    head = (f"{'model':18s} {'ops':>5s} {'compute':>7s} {'compared':>8s} {'cover':>5s} {'fid':>5s} "
            f"{'CPU':>16s} {'time':>6s} {'EMU:f16':>16s} {'time':>6s} {'faults':>7s}")
    lines = [head]
    for name, m in by_model.items():
        cpu, emu, faults = m.get("CPU", {}), m.get("EMU:f16", {}), m.get("faults", {})
        first = cpu or emu
        if not first and not faults:
            continue
        lines.append(
            f"{name:18s} {first.get('ops', ''):>5} {first.get('compute', ''):>7} {first.get('compared', ''):>8} "
            f"{_pct(first.get('coverage')):>5s} {_num(first.get('fidelity')):>5s} "
            f"{cpu.get('verdict', '-'):>16s} {_sec(cpu.get('seconds')):>6s} "
            f"{emu.get('verdict', '-'):>16s} {_sec(emu.get('seconds')):>6s} "
            f"{faults.get('hits', '-')}/{faults.get('sites', '-')}".rstrip()
        )
    return lines


def _pct(x) -> str:
    return f"{100 * x:.0f}%" if isinstance(x, (int, float)) else "-"


def _num(x) -> str:
    return f"{x:.2f}" if isinstance(x, (int, float)) else "-"


def _sec(x) -> str:
    return f"{x:.1f}s" if isinstance(x, (int, float)) else "-"


def summary(terminalreporter) -> None:
    rows = load()
    if not rows:
        return
    terminalreporter.write_sep("-", "zoo tier: real architectures (bisect_ov.zoo)")
    for line in table(rows):
        terminalreporter.write_line(line)
    twins = [r for r in rows if r["kind"] == "twin"]
    for r in twins:
        terminalreporter.write_line(f"twin {r['model']:18s} {r.get('target', ''):8s} "
                                    f"compared {r.get('compared')}/{r.get('compute')} "
                                    f"({_pct(r.get('coverage'))}) verdict {r.get('verdict')} "
                                    f"{_sec(r.get('seconds'))} {r.get('error', '')}")
    busy = sum(r.get("seconds", 0) or 0 for r in rows)
    terminalreporter.write_line(f"zoo tier: {busy:.0f} s of bisect() calls over {len(rows)} measurements; "
                                f"results in {os.environ.get(RESULTS_ENV)}")


def markdown(rows: list[dict]) -> str:
    """The README's zoo-tier table (model, converter, ops, compared, fidelity, time, verdicts, hit rate)."""
    by_model: dict[str, dict] = {}
    for r in rows:
        m = by_model.setdefault(r["model"], {})
        key = r["kind"] if r["kind"] == "faults" else (r["kind"], r.get("target"))
        m[key] = r
    head = ("| model | converter | ops | compute nodes | compared (covered) | fidelity | bf16: verdict, time "
            "| emulated f16: verdict, time | fault hit rate |")
    out = [head, "|---|---|---|---|---|---|---|---|---|"]
    from bisect_ov.zoo.cache import MODELS

    order = {name: i for i, name in enumerate(MODELS)}
    for name, m in sorted(by_model.items(), key=lambda item: order.get(item[0], len(order))):
        if ("bisect", "CPU") not in m:
            continue
        cpu, emu, faults = m[("bisect", "CPU")], m.get(("bisect", "EMU:f16"), {}), m.get("faults", {})
        fid = "/".join(_num(r.get("fidelity")) for r in (cpu, emu) if r)
        compared = (f"{cpu.get('compared')} ({_pct(cpu.get('coverage'))})" if cpu.get("compared") is not None
                    else "-")
        hits = f"{faults['hits']}/{faults['sites']}" if faults else "-"
        out.append(f"| {name} | {cpu.get('converter', '')} | {cpu.get('ops')} | {cpu.get('compute')} | {compared} | "
                   f"{fid} | {cpu.get('verdict')}, {_sec(cpu.get('seconds'))} | "
                   f"{emu.get('verdict', '-')}, {_sec(emu.get('seconds'))} | {hits} |")
    twins = [r for r in rows if r["kind"] == "twin"]
    if twins:
        out += ["", "| twin | target | compared (covered) | fidelity | verdict | time |", "|---|---|---|---|---|---|"]
        for r in sorted(twins, key=lambda r: (r["model"], r.get("target", ""))):
            compared = f"{r.get('compared')} ({_pct(r.get('coverage'))})" if r.get("compared") is not None else "-"
            out.append(f"| {r['model']} | {r.get('target')} | {compared} | {_num(r.get('fidelity'))} | "
                       f"{r.get('verdict')} | {_sec(r.get('seconds'))} |")
    return "\n".join(out)


if __name__ == "__main__":
    import sys

    print(markdown(load(sys.argv[1])))
