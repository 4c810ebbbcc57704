"""Peak memory of the default job on a 24-layer BERT whose f16 run overflows, against `EMU:f16`.

The zoo's full-size BERT-large (1.3 GB of f32 weights, built once into the zoo cache) with one layer's FFN made to
overflow f16 without changing what f32 computes: the up-projection's weights and bias times 1e5, the
down-projection's weights times 1e-5. `bisect(model, "CPU:f32", "EMU:f16", inputs)` then names the overflow and
runs impact experiments over the layers around it, which compile prefix and suffix pieces of the model. Each run
is one fresh process; its peak RSS is the process's ``VmHWM``.

Usage::

    python benchmarks/overflow_memory.py                     # this checkout
    python benchmarks/overflow_memory.py --code OTHER_CHECKOUT --layer 12

``--code`` runs another checkout of the package (to compare with an older version). This is a measuring
script, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parents[1]


def planted(layer: int, folder: pathlib.Path) -> pathlib.Path:
    """The zoo's BERT-large with layer `layer`'s FFN scaled to overflow f16, saved as IR in `folder`."""
    import numpy as np
    import openvino as ov
    from openvino import opset13 as ops

    from bisect_ov.zoo import cache

    model = cache.load("bert_large", "full")
    hidden = 1024

    def weight(matmul):
        """The constant a MatMul's second input reads (through Converts and the like), or None."""
        node = matmul.input_value(1).get_node()
        for _ in range(4):
            if node.get_type_name() == "Constant":
                return node
            if node.get_input_size() == 0:
                return None
            node = node.input_value(0).get_node()
        return None

    ffn = [m for m in model.get_ordered_ops() if m.get_type_name() == "MatMul" and weight(m) is not None
           and 4 * hidden in weight(m).get_output_shape(0)]
    up = [m for m in ffn if m.get_output_partial_shape(0)[-1].get_length() == 4 * hidden]
    down = [m for m in ffn if m not in up]
    if len(up) <= layer or len(down) <= layer:
        raise SystemExit(f"found {len(up)} FFN up-projections and {len(down)} down-projections; no layer {layer}")

    def scale(matmul, factor: float, bias: bool) -> None:
        old = weight(matmul)
        new = ops.constant(old.get_data() * np.float32(factor), ov.Type.f32)
        for target in list(old.output(0).get_target_inputs()):
            target.replace_source_output(new.output(0))
        for target in matmul.output(0).get_target_inputs():
            add = target.get_node()
            if bias and add.get_type_name() == "Add" and add.input_value(1).get_node().get_type_name() == "Constant":
                b = add.input_value(1).get_node()
                add.input(1).replace_source_output(ops.constant(b.get_data() * np.float32(factor), ov.Type.f32).output(0))

    scale(up[layer], 1e5, bias=True)
    scale(down[layer], 1e-5, bias=False)
    path = folder / f"bert_large_overflow_{layer}.xml"
    ov.save_model(model, str(path), compress_to_fp16=False)
    return path


def _child(path: str) -> dict:
    from bisect_ov import bisect
    from bisect_ov.zoo import cache

    model = cache.load("bert_large", "full")
    inputs = cache.sample_inputs("bert_large", "full", seed=1, model=model)
    del model
    start = time.perf_counter()
    report = bisect(path, "CPU:f32", "EMU:f16", inputs, progress=False)
    seconds = time.perf_counter() - start
    with open("/proc/self/status", encoding="ascii") as status:
        peak = next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM:"))
    first = report.first_divergence
    return {"seconds": round(seconds, 1), "peak_rss_mb": round(peak), "compiles": report.compiles,
            "first": first.name if first else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layer", type=int, default=12, help="the layer whose FFN overflows (default 12)")
    parser.add_argument("--code", help="a checkout of bisect_ov to run instead of this one")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child)))
        return 0
    with tempfile.TemporaryDirectory(prefix="overflow_memory_") as folder:
        path = planted(args.layer, pathlib.Path(folder))
        code = pathlib.Path(args.code).resolve() if args.code else HERE
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")])}
        out = subprocess.run([sys.executable, str(pathlib.Path(__file__).resolve()), "--child", str(path)],
                             env=env, capture_output=True, text=True, check=False)
        if out.returncode:
            print(out.stderr[-2000:], file=sys.stderr)
            return out.returncode
        row = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"code {code}: BERT-large, layer {args.layer}'s FFN overflowing f16, against EMU:f16: peak RSS "
          f"{row['peak_rss_mb']} MB, {row['seconds']} s, compiles {row['compiles']}, first divergence {row['first']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
