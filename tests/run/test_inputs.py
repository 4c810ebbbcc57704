import numpy as np
import openvino as ov
import pytest
from openvino import opset13 as ops

from bisect_ov.core.errors import InputError
from bisect_ov.run.inputs import align_inputs, prepare_inputs


def _two_inputs(dynamic: bool = False) -> ov.Model:
    a = ops.parameter(ov.PartialShape([-1, 3]) if dynamic else [2, 3], np.float32, name="a")
    b = ops.parameter([1], np.int32, name="b")
    out = ops.add(a, ops.convert(b, "f32"), name="sum")
    return ov.Model([out.output(0)], [a, b])


def test_random_inputs_respect_dtype_shape_and_seed():
    m = _two_inputs()
    a, b = prepare_inputs(m, None, seed=3)
    assert a.shape == (2, 3) and a.dtype == np.float32
    assert b.dtype == np.int32 and 0 <= b.min() and b.max() < 10
    assert np.array_equal(prepare_inputs(m, None, seed=3)[0], a)
    assert not np.array_equal(prepare_inputs(m, None, seed=4)[0], a)


def test_forms_dict_list_npz_npy(tmp_path):
    m = _two_inputs()
    a = np.ones((2, 3), np.float64)  # float64 is cast within its kind
    b = np.array([4], np.int64)
    for given in ({"a": a, "b": b}, [a, b]):
        got = prepare_inputs(m, given)
        assert got[0].dtype == np.float32 and got[1].tolist() == [4]
    np.savez(tmp_path / "in.npz", a=a, b=b)
    assert prepare_inputs(m, tmp_path / "in.npz")[1].tolist() == [4]
    np.savez(tmp_path / "pos.npz", a, b)
    assert prepare_inputs(m, tmp_path / "pos.npz")[0].shape == (2, 3)


@pytest.mark.parametrize(
    "given, message",
    [
        ({"a": np.ones((2, 3))}, "Missing value.*: Give a value for every input"),
        ({}, "an empty dict names none of them.*or none for seeded random values"),
        ({"a": np.ones((2, 3)), "b": np.ones(1, np.int32), "c": 1}, "Unknown input name"),
        ([np.ones((2, 4)), np.ones(1, np.int32)], "shape"),
        ([np.ones((2, 3)), np.ones(1, np.float32)], "dtype float32"),
        ([np.ones((2, 3))], "has 2 input"),
        ("missing.npz", "not found"),
        (42, "inputs must be"),
    ],
)
def test_bad_inputs_are_clear(given, message):
    with pytest.raises(InputError, match=message):
        prepare_inputs(_two_inputs(), given)


def test_dynamic_shape_needs_inputs():
    m = _two_inputs(dynamic=True)
    with pytest.raises(InputError, match="dynamic shape"):
        prepare_inputs(m, None)
    got = prepare_inputs(m, [np.ones((5, 3), np.float32), np.ones(1, np.int32)])
    assert got[0].shape == (5, 3)


def test_align_by_name_when_order_differs():
    a = ops.parameter([1], np.float32, name="a")
    b = ops.parameter([2], np.float32, name="b")
    twin = ov.Model([ops.concat([a, b], 0).output(0)], [b, a])
    orig = ov.Model([ops.concat([a, b], 0).output(0)], [a, b])
    arrays = [np.ones(1, np.float32), np.zeros(2, np.float32)]
    aligned, notes = align_inputs(orig, twin, arrays)
    assert aligned[0].shape == (2,) and aligned[1].shape == (1,) and notes == ()


def _renamed(model: ov.Model, names: list[str], order: list[int]) -> ov.Model:
    """`model` with its inputs renamed to `names` and listed in `order` (a twin re-exported by another tool)."""
    clone = model.clone()
    params = clone.get_parameters()
    for p, name in zip(params, names):
        p.set_friendly_name(name)
        p.output(0).get_tensor().set_names({name})
    return ov.Model(clone.get_results(), [params[i] for i in order])


