"""Many prompts for a stateful LLM and prompt-length sweeps, on the zoo's small stateful Llama (optimum-intel's
export, KV-cache variables): a bad prompt found as the worst and examined node by node, a value that overflows
f16 only beyond a prompt length found at that length and node, and the sweeps the tool refuses."""

from __future__ import annotations

import json

import numpy as np
import openvino as ov
import openvino.opset13 as ops
import pytest

from bisect_ov import Samples, bisect
from bisect_ov.core.errors import InputError
from tests.zoo.conftest import needs_zoo, zoo_model

pytestmark = [needs_zoo, pytest.mark.zoo]

EMBEDDING = "__module.model.embed_tokens/aten::embedding/Gather"
NORM = "__module.model.layers.0.input_layernorm/aten::"


def _op(model: ov.Model, name: str):
    return next(o for o in model.get_ordered_ops() if o.get_friendly_name() == name)


def _table(model: ov.Model) -> np.ndarray:
    return np.array(_op(model, EMBEDDING).input_value(0).get_node().get_data(), dtype=np.float32)


def _embedding_row_scaled(model: ov.Model, token: int) -> ov.Model:
    """A copy of `model` whose embedding row `token` is 1.5 times the model's: only prompts holding it differ."""
    clone = model.clone()
    gather = _op(clone, EMBEDDING)
    table = _table(clone)
    table[token] *= 1.5
    gather.input(0).replace_source_output(ops.constant(table).output(0))
    return clone


@pytest.mark.parametrize("executor", [None, "processes:2"])
def test_many_prompts_of_a_stateful_model_find_the_bad_prompt_and_examine_it(executor):
    model = zoo_model("llama_stateful")
    rng = np.random.default_rng(3)
    prompts = [rng.integers(10, 1000, size=n) for n in (6, 9, 12, 16, 20)]  # token 7 in none of them...
    prompts[3][4] = 7  # ... but this one
    report = bisect(model, "CPU:f32", "CPU:f32", Samples(prompts), target_model=_embedding_row_scaled(model, 7),
                    executor=executor, progress=False, impact=0, noise=False)
    summary = report.samples
    assert summary.count == 5 and summary.worst == 3 and summary.executor.startswith(executor or "in-process"), summary
    assert all(e <= 1e-6 for i, e in enumerate(summary.errors) if i != 3) and summary.errors[3] > 1e-2
    first = report.first_divergence
    assert first is not None and first.name == EMBEDDING, report.to_text()
    # Per node over the prompts: the embedding is over its tolerance on one prompt of the five.
    assert first.over_samples is not None and first.over_samples["count"] == 5, first.over_samples


def _grows_with_length(model: ov.Model, scale: float) -> ov.Model:
    """The model with its first RMSNorm's mean of squares computed as mean(x*x * L*scale) / (L*scale), L the
    prompt's length: equal in exact arithmetic, but the product grows with the length until f16 overflows it
    (as an FC accumulating in f16 overflowed only on long prompts)."""
    clone = model.clone()
    power, mean = _op(clone, NORM + "pow/Power"), _op(clone, NORM + "mean/ReduceMean")
    length = ops.convert(ops.gather(ops.shape_of(power.output(0)), np.int64([1]), np.int64(0)), "f32")
    length = ops.reshape(length, np.int64([1, 1, 1]), special_zero=False)
    root = ops.constant(np.float32(np.sqrt(scale)))  # every constant and partial product within f16's range
    grown = ops.multiply(ops.multiply(ops.multiply(power.output(0), root), root), length)
    grown.set_friendly_name("grows_with_length")
    consumers = list(mean.output(0).get_target_inputs())
    mean.input(0).replace_source_output(grown.output(0))
    back = ops.divide(ops.divide(ops.divide(mean.output(0), length), root), root)
    for target in consumers:
        target.replace_source_output(back.output(0))
    return clone


