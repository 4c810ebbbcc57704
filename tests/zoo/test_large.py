"""The large tier: the zoo's 1B-class stateful Llama (`bisect_ov.zoo.llm_cases.llama_1b`, TinyLlama-1.1B's shape,
optimum-intel's export) and its int4 twin. Building it takes minutes and ~10 GB of memory, so the tier runs only
when asked: ``BISECT_OV_LARGE=1 python -m pytest -m large`` (``benchmarks/llm_bench.py --model 1b`` times it)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from bisect_ov import bisect, inject_fault
from bisect_ov.model.graph import ModelGraph
from tests.zoo.conftest import needs_zoo

pytestmark = [needs_zoo, pytest.mark.zoo, pytest.mark.large,
              pytest.mark.skipif(os.environ.get("BISECT_OV_LARGE") != "1",
                                 reason="the large tier runs with BISECT_OV_LARGE=1 (a 1B-class model, ~10 GB)")]


@pytest.fixture(scope="module")
def llama_1b():
    from bisect_ov.zoo.llm_cases import llama_1b

    return llama_1b()


def test_the_1b_model_has_its_shape(llama_1b):
    graph = ModelGraph(llama_1b)
    norms = [n for n in graph.candidates() if n.name.endswith("input_layernorm/aten::pow/Power")]
    assert len(norms) == 22 and llama_1b.get_parameters()[0].get_partial_shape()[1].is_dynamic
    weights = sum(op.get_byte_size() for op in llama_1b.get_ops() if op.get_type_name() == "Constant")
    assert weights > 4e9  # 1.1 billion f32 parameters


def test_a_fault_in_a_middle_layer_of_the_1b_model_is_named_against_emulated_f16(llama_1b):
    site = "__module.model.layers.11.mlp.down_proj/aten::linear/MatMul"
    report = bisect(llama_1b, "CPU:f32", "EMU:f16", None, target_model=inject_fault(llama_1b, site, "scale", 0.5),
                    progress=False, impact=1)
    assert report.first_divergence is not None and report.first_divergence.name == site, report.to_text()


def test_prompts_of_the_1b_model_against_its_int4_twin():
    from bisect_ov import Samples
    from bisect_ov.zoo.llm_cases import llama_1b

    prompts = [np.random.default_rng(i).integers(0, 32000, size=n) for i, n in enumerate((8, 24))]
    report = bisect(llama_1b(), "CPU:f32", "CPU:f32", Samples(prompts), target_model=llama_1b("int4"), progress=False,
                    impact=0)
    assert report.samples.count == 2 and all(np.isfinite(report.samples.errors))
    assert report.coverage is not None and report.coverage >= 0.8, report.coverage
