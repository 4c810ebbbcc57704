"""Pieces of the model run alone: compiled with the values crossing their cuts typed as the untouched target
stored them, fed, run, counted.

Both the streamed measurement (`bisect_ov.engine.streamed`) and the experiments' partitioned runs go through
these two functions; what they need to know of the untouched target (its runtime graph) is passed in.
"""

from __future__ import annotations

from typing import Collection, Mapping

import numpy as np

from bisect_ov.engine.comparison import Sample
from bisect_ov.engine.runner import Runner
from bisect_ov.model.runtime import RuntimeGraph
from bisect_ov.model.taps import Tap

__all__ = ["compile_piece", "run_compiled_piece", "stored_low", "static_piece"]


def stored_low(target_runtime: RuntimeGraph, tap: Tap) -> bool:
    """Whether the untouched target stored this tensor (a target-graph tap) in its activation precision.

    The CPU plugin in bf16 keeps some tensors in f32 (residual sums, some convolutions' outputs): a value
    handed between pieces must keep that precision, or rounding it adds error the whole model never had
    (it doubled a Whisper encoder's final-output error). Without a runtime graph (emulated devices, which
    round every tensor), every tensor is taken as stored in the activation precision.
    """
    layer = target_runtime.by_original.get(tap.key)
    if layer is None or not layer.output_precisions:
        return True
    precision = layer.output_precisions[min(tap.port, len(layer.output_precisions) - 1)]
    return precision not in ("f32", "f64", "fp32")


def compile_piece(runner: Runner, side: str, piece, final: frozenset[Tap], target_runtime: RuntimeGraph,
                  handed: Collection[Tap] | None = None):
    """Compile an extracted piece (counted): values cross its cuts in the precision the target stored them.

    `handed`: the outputs later pieces read (None: all of them). The others are only compared, and are typed
    in the device's activation precision, as a tapped compile types its taps: an f32 output makes the CPU plugin
    run the op before it in f32, and an EfficientNet-B0 streamed with its squeeze-and-excite means typed
    as stored (f32) ran them, and the convolutions before them, in f32 (fidelity 0.78).
    """
    def low(t: Tap) -> bool:
        return stored_low(target_runtime, t) if side == "target" else True

    typed = tuple(i for i, t in enumerate(piece.outputs)
                  if t not in final and (low(t) or (handed is not None and t not in handed)))
    fed = tuple(i for i, t in enumerate(piece.fed) if low(t))
    return runner.compile(side, piece.model, taps=typed, fed=fed)


def run_compiled_piece(runner: Runner, sample: Sample, side: str, piece, compiled, values: Mapping[Tap, np.ndarray],
                       *, share: bool = False) -> list[np.ndarray]:
    """Run a compiled piece fed with `values`; `share`: outputs as views valid until the next run."""
    arrays = sample.target if side == "target" else sample.ref
    feed = [values[t] for t in piece.fed] + [arrays[i] for i in piece.model_inputs]
    runner.ran(side)
    with runner.clock("infer"):
        return compiled.infer(feed, share_outputs=share)


def static_piece(piece, sample: Sample, side: str, values: Mapping[Tap, np.ndarray]):
    """`piece` with every input's shape fixed to the value it is fed, empty inputs folded and inputs nothing
    reads dropped, or None when that changes nothing or the model does not take them. The CPU plugin fails at
    run time on some pieces of dynamic shape whose inputs reach the outputs only through shape computations (a
    Phi-3 piece holding the first layer's KV-cache input: "Node state:... contains dead weak ptr"), or an input
    that is empty (a prefill's KV cache of length 0: "... contains empty child edge"); with static shapes those
    computations fold away, and an empty input is a constant."""
    import dataclasses

    import openvino as ov
    import openvino.opset13 as ops
    from openvino import passes

    params = piece.model.get_parameters()
    static = all(p.get_partial_shape().is_static for p in params)
    arrays = sample.target if side == "target" else sample.ref
    feed = [values[t] for t in piece.fed] + [arrays[i] for i in piece.model_inputs]
    model = piece.model.clone()
    try:
        model.reshape({i: ov.PartialShape(list(np.shape(a))) for i, a in enumerate(feed)})
        empties = [p for p, v in zip(model.get_parameters(), feed) if not np.size(v)]
        for param, value in zip(model.get_parameters(), feed):
            if not np.size(value):  # an empty input (a prefill's KV cache of length 0) is a constant: it folds away
                empty = ops.constant(np.zeros(np.shape(value), param.get_element_type().to_dtype()))
                for target in list(param.output(0).get_target_inputs()):
                    target.replace_source_output(empty.output(0))
        manager = passes.Manager()
        manager.register_pass(passes.ConstantFolding())
        manager.run_passes(model)
    except Exception:  # the model's shape inference refuses them: the piece stays as it is
        return None
    # An input read only by shape computations, folded away, is dropped (the plugin fails on one nothing reads)
    live = {op.get_name() for op in model.get_ordered_ops()}  # what the results still read
    used = [i for i, p in enumerate(model.get_parameters())
            if any(t.get_node().get_name() in live for t in p.output(0).get_target_inputs())]
    if static and not empties and len(used) == len(params):
        return None  # nothing to fold or drop: the piece as it was
    if len(used) < len(params):
        kept = [model.get_parameters()[i] for i in used]
        model = ov.Model(model.get_results(), kept, "piece")
    n = len(piece.fed)
    return dataclasses.replace(piece, model=model, fed=tuple(piece.fed[i] for i in used if i < n),
                               model_inputs=tuple(piece.model_inputs[i - n] for i in used if i >= n))
