"""Benchmark bisect_ov's capture strategies against a plain run of the same model.

For each model and each strategy, one fresh process (so peak RSS is that run's own) measures:

* ``plain``: compile + one inference of the untouched model on the reference and on the target;
* ``fusion``, ``full``, ``bisection``: the whole `bisect()` call with that capture strategy (local errors,
  impact and the noise check off, so the row measures the capture alone);
* ``local``: the ``full`` capture plus the local error of every node (each run alone on the target, fed the
  reference's inputs); its compiles per side include the plain run and the capture;
* ``capture-full``, ``capture-stats``: recording a run of the target to a file (`bisect_ov.capture`) with
  every tensor, or with 4,096 sampled values per tensor; the row gives the file size.

Reported per row: wall time, its ratio to the plain row, compiles per side, peak RSS (and its ratio to the
plain row), the fidelity ratio (instrumented / plain final-output error), the number of nodes measured, and
the first divergence found. Models: code-built ones (`bisect_ov.zoo.synthetic`) and real topologies from the
`onnx` wheel with seeded random weights (`bisect_ov.zoo.onnx_light`).

Usage::

    python benchmarks/bench.py                       # default models, target CPU (bf16 where the CPU has it)
    python benchmarks/bench.py --models resnet50 --target CPU:bf16 --json out.json

This is a measuring script, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import resource
import subprocess
import sys
import time

DEFAULT_MODELS = ("demo", "face_resnet", "attention_block", "squeezenet", "shufflenet", "resnet50")
STRATEGIES = ("plain", "fusion", "full", "bisection", "local", "capture-full", "capture-stats")


def _load(name: str):
    from bisect_ov.zoo import onnx_light, synthetic

    if name in synthetic.BUILDERS:
        model = synthetic.BUILDERS[name]()
        return model, synthetic.sample_inputs(model, seed=1)
    model = onnx_light.load_light_model(name, seed=0)
    return model, None


def _peak_rss_mb() -> float:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run_one(model_name: str, strategy: str, ref: str, target: str) -> dict:
    """Measure one (model, strategy) pair in this process."""
    import openvino as ov

    from bisect_ov import bisect, make_device, prepare_inputs
    from bisect_ov.model.graph import ModelGraph

    model, inputs = _load(model_name)
    arrays = prepare_inputs(model, inputs, seed=0)
    rss_before = _peak_rss_mb()
    row = {"model": model_name, "strategy": strategy, "nodes": len(ModelGraph(model).candidates())}
    start = time.perf_counter()
    if strategy.startswith("capture-"):
        import tempfile

        from bisect_ov import record

        with tempfile.TemporaryDirectory() as tmp:
            path = record(model, target, arrays, pathlib.Path(tmp) / "run.npz", mode=strategy.split("-")[1])
            row.update(compiles=None, fidelity=None, measured=None, first=None,
                       file_mb=round(path.stat().st_size / 1e6, 2))
    elif strategy == "plain":
        for side, name in (("ref", ref), ("target", target)):
            compiled = make_device(name, role=side).compile(model)
            compiled.infer(arrays)
        row.update(compiles=1, fidelity=None, measured=0, first=None)
    else:
        # Capture strategies alone; "local" is the full capture plus every node run alone on the target.
        local = strategy == "local"
        report = bisect(model, ref, target, arrays, strategy="full" if local else strategy, local=local, impact=0,
                        noise=False, progress=False)
        row.update(
            compiles=report.compiles["target"], fidelity=report.fidelity.ratio if report.fidelity else None, measured=len(report.nodes),
            local_seconds=report.timings.get("experiments"),
            first=report.first_divergence.name if report.first_divergence else None,
            final_error=max((o.error for o in report.outputs), default=None),
            target_precision=report.target.precision,
        )
    row["seconds"] = round(time.perf_counter() - start, 3)
    row["peak_rss_mb"] = round(_peak_rss_mb(), 1)
    row["rss_at_start_mb"] = round(rss_before, 1)
    row["openvino"] = ov.get_version().split("-")[0]
    return row


def _subprocess(model: str, strategy: str, ref: str, target: str) -> dict:
    cmd = [sys.executable, __file__, "--one", model, strategy, "--ref", ref, "--target", target]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        return {"model": model, "strategy": strategy, "error": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _table(rows: list[dict]) -> str:
    head = ("model", "nodes", "strategy", "seconds", "x plain", "compiles/side", "peak RSS MB", "x plain RSS",
            "fidelity", "measured", "first divergence / file")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    plain = {r["model"]: r for r in rows if r.get("strategy") == "plain" and "error" not in r}
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | | {r['strategy']} | failed: {r['error']} |")
            continue
        p = plain.get(r["model"])
        ratio = f"{r['seconds'] / p['seconds']:.2f}" if p and p["seconds"] else ""
        rss = f"{r['peak_rss_mb'] / p['peak_rss_mb']:.2f}" if p else ""
        fid = f"{r['fidelity']:.2f}" if isinstance(r.get("fidelity"), (int, float)) else ""
        out.append(
            f"| {r['model']} | {r['nodes']} | {r['strategy']} | {r['seconds']:.2f} | {ratio} | {r['compiles'] or '-'} | "
            f"{r['peak_rss_mb']:.0f} | {rss} | {fid} | {r['measured'] if r['measured'] is not None else '-'} | "
            f"{(str(r['file_mb']) + ' MB') if 'file_mb' in r else (r.get('first') or '-')} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS))
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument("--ref", default="CPU")
    parser.add_argument("--target", default="CPU", help="CPU runs bf16 where the CPU supports it")
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "STRATEGY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one[0], args.one[1], args.ref, args.target)))
        return 0
    rows = []
    for model in args.models:
        for strategy in args.strategies:
            row = _subprocess(model, strategy, args.ref, args.target)
            rows.append(row)
            print(f"{model:>16} {strategy:>10}: {row.get('seconds', 'failed')} s", file=sys.stderr)
    import openvino as ov

    print(f"Machine: {platform.processor() or platform.machine()}, "
          f"{ov.Core().get_property('CPU', 'FULL_DEVICE_NAME')}, OpenVINO {ov.get_version().split('-')[0]}; "
          f"ref {args.ref}, target {args.target}\n")
    print(_table(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
