"""Case 3: an int8 model whose answers change between Intel CPUs; which nodes does quantization change?

An NNCF-quantized MobileNetV3/ShuffleNetV2 put 693 images in one class on 12th-gen Core CPUs and 702 on
7th/8th-gen ones (and changed between OpenVINO 2024.1 and 2024.2), while the FP32 model agreed everywhere; the
cause was one kind of 1x1 convolution running different instructions (VNNI or not) plus an int8 saturation.
The users needed to compare the FP32 model with its int8 twin node by node, and runs from two machines layer
by layer.

Here `synthetic.fp32_and_int8()` gives a small MobileNet-like classifier; its int8 twin is made the way the
users made theirs, with ``nncf.quantize`` calibrated on inputs in [-1, 1] (when NNCF is installed; otherwise
the FakeQuantize twin `synthetic.fp32_and_int8()` builds in code, calibrated the same way). bisect_ov
recognises the twin's FakeQuantize ops as the quantization of the nodes they serve and compares them node by
node on the CPU in f32, on bisect's default inputs
(standard normal, so about a third of the values lie outside the calibrated range and are clipped by the first
FakeQuantize) and on inputs inside the calibrated range. It lists which nodes quantization changes and how
each is quantized, then runs the int8 model in f32 against the CPU's bf16 where the
CPU has it, and prints what each side really ran (precision and kernel per node). Comparing two machines or
two OpenVINO versions needs runs recorded on each machine and compared later (the capture feature); this
example compares two configurations of one machine.

Run from the repository root: ``python examples/case3_int8_cpus.py``.
"""

from __future__ import annotations

import sys

import numpy as np
import openvino as ov

from bisect_ov import Report, bisect, prepare_inputs
from bisect_ov.run.devices import cpu_supports_bf16
from bisect_ov.zoo import synthetic

CALIBRATION_SAMPLES = 8


def int8_twin(fp32: ov.Model, *, seed: int = 0) -> tuple[ov.Model, str]:
    """The int8 twin of `fp32` and who made it: ``nncf.quantize`` when NNCF is installed, else the code-built one.

    NNCF is calibrated on `CALIBRATION_SAMPLES` inputs uniform in [-1, 1], as the code-built twin is.
    """
    try:
        import nncf
    except ImportError:
        return synthetic.fp32_and_int8(seed=seed)[1], "code-built FakeQuantize twin (NNCF is not installed)"
    import logging

    nncf.set_log_level(logging.ERROR)
    rng = np.random.default_rng([seed, 1])
    data = [{fp32.inputs[0].get_any_name(): rng.uniform(-1.0, 1.0, [1, 3, 32, 32]).astype(np.float32)}
            for _ in range(CALIBRATION_SAMPLES)]
    return nncf.quantize(fp32.clone(), nncf.Dataset(data), subset_size=CALIBRATION_SAMPLES), "nncf.quantize"



def run(*, progress: bool = False) -> dict[str, Report]:
    """Run the comparisons of case 3 and return the reports by key.

    Keys: ``"fp32_vs_int8"`` (the FP32 model on CPU f32 against its int8 twin on CPU f32, node by node, on
    bisect's default seeded inputs: standard normal), ``"fp32_vs_int8_in_range"`` (the same on inputs uniform
    in the calibrated range [-1, 1]) and, only where the CPU has bf16, ``"int8_f32_vs_bf16"`` (the int8 model
    on CPU f32 against CPU:bf16, default inputs).
    """
    fp32 = synthetic.fp32_and_int8()[0]
    int8, _ = int8_twin(fp32)
    reports = {
        "fp32_vs_int8": bisect(fp32, "CPU", "CPU:f32", target_model=int8, progress=progress),
        "fp32_vs_int8_in_range": bisect(fp32, "CPU", "CPU:f32", synthetic.sample_inputs(fp32, seed=1),
                                        target_model=int8, progress=progress),
    }
    if cpu_supports_bf16():
        reports["int8_f32_vs_bf16"] = bisect(int8, "CPU", "CPU:bf16", progress=progress)
    return reports


def input_range(int8: ov.Model) -> tuple[float, float]:
    """The calibrated [low, high] of the FakeQuantize on the model input, read from its bound constants."""
    for op in int8.get_ordered_ops():
        if op.get_type_name() == "FakeQuantize" and op.input_value(0).get_node().get_type_name() == "Parameter":
            low, high = (float(np.asarray(op.input_value(i).get_node().get_data()).reshape(-1)[0]) for i in (1, 2))
            return low, high
    raise ValueError("the int8 model has no FakeQuantize on its input")


