"""Benign conversions against their own framework: what `bisect()` says when nothing is wrong.

Each torchvision model (random weights, seed 0) is converted the way OpenVINO's documentation shows,
``ov.convert_model(module, example_input=x)`` (a dynamic input), and compared with the module itself in PyTorch
eager (f32) against ``CPU:f32``. Printed per model: the verdict, the final output's error and tolerance, and the
share of compute nodes compared or covered. Needs the ``zoo`` extra (torch, torchvision). Nothing downloads.

    python benchmarks/framework_agreement.py
    python benchmarks/framework_agreement.py --models resnet18 resnet50 --size 64

This is a measuring script, not a test: nothing here passes or fails.
"""

from __future__ import annotations

import argparse
import warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "resnet50", "mobilenet_v3_small"])
    parser.add_argument("--size", type=int, default=64, help="input height and width (default 64)")
    args = parser.parse_args(argv)
    import openvino as ov
    import torch
    import torchvision

    from bisect_ov import bisect

    print(f"{'model':<22} {'verdict':<48} {'output rel_l2':>13} {'tolerance':>9} {'covered':>8}")
    for name in args.models:
        torch.manual_seed(0)
        module = getattr(torchvision.models, name)().eval()
        x = torch.randn(1, 3, args.size, args.size)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = ov.convert_model(module, example_input=x)
        report = bisect(model, ref=module, target="CPU:f32", inputs=[x.numpy()], progress=False, noise=False,
                        impact=0)
        out = report.outputs[0]
        verdict = repr(report).split(", ", 2)[-1].rstrip(")")[:48]
        print(f"{name:<22} {verdict:<48} {out.error:>13.2e} {out.tolerance:>9.1e} {report.coverage:>8.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
