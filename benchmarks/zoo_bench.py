"""Benchmark `bisect()` on full-size real architectures from `bisect_ov.zoo` against a plain run.

For each model, fresh processes (so peak RSS is that job's own) measure:

* ``plain``: compile + one inference of the untouched model on the reference and on the target;
* ``default``: the whole default `bisect()` call (fusion taps, local errors, impact of the top suspects,
  the noise check), reference ``CPU:f32`` against the target;
* ``fast``: `bisect(..., budget="fast")` (no local errors, no impact runs, noise from the compiles made);
* ``naive``: what a script that exposes every output and compares does: both sides compiled with every
  compute node's outputs exposed, one inference, every pair compared (it answers far less);
* with ``--samples N``, ``samples:N``: the default job over N seeded inputs given as a generator (its peak RSS
  should be the one-sample default job's: only statistics are kept per sample);
* with ``--emulated``, the default job against ``EMU:f16`` as well (slow on large models: the emulated
  device rounds every tensor with extra ops).

Reported per row: ops and compute nodes of the model, nodes compared, fidelity ratio (instrumented / plain
final-output error), wall time and its ratio to the plain job, peak RSS, verdict and first divergence. Models
are built once into the zoo cache (``$BISECT_OV_ZOO_CACHE``, see `bisect_ov.zoo.cache`) with f32 weights;
building the full sizes needs the ``zoo`` extra, several GB of memory, and minutes.

Usage::

    python benchmarks/zoo_bench.py            # BERT-base, ViT-B/16, ConvNeXt-T, ResNet-50, GPT-2, BERT-large
    python benchmarks/zoo_bench.py --models bert llama --emulated --json out.json
    python benchmarks/zoo_bench.py --repeat 3          # each job 3 times: fastest time, largest peak RSS
    python benchmarks/zoo_bench.py --models resnet50 bert --jobs --samples 8 64    # memory over many samples
    python benchmarks/zoo_bench.py --models --outside --jobs    # only the architectures outside the zoo

This is a measuring script, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import resource
import statistics
import subprocess
import sys
import time

DEFAULT_MODELS = ("bert", "vit", "convnext", "resnet50", "gpt2", "bert_large")
LABELS = {"bert": "BERT-base", "vit": "ViT-B/16", "convnext": "ConvNeXt-T", "resnet50": "ResNet-50",
          "gpt2": "GPT-2 (12 layers)", "bert_large": "BERT-large (24 layers)", "llama": "Llama (12 layers)",
          "whisper_encoder": "Whisper-base encoder", "efficientnet": "EfficientNet-B0",
          "mobilenetv3": "MobileNetV3-Large"}


def _outside() -> tuple[str, ...]:
    """The architectures outside the zoo (built by ``needle_bench.py``, beside this script)."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import needle_bench

    return tuple(needle_bench.OUTSIDE)