def test_a_sweep_finds_the_length_from_which_f16_overflows_and_the_node():
    base = zoo_model("llama_stateful")
    tokens = np.random.default_rng(5).integers(0, 1000, size=48)
    squares = (_table(base)[tokens] ** 2).max(axis=1)  # the first norm's x*x is the embedding's square
    # At 16 tokens the product peaks at 65,504 / 1.4; at 32 it is at least twice that: over f16's largest value.
    scale = 65504 / (squares[:16].max() * 16 * 1.4)
    model = _grows_with_length(base, float(scale))
    report = bisect(model, "CPU:f32", "EMU:f16", tokens, prompt_lengths=[8, 16, 32, 48], progress=False)
    summary = report.samples
    assert summary.count == 4
    tolerance = max(o.tolerance for o in report.outputs)
    assert max(summary.errors[:2]) < tolerance < min(summary.errors[2:]), (summary.errors, tolerance)
    assert summary.examined == 2 and "the search ran on sample #2" in " ".join(report.to_text().split())  # wrapped
    assert any("diverge from 32 tokens on" in n for n in report.notes), report.notes
    assert [i.shape for i in report.inputs if i.name == "input_ids"] == [(1, 32)]  # that length examined
    first = report.first_divergence
    assert first is not None and first.name == "grows_with_length", report.to_text()
    note = next(n for n in report.notes if n.startswith("First node over its tolerance"))
    by_length = dict(part.split(" tokens: ") for part in note.split(": ", 1)[1].rstrip(".").split("; "))
    assert by_length["32"] == by_length["48"] == "'grows_with_length'", note
    assert by_length["8"] != "'grows_with_length'" and by_length["16"] != "'grows_with_length'", note


def test_a_sweep_where_nothing_diverges_examines_the_worst_length():
    report = bisect(zoo_model("llama_stateful"), "CPU:f32", "EMU:f16", None, prompt_lengths=[4, 12], progress=False)
    assert report.samples.count == 2 and not report.diverges
    assert any("No length diverges at the outputs" in n for n in report.notes), report.notes
    assert any("seeded random prompt of 12 tokens" in n for n in report.notes)


@pytest.mark.parametrize("name, lengths, inputs, message", [
    ("gpt2", [16, 600], None, r"beyond the model's position range \(positions 0 to 511"),
    ("llama_stateful", [8, 32], np.arange(20), "The prompt has 20 tokens, fewer than the longest length asked"),
    ("llama_stateful", [8], [np.arange(8), np.arange(9)], "not many samples"),
    ("resnet50", [8], None, "needs an LLM whose 'input_ids' has a dynamic sequence"),
])
def test_sweeps_the_tool_cannot_run_are_refused_clearly(name, lengths, inputs, message):
    with pytest.raises(InputError, match=message):
        bisect(zoo_model(name), "CPU:f32", "EMU:f16", Samples(inputs) if isinstance(inputs, list) else inputs,
               prompt_lengths=lengths, progress=False)


def test_a_longer_prompt_is_cut_and_the_note_says_so():
    report = bisect(zoo_model("llama_stateful"), "CPU:f32", "CPU:f32", np.arange(30), prompt_lengths=[6, 10],
                    progress=False, local=False, impact=0, noise=False)
    assert any("The prompt of 30 tokens was cut to each length of the sweep ([6, 10])" in n for n in report.notes)
    assert report.samples.count == 2


def test_the_command_line_sweeps_prompt_lengths(tmp_path, capsys):
    from bisect_ov.cli import main

    ov.save_model(zoo_model("llama_stateful"), tmp_path / "llm.xml", compress_to_fp16=False)
    code = main([str(tmp_path / "llm.xml"), "--ref", "CPU:f32", "--target", "EMU:f16", "--prompt-lengths", "12", "4",
                 "--json", str(tmp_path / "r.json"), "--width", "200", "-q"])
    text = capsys.readouterr().out
    assert code == 0 and "Prompt-length sweep, final-output error by length: 4 tokens" in text and "12 tokens" in text
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["options"]["prompt_lengths"] == [4, 12] and len(saved["samples"]["errors"]) == 2


