"""The cases whose saved reports pin the pipeline's behaviour: built-in demo cases, tiny models with injected
faults, a quantized twin, many samples, a streamed run, and small real architectures from the zoo.

Each case is a function returning a `Report`; `make_golden.py` writes them as JSON next to this file (with the
machine facts they depend on), and `tests/test_golden.py` runs them again and compares the reports field by
field, timings aside. Every case names its devices explicitly (`CPU:f32` and an emulated or a precision-hinted
target): none depends on the CPU's default precision. A case marked `bf16` needs a CPU whose plugin runs bf16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[], object]
    bf16: bool = False  # the target is CPU:bf16: needs a CPU whose plugin runs bf16
    zoo: bool = False  # builds a zoo model (needs the zoo extra)


def _bisect(*args, **kwargs):
    from bisect_ov import bisect

    kwargs.setdefault("progress", False)
    return bisect(*args, **kwargs)


def _demo_f16():
    from bisect_ov.zoo import synthetic

    return _bisect(synthetic.demo(), "CPU:f32", "EMU:f16", fix=True, delegation=True, curve=3)


def _demo_bf16():
    from bisect_ov.zoo import synthetic

    return _bisect(synthetic.demo(), "CPU:f32", "CPU:bf16", fix=True)


def _demo_bisection():
    from bisect_ov.zoo import synthetic

    return _bisect(synthetic.demo(), "CPU:f32", "EMU:f16", strategy="bisection")


def _demo_streamed():
    from bisect_ov.zoo import synthetic

    return _bisect(synthetic.demo(), "CPU:f32", "CPU:bf16", max_tap_bytes=4096)


def _demo_samples():
    from bisect_ov.zoo import synthetic

    model = synthetic.demo()
    samples = [synthetic.sample_inputs(model, seed=s) for s in range(4)]
    return _bisect(model, "CPU:f32", "EMU:f16", samples)


def _chain_fault():
    from bisect_ov import inject_fault
    from bisect_ov.zoo import synthetic

    model = synthetic.chain(depth=8, width=16)
    site = [n.get_friendly_name() for n in model.get_ordered_ops() if n.get_type_name() == "MatMul"][3]
    return _bisect(model, "CPU:f32", "CPU:f32", target_model=inject_fault(model, site, "scale", 0.3), fix=True, impact=3)


def _diamond_fault_full():
    from bisect_ov import inject_fault
    from bisect_ov.zoo import synthetic

    model = synthetic.diamond()
    site = [n.get_friendly_name() for n in model.get_ordered_ops() if n.get_type_name() not in
            ("Parameter", "Constant", "Result")][2]
    return _bisect(model, "CPU:f32", "CPU:f32", target_model=inject_fault(model, site, "offset", 0.5),
                   strategy="full")


def _attention_bf16_emulated():
    from bisect_ov.zoo import synthetic

    return _bisect(synthetic.attention_block(), "CPU:f32", "EMU:bf16")


def _softmax_f16():
    from bisect_ov.zoo import synthetic

    model = synthetic.softmax_model()
    return _bisect(model, "CPU:f32", "EMU:f16", {"x": np.linspace(-3, 3, 5, dtype=np.float32)[None]}
                   if model.inputs[0].get_any_name() == "x" else None)


def _int8_twin():
    from bisect_ov.zoo import synthetic

    fp32, int8 = synthetic.fp32_and_int8()
    return _bisect(fp32, "CPU:f32", "CPU:f32", target_model=int8, sensitivity=True)


def _int_conv_bf16():
    from bisect_ov.zoo import synthetic

    return _bisect(synthetic.int_conv(), "CPU:f32", "CPU:bf16", synthetic.int_conv_input())


def _zoo(name: str, target: str, **kwargs):
    def run():
        from bisect_ov.zoo import cache

        model = cache.load(name, "small")
        base = cache.TWINS[name].base if name in cache.TWINS else name
        inputs = cache.sample_inputs(base, "small", 1, model=cache.load(base, "small"))
        return _bisect(model, "CPU:f32", target, inputs, **kwargs)

    return run


CASES = {c.name: c for c in (
    Case("demo_f16", _demo_f16),
    Case("demo_bf16", _demo_bf16, bf16=True),
    Case("demo_bisection", _demo_bisection),
    Case("demo_streamed", _demo_streamed, bf16=True),
    Case("demo_samples", _demo_samples),
    Case("chain_fault", _chain_fault),
    Case("diamond_fault_full", _diamond_fault_full),
    Case("attention_bf16_emulated", _attention_bf16_emulated),
    Case("softmax_f16", _softmax_f16),
    Case("int8_twin", _int8_twin),
    Case("int_conv_bf16", _int_conv_bf16, bf16=True),
    Case("zoo_resnet50_bf16", _zoo("resnet50", "CPU:bf16"), bf16=True, zoo=True),
    Case("zoo_bert_bf16", _zoo("bert", "CPU:bf16", fix=True), bf16=True, zoo=True),
    Case("zoo_llama_bf16", _zoo("llama", "CPU:bf16"), bf16=True, zoo=True),
    Case("zoo_llama_stateful_steps", _zoo("llama_stateful", "CPU:bf16", steps=2), bf16=True, zoo=True),
    Case("zoo_mobilenetv3_f16", _zoo("mobilenetv3", "EMU:f16"), zoo=True),
)}
