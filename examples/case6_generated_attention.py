"""Case 6: an attention that the CPU computes 7% off in f32, against ONNX Runtime.

A small vision transformer exported to ONNX (MobileViT's blocks: queries and keys scaled by a constant, MatMul,
Softmax, MatMul, the heads moved back by a Transpose) gives outputs that differ from ONNX Runtime's by far more
than two f32 implementations differ, on the CPU in f32. The CPU plugin compiles each such attention into one
kernel it generates (a snippets ``Subgraph``), and on the OpenVINO release measured here (2026.4.1, an AMD EPYC)
that kernel is off by 2% to 14% whenever the number of heads equals the number of tokens; its ordinary kernels
agree with ONNX Runtime to 1e-7.

Here the attention alone, four heads of four tokens of size 20, written as ONNX, runs on ONNX Runtime (the
reference) and on ``CPU:f32``. Exposing a tensor inside the kernel, or cutting the graph through it, compiles
another kernel, so the taps and the partitioned runs cannot name a node; the report says so, and says what the run
without generated kernels (``SNIPPETS_MODE=DISABLE``) gives: the outputs agree, so the generated kernel makes the
divergence, and the setting is the verified remedy. `reproduce` writes the reproducer a bug report needs: the six
ops, their inputs and ONNX Runtime's outputs, and a ``run.py`` needing only OpenVINO and numpy.

Where the plugin's kernel is exact (another release or CPU), both sides agree and the report says so.

Run from the repository root: ``python examples/case6_generated_attention.py`` (needs onnxruntime).
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

import numpy as np

from bisect_ov import Report, bisect

SHAPE = (4, 4, 4, 20)  # batch of patches, heads, tokens, head size: MobileViT-XXS's third stage


def attention_onnx(path: str | pathlib.Path) -> pathlib.Path:
    """Write the attention as ONNX (opset 17) to `path`: inputs q, k, v of `SHAPE`, output of shape
    (4, 4, 4, 20) with tokens before heads."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    half = numpy_helper.from_array(np.array([0.5], np.float32), "half")
    nodes = [
        helper.make_node("Mul", ["q", "half"], ["q_scaled"], name="q_scaled"),
        helper.make_node("Transpose", ["k"], ["k_t"], name="k_t", perm=[0, 1, 3, 2]),
        helper.make_node("Mul", ["k_t", "half"], ["k_scaled"], name="k_scaled"),
        helper.make_node("MatMul", ["q_scaled", "k_scaled"], ["scores"], name="scores"),
        helper.make_node("Softmax", ["scores"], ["weights"], name="weights", axis=-1),
        helper.make_node("MatMul", ["weights", "v"], ["mixed"], name="mixed"),
        helper.make_node("Transpose", ["mixed"], ["heads"], name="heads", perm=[0, 2, 1, 3]),
    ]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(SHAPE)) for n in "qkv"]
    output = helper.make_tensor_value_info("heads", TensorProto.FLOAT, [SHAPE[0], SHAPE[2], SHAPE[1], SHAPE[3]])
    graph = helper.make_graph(nodes, "attention", inputs, [output], initializer=[half])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = pathlib.Path(path)
    onnx.save(model, str(path))
    return path


def inputs(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: (rng.standard_normal(SHAPE) * 0.3).astype(np.float32) for n in "qkv"}


def kernel_difference(folder: str | pathlib.Path | None = None) -> float:
    """How far this CPU plugin's attention is from its ordinary kernels (relative L2), OpenVINO alone: compiled
    as it comes and with ``SNIPPETS_MODE=DISABLE``, both in f32. Near 1e-7 where the generated kernel is exact."""
    import openvino as ov

    with tempfile.TemporaryDirectory() as scratch:
        path = attention_onnx(pathlib.Path(folder or scratch) / "attention.onnx")
        core = ov.Core()
        outs = [np.array(core.compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32", **extra})(
            list(inputs().values()))[0]) for extra in ({}, {"SNIPPETS_MODE": "DISABLE"})]
    return float(np.linalg.norm(outs[0] - outs[1]) / np.linalg.norm(outs[1]))


def run(*, progress: bool = False, folder: str | pathlib.Path | None = None) -> dict[str, Report]:
    """The attention on ``CPU:f32`` against ONNX Runtime: ``{"attention": report}``. `folder`: where the ONNX
    file is written (by default a new temporary folder, left in place: the report's reproducer reads the file)."""
    if folder is None:
        folder = tempfile.mkdtemp(prefix="case6_")
    path = attention_onnx(pathlib.Path(folder) / "attention.onnx")
    return {"attention": bisect(str(path), ref="ORT", target="CPU:f32", inputs=inputs(), progress=progress)}


def reproduce(report: Report, folder: str | pathlib.Path):
    """Write the reproducer of `report` into `folder` (`Report.repro`), when its outputs diverge."""
    return report.repro(folder) if report.diverges else None


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        report = run(progress=sys.stderr.isatty(), folder=scratch)["attention"]
        print(report.to_text(top=4))
        print()
        found = report.kernel_setting
        if found is None:
            print("Summary: the CPU's attention agrees with ONNX Runtime here; there is nothing to explain.")
            return
        written = reproduce(report, pathlib.Path(scratch) / "repro")
        print("Summary")
        print(f"  CPU:f32 against ONNX Runtime: {found.error_before:.1e} (tolerance {found.tolerance:.0e}); "
              f"with {found.setting}: {found.error_after:.1e}")
        if written is not None:
            print(f"  reproducer: {len(written.nodes)} ops ({', '.join(written.nodes)}), {written.error:.1e} on the "
                  "target alone")
        print("Diagnosis: " + ("the kernel the CPU plugin generates for the attention makes the divergence; compile "
                               f"with {{'{found.option}': '{found.value}'}} until the plugin is fixed."
                               if found.solved else "the generated kernels do not explain it."))


if __name__ == "__main__":
    main()
