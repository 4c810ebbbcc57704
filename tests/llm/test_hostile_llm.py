"""LLM prompts and steps under hostile requests: decode steps beyond the model's position table or the memory
are refused before they run (not left to grow until the machine runs out), and token ids outside the
vocabulary are refused in a sweep's prompt and in prompts given as token ids."""

from __future__ import annotations

import time

import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov import Samples, bisect
from bisect_ov.core.errors import InputError
from bisect_ov.experiments.steps import check_memory, check_positions

FAST = {"noise": False, "progress": False, "impact": 0}
VOCAB, POSITIONS, DIM = 50, 32, 8


def _tiny_lm(positions: bool = True) -> ov.Model:
    """A stateful LM in miniature: token and position embeddings (tables of VOCAB and POSITIONS rows; without
    `positions`, no position input, as rotary models have no table), a cache variable that concatenates every
    position's hidden state, logits [1, seq, VOCAB] from the state and the cache's mean."""
    rng = np.random.default_rng(0)
    ids = ops.parameter([1, -1], np.int64, name="input_ids")
    ids.output(0).get_tensor().set_names({"input_ids"})
    pos = ops.parameter([1, -1], np.int64, name="position_ids")
    pos.output(0).get_tensor().set_names({"position_ids"})
    tokens = ops.gather(ops.constant(rng.standard_normal((VOCAB, DIM)).astype(np.float32)), ids, 0)
    places = ops.gather(ops.constant(rng.standard_normal((POSITIONS, DIM)).astype(np.float32)), pos, 0)
    hidden = ops.add(tokens, places, name="hidden") if positions else tokens
    info = ov.op.util.VariableInfo()
    info.data_shape, info.data_type, info.variable_id = ov.PartialShape([1, -1, DIM]), ov.Type.f32, "cache"
    variable = ov.op.util.Variable(info)
    empty = ops.broadcast(ops.constant(np.float32(0)), ops.constant(np.int64([1, 0, DIM])))
    cache = ops.concat([ops.read_value(empty, variable), hidden], 1)
    assign = ops.assign(cache, variable)
    context = ops.reduce_mean(cache, np.int64([1]), keep_dims=True)
    logits = ops.matmul(ops.add(hidden, context, name="mixed"),
                        ops.constant(rng.standard_normal((DIM, VOCAB)).astype(np.float32)), False, False, name="logits")
    return ov.Model([ops.result(logits)], [assign], [ids, pos] if positions else [ids], "tiny_lm")


def _prompt(ids) -> dict:
    ids = np.array([ids], np.int64)
    return {"input_ids": ids, "position_ids": np.arange(ids.shape[1], dtype=np.int64)[None]}


def test_a_few_steps_run_on_the_tiny_lm():
    ids = _prompt([3, 1, 4, 1])
    report = bisect(_tiny_lm(), "CPU:f32", "CPU:f32", ids, steps=3, **FAST)
    assert len(report.steps) == 4


def test_steps_beyond_the_position_table_are_refused_before_they_run():
    ids = _prompt([3, 1, 4, 1])
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"steps=29 after a prompt of 4 tokens reach position 32, beyond the model's "
                                         r"position range \(positions 0 to 31.*Ask for steps up to 28"):
        bisect(_tiny_lm(), "CPU:f32", "CPU:f32", ids, steps=29, **FAST)
    with pytest.raises(InputError, match="position range"):
        bisect(_tiny_lm(), "CPU:f32", "CPU:f32", ids, steps=10 ** 9, **FAST)
    assert time.perf_counter() - start < 60
    assert len(bisect(_tiny_lm(), "CPU:f32", "CPU:f32", ids, steps=28, **FAST).steps) == 29


