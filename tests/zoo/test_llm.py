"""The zoo's LLMs as OpenVINO runs them: GPT-2 and Llama (torch.export) and optimum-intel's stateful Llama.

CPU f32 against bf16 (where the CPU has it) and against emulated f16: a fault injected right after the first
attention block is named first, and the stateful model runs a prefill and decode steps on both sides, each on
its own KV cache. (Benign random-weight models giving no divergence is `test_real_models`' default case.)
"""

from __future__ import annotations

import pytest

from bisect_ov import bisect, inject_fault
from bisect_ov.model.graph import ModelGraph
from tests.conftest import needs_bf16
from tests.zoo.conftest import needs_zoo, zoo_inputs, zoo_model

pytestmark = [needs_zoo, pytest.mark.zoo]

LLMS = ("gpt2", "llama", "llama_stateful")
FAULT = {"kind": "noise", "magnitude": 0.3, "seed": 7}
TARGETS = [pytest.param("CPU:bf16", marks=needs_bf16), "EMU:f16"]


def _static(name: str):
    """The model reshaped to its sample inputs' shapes: noise faults need static shapes."""
    model = zoo_model(name).clone()
    model.reshape({key: list(value.shape) for key, value in zoo_inputs(name).items()})
    return model


def _after_first_attention(model) -> str:
    """The first MatMul after the first ScaledDotProductAttention: the attention block's output projection."""
    nodes = ModelGraph(model).candidates()
    sdpa = next(i for i, n in enumerate(nodes) if n.op_type == "ScaledDotProductAttention")
    return next(n.name for n in nodes[sdpa + 1:] if n.op_type == "MatMul")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", LLMS)
def test_fault_after_the_first_attention_block_is_named(name, target):
    model = _static(name)
    site = _after_first_attention(model)
    report = bisect(model, "CPU:f32", target, zoo_inputs(name), target_model=inject_fault(model, site, **FAULT),
                    progress=False)
    first = report.first_divergence
    assert report.diverges and first is not None and first.name == site, report.to_text()
    if name == "llama_stateful":  # traced names: the module path is shown and found
        assert "model.layers.0.self_attn.o_proj (aten::linear -> MatMul)" in report.to_text()
        assert report.node("model.layers.0.self_attn.o_proj").name == site


@pytest.mark.parametrize("steps", [1, 3])
def test_stateful_llama_runs_decode_steps_each_side_on_its_own_cache(steps):
    report = bisect(zoo_model("llama_stateful"), "CPU:f32", "EMU:f16", zoo_inputs("llama_stateful"), steps=steps,
                    progress=False)
    assert [s.step for s in report.steps] == list(range(steps + 1))
    assert not report.diverges and not any(s.diverged or s.flipped for s in report.steps), report.to_text()
    # From the first decode step on, the target's cache is its own: it differs from the reference's.
    assert report.steps[0].cache_error == 0 and all(s.cache_error > 0 for s in report.steps[1:])
    assert "Generation: prefill + " in report.to_text()


def test_steps_reuse_the_plain_runs_reference_compile_and_tell_the_compile_noise():
    # On the CPU (bf16 or f32, as this machine runs it): the steps compile only the target, once, and that
    # compile's prefill is the second compile the noise check needs, so scoring compiles nothing.
    report = bisect(zoo_model("llama_stateful"), "CPU:f32", "CPU", zoo_inputs("llama_stateful"), steps=2,
                    progress=False)
    generate, score = report.costs["generate"], report.costs["score"]
    assert (generate.ref_compiles, generate.target_compiles) == (0, 1), report.costs
    assert (generate.ref_infers, generate.target_infers) == (2, 1 + 2 * 2), report.costs
    assert score.target_compiles == 0 and report.noise.compile_to_compile is not None, report.costs
    # The prefill is the untouched run: its error is the final output's.
    assert report.steps[0].error == pytest.approx(report.outputs[0].error), report.to_text()


def test_a_fault_in_the_stateful_llama_is_found_at_the_step_where_it_starts():
    model = zoo_model("llama_stateful")
    site = _after_first_attention(model)
    # Decode steps change the sequence length, so the fault scales its tensor (noise needs one shape).
    faulty = inject_fault(model, site, "scale", 0.5)
    report = bisect(model, "CPU:f32", "EMU:f16", zoo_inputs("llama_stateful"), steps=2, progress=False,
                    target_model=faulty)
    assert all(s.diverged and s.local_error > s.tolerance for s in report.steps), report.to_text()
    assert report.examined_step == 0 and report.first_divergence.name == site, report.to_text()