def test_a_sweep_against_an_int4_twin_is_judged_by_the_twins_tolerance():
    # The twin's quantization is expected error: judged by the f32 rounding tolerance, every length would diverge.
    report = bisect(zoo_model("llama"), "CPU:f32", "CPU:f32", None, target_model=zoo_model("llama-int4w"),
                    prompt_lengths=[4, 16], progress=False, impact=0)
    assert not report.diverges and report.samples.count == 2 and min(report.samples.errors) > 1e-2
    assert any("No length diverges at the outputs" in n for n in report.notes), report.notes


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_the_command_line_cuts_a_prompt_read_from_a_file(tmp_path, capsys, suffix):
    from bisect_ov.cli import main

    ov.save_model(zoo_model("llama_stateful"), tmp_path / "llm.xml", compress_to_fp16=False)
    tokens = np.arange(3, 23, dtype=np.int64)
    path = tmp_path / f"prompt{suffix}"
    np.save(path, tokens) if suffix == ".npy" else np.savez(path, input_ids=tokens[None])
    code = main([str(tmp_path / "llm.xml"), "--ref", "CPU:f32", "--target", "CPU:f32", "--inputs", str(path),
                 "--prompt-lengths", "5", "10", "--width", "200", "-q", "--no-local", "--impact", "0"])
    text = capsys.readouterr().out
    assert code == 0 and "The prompt of 20 tokens was cut to each length of the sweep ([5, 10])" in text


def test_prompts_in_files_take_every_form_an_in_memory_prompt_takes(tmp_path):
    # A folder of prompts (token ids as .npy, a .npz of input_ids only, a .npz of every input), one such file, and
    # one input given by file: each file is read as a prompt and the LLM inputs it leaves out follow from its ids.
    model = zoo_model("llama_stateful")
    rng = np.random.default_rng(5)
    prompts = [rng.integers(10, 1000, size=n) for n in (6, 9, 12)]
    prompts[1][2] = 7  # the prompt the twin changes
    folder = tmp_path / "prompts"
    folder.mkdir()
    np.save(folder / "p0.npy", prompts[0])
    np.savez(folder / "p1.npz", input_ids=prompts[1][None])
    n = prompts[2].size
    np.savez(folder / "p2.npz", input_ids=prompts[2][None], attention_mask=np.ones((1, n), np.int64),
             position_ids=np.arange(n)[None], beam_idx=np.zeros(1, np.int32))
    twin = _embedding_row_scaled(model, 7)
    report = bisect(model, "CPU:f32", "CPU:f32", str(folder), target_model=twin, progress=False, impact=0, noise=False)
    assert report.samples.count == 3 and report.samples.worst == 1, report.samples
    assert report.first_divergence is not None and report.first_divergence.name == EMBEDDING, report.to_text()
    for one in (folder / "p1.npz", folder / "p0.npy"):
        alone = bisect(model, "CPU:f32", "CPU:f32", one, target_model=twin, progress=False, impact=0, noise=False)
        assert alone.diverges == (one.name == "p1.npz"), alone.to_text()
    given = bisect(model, "CPU:f32", "CPU:f32", {"input_ids": prompts[1]}, target_model=twin, progress=False,
                   impact=0, noise=False)  # 1-D ids by name: one prompt
    assert given.first_divergence is not None and given.first_divergence.name == EMBEDDING, given.to_text()


def test_inputs_made_beside_the_token_ids_given_are_said(tmp_path):
    """A BERT given only its token ids (a file holding input_ids, pad tokens included) ran with a full attention
    mask and zero token types, unsaid: the padding was attended."""
    from bisect_ov.zoo import cache

    model = cache.load("bert")
    full = cache.sample_inputs("bert", model=model)
    np.savez(tmp_path / "ids.npz", input_ids=full["input_ids"])
    report = bisect(model, "CPU:f32", "EMU:f16", str(tmp_path / "ids.npz"), progress=False)
    made = [n for n in report.notes if "not given: made from input_ids" in n]
    assert len(made) == 1 and "attention_mask" in made[0] and "padding included" in made[0]
    np.savez(tmp_path / "all.npz", **full)
    assert not any("not given" in n for n in bisect(model, "CPU:f32", "EMU:f16", str(tmp_path / "all.npz"),
                                                    progress=False).notes)