def clipped_fraction(int8: ov.Model, seed: int = 0) -> float:
    """Fraction of bisect's default inputs (for `seed`) outside the first FakeQuantize's calibrated range."""
    (x,) = prepare_inputs(int8, None, seed=seed)  # the report keeps no tensors: regenerate the same inputs
    low, high = input_range(int8)
    return float(np.mean((x < low) | (x > high)))


def kernel(runtime: dict, side: str) -> str:
    """'precision kernel' of one side of a node's runtime record, '-' when unknown."""
    rt = (runtime or {}).get(side) or {}
    text = " ".join(str(rt[k]) for k in ("precision", "kernel") if rt.get(k))
    return text or "-"


def what_ran(report: Report) -> list[str]:
    """Each side's precision (and the count of runtime nodes per precision), then the kernel of each node."""
    lines = []
    for role, info in (("ref", report.ref), ("target", report.target)):
        counts = ", ".join(f"{p} {n}" for p, n in sorted(info.precision_counts.items()))
        lines.append(f"  {role:>6}: {info.name} precision {info.precision} on {info.full_name or info.device}"
                     + (f" (runtime nodes by precision: {counts})" if counts else ""))
    lines.append(f"  {'node':<24} {'ref ran':<28} {'target ran':<28} {'error':>8}  role")
    for n in report.nodes:
        lines.append(f"  {n.name:<24} {kernel(n.runtime, 'ref'):<28} {kernel(n.runtime, 'target'):<28} "
                     f"{n.error:>8.1e}  {n.role + ('*' if n.first else '')}")
    return lines


def main() -> None:
    reports = run(progress=sys.stderr.isatty())
    for key, report in reports.items():
        print(f"--- {key} ---")
        print(report.to_text(top=8))
        print()
        print(f"What ran ({key}):")
        print("\n".join(what_ran(report)))
        print()
    if "int8_f32_vs_bf16" not in reports:
        print("This CPU has no bf16 (AVX512_BF16 or AMX): the int8 CPU f32 vs CPU:bf16 comparison is skipped.\n")
    int8, made_by = int8_twin(synthetic.fp32_and_int8()[0])
    print(f"Summary (int8 twin: {made_by})")
    low, high = input_range(int8)
    for key, inputs in (("fp32_vs_int8", f"default inputs, {clipped_fraction(int8):.0%} "
                                         f"of them outside the calibrated [{low:.2f}, {high:.2f}]"),
                        ("fp32_vs_int8_in_range", "inputs inside the calibrated range")):
        r = reports[key]
        first = r.first_divergence
        if first is not None:
            verdict = (f"quantization changes {len(r.culprits)} of {len(r.nodes)} matched nodes beyond int8 rounding, "
                       f"starting at '{first.name}' ({'; '.join(first.causes) or first.role})")
        else:
            verdict = "no matched node differs beyond int8 rounding"
        print(f"  FP32 vs int8 twin, {inputs}: {verdict}; final output rel_l2 {r.outputs[0].error:.1e} "
              f"(tolerance {r.outputs[0].tolerance:.1e})")
    only = reports["fp32_vs_int8"].unmatched.get("target_model", [])
    print(f"  coverage: {reports['fp32_vs_int8'].coverage:.0%} of the FP32 model's compute nodes compared; only in "
          f"the int8 model (neither matched nor a recognised quantizer): {', '.join(only) or 'nothing'}")
    if "int8_f32_vs_bf16" in reports:
        b = reports["int8_f32_vs_bf16"]
        out = b.outputs[0]
        print(f"  int8 model, CPU f32 vs CPU:bf16 (target ran {b.target.precision}): "
              + (f"diverges at '{b.first_divergence.name}'" if b.first_divergence else
                 f"no divergence (final output rel_l2 {out.error:.1e}, tolerance {out.tolerance:.1e})"))
    out_of_range, in_range = reports["fp32_vs_int8"], reports["fp32_vs_int8_in_range"]
    if out_of_range.diverges and not in_range.diverges:
        story = (f"the int8 twin stays within int8 rounding on inputs inside its calibrated range; on inputs outside "
                 f"it the first FakeQuantize clips them and '{out_of_range.first_divergence.name}' is where the two "
                 f"models part")
    else:
        story = (f"FP32 vs int8 {'diverges' if out_of_range.diverges else 'agrees'} on default inputs and "
                 f"{'diverges' if in_range.diverges else 'agrees'} on in-range inputs (see the reports)")
    print(f"Diagnosis: {story}. Kernels per node are listed above; to compare two CPUs or two OpenVINO versions, "
          "record a run on each machine and compare the recordings.")


if __name__ == "__main__":
    main()
