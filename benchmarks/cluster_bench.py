"""Throughput of many samples in this process and on a local Dask cluster of 1 and 2 worker processes.

One `bisect()` per configuration over the same samples of a real topology with seeded random weights
(`bisect_ov.zoo.onnx_light`, ResNet-50 by default), reference ``CPU`` (f32) against target ``CPU:bf16``
(``CPU`` on a machine without bf16). The cluster is started before the clock runs (a real cluster is
already up), with the workers' profiler off (see `--profile`); the workers' compiles are in the figures
(each worker compiles the model once per pass).

Reported per configuration: the wall time of the two passes over the samples (the ``samples`` stage: the
untouched model on every sample, then the measured nodes exposed), samples per second over both passes, the
median time per unit, and whether the figures equal the in-process ones.

Usage::

    python benchmarks/cluster_bench.py                          # resnet50, 64 samples, 16 per unit
    python benchmarks/cluster_bench.py --model squeezenet --samples 200 --per-unit 25

Needs the ``cluster`` extra (``pip install 'bisect_ov[cluster]'``). This is a measuring script, not a test.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's package, here and in the workers started below
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--per-unit", type=int, default=16)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--profile", action="store_true", help="keep the Dask workers' profiler on")
    args = parser.parse_args()

    import dask
    import numpy as np
    from distributed import Client, LocalCluster

    # The workers' statistical profiler samples every thread's stack every 10 ms and costs the units about
    # a third of their time here; `--profile` keeps it on to show that.
    dask.config.set({"distributed.worker.profile.enabled": args.profile})

    from bisect_ov import bisect
    from bisect_ov.run.devices import cpu_supports_bf16
    from bisect_ov.zoo.onnx_light import load_light_model

    model = load_light_model(args.model)
    target = "CPU:bf16" if cpu_supports_bf16() else "CPU"
    param = model.get_parameters()[0]
    shape = [int(d) for d in param.get_partial_shape().to_shape()]
    data = [[np.random.default_rng(i).standard_normal(shape).astype(np.float32)] for i in range(args.samples)]

    def run(executor):
        start = time.perf_counter()
        report = bisect(model, "CPU", target, data, executor=executor, samples_per_batch=args.per_unit, local=False,
                        impact=0, noise=False, progress=False)
        total = time.perf_counter() - start
        s = report.samples
        figures = (s.errors, s.ranking, {n.key: n.over_samples for n in report.nodes})
        units = list(s.batch_seconds) + list(s.spread_batch_seconds)
        return report.timings.get("samples", 0.0), total, statistics.median(units), figures

    print(f"{args.model}, {args.samples} samples of {shape}, {args.per_unit} per unit, CPU vs {target}")
    print(f"{'where':22} {'samples s':>9} {'samples/s':>9} {'unit s':>7} {'bisect s':>8}  same figures")
    seconds, total, unit, reference = run(None)
    print(f"{'in-process':22} {seconds:9.1f} {2 * args.samples / seconds:9.1f} {unit:7.2f} {total:8.1f}  -")
    for n in args.workers:
        with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                          silence_logs=50) as cluster, Client(cluster) as client:
            seconds, total, unit, figures = run(client.get_executor())
        print(f"{f'dask, {n} worker(s)':22} {seconds:9.1f} {2 * args.samples / seconds:9.1f} {unit:7.2f} "
              f"{total:8.1f}  {figures == reference}")
    print("samples/s counts both passes (2 runs per sample, each on both sides).")


if __name__ == "__main__":
    main()