def test_twin_inputs_without_shared_names_are_paired_by_shape_or_refused():
    from bisect_ov import InputError

    a = ops.parameter([1, 4], np.int64, name="input_ids")
    b = ops.parameter([1, 4], np.int64, name="attention_mask")
    same = ov.Model([ops.add(a, b).output(0)], [a, b])
    arrays = [np.arange(4, dtype=np.int64)[None], np.ones((1, 4), np.int64)]
    # Token ids and a mask of one shape and type, named otherwise and listed the other way round: feeding them by
    # position would send the ids into the mask unseen.
    with pytest.raises(InputError, match="share no name.*do not tell them apart"):
        align_inputs(same, _renamed(same, ["ids", "mask"], [1, 0]), arrays)
    # One name shared: the other input is the one left, said in a note.
    aligned, notes = align_inputs(same, _renamed(same, ["input_ids", "mask"], [1, 0]), arrays)
    assert np.array_equal(aligned[1], arrays[0]) and np.array_equal(aligned[0], arrays[1])
    assert "attention_mask" in notes[0] and "'mask'" in notes[0] and "one input left" in notes[0]
    # Shapes that tell them apart pair them, with a note.
    c = ops.parameter([1, 3], np.float32, name="x")
    d = ops.parameter([2], np.float32, name="y")
    two = ov.Model([ops.concat([ops.reshape(c, [3], False), d], 0).output(0)], [c, d])
    aligned, notes = align_inputs(two, _renamed(two, ["image", "scale"], [1, 0]),
                                  [np.ones((1, 3), np.float32), np.zeros(2, np.float32)])
    assert aligned[0].shape == (2,) and aligned[1].shape == (1, 3) and "shape and type" in notes[0]
    with pytest.raises(InputError, match=r"has 1 input\(s\) \('x'.*and the model 2 \('input_ids'"):
        align_inputs(same, ov.Model([ops.relu(c).output(0)], [c]), arrays)


@pytest.mark.parametrize("value, fragment", [
    (np.array([["a"] * 8]), "got text"),
    (np.full((1, 8), np.nan, np.float32), "holds no finite value"),
    (np.full((1, 8), 1e39, np.float64), "exceed the f32 range"),
])
def test_inputs_that_cannot_be_fed_are_refused_clearly(value, fragment):
    from bisect_ov import InputError
    from bisect_ov.run.inputs import prepare_inputs
    from tests.conftest import tiny_chain

    with pytest.raises(InputError, match=fragment):
        prepare_inputs(tiny_chain(), {"x": value})


def test_a_bad_sample_is_named(tmp_path):
    from bisect_ov import InputError, Samples, bisect
    from tests.conftest import tiny_chain

    np.save(tmp_path / "a.npy", np.zeros((1, 8), np.float32))
    np.save(tmp_path / "b.npy", np.zeros((1, 3), np.float32))
    with pytest.raises(InputError, match=r"Sample #1 \('.*b\.npy'\)"):
        bisect(tiny_chain(), "CPU", "CPU:f32", str(tmp_path), progress=False)
    good = {"x": np.zeros((1, 8), np.float32)}
    with pytest.raises(InputError, match="Sample #2:"):
        bisect(tiny_chain(), "CPU", "CPU:f32", Samples(iter([good, good, {"y": 1}])), progress=False)


def test_tolerance_refuses_bad_values():
    from bisect_ov import InputError, Tolerance

    for bad in ({"factor": -1}, {"floor": float("nan")}, {"value": -0.5}, {"per_node": {"a": -1}}, {"min_growth": "x"}):
        with pytest.raises(InputError, match="Tolerance"):
            Tolerance(**bad)


