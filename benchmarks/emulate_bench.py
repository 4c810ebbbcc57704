"""Benchmark the emulated low-precision devices against the f32 CPU on full-size models.

For each model, in a fresh process:

* ``compile``/``infer``: compile time and median inference time of the model on ``CPU:f32`` and on
  ``EMU:f16`` (``EMU:f16-acc`` too with ``--acc``);
* ``bisect``: the default `bisect()` job (CPU reference; local errors, impact and the noise check on) with
  ``CPU:f32`` as target and with ``EMU:f16`` as target, and their ratio;
* ``samples`` (with ``--samples N``): N inputs through one compile with OpenVINO's asynchronous infer queue
  at 1, 2 and 4 jobs, on ``CPU:f32`` and on ``EMU:f16``: the emulated model's rounding runs Python under
  the GIL, so its requests do not run fully in parallel.

Models are built from library configs with random weights (nothing is downloaded): BERT-base
(``transformers.BertConfig()``), a small Llama (8 layers, hidden 512, grouped-query attention), GPT-2
(``GPT2Config()``), ViT-B/16 and ResNet-50 (torchvision). Transformers take 128 tokens, vision models one
224x224 image. Needs ``torch``, ``torchvision`` and ``transformers``.

Usage::

    python benchmarks/emulate_bench.py                        # bert, llama
    python benchmarks/emulate_bench.py --models bert llama gpt2 vit resnet50 --samples 16 --json out.json

This is a measuring script, not a test: nothing here passes or fails. Timings depend on what else runs.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

# Measure the checkout this script belongs to, even where another copy of bisect_ov is installed.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

DEFAULT_MODELS = ("bert", "llama")
ALL_MODELS = ("bert", "llama", "gpt2", "vit", "resnet50")
SEQ = 128


# ------------------------------------------------------------------------------------------- builders
def _convert(module, example: tuple):
    """``ov.convert_model`` by tracing; through ``torch.export`` when tracing fails (recent transformers)."""
    import openvino as ov
    import torch

    try:
        return ov.convert_model(module, example_input=example)
    except Exception:  # noqa: BLE001 - tracing fails on some transformers versions (any error): export
        return ov.convert_model(torch.export.export(module, example))


def _text_model(model, output: str):
    import numpy as np
    import torch

    class PlainTensors(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model.eval()

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask)[output]

    vocab = model.config.vocab_size
    rng = np.random.default_rng(0)
    ids, mask = rng.integers(0, vocab, (1, SEQ)), np.ones((1, SEQ), np.int64)
    with torch.no_grad():
        converted = _convert(PlainTensors(), (torch.from_numpy(ids), torch.from_numpy(mask)))
    return converted, [ids, mask]


def _bert():
    import transformers

    return _text_model(transformers.BertModel(transformers.BertConfig()), "last_hidden_state")


def _llama():
    import transformers

    config = transformers.LlamaConfig(hidden_size=512, intermediate_size=1376, num_hidden_layers=8,
                                      num_attention_heads=8, num_key_value_heads=2, vocab_size=8000,
                                      max_position_embeddings=512, use_cache=False)
    return _text_model(transformers.LlamaForCausalLM(config), "logits")


def _gpt2():
    import transformers

    return _text_model(transformers.GPT2LMHeadModel(transformers.GPT2Config(use_cache=False)), "logits")


def _vision(model):
    import numpy as np
    import torch

    image = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    with torch.no_grad():
        return _convert(model.eval(), (torch.from_numpy(image),)), [image]


def _vit():
    import torchvision

    return _vision(torchvision.models.vit_b_16(weights=None))


def _resnet50():
    import torchvision

    return _vision(torchvision.models.resnet50(weights=None))


BUILDERS = {"bert": _bert, "llama": _llama, "gpt2": _gpt2, "vit": _vit, "resnet50": _resnet50}


# ------------------------------------------------------------------------------------------ measuring
def _timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def _compile_and_infer(device, model, inputs, repeats: int = 5) -> dict:
    compiled, compile_s = _timed(lambda: device.compile(model))
    compiled.infer(inputs)  # the first inference allocates
    times = [_timed(lambda: compiled.infer(inputs))[1] for _ in range(repeats)]
    ops = len(compiled.compiled.get_runtime_model().get_ordered_ops())
    return {"compile_s": compile_s, "infer_s": statistics.median(times), "runtime_layers": ops}


def _throughput(device, model, inputs, n: int) -> dict:
    import openvino as ov

    compiled = device.compile(model).compiled
    rows = {}
    for jobs in (1, 2, 4):
        queue = ov.AsyncInferQueue(compiled, jobs)
        start = time.perf_counter()
        for _ in range(n):
            queue.start_async(list(inputs))
        queue.wait_all()
        rows[str(jobs)] = n / (time.perf_counter() - start)  # str keys: the row goes through JSON
    return rows


def measure(name: str, *, acc: bool, samples: int) -> dict:
    from bisect_ov import bisect
    from bisect_ov.run.devices import make_device

    (model, inputs), build_s = _timed(BUILDERS[name])
    row: dict = {"model": name, "ops": len(model.get_ordered_ops()), "build_s": build_s}
    targets = ["CPU:f32", "EMU:f16"] + (["EMU:f16-acc"] if acc else [])
    for target in targets:
        row[target] = _compile_and_infer(make_device(target), model, inputs)
    for target in ("CPU:f32", "EMU:f16"):
        report, seconds = _timed(lambda t=target: bisect(model, "CPU", t, inputs, progress=False))
        first = report.first_divergence
        row[f"bisect {target}"] = {"seconds": seconds, "compiles": dict(report.compiles),
                                   "first": first.name if first else None,
                                   "final_error": report.outputs[0].error}
    row["bisect ratio"] = row["bisect EMU:f16"]["seconds"] / row["bisect CPU:f32"]["seconds"]
    if samples:
        row["samples/s"] = {t: _throughput(make_device(t), model, inputs, samples) for t in ("CPU:f32", "EMU:f16")}
    return row


# -------------------------------------------------------------------------------------------- output
def _table(rows: list[dict], acc: bool) -> str:
    targets = ["CPU:f32", "EMU:f16"] + (["EMU:f16-acc"] if acc else [])
    head = "| model | ops | " + " | ".join(f"{t} compile / infer" for t in targets)
    head += " | bisect CPU:f32 | bisect EMU:f16 | ratio |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [r["model"], str(r["ops"])]
        cells += [f"{r[t]['compile_s']:.2f} s / {r[t]['infer_s'] * 1000:.0f} ms" for t in targets]
        cells += [f"{r['bisect CPU:f32']['seconds']:.1f} s", f"{r['bisect EMU:f16']['seconds']:.1f} s",
                  f"{r['bisect ratio']:.2f}x"]
        lines.append("| " + " | ".join(cells) + " |")
    if any("samples/s" in r for r in rows):
        lines += ["", "| model | target | samples/s at 1 / 2 / 4 jobs |", "|---|---|---|"]
        for r in rows:
            for target, by_jobs in r.get("samples/s", {}).items():
                lines.append(f"| {r['model']} | {target} | " + " / ".join(f"{by_jobs[j]:.1f}" for j in ("1", "2", "4"))
                             + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS), choices=ALL_MODELS)
    parser.add_argument("--acc", action="store_true", help="also time EMU:f16-acc (low-precision accumulation)")
    parser.add_argument("--samples", type=int, default=0, help="also measure async throughput over N samples")
    parser.add_argument("--json", type=pathlib.Path, help="write the rows here")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # internal: measure one model, print its row as JSON
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, acc=args.acc, samples=args.samples)))
        return
    rows = []
    for name in args.models:
        command = [sys.executable, __file__, "--one", name, "--samples", str(args.samples)] + (["--acc"] if args.acc else [])
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"{name}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{name}: done", file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    print(_table(rows, args.acc))


if __name__ == "__main__":
    main()
