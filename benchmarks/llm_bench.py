"""Benchmark the default `bisect()` job on a 24-layer LLM, with and without decode steps.

The model is `bisect_ov.zoo.llm_cases.deep_llama`: a random-init Llama with 24 decoder layers (width 512,
grouped-query attention, 32,000-token vocabulary), exported by optimum-intel as the stateful IR (KV-cache
variables). Measured, each in a fresh process (so peak RSS is that job's own):

* ``plain``: compile + one inference of the untouched model on both sides (states reset);
* ``default``: the whole default `bisect()` call, ``CPU:f32`` against ``CPU`` (bf16 where the CPU has it),
  with generated LLM inputs (a 16-token prompt);
* ``steps``: the same with ``steps=4`` (prefill + 4 decode steps on both sides).

Usage: ``python benchmarks/llm_bench.py [--json out.json]``. A measuring script, not a test.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

JOBS = {"plain": {}, "default": {}, "steps": {"steps": 4}}


def _one(job: str) -> dict:
    import openvino as ov

    from bisect_ov import bisect
    from bisect_ov.model.state import initial_states, make_stateless
    from bisect_ov.run.inputs import prepare_inputs
    from bisect_ov.zoo.llm_cases import deep_llama

    model = deep_llama()
    start = time.perf_counter()
    row: dict = {"job": job, "ops": len(model.get_ops())}
    if job == "plain":
        stateless = make_stateless(model)
        arrays = prepare_inputs(model, None)
        arrays += initial_states(stateless, arrays)
        for config in ({"INFERENCE_PRECISION_HINT": "f32"}, {}):
            ov.Core().compile_model(stateless.model, "CPU", config).create_infer_request().infer(arrays)
        row["verdict"] = "-"
    else:
        report = bisect(model, "CPU:f32", "CPU", progress=False, **JOBS[job])
        row.update(nodes=len(report.nodes), verdict="DIVERGES" if report.diverges else "no divergence",
                   output_error=max(o.error for o in report.outputs),
                   fidelity=report.fidelity.ratio if report.fidelity else None, steps=len(report.steps))
    row["seconds"] = round(time.perf_counter() - start, 1)
    row["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="write the rows to this file")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(args.one)))
        return 0
    from bisect_ov.zoo.llm_cases import deep_llama

    deep_llama()  # built once, outside the timed jobs
    rows = []
    for job in JOBS:
        out = subprocess.run([sys.executable, __file__, "--one", job], capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