@pytest.mark.parametrize("dtype, changed", [(np.float64, True), (np.float16, False)])
def test_a_float_input_of_another_precision_is_cast_and_the_report_says_so(dtype, changed):
    from bisect_ov import bisect
    from tests.conftest import tiny_chain

    x = np.random.default_rng(0).standard_normal((1, 8)).astype(dtype)
    report = bisect(tiny_chain(), "CPU", "CPU:f32", {"x": x}, progress=False)
    note = [n for n in report.notes if n.startswith("Input 'x'")]
    assert len(note) == 1 and f"given as {np.dtype(dtype).name} and cast to f32" in note[0]
    assert ("rounded to f32" in note[0]) is changed and ("no value changed" in note[0]) is not changed
    assert report.inputs[0].dtype == "float32"  # what both sides ran on
    same = bisect(tiny_chain(), "CPU", "CPU:f32", {"x": x.astype(np.float32)}, progress=False)
    assert not [n for n in same.notes if n.startswith("Input 'x'")]


def test_a_file_numpy_cannot_read_says_what_it_is(tmp_path):
    # numpy takes any file without its signatures for pickled data and suggests loading it unsafely.
    (tmp_path / "junk.npz").write_bytes(b"not numpy at all" * 8)
    with pytest.raises(InputError, match=r"junk.npz': it is not a NumPy file \(it has neither the .npy nor the .npz "
                                         r"signature\)\.$"):
        prepare_inputs(_two_inputs(), tmp_path / "junk.npz")
    import pickle

    (tmp_path / "p.npy").write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(InputError, match="it holds pickled Python data, which is not read"):
        prepare_inputs(_two_inputs(), tmp_path / "p.npy")


def test_a_stateless_llm_export_s_kv_cache_is_made_empty():
    """optimum-intel's stateful=False export takes past_key_values.* of dynamic shape: random inputs were refused
    ("has a dynamic shape") and so was a token-id prompt; an empty cache (batch 1, past length 0) is a prefill."""
    from bisect_ov.run.inputs import random_inputs
    from bisect_ov.samples.prompts import PromptInputs

    ids = ops.parameter(ov.PartialShape([-1, -1]), np.int64, name="input_ids")
    mask = ops.parameter(ov.PartialShape([-1, -1]), np.int64, name="attention_mask")
    past = ops.parameter(ov.PartialShape([-1, 2, -1, 4]), np.float32, name="past_key_values.0.key")
    for p, n in ((ids, "input_ids"), (mask, "attention_mask"), (past, "past_key_values.0.key")):
        p.output(0).get_tensor().set_names({n})
    table = ops.constant(np.ones((10, 4), np.float32))
    emb = ops.gather(table, ids, 0)  # [b, s, 4]
    key = ops.concat([ops.reduce_sum(past, [1], False), emb], 1)  # [b, past + s, 4]
    model = ov.Model([key.output(0), ops.convert(mask, "f32").output(0)], [ids, mask, past])
    arrays = random_inputs(model, prompt_length=5)
    assert [a.shape for a in arrays] == [(1, 5), (1, 5), (1, 2, 0, 4)] and not arrays[2].size
    given = PromptInputs.of(model, None).expand(np.array([1, 2, 3]))
    assert given["past_key_values.0.key"].shape == (1, 2, 0, 4) and given["input_ids"].shape == (1, 3)


@pytest.mark.parametrize("scale", [np.array(2.0, np.float32), np.float32(2.0), 2.0, np.array(2.0)])
def test_a_scalar_input_keeps_rank_0(scale):
    # `np.ascontiguousarray` gives 0-d arrays a dimension: a rank-0 input ("s", shape []) was refused by the plugin
    # ("got [1] expecting []") whatever form it was given in, and blamed on the device.
    from bisect_ov import bisect

    x = ops.parameter([2, 3], np.float32, name="x")
    s = ops.parameter([], np.float32, name="s")
    model = ov.Model([ops.multiply(x, s).output(0)], [x, s])
    got = prepare_inputs(model, {"x": np.ones((2, 3), np.float32), "s": scale}, seed=0)
    assert got[1].shape == () and got[1].dtype == np.float32 and float(got[1]) == 2.0
    report = bisect(model, "CPU:f32", "EMU:f16", {"x": np.ones((2, 3), np.float32), "s": scale}, progress=False)
    assert report.outputs[0].error == 0.0