def test_one_prompt_beyond_the_position_table_is_refused_in_every_form():
    # 32 positions: a prompt of 33 tokens, given or generated, one or one of many, reads past the table.
    ids = np.arange(1, 34, dtype=np.int64)
    for given, options in ((ids, {}), (_prompt(list(ids)), {}), (None, {"prompt_length": 33}), (Samples([ids]), {})):
        with pytest.raises(InputError, match=r"A prompt of 33 tokens reaches position 32, beyond the model's position "
                                             r"range \(positions 0 to 31"):
            bisect(_tiny_lm(), "CPU:f32", "CPU:f32", given, **options, **FAST)
    assert bisect(_tiny_lm(), "CPU:f32", "CPU:f32", None, prompt_length=32, **FAST).inputs[0].shape == (1, 32)


def test_the_caches_steps_would_hold_are_bounded_by_the_memory():
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"steps=1,000,000,000 would hold about .* GB of KV caches"):
        bisect(_tiny_lm(positions=False), "CPU:f32", "CPU:f32", {"input_ids": np.array([[3, 1, 4]], np.int64)},
               steps=10 ** 9, **FAST)
    assert time.perf_counter() - start < 60
    check_positions(10, 4, None)  # no position table: nothing to check
    check_memory(100, 16, 16 * 1024, 10 ** 9)
    with pytest.raises(InputError, match=r"steps=1,000,000,000 would hold about .* GB of KV caches .* more than half "
                                         r"the memory available \(1\.0 GB\)\. Ask for at most ([0-9,]+) steps"):
        check_memory(10 ** 9, 16, 16 * 1024, 10 ** 9)
    try:
        check_memory(10 ** 9, 16, 16 * 1024, 10 ** 9)
    except InputError as err:
        fit = int(str(err).rsplit("at most ", 1)[1].split(" ")[0].replace(",", ""))
    check_memory(fit, 16, 16 * 1024, 10 ** 9)  # the most it names does fit
    with pytest.raises(InputError):
        check_memory(fit + 1, 16, 16 * 1024, 10 ** 9)
    with pytest.raises(InputError, match="memory available cannot be read"):
        check_memory(10 ** 6, 16, 16 * 1024, None)


def test_token_ids_outside_the_vocabulary_are_refused():
    model = _tiny_lm()
    for bad in (np.array([1, 2, 5000, 3], np.int64), np.array([[1, -7, 2, 3]], np.int64)):
        with pytest.raises(InputError, match=r"token id (5,000|-7) at position [12] .* must be 0 to 49 \(the model's "
                                             r"embedding table has 50 rows\)"):
            bisect(model, "CPU:f32", "CPU:f32", bad, prompt_lengths=(2, 4), **FAST)
        for prompts in ([np.array([1, 2, 3], np.int64), bad], [_prompt([1, 2]), _prompt(bad.reshape(-1))]):
            with pytest.raises(InputError, match="outside the vocabulary"):
                bisect(model, "CPU:f32", "CPU:f32", Samples(prompts), **FAST)


def test_token_ids_that_are_no_array_are_refused_not_a_crash():
    # A dict of input specs (or a lone number) where the ids go was an IndexError from deep inside
    model = _tiny_lm()
    for bad in ({"shape": [1, 4]}, 7):
        with pytest.raises(InputError, match="input_ids must be a list or array of token ids; got"):
            bisect(model, "CPU:f32", "CPU:f32", {"input_ids": bad}, **FAST)


