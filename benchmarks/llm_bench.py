"""Benchmark the default `bisect()` job on deep LLMs, with decode steps and against a weight-compressed twin.

Models (`bisect_ov.zoo.llm_cases`), each a random-init Llama exported by optimum-intel as the stateful IR
(KV-cache variables):

* ``deep`` (`deep_llama`): 24 decoder layers of width 512, grouped-query attention, 32,000-token vocabulary;
* ``1b`` (`llama_1b`): the 1B-class shape of TinyLlama-1.1B (22 layers of width 2048, 32 query and 4
  key-value heads, 5,632-wide MLP, 32,000 tokens), and its ``nncf.compress_weights`` int4 twin (groups of 128).

Measured, each job in a fresh process (so peak RSS is that job's own, read from its ``VmHWM``):

* ``plain``: compile + one inference of the untouched model on both sides (states reset), ``CPU:f32`` and
  ``CPU`` (bf16 where the CPU has it);
* ``default``: the whole default `bisect()` call, ``CPU:f32`` against ``CPU``, with a generated 16-token prompt;
* ``steps``: the same with decode steps (4 on ``deep``, 8 on ``1b``); on ``1b`` compared with ``plain-steps``,
  the plain job followed by 8 greedy decode steps on each side (plain generation);
* on ``1b`` also ``plain-int4`` (the f32 model and its int4 twin, both compiled and run once on ``CPU:f32``)
  and ``int4``: the default job, ``CPU:f32`` against ``CPU:f32`` with the int4 twin as the target model;
  ``plain-int4-steps`` and ``int4-steps`` the same with 8 decode steps.

Usage: ``python benchmarks/llm_bench.py [--model deep|1b] [--json out.json]``. The models are built once into
the zoo cache before any job is timed (the 1B model: minutes, ~10 GB of memory). A measuring script, not a test.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

JOBS = {
    "deep": {"plain": {}, "default": {}, "steps": {"steps": 4}},
    "1b": {"plain": {}, "default": {}, "plain-steps": {"steps": 8}, "steps": {"steps": 8}, "plain-int4": {},
           "int4": {}, "plain-int4-steps": {"steps": 8}, "int4-steps": {"steps": 8}},
}


def _peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024)
    return float("nan")


def _model(name: str, weights: str = "f32"):
    from bisect_ov.zoo.llm_cases import deep_llama, llama_1b

    return deep_llama() if name == "deep" else llama_1b(weights)


def _plain(model, twin=None, steps: int = 0) -> None:
    """Compile and run the untouched model once per side, the variables reset (what the plain job does); with
    `steps`, then that many greedy decode steps on each side's own cache (what plain generation does)."""
    import numpy as np
    import openvino as ov

    from bisect_ov.run.inputs import prepare_inputs

    arrays = dict(zip(("input_ids", "attention_mask", "position_ids", "beam_idx"), prepare_inputs(model, None)))
    sides = [(model, {"INFERENCE_PRECISION_HINT": "f32"})]
    sides.append((twin, {"INFERENCE_PRECISION_HINT": "f32"}) if twin is not None else (model, {}))
    for side, config in sides:
        compiled = ov.Core().compile_model(side, "CPU", config)
        request = compiled.create_infer_request()
        request.reset_state()
        feed = dict(arrays)
        logits = request.infer(feed)[0]
        length = feed["input_ids"].shape[1]
        for step in range(steps):
            token = np.argmax(logits[:, -1], axis=-1).reshape(1, 1).astype(feed["input_ids"].dtype)
            feed = {"input_ids": token, "attention_mask": np.ones((1, length + step + 1), feed["attention_mask"].dtype),
                    "position_ids": np.full((1, 1), length + step, feed["position_ids"].dtype),
                    "beam_idx": feed["beam_idx"]}
            logits = request.infer(feed)[0]
        del request, compiled


def _one(name: str, job: str) -> dict:
    from bisect_ov import bisect

    model = _model(name)
    twin = _model(name, "int4") if "int4" in job else None
    start = time.perf_counter()
    row: dict = {"model": name, "job": job, "ops": len(model.get_ops())}
    if job.startswith("plain"):
        _plain(model, twin, JOBS[name][job].get("steps", 0))
        row["verdict"] = "-"
    else:
        options = dict(JOBS[name][job])
        target = "CPU:f32" if twin is not None else "CPU"
        if twin is not None:
            options["target_model"] = twin
        report = bisect(model, "CPU:f32", target, progress=False, **options)
        first = report.first_divergence
        row.update(nodes=len(report.nodes), verdict="DIVERGES" if report.diverges else "no divergence",
                   first=first.name if first else None, output_error=max(o.error for o in report.outputs),
                   fidelity=report.fidelity.ratio if report.fidelity else None, steps=len(report.steps),
                   compiles=dict(report.compiles))
    row["seconds"] = round(time.perf_counter() - start, 1)
    row["peak_rss_mb"] = _peak_rss_mb()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="deep", choices=tuple(JOBS), help="which deep LLM (default: deep)")
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(*args.one)))
        return 0
    _model(args.model)  # built once, outside the timed jobs
    if args.model == "1b":
        _model(args.model, "int4")
    # An untimed plain job first: the first process to read the model pays for the disk cache, which would
    # inflate whichever job came first.
    subprocess.run([sys.executable, __file__, "--one", args.model, "plain"], capture_output=True, check=True)
    rows = []
    for job in JOBS[args.model]:
        out = subprocess.run([sys.executable, __file__, "--one", args.model, job], capture_output=True, text=True,
                             check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    plain = {r["job"]: r for r in rows if r["job"].startswith("plain")}
    for r in rows:
        base = plain.get("plain" if r["job"] == "default" else f"plain-{r['job']}")
        if base is not None and r is not base and not r["job"].startswith("plain"):
            print(f"{r['job']}: {r['seconds'] / base['seconds']:.2f}x the plain job's time, "
                  f"{r['peak_rss_mb'] / base['peak_rss_mb']:.2f}x its peak RSS")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