def test_an_input_too_large_for_random_values_is_an_input_error_not_a_traceback():
    # A declared [100000, 100000] input ended in numpy's _ArrayMemoryError traceback, exit 1 ("diverges").
    x = ops.parameter([1 << 20, 1 << 20, 1 << 10], np.float32, name="hx")
    with pytest.raises(InputError, match=r"Input 'hx' .* too many to make random values for .* Pass inputs="):
        prepare_inputs(ov.Model([ops.relu(x).output(0)], [x]), None)


def test_a_text_input_is_refused_as_text():
    # It read "Inference failed on EMU:f16: Unknown string kind" (random values), or "pass a numeric array of dtype
    # float32" for an array of text.
    s = ops.parameter([2], ov.Type.string, name="st")
    x = ops.parameter([2], np.float32, name="x")
    model = ov.Model([ops.relu(x).output(0)], [x, s])
    for given in (None, {"x": np.ones(2, np.float32), "st": np.array(["a", "b"])}):
        with pytest.raises(InputError, match=r"Input 'st' \[2\] string holds text"):
            prepare_inputs(model, given)


def test_a_device_failure_on_made_up_inputs_says_which_shapes_were_made_up():
    # A BERT traced at 128 tokens with dynamic input_ids/attention_mask read only "Inference failed on CPU: Eltwise
    # shape infer input shapes dim index: 1 mismatch": its inputs had been made up at 16 tokens.
    from bisect_ov import bisect
    from bisect_ov.core.errors import DeviceError

    ids = ops.parameter(ov.PartialShape([-1, -1]), np.int64, name="input_ids")
    mask = ops.parameter(ov.PartialShape([-1, -1]), np.int64, name="attention_mask")
    table = ops.constant(np.random.default_rng(0).standard_normal((50, 8)).astype(np.float32))
    h = ops.add(ops.gather(table, ids, ops.constant(np.int64(0))),
                ops.constant(np.random.default_rng(1).standard_normal((1, 128, 8)).astype(np.float32)))
    model = ov.Model([ops.multiply(h, ops.unsqueeze(ops.convert(mask, "f32"), ops.constant(np.int64(-1)))).output(0)],
                     [ids, mask], "bertish")
    with pytest.raises(DeviceError, match=r"The inputs were made up \('input_ids' \[1, 16\], 'attention_mask' \[1, 16\]: "
                                          r"batch 1 and 16 tokens .* or another prompt_length \(--prompt-length\)\."):
        bisect(model, "CPU:f32", "CPU:f32", progress=False)
    assert not bisect(model, "CPU:f32", "CPU:f32", prompt_length=128, progress=False).diverges


def test_token_ids_past_the_vocabulary_are_noted():
    # Ids 50 and 2**40 into a 10-row embedding were taken without a word.
    from bisect_ov.run.inputs import prepare_inputs_noted

    ids = ops.parameter([1, 4], np.int64, name="input_ids")
    table = ops.constant(np.ones((10, 4), np.float32))
    model = ov.Model([ops.gather(table, ids, ops.constant(np.int64(0))).output(0)], [ids])
    _, notes = prepare_inputs_noted(model, {"input_ids": np.array([[1, 50, 2 ** 40, 3]])})
    assert notes == ("Input 'input_ids' [1,4] i64 holds 2 token id(s) of 10 or more, past the embedding table's 10 "
                     "rows: its lookup gives no token's values there, on both sides.",)
    assert prepare_inputs_noted(model, {"input_ids": np.array([[1, 9, 2, 3]])})[1] == ()
