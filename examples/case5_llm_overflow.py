"""Case 5: an LLM whose "massive activations" overflow f16 in every layer's RMSNorm.

Trained LLMs carry a few hidden channels whose activations reach hundreds or thousands (public reports:
Qwen2.5-VL printing "!!!!" on the GPU plugin because a product overflowed f16 and the next RMSNorm turned it
into NaN; the fix kept that slice of every layer in f32). Here a small Llama exported by optimum-intel (the
stateful IR OpenVINO GenAI runs) carries activations near 400 in two channels; the reference runs on the CPU
in f32, the target is an emulated f16 device (GPU and NPU plugins run LLMs in f16).

bisect_ov names the first node that overflows, with the magnitudes that explain it (inputs reach 400:
x*x = 1.6e5 > 65,504), and finds the fix as a pattern: the square and the mean of every layer's RMSNorm kept
in f32, verified end to end by partitioned runs.

Run from the repository root: ``python examples/case5_llm_overflow.py`` (needs the ``zoo`` extra to build
the model the first time).
"""

from __future__ import annotations

import sys

from bisect_ov import Report, bisect
from bisect_ov.zoo.llm_cases import massive_llama

LAYERS = 2
PEAK = 400.0  # magnitude of the massive activations: 400**2 = 1.6e5 > 65,504


def run(*, progress: bool = False) -> dict[str, Report]:
    """Compare the LLM on CPU f32 against emulated f16 and search the fix; returns {"f16": report}."""
    model = massive_llama(layers=LAYERS, peak=PEAK)
    # The node-by-node view and the verified fix; local errors and impacts are left out to keep it short.
    report = bisect(model, "CPU:f32", "EMU:f16", prompt_length=8, fix=True, local=False, impact=0, noise=False,
                    progress=progress)
    return {"f16": report}


def main() -> int:
    report = run(progress=sys.stderr.isatty())["f16"]
    print(report.to_text())
    first = report.first_divergence
    print(f"\nFirst divergence: {first.label if first else None}")
    if report.fix is not None:
        print("Fix as patterns: " + "; ".join(report.fix.patterns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
