"""Case 4: an INT8 x INT8 convolution that does not give the exact INT32 answer.

A 1x1 convolution over 11,111 channels with inputs and weights all 127 should give 127 * 127 * 11111 =
179,209,319, but the NPU gave 65504 (the f16 maximum), the GPU 179,199,248 or 179,209,312, and an x86 CPU
179,207,392 in f32 and 179,306,496 in bf16: floating point had been introduced inside the compiled graph. The
user needed to see that the value was saturated or computed in floating point, and which node did it.

Here `synthetic.int_conv()` (i8 input -> Convert to f32 -> 1x1 Convolution -> Convert to i32) runs on the CPU in
f32 against emulated f16 (saturation: the convolution overflows the f16 range), against the CPU's real bf16
where the CPU has it (computed in floating point, off by 97,177), and against CPU:f32, where both sides agree
but the report notes that the reference itself is off by 1,927 (on an AVX-512 Xeon; the f32 kernel's
accumulation order differs between CPUs) from the exact integer result.

Run from the repository root: ``python examples/case4_int_conv.py``.
"""

from __future__ import annotations

import sys

from bisect_ov import Report, bisect
from bisect_ov.run.devices import cpu_supports_bf16
from bisect_ov.zoo import synthetic

CHANNELS, VALUE = 11111, 127
EXACT = VALUE * VALUE * CHANNELS  # 179,209,319



def run(*, progress: bool = False) -> dict[str, Report]:
    """Run the comparisons of case 4 and return the reports by key.

    Keys: ``"f16"`` (CPU f32 vs EMU:f16), ``"f32"`` (CPU vs CPU:f32) and, only where the CPU has bf16,
    ``"bf16"`` (CPU f32 vs CPU:bf16).
    """
    model = synthetic.int_conv(CHANNELS, VALUE)
    inputs = {"input": synthetic.int_conv_input(CHANNELS, VALUE)}
    targets = {"f16": "EMU:f16"}
    if cpu_supports_bf16():
        targets["bf16"] = "CPU:bf16"
    targets["f32"] = "CPU:f32"
    return {key: bisect(model, "CPU", target, inputs, progress=progress) for key, target in targets.items()}


def main() -> None:
    reports = run(progress=sys.stderr.isatty())
    for key, report in reports.items():
        print(f"--- {key} ---")
        print(report.to_text(top=8))
        print()
    print("Summary")
    print(f"  exact answer: {VALUE} * {VALUE} * {CHANNELS} = {EXACT:,}")
    if "bf16" not in reports:
        print("  CPU:bf16: skipped, this CPU has no bf16 (AVX512_BF16 or AMX)")
    for key, report in reports.items():
        first = report.first_divergence
        if first is not None:
            verdict = f"'{first.name}' ({first.op_type}) is the {first.role}: {'; '.join(first.causes)}"
        else:
            verdict = "no divergence between the two sides; " + (" ".join(report.notes) or "no notes")
        print(f"  {report.ref.label} vs {report.target.label}: {verdict}")
    rounded = "in bf16 and even in f32" if "bf16" in reports else "even in f32"
    print("Diagnosis: the integer convolution 'conv' is computed in floating point inside the compiled graph: in "
          f"f16 it overflows (65504 is the f16 maximum), {rounded} it is rounded; only an integer accumulator "
          f"gives {EXACT:,}.")


if __name__ == "__main__":
    main()
