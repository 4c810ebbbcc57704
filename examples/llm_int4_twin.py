"""An LLM against its int4 twin: which layers does int4 hurt most, and which to keep in higher precision?

OpenVINO LLMs ship with NNCF weight compression (``nncf.compress_weights``, int4 or int8 weights, f32
activations). Here the zoo's small Llama (random initialisation from its config, 2 layers; built once into
the zoo cache) is compressed to int4 (symmetric, grouped) and compared with its FP32 model node by node on
the CPU in f32. bisect_ov recognises NNCF's decompression subgraphs as the quantization of the MatMuls and
the Gather that read them, judges the twin by the expected int4 error, ranks the compressed layers by their
impact on the logits (each alone compressed, in a partitioned run), and finds the smallest set of layers to
keep uncompressed for half the twin's error, verified end to end. The scope it prints is what
``nncf.IgnoredScope(names=...)`` takes; compressing again with it gives a twin whose error is checked here.

Needs the ``zoo`` extra (torch, transformers, nncf). Run from the repository root:
``python examples/llm_int4_twin.py``.
"""

from __future__ import annotations

import sys

import numpy as np
import openvino as ov

from bisect_ov import Report, bisect
from bisect_ov.zoo import cache, twins


def final_error(model: ov.Model, twin: ov.Model, inputs: dict) -> float:
    """Worst relative L2 error of the twin's outputs against the model's, both compiled whole on CPU f32."""
    core = ov.Core()
    outs = [list(core.compile_model(m, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
                 .infer(inputs).values()) for m in (model, twin)]
    return max(float(np.linalg.norm(np.float64(t) - r) / max(np.linalg.norm(np.float64(r)), 1e-30))
               for r, t in zip(*outs))


def run(*, progress: bool = False) -> dict:
    """Compare the Llama with its int4 twin; returns the report, the scope and the re-compressed twin's error.

    Keys: ``"report"`` (bisect with ``sensitivity=True`` and a fix for half the twin's error), ``"scope"``
    (`Report.ignored_scope()`), ``"plain_error"`` (the twin's final error), ``"goal"``, ``"nncf_error"`` (the
    final error of the twin NNCF makes with that scope).
    """
    model = cache.load("llama")
    twin = cache.load("llama-int4w")
    inputs = cache.sample_inputs("llama", seed=1, model=model)
    plain = final_error(model, twin, inputs)
    goal = plain / 2
    report: Report = bisect(model, "CPU:f32", "CPU:f32", inputs, target_model=twin, sensitivity=True, fix=goal,
                            progress=progress)
    scope = report.ignored_scope()
    again = twins.compress_weights(model, bits=4, ignored=scope)
    return {"report": report, "scope": scope, "plain_error": plain, "goal": goal,
            "nncf_error": final_error(model, again, inputs)}


def main() -> None:
    found = run(progress=sys.stderr.isatty())
    report = found["report"]
    print(report.to_text(top=5))
    print()
    print("Layers int4 hurts most (final-output error when only that layer is compressed):")
    for s in report.sensitivity[:5]:
        print(f"  {s.impact:.2e}  {s.name}  ({s.quantization}; its own error {s.local_error or float('nan'):.2e})")
    fix = report.fix
    print(f"\nKeep {len(found['scope'])} layer(s) uncompressed: the logits' error goes from {found['plain_error']:.2e} "
          f"to {fix.error_after:.2e} (goal {found['goal']:.2e}), verified by partitioned runs.")
    print(f"NNCF: nncf.compress_weights(model, ..., ignored_scope=nncf.IgnoredScope(names={found['scope']!r}))")
    print(f"Compressed again with that scope, the twin's error is {found['nncf_error']:.2e} "
          f"({'meets' if found['nncf_error'] <= found['goal'] else 'misses'} the goal).")


if __name__ == "__main__":
    main()
