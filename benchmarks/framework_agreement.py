"""Benign conversions against their own framework: what `bisect()` says when nothing is wrong.

Each torchvision model (random weights, seed 0) is converted the way OpenVINO's documentation shows,
``ov.convert_model(module, example_input=x)`` (a dynamic input), and compared with the module itself in PyTorch
eager (f32) against ``CPU:f32``. Printed per model: the verdict, the final output's error and tolerance, and the
share of compute nodes compared or covered. With ``--faults N``, N more runs per model, each with one weighted op
(a Convolution or MatMul, spread over the graph) given weights 1.2x in the converted model, as a conversion
defect would: whether the verdict names that op (as the first divergence, or, when the outputs stay within their
tolerance, as where the absorbed error starts: a ConvNeXt's layer scales, 1e-6 at random init, take most of a
block's error out). Models are torchvision's by name, or ``timm:<name>``.
Needs the ``zoo`` extra (torch, torchvision, timm). Nothing downloads.

    python benchmarks/framework_agreement.py
    python benchmarks/framework_agreement.py --models resnet18 timm:convnext_atto --size 64 --faults 4

This is a measuring script, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "resnet50", "mobilenet_v3_small"])
    parser.add_argument("--size", type=int, default=64, help="input height and width (default 64)")
    parser.add_argument("--faults", type=int, default=0, help="faulty weighted ops per model (default 0)")
    args = parser.parse_args(argv)
    import openvino as ov
    import openvino.opset13 as ops
    import torch
    import torchvision

    from bisect_ov import bisect
    from bisect_ov.report.view import absorbed_start

    print(f"{'model':<22} {'verdict':<48} {'output rel_l2':>13} {'tolerance':>9} {'covered':>8}  faults named")
    named_all = tried_all = 0
    for name in args.models:
        torch.manual_seed(0)
        if name.startswith("timm:"):
            import timm

            module = timm.create_model(name[5:], pretrained=False).eval()
        else:
            module = getattr(torchvision.models, name)().eval()
        x = torch.randn(1, 3, args.size, args.size)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = ov.convert_model(module, example_input=x)
        report = bisect(model, ref=module, target="CPU:f32", inputs=[x.numpy()], progress=False, noise=False,
                        impact=0)
        out = report.outputs[0]
        verdict = repr(report).split(", ", 2)[-1].rstrip(")")[:48]
        weighted = [op.get_friendly_name() for op in model.get_ordered_ops()
                    if op.get_type_name() in ("Convolution", "GroupConvolution", "MatMul")
                    and op.input_value(1).get_node().get_type_name() != "Parameter"]
        picks = [weighted[(i + 1) * len(weighted) // (args.faults + 1)] for i in range(args.faults)] if weighted else []
        named = absorbed_at = 0
        for site in picks:
            faulty = model.clone()
            op = next(o for o in faulty.get_ordered_ops() if o.get_friendly_name() == site)
            op.input(1).replace_source_output(ops.multiply(op.input_value(1), ops.constant(np.float32(1.2))).output(0))
            faulty.validate_nodes_and_infer_types()
            faulty_report = bisect(faulty, ref=module, target="CPU:f32", inputs=[x.numpy()], progress=False,
                                   noise=False, impact=0)
            found = faulty_report.first_divergence
            if found is None:  # outputs within tolerance: the start of the absorbed error is what the verdict names
                absorbed = tuple(n for n in faulty_report.nodes if n.absorbed)
                found = absorbed_start(absorbed) if absorbed else None
                absorbed_at += found is not None and (found.name == site or site in found.group)
            named += found is not None and (found.name == site or site in found.group)
        named_all, tried_all = named_all + named, tried_all + len(picks)
        faults = (f"{named}/{len(picks)}" + (f" ({absorbed_at} absorbed)" if absorbed_at else "")) if picks else "-"
        print(f"{name:<22} {verdict:<48} {out.error:>13.2e} {out.tolerance:>9.1e} {report.coverage:>8.0%}  {faults}",
              flush=True)
    if tried_all:
        print(f"Faults named at their op (first divergence, or where the absorbed error starts): {named_all}/{tried_all}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
