"""Benign conversions against their own framework: what `bisect()` says when nothing is wrong.

Each model (random weights, seed 0) is converted one of three ways and compared with its framework, reference
in f32 against ``CPU:f32``:

* ``trace`` (default): ``ov.convert_model(module, example_input=x)`` (a dynamic input), the way OpenVINO's
  documentation shows, against the module in PyTorch eager;
* ``export``: ``ov.convert_model(torch.export.export(module, ...))`` against ``Torch(program)``;
* ``onnx``: ``torch.onnx.export`` (TorchScript for the CNNs, the dynamo exporter for the transformers, which
  needs onnxscript) read by OpenVINO, against ONNX Runtime running the file (``ref="ORT"``).

Printed per model: the verdict, the final output's error and tolerance, the share of compute nodes compared or
covered, and how many the framework's run has a value for. With ``--faults N``, N more runs per model, each with
one weighted op (a Convolution or MatMul, spread over the graph) given weights 1.2x in the converted model, as a
conversion defect would: whether the verdict names that op (as the first divergence, or, when the outputs stay
within their tolerance, as where the absorbed error starts). Models: torchvision's by name, ``timm:<name>``, and
``hf:bert``, ``hf:gpt2``, ``hf:llama`` (the zoo's small configs, `bisect_ov.zoo.hf.plain_module`: 2 layers, width
64, a vocabulary of 1,000, 16 tokens; these trace with neither TorchScript nor TorchScript's ONNX export on current
transformers, so ``trace`` exports them). Needs the ``zoo`` extra (torch, torchvision, timm, transformers).
Nothing downloads. With ``--cost``, each benign run's time beside the same run against an OpenVINO reference
(``CPU:f32``), in one process (the first model's time includes warming up).

    python benchmarks/framework_agreement.py
    python benchmarks/framework_agreement.py --models resnet18 timm:convnext_atto --size 64 --faults 4
    python benchmarks/framework_agreement.py --models hf:bert hf:gpt2 hf:llama vit_b_16 --how export --faults 2

This is a measuring script, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings

import numpy as np


def build(name: str, size: int):
    """The module (eval mode, seeded) and its example inputs (a tuple of tensors)."""
    import torch
    import torchvision

    torch.manual_seed(0)
    if name.startswith("hf:"):
        from bisect_ov.zoo.hf import plain_module

        return plain_module(name[3:], "small", 0), (torch.randint(0, 1000, (1, 16)), torch.ones(1, 16, dtype=torch.int64))
    if name.startswith("timm:"):
        import timm

        module = timm.create_model(name[5:], pretrained=False).eval()
    else:
        module = getattr(torchvision.models, name)().eval()
    return module, (torch.randn(1, 3, size, size),)


def convert(name: str, module, example: tuple, how: str, folder: str):
    """(the OpenVINO model, the reference side, how it was converted) for conversion path `how`."""
    import openvino as ov
    import torch

    from bisect_ov.frameworks import ORT, Torch

    if how == "trace" and not name.startswith("hf:"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ov.convert_model(module, example_input=example[0]), module, "trace"
    if how in ("trace", "export"):
        program = torch.export.export(module, example)
        return ov.convert_model(program), Torch(program), "export"
    path = os.path.join(folder, name.replace(":", "_") + ".onnx")
    dynamo = name.startswith("hf:")
    names = ["input_ids", "attention_mask"] if dynamo else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, example, path, dynamo=dynamo, input_names=names)
    return ov.Core().read_model(path), ORT(path), "onnx"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "resnet50", "mobilenet_v3_small"])
    parser.add_argument("--size", type=int, default=64, help="input height and width of the CNNs (default 64)")
    parser.add_argument("--how", choices=("trace", "export", "onnx"), default="trace",
                        help="conversion path (default trace; the transformers are exported)")
    parser.add_argument("--faults", type=int, default=0, help="faulty weighted ops per model (default 0)")
    parser.add_argument("--cost", action="store_true",
                        help="also time the benign run against an OpenVINO reference (CPU:f32), the same options")
    args = parser.parse_args(argv)
    import openvino.opset13 as ops

    from bisect_ov import bisect
    from bisect_ov.report.view import absorbed_start

    print(f"{'model':<20} {'path':<6} {'verdict':<40} {'output rel_l2':>13} {'tolerance':>9} {'covered':>8} "
          f"{'matched':>9}  faults named")
    named_all = tried_all = 0
    folder = tempfile.mkdtemp(prefix="framework_agreement_")
    for name in args.models:
        module, example = build(name, args.size)
        inputs = [t.numpy() for t in example]
        model, ref, path = convert(name, module, example, args.how, folder)
        start = time.perf_counter()
        report = bisect(model, ref=ref, target="CPU:f32", inputs=inputs, progress=False, noise=False, impact=0)
        seconds = time.perf_counter() - start
        cost = ""
        if args.cost:
            start = time.perf_counter()
            bisect(model, ref="CPU:f32", target="CPU:f32", inputs=inputs, progress=False, noise=False, impact=0)
            against_ov = time.perf_counter() - start
            cost = f"  {seconds:.2f} s against {against_ov:.2f} s with an OpenVINO reference ({seconds / against_ov:.1f}x)"
        out = report.outputs[0]
        verdict = repr(report).split(", ", 2)[-1].rstrip(")")[:40]
        match = report.frameworks[0]
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
            faulty_report = bisect(faulty, ref=ref, target="CPU:f32", inputs=inputs, progress=False, noise=False,
                                   impact=0)
            found = faulty_report.first_divergence
            if found is None:  # outputs within tolerance: the start of the absorbed error is what the verdict names
                absorbed = tuple(n for n in faulty_report.nodes if n.absorbed)
                found = absorbed_start(absorbed) if absorbed else None
                absorbed_at += found is not None and (found.name == site or site in found.group)
            named += found is not None and (found.name == site or site in found.group)
        named_all, tried_all = named_all + named, tried_all + len(picks)
        faults = (f"{named}/{len(picks)}" + (f" ({absorbed_at} absorbed)" if absorbed_at else "")) if picks else "-"
        print(f"{name:<20} {path:<6} {verdict:<40} {out.error:>13.2e} {out.tolerance:>9.1e} {report.coverage:>8.0%} "
              f"{match.matched:>4}/{match.compute_nodes:<4}  {faults}{cost}", flush=True)
    if tried_all:
        print(f"Faults named at their op (first divergence, or where the absorbed error starts): {named_all}/{tried_all}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
