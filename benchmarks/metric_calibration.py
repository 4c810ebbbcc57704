"""How the built-in metrics sit against the default tolerance model, which is measured for ``rel_l2``.

For each benign model of the zoo (and the demo, whose instance norm diverges on purpose), compared on
``CPU:f32`` against ``EMU:f16`` and ``EMU:bf16`` with every node tapped: how many floating nodes each metric
puts over the default tolerance, the first of them, and the median per node of that metric over ``rel_l2``.
A metric that keeps the model's thresholds must find nothing on the benign models and ``inorm/sub`` on the
demo, with a ratio near 1 (docs/tolerance.md, "Metrics").

Usage::

    python benchmarks/metric_calibration.py

This is a measuring script, not a test: nothing here passes or fails.
"""

from __future__ import annotations

from bisect_ov import bisect
from bisect_ov.analysis.metrics import METRICS
from bisect_ov.zoo import synthetic

MEASURED = ("rel_l2", "max_rel", "cosine_distance")
CASES = {
    "demo (offset 0)": lambda: synthetic.demo(inorm_offset=0.0), "conv_bn_net": synthetic.conv_bn_net,
    "attention_block": synthetic.attention_block, "chain": synthetic.chain, "diamond": synthetic.diamond,
    "demo": synthetic.demo,
}


def worst(node, metric: str) -> float:
    return max((METRICS[metric](o) for o in node.outputs), default=0.0)


def main() -> None:
    for target in ("EMU:f16", "EMU:bf16"):
        for label, build in CASES.items():
            report = bisect(build(), "CPU:f32", target, progress=False, strategy="full", impact=0, local=False,
                            noise=False, baseline=False)
            floats = [n for n in report.nodes if n.tolerance > 0]
            cells = []
            for metric in MEASURED:
                over = [n for n in floats if worst(n, metric) > n.tolerance]
                ratios = sorted(worst(n, metric) / n.outputs[0].rel_l2 for n in floats if n.outputs[0].rel_l2 > 0)
                median = ratios[len(ratios) // 2] if ratios else float("nan")
                first = min(over, key=lambda n: n.index).name if over else "-"
                cells.append(f"{metric} {len(over)}/{len(floats)} over, first {first}, median x{median:.3g}")
            print(f"{target:8s} {label:16s} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
