"""Peak memory of `bisect()` against the number of samples: it should stay flat.

Each run is one fresh process (so its peak RSS, ``ru_maxrss``, is that run's own) that builds a small
convolutional classifier taking one 1x64x32x32 f32 input (256 KB per sample), and runs
``bisect(model, "CPU", "CPU:bf16", samples)`` over N samples given as a generator (made on the fly, so
the generator itself holds nothing), or as a folder of ``.npz`` files written beforehand. Local errors,
impact and the noise check are off: the row measures the samples.

Usage::

    python benchmarks/samples_memory.py                         # N = 1, 50, 200, 1000; generator and folder
    python benchmarks/samples_memory.py --counts 1 200 --forms generator --code OTHER_CHECKOUT

``--code`` runs another checkout of the package (to compare with an older version). This is a measuring
script, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parents[1]
SHAPE = (1, 64, 32, 32)


def _model():
    import numpy as np
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter(list(SHAPE), np.float32, name="x")
    h = x
    for i in range(2):
        w = ops.constant((rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32))
        h = ops.relu(ops.convolution(h, w, [1, 1], [1, 1], [1, 1], [1, 1]))
        h.set_friendly_name(f"conv{i}")
    pooled = ops.reduce_mean(h, ops.constant(np.array([2, 3])), keep_dims=False)
    logits = ops.matmul(pooled, ops.constant(rng.standard_normal((64, 10)).astype(np.float32)), False, False)
    logits.set_friendly_name("logits")
    return ov.Model([logits], [x], "samples_memory")


def _child(n: int, form: str) -> dict:
    import numpy as np

    from bisect_ov import bisect

    def generate():
        for i in range(n):
            yield {"x": np.random.default_rng(i).standard_normal(SHAPE).astype(np.float32)}

    with tempfile.TemporaryDirectory() as folder:
        if form == "folder":
            for i, sample in enumerate(generate()):
                np.savez(os.path.join(folder, f"{i:05d}.npz"), **sample)
            inputs = folder
        else:
            inputs = generate()
        start = time.perf_counter()
        report = bisect(_model(), "CPU", "CPU:bf16", inputs, local=False, impact=0, noise=False, progress=False)
        seconds = time.perf_counter() - start
    assert report.samples is not None and report.samples.count == n or n == 1
    return {"n": n, "form": form, "seconds": round(seconds, 2),
            "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 50, 200, 1000])
    parser.add_argument("--forms", nargs="+", default=["generator", "folder"], choices=["generator", "folder"])
    parser.add_argument("--code", type=pathlib.Path, default=HERE, help="checkout whose bisect_ov runs")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--form", default="generator", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(_child(args.child, args.form)))
        return
    env = dict(os.environ, PYTHONPATH=str(args.code.resolve()))
    print(f"{'form':10} {'samples':>7} {'peak RSS MB':>11} {'seconds':>8}")
    for form in args.forms:
        for n in args.counts:
            command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--child", str(n), "--form", form]
            out = subprocess.run(command, env=env,
                                 capture_output=True, text=True, check=True, cwd=str(args.code))
            row = json.loads(out.stdout.strip().splitlines()[-1])
            print(f"{form:10} {row['n']:7d} {row['peak_mb']:11.1f} {row['seconds']:8.2f}", flush=True)


if __name__ == "__main__":
    main()
