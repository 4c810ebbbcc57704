"""Run again, with the rules of this checkout, the faults a needle-benchmark run planted at some op types.

When a rule of the judge changes what it says about one kind of op, the faults the held-out runs planted at
such ops say whether the change loses any: each row of the given `needle_bench.py --json` files whose site's
op type is among `--ops` runs again (the same model, site, fault and seed, reference ``CPU:f32``, the row's
target) and is judged as the benchmark judges it. A measuring script: it passes or fails nothing.

Usage::

    python benchmarks/needle_again.py --ops Cos Sin Gelu --target CPU:bf16 RESULTS/*.json

It prints one line per fault (named before, named now) and the two counts.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys
import zlib

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="needle_bench.py --json files")
    parser.add_argument("--ops", nargs="+", required=True, help="op types whose sites run again")
    parser.add_argument("--target", default="CPU:bf16", help="the target (default CPU:bf16)")
    args = parser.parse_args(argv)
    import needle_bench as nb

    from bisect_ov import bisect, inject_fault
    from bisect_ov.model.graph import ModelGraph

    rows = [r for f in args.results for r in json.loads(pathlib.Path(f).read_text())["rows"] if r["op_type"] in args.ops]
    by_model = collections.defaultdict(list)
    for r in rows:
        by_model[(r["source"], r["model"])].append(r)
    before = now = 0
    for (source, name), these in by_model.items():
        module, _, loader = nb.HELD_OUT[source]
        model, meta = getattr(__import__(module), loader)(name, None)
        inputs = nb.outside_inputs(meta, model, 0)
        graph = ModelGraph(model)
        for r in these:
            faulty = inject_fault(model, r["site"], seed=zlib.crc32(f"{name}:{r['site']}".encode()), **nb.FAULTS[r["fault"]])
            report = bisect(model, nb.REFERENCE, args.target, inputs, target_model=faulty, progress=False)
            hit = nb.judge(report, r["site"], nb.producers_of(graph, r["site"]))["hit"]
            before, now = before + r["hit"], now + hit
            print(f"{name} {r['fault']:8} {r['op_type']:8} {r['site'][:60]}: before {'hit' if r['hit'] else 'miss'}, "
                  f"now {'hit' if hit else 'miss'}", flush=True)
    print(f"{len(rows)} faults at {', '.join(args.ops)}: named before {before}, now {now}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
