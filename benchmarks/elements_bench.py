"""How far rounding's worst element goes against its own size, in benign runs of real models.

The judge names a node whose error sits in a few elements (docs/verdict.md, rule 2). Against each element's own
size (`TensorStats.max_elem_rel`: ``max |t - r| / (|r| + rms(r))``) the test is: at least `SPIKE` tolerances off
and `OWN_CONCENTRATED` times the node's relative L2 error. This script runs `bisect(model, "CPU:f32", target,
inputs)` without any fault on each model (the zoo's, needle_bench's OUTSIDE set and the held-out sets' entries) and,
for every node the default job compared (not ops whose output steps), records its worst floating output's
``max_elem_rel``, relative L2 error, tolerance and op type. It prints, for the ops the test applies to and apart
for those that sum products (`REDUCING`, which it leaves out), how many nodes are `SPIKE` tolerances off their own
size and the largest ratio ``max_elem_rel / rel_l2`` among them (what the second bound must stay above), the nodes
the test's two bounds flag, and the runs that named a first divergence.

Usage::

    python benchmarks/elements_bench.py                              # every model, CPU:bf16
    python benchmarks/elements_bench.py --target EMU:f16 --sets zoo outside holdout6
    python benchmarks/elements_bench.py --json elements.json
    python benchmarks/elements_bench.py --sets zoo --size full      # the zoo's full sizes (GBs, minutes each)

Each model runs in a process of its own (`--one`), so that one model's memory does not stay for the next. Models
are built or read as needle_bench builds them (the ``zoo`` extra; nothing is downloaded). A measuring script: it
passes or fails nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import subprocess
import sys
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from needle_bench import HELD_OUT  # noqa: E402 - after the folder is on the path

SETS = ("zoo", "outside", *HELD_OUT)


def entries(sets: list[str]) -> list[tuple[str, str]]:
    """(set, name) of every model of `sets`."""
    import needle_bench as nb

    found = []
    for name in sets:
        if name == "zoo":
            found += [("zoo", n) for n in nb.default_zoo_models()]
        elif name == "outside":
            found += [("outside", n) for n in nb.OUTSIDE]
        else:
            module, table, _ = nb.HELD_OUT[name]
            found += [(name, n) for n in getattr(__import__(module), table)]
    return found


def one(source: str, name: str, target: str, size: str = "small") -> dict[str, Any]:
    """The benign run of one model: every compared node's figures."""
    import needle_bench as nb

    from bisect_ov import bisect
    from bisect_ov.analysis.judge import STEPS

    if source == "zoo":
        from bisect_ov.zoo import cache

        model = cache.load(name, size)
        inputs = cache.sample_inputs(name, size, 0, model=model)
    else:
        if source == "outside":
            model, meta = nb.load_outside(name)
        else:
            module, _, loader = nb.HELD_OUT[source]
            model, meta = getattr(__import__(module), loader)(name, None)
        inputs = nb.outside_inputs(meta, model, 0)
    report = bisect(model, nb.REFERENCE, target, inputs, progress=False)
    nodes = []
    for n in report.nodes:
        floating = [s for s in n.outputs if not s.integer]
        if not floating or n.op_type in STEPS or not n.tolerance:
            continue
        s = max(floating, key=lambda s: s.max_elem_rel)
        nodes.append({"node": n.name, "op_type": n.op_type, "max_elem_rel": s.max_elem_rel, "rel_l2": s.rel_l2,
                      "tolerance": n.tolerance, "role": n.role, "inside_kernel": n.inside_kernel is not None})
    return {"set": source, "model": name, "target": target, "first": [n.name for n in report.first_divergences],
            "nodes": nodes}


def summary(runs: list[dict[str, Any]]) -> list[str]:
    from bisect_ov.analysis.diagnosis import OWN_CONCENTRATED, SPIKE, is_concentrated_own
    from bisect_ov.analysis.judge import REDUCING

    lines = [f"{len(runs)} benign runs"]
    for label, keep in (("ops the test applies to", lambda n: n["op_type"] not in REDUCING),
                        (f"ops that sum products ({', '.join(sorted(REDUCING)[:3])}, ...: left out)",
                         lambda n: n["op_type"] in REDUCING)):
        nodes = [(r["model"], n) for r in runs for n in r["nodes"] if keep(n)]
        off = [(m, n) for m, n in nodes if math.isfinite(n["max_elem_rel"]) and n["max_elem_rel"] >= SPIKE * n["tolerance"]]
        flagged = [(m, n) for m, n in nodes if is_concentrated_own(n["max_elem_rel"], n["rel_l2"], n["tolerance"])]
        lines.append(f"{label}: {len(nodes)} compared nodes ({sum(n['inside_kernel'] for _, n in nodes)} inside a "
                     f"fused kernel); {len(off)} with a worst element {SPIKE:g} tolerances off its own size")
        if off:
            model, worst = max(off, key=lambda mn: mn[1]["max_elem_rel"] / max(mn[1]["rel_l2"], 1e-30))
            ratio = worst["max_elem_rel"] / max(worst["rel_l2"], 1e-30)
            lines.append(f"  the largest of them is {ratio:.1f}x its relative L2 error ({model}: '{worst['node']}', "
                         f"{worst['op_type']}, {worst['max_elem_rel']:.2g} against {worst['rel_l2']:.2g}); the test "
                         f"asks {OWN_CONCENTRATED:g}x")
        lines.append(f"  past both bounds (before the growth bound): {len(flagged)}"
                     + "".join(f"\n    {m}: '{n['node']}' ({n['op_type']})" for m, n in flagged[:20]))
    named = [r for r in runs if r["first"]]
    lines.append(f"runs that named a first divergence: {len(named)}"
                 + "".join(f"\n    {r['model']}: {', '.join(r['first'][:3])}" for r in named))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS, help="the model sets (default: all)")
    parser.add_argument("--target", default="CPU:bf16", help="the target (default CPU:bf16)")
    parser.add_argument("--json", help="write every run's nodes to this file")
    parser.add_argument("--size", default="small", choices=("small", "full"),
                        help="the zoo's models at their small (default) or full size; full needs minutes and GBs")
    parser.add_argument("--one", nargs=2, metavar=("SET", "NAME"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(*args.one, args.target, args.size)))
        return 0
    print("$ python benchmarks/elements_bench.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    runs, failed = [], []
    for source, name in entries(args.sets):
        proc = subprocess.run([sys.executable, __file__, "--one", source, name, "--target", args.target,
                               "--size", args.size],
                              capture_output=True, text=True)
        if proc.returncode != 0 or not proc.stdout.strip():
            failed.append(f"{name}: {(proc.stderr.strip().splitlines() or ['no output'])[-1][:160]}")
            print(f"  {name}: failed ({failed[-1]})", file=sys.stderr, flush=True)
            continue
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"  {name}: {len(runs[-1]['nodes'])} nodes", file=sys.stderr, flush=True)
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps({"target": args.target, "runs": runs, "failed": failed}))
    print(f"Reference CPU:f32, target {args.target}")
    for line in summary(runs):
        print(line)
    for line in failed:
        print(f"Not measured: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