def test_a_sweep_prompt_file_numpy_cannot_read_and_an_empty_prompt_are_refused(tmp_path):
    model = _tiny_lm()
    np.save(tmp_path / "objects.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    (tmp_path / "broken.npz").write_bytes(b"PK\x03\x04 not a zip")
    (tmp_path / "broken.npy").write_bytes(b"\x93NUMPY not an array")
    for name in ("objects.npy", "broken.npz", "broken.npy"):
        with pytest.raises(InputError, match=f"Cannot read the prompt .*{name}"):
            bisect(model, "CPU:f32", "CPU:f32", str(tmp_path / name), prompt_lengths=(2, 3), **FAST)
    with pytest.raises(InputError, match="holds no token ids"):
        bisect(model, "CPU:f32", "CPU:f32", Samples([np.array([1, 2], np.int64), np.array([], np.int64)]), **FAST)


# ----- one prompt and many take the same forms ----------------------------------------------------------------
def _examined(model, inputs, **options):
    """The examined sample's reference arrays, the setup's notes, and which of many samples was examined."""
    from bisect_ov.pipeline.options import BisectOptions
    from bisect_ov.pipeline.stages import open_comparison

    setup = open_comparison(model, "CPU:f32", "CPU:f32", inputs, None, BisectOptions(**{**FAST, **options}))
    try:
        summary = setup.summary
        return setup.sample.ref, setup.notes, (None if summary is None else summary.examined if summary.examined is not None
                                               else summary.ranking[0])
    finally:
        if setup.samples is not None:
            setup.samples.close()


def test_one_prompt_is_taken_in_every_form_many_prompts_are():
    model = _tiny_lm()
    full, _, _ = _examined(model, _prompt([3, 1, 4, 1]))
    for form in (np.array([3, 1, 4, 1], np.int64), np.array([[3, 1, 4, 1]], np.int64),
                 {"input_ids": np.array([[3, 1, 4, 1]], np.int64)}):
        one, _, _ = _examined(model, form)
        many, _, _ = _examined(model, Samples([form]))
        assert len(one) == len(many) == len(full)  # the model's two inputs and its variable
        for a, b, c in zip(one, many, full):
            np.testing.assert_array_equal(a, c)
            np.testing.assert_array_equal(b, c)
    with pytest.raises(InputError, match="token id 5,000 at position 1"):
        bisect(model, "CPU:f32", "CPU:f32", np.array([1, 5000], np.int64), **FAST)


def test_the_examined_samples_cast_notes_are_kept_with_many_samples_too():
    model = _tiny_lm()
    cast = {"input_ids": np.array([[3, 1, 4]], np.int32)}
    said = "was given as int32 and cast to i64"
    for inputs in (cast, Samples([cast])):
        _, notes, _ = _examined(model, inputs)
        assert [n for n in notes if said in n], (inputs, notes)
    for order in ([_prompt([3, 1, 4]), cast], [cast, _prompt([3, 1, 4])]):
        _, notes, examined = _examined(model, Samples(order))
        assert bool([n for n in notes if said in n]) == (order[examined] is cast)
    _, notes, _ = _examined(model, Samples([_prompt([3, 1, 4])]))
    assert not [n for n in notes if "cast to" in n]


def test_an_input_given_under_another_of_its_names_is_not_filled_from_the_token_ids():
    """A decoder's ``encoder_attention_mask`` that also bears the name ``attention_mask`` (a T5 export) is given
    under its first name: it is not made again from input_ids' shape; a dict leaving it out gets it filled."""
    from bisect_ov.samples.prompts import PromptInputs

    ids = ops.parameter([1, -1], np.int64, name="input_ids")
    ids.output(0).get_tensor().set_names({"input_ids"})
    mask = ops.parameter([1, 7], np.int64, name="encoder_attention_mask")
    mask.output(0).get_tensor().set_names({"encoder_attention_mask", "attention_mask"})
    out = ops.add(ops.convert(ops.reduce_sum(ids, np.int64([1]), True), np.float32),
                  ops.convert(ops.reduce_sum(mask, np.int64([1]), True), np.float32))
    prompts = PromptInputs.of(ov.Model([ops.result(out)], [ids, mask], "decoder"), None)
    given = {"input_ids": np.array([[4]], np.int64), "encoder_attention_mask": np.ones((1, 7), np.int64)}
    assert set(prompts.expand(given)) == set(given)
    filled = prompts.expand({"input_ids": np.array([[4, 2]], np.int64)})
    assert filled["attention_mask"].shape == (1, 2) and filled["attention_mask"].all()


def test_a_prompt_length_beside_a_sweep_is_refused():
    # It was silently ignored: the sweep's lengths are the prompts.
    with pytest.raises(InputError, match=r"prompt_length=32 \(--prompt-length\) sets the generated prompt's tokens, and "
                                         r"a sweep runs the lengths \[2, 3\]"):
        bisect(_tiny_lm(), "CPU:f32", "CPU:f32", None, prompt_length=32, prompt_lengths=(2, 3), **FAST)