def _peak_rss_mb() -> float:
    """This process's own peak RSS. getrusage's ru_maxrss is not: Linux carries it over from the parent
    across fork and exec, so a job started by a driver that had loaded big models would report theirs."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def run_one(name: str, job: str, target: str, size: str, max_tap_mb: float | None = None) -> dict:
    """Measure one (model, job) in this process."""
    from bisect_ov import bisect, make_device
    from bisect_ov.model.graph import ModelGraph
    from bisect_ov.zoo import cache

    if name in _outside():
        import needle_bench

        model, meta = needle_bench.load_outside(name)
        inputs = needle_bench.outside_inputs(meta, model, seed=1)
        converter, size = meta["converter"], "outside"

        def sample(seed: int) -> dict:
            return needle_bench.outside_inputs(meta, model, seed=seed)
    else:
        model = cache.load(name, size)
        inputs = cache.sample_inputs(name, size, seed=1, model=model)
        converter = cache.describe(name, size)["converter"]

        def sample(seed: int) -> dict:
            return cache.sample_inputs(name, size, seed=seed, model=model)
    graph = ModelGraph(model)
    row = {"model": name, "size": size, "job": job, "target": target, "ops": len(model.get_ops()),
           "compute": len(graph.candidates()), "converter": converter}
    start = time.perf_counter()
    if job == "plain":
        for role, device in (("ref", "CPU:f32"), ("target", target)):
            make_device(device, role=role).compile(model).infer(list(inputs.values()))
    elif job == "naive":
        from bisect_ov.analysis.metrics import compare
        from bisect_ov.model.taps import default_taps, tap_model
        from bisect_ov.run.inputs import prepare_inputs

        arrays = prepare_inputs(model, inputs)
        tapped = tap_model(graph, default_taps(graph))
        outs = [make_device(device, role=role).compile(tapped.model).infer(arrays, share_outputs=False)
                for role, device in (("ref", "CPU:f32"), ("target", target))]
        row["compared"] = len([compare(outs[0][i], outs[1][i]) for i in tapped.tap_outputs])
    else:
        from bisect_ov import Samples

        extra = {"budget": "fast"} if job == "fast" else {}
        if max_tap_mb is not None:
            extra["max_tap_bytes"] = int(max_tap_mb * 2**20)
        if job.startswith("samples:"):
            count = int(job.split(":")[1])
            inputs = Samples(sample(1 + i) for i in range(count))
            row["samples"] = count
        report = bisect(model, "CPU:f32", target, inputs, progress=False, **extra)
        first = report.first_divergence
        row.update(compared=len(report.nodes), fidelity=report.fidelity.ratio if report.fidelity else None,
                   verdict="DIVERGES" if report.diverges else "no divergence", first=first.name if first else None,
                   final_error=max((o.error for o in report.outputs), default=None),
                   target_precision=report.target.precision, compiles=report.compiles.get("target"),
                   costs=report.to_dict()["costs"])  # plain JSON values of the typed records
    row["seconds"] = round(time.perf_counter() - start, 2)
    row["peak_rss_mb"] = round(_peak_rss_mb(), 0)
    return row


def _subprocess(name: str, job: str, target: str, size: str, timeout: float, max_tap_mb: float | None = None) -> dict:
    cmd = [sys.executable, __file__, "--one", name, job, "--target", target, "--size", size]
    if max_tap_mb is not None:
        cmd += ["--max-tap-mb", str(max_tap_mb)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"model": name, "job": job, "target": target, "error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        return {"model": name, "job": job, "target": target, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _table(rows: list[dict]) -> str:
    head = ("model", "ops", "compute nodes", "job", "target", "nodes compared", "fidelity", "seconds", "x plain",
            "peak RSS MB", "verdict", "first divergence")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    plain = {(r["model"], r["target"]): r for r in rows if r["job"] == "plain" and "error" not in r}
    for r in rows:
        size = r.get("size", "full")
        label = LABELS.get(r["model"], r["model"]) if size == "full" else f"{r['model']} ({size})"
        if "error" in r:
            out.append(f"| {label} | | | {r['job']} | {r['target']} | failed: {r['error']} | | | | | | |")
            continue
        p = plain.get((r["model"], r["target"]))  # the plain job on the same target
        ratio = f"{r['seconds'] / p['seconds']:.1f}" if p and p["seconds"] and r["job"] != "plain" else ""
        fid = f"{r['fidelity']:.2f}" if isinstance(r.get("fidelity"), (int, float)) else "-"
        out.append(f"| {label} | {r['ops']} | {r['compute']} | {r['job']} | {r['target']} | {r.get('compared', '-')} | "
                   f"{fid} | {r['seconds']:.1f} | {ratio} | {r['peak_rss_mb']:.0f} | {r.get('verdict', '-')} | "
                   f"{r.get('first') or '-'} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    parser.add_argument("--outside", nargs="*", default=None,
                        help="also the architectures outside the zoo that needle_bench.py builds (all, or those "
                             "named), at their own size")
    parser.add_argument("--target", default="CPU", help="CPU runs bf16 where the CPU supports it")
    parser.add_argument("--emulated", action="store_true", help="also run the default job against EMU:f16")
    parser.add_argument("--jobs", nargs="*", default=["fast", "naive"], choices=("fast", "naive"),
                        help="jobs besides plain and default (default: fast naive)")
    parser.add_argument("--size", default="full", choices=("small", "full"))
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per job")
    parser.add_argument("--json", help="also write the rows as JSON here")
    parser.add_argument("--max-tap-mb", type=float, help="max_tap_bytes of the default and fast jobs, in MB "
                        "(default: bisect()'s)")
    parser.add_argument("--repeat", type=int, default=1, help="run each job this many times, each in a fresh "
                        "process, and keep its fastest time and its largest peak RSS (default 1)")
    parser.add_argument("--samples", type=int, nargs="*", default=[], metavar="N",
                        help="also run the default job over N seeded samples, for each N given")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "JOB"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one[0], args.one[1], args.target, args.size, args.max_tap_mb)))
        return 0
    from bisect_ov.zoo import cache

    rows = []
    outside = [] if args.outside is None else (args.outside or list(_outside()))
    for name in [*args.models, *[n for n in outside if n not in args.models]]:
        if name in _outside():
            import needle_bench

            needle_bench.load_outside(name)  # build outside the timed jobs
        else:
            cache.model_path(name, args.size)
        jobs = [("plain", args.target), ("default", args.target)]
        jobs += [(job, args.target) for job in args.jobs]
        jobs += [(f"samples:{n}", args.target) for n in args.samples]
        if args.emulated:  # its plain job too: an emulated compile holds the weights once more than the CPU's
            jobs += [("plain", "EMU:f16"), ("default", "EMU:f16")]
        for job, target in jobs:
            runs = [_subprocess(name, job, target, args.size, args.timeout,
                                args.max_tap_mb if job not in ("plain", "naive") else None)
                    for _ in range(args.repeat)]
            good = [r for r in runs if "error" not in r]
            row = min(good, key=lambda r: r["seconds"]) if good else runs[0]
            if good:
                row = dict(row, peak_rss_mb=max(r["peak_rss_mb"] for r in good), runs=[r["seconds"] for r in good])
            rows.append(row)
            print(f"{name:>16} {job:>8} {target:>8}: {row.get('seconds', row.get('error'))}", file=sys.stderr,
                  flush=True)
            if args.json:
                with open(args.json, "w", encoding="utf-8") as f:
                    json.dump(rows, f, indent=1)
    import openvino as ov

    print(f"Machine: {platform.machine()}, {ov.Core().get_property('CPU', 'FULL_DEVICE_NAME')}, "
          f"OpenVINO {ov.get_version().split('-')[0]}; ref CPU:f32, size {args.size}\n")
    print(_table(rows) + "\n")
    plain = {(r["model"], r["target"]): r for r in rows if r.get("job") == "plain" and "error" not in r}
    targets = (args.target, *(("EMU:f16",) if args.emulated else ()))
    for target in targets:
        for job in ("default", "fast", "naive", *(f"samples:{n}" for n in args.samples)):
            done = [r for r in rows if r.get("job") == job and "error" not in r and r.get("target") == target
                    and (r["model"], target) in plain]
            for what, field in (("time", "seconds"), ("peak RSS", "peak_rss_mb")):
                ratios = sorted(r[field] / plain[(r["model"], target)][field] for r in done
                                if plain[(r["model"], target)][field])
                if ratios:
                    on = f" against {target}" if len(targets) > 1 else ""
                    print(f"{job} job / plain job{on}, {what}: median {statistics.median(ratios):.2f}x, "
                          f"worst {ratios[-1]:.2f}x over {len(ratios)} models")
    return 0


if __name__ == "__main__":
    sys.exit(main())
