"""What `bisect_pipeline()` costs against the plain pipeline run, on the zoo's tiny pipeline exports.

The plain run is what a user runs anyway: optimum-intel's own class (`OVModelForSeq2SeqLM`,
`OVModelForSpeechSeq2Seq` for Whisper, `OVModelForVisualCausalLM` for LLaVA) loaded from the export folder,
compiled on the CPU, one greedy `generate()` of at most 16 new tokens (Stable Diffusion: one image, four
denoising steps). The pipeline job is `bisect_pipeline()` on
the same folder and input (a prompt; Whisper's seeded random log-mel features; LLaVA's token ids with its image
token and seeded random pixels) (reference `CPU:f32`), against each target: both sides of every component call, the
free-running target, and the first diverging component's `bisect()` when there is one. Each is timed in this
process, best of `--repeat` runs, after one warm-up run of the plain job (imports and the export are not counted).

    python benchmarks/pipeline_bench.py                       # targets EMU:f16 and (where the CPU has bf16) CPU:bf16
    python benchmarks/pipeline_bench.py --folders t5 t5-overflow whisper llava --targets EMU:f16 --repeat 3
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

PROMPT = "translate english to german : the cat sat on the mat ."


def plain(folder, tokens: int) -> float:
    """Seconds to load, compile (CPU) and generate once with optimum-intel's own pipeline."""
    import optimum.intel as oi
    import torch

    from bisect_ov.components.folder import family_of, quiet
    from bisect_ov.core.extras import hub_offline

    given = _given(folder)  # not timed: opening the folder to make the input
    start = time.perf_counter()
    with hub_offline(), quiet(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        family = family_of(folder)
        model = getattr(oi, family.loader).from_pretrained(folder, device="CPU")
        if family.main_input == "prompt":  # a diffusion pipeline: four denoising steps, an image
            model.set_progress_bar_config(disable=True)
            model(given["prompt"], num_inference_steps=4, output_type="np")
        else:
            model.generate(**{k: torch.from_numpy(v) for k, v in given.items()}, max_new_tokens=tokens,
                           do_sample=False)
    return time.perf_counter() - start


def _given(folder) -> dict:
    """The input `bisect_pipeline` feeds the pipeline (`generation_inputs`): the prompt (tokenized for a text
    model), or a speech or vision-language model's seeded inputs."""
    from bisect_ov.components.api import generation_inputs
    from bisect_ov.components.folder import family_of

    text = family_of(folder).main_input in ("input_ids", "prompt")
    return generation_inputs(folder, prompt=PROMPT if text else None, seed=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folders", nargs="+", default=["t5", "t5-overflow", "whisper", "llava", "sd"],
                        help="bisect_ov.zoo.pipelines names")
    parser.add_argument("--targets", nargs="+", default=None, help="targets (default EMU:f16, and CPU:bf16 with bf16)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each job; the fastest is kept (default 2)")
    args = parser.parse_args(argv)

    from bisect_ov import bisect_pipeline
    from bisect_ov.run.devices import cpu_supports_bf16
    from bisect_ov.zoo import pipelines

    targets = args.targets or ["EMU:f16", *(["CPU:bf16"] if cpu_supports_bf16() else [])]
    print("$ python " + " ".join([sys.argv[0], *(sys.argv[1:] if argv is None else argv)]))
    print("| export | target | plain s | pipeline job s | x plain | verdict | examined | first node |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.folders:
        folder = pipelines.folder(name)
        given = _given(folder)
        fed = given.get("prompt", given)  # a diffusion pipeline takes the prompt itself
        plain(folder, 16)  # warm-up
        base = min(plain(folder, 16) for _ in range(args.repeat))
        for target in targets:
            best, found = None, None
            for _ in range(args.repeat):
                start = time.perf_counter()
                found = bisect_pipeline(folder, "CPU:f32", target, fed, max_new_tokens=16, progress=False)
                took = time.perf_counter() - start
                best = took if best is None else min(best, took)
            first = found.report.first_divergence.name if found.report and found.report.first_divergence else "-"
            print(f"| {name} | {target} | {base:.2f} | {best:.2f} | {best / base:.1f} | "
                  f"{'DIVERGES' if found.diverges else 'no divergence'} | {found.examined or '-'} | {first} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
