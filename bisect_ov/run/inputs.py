"""Inputs: from what the user passed to one validated array per model parameter.

Accepted forms: None (seeded random values that respect each parameter's element type and static shape),
a dict name -> array (names are tensor names or friendly names of the parameters), a list or tuple in
parameter order, a single array for a single-input model, or a path to ``.npz`` (keys are names, or
``arr_0``... in order) or ``.npy`` (single input). Arrays are checked against the parameter's (partial) shape
and element type; values are cast only within a kind (float64 -> float32), never across kinds, and a cast that
would overflow or change an integer is refused. `prepare_inputs_noted` also says, as notes for the report, which
inputs were cast.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, Mapping, Sequence

import numpy as np
import openvino as ov

from bisect_ov.core.errors import InputError
from bisect_ov.model.graph import element_dtype

__all__ = ["ParameterSpec", "parameter_specs", "prepare_inputs", "prepare_inputs_noted", "random_inputs", "align_inputs",
           "pair_inputs", "LLM_INPUTS", "vocabulary_size", "empty_cache_shape", "llm_companion", "llm_role", "decode_value",
           "numpy_reason", "load_arrays"]

# The inputs LLM exports take (transformers, optimum-intel): generated with meaning, not as random numbers. What each
# holds at the prefill (`llm_companion`) and at a decode step (`decode_value`), and which one a parameter is
# (`llm_role`), are decided here only.
LLM_INPUTS = ("input_ids", "attention_mask", "position_ids", "beam_idx", "token_type_ids")


class ParameterSpec:
    """Name, names, partial shape and element type of one model input."""

    def __init__(self, param, index: int):
        out = param.output(0)
        self.index = index
        self.friendly = param.get_friendly_name()
        self.names = set(out.get_names()) | {self.friendly}
        # The name a person gave it: a converter's counter-made tensor name ('52', from TorchScript) only if none.
        named = sorted(out.get_names())
        self.name = next((n for n in named if not n.isdigit()), named[0] if named else self.friendly)
        self.pshape = out.get_partial_shape()
        self.type_name = out.get_element_type().get_type_name()
        self.dtype = element_dtype(self.type_name)

    def describe(self) -> str:
        return f"'{self.name}' {self.pshape} {self.type_name}"


def parameter_specs(model: ov.Model) -> list[ParameterSpec]:
    return [ParameterSpec(p, i) for i, p in enumerate(model.get_parameters())]


def vocabulary_size(model: ov.Model, name: str = "input_ids") -> int | None:
    """Rows of the embedding table that the token input `name` indexes (a Gather on a constant), if found."""
    params = [p for p in model.get_parameters() if name in p.output(0).get_names() or p.get_friendly_name() == name]
    if not params:
        return None
    frontier = [params[0].output(0)]
    for _ in range(4):  # through a Convert or two to the Gather
        following = []
        for out in frontier:
            for target in out.get_target_inputs():
                node = target.get_node()
                if node.get_type_name() == "Gather" and target.get_index() == 1:
                    rows = node.get_input_partial_shape(0)
                    if rows.rank.is_static and rows[0].is_static:
                        return int(rows[0].get_length())
                elif node.get_type_name() in ("Convert", "Reshape", "Unsqueeze", "Squeeze"):
                    following.append(node.output(0))
        frontier = following
    return None


def _llm_input(spec: ParameterSpec, model: ov.Model, prompt_length: int, rng: np.random.Generator) -> np.ndarray | None:
    """The usual value of an LLM input: token ids within the vocabulary, a full attention mask, consecutive
    positions, a zero beam index; batch 1 and `prompt_length` tokens where the shape is dynamic."""
    name = next((n for n in LLM_INPUTS if n in spec.names), None)
    if name is None or not spec.pshape.rank.is_static:
        return None
    dims = [d.get_length() if d.is_static else (1 if i == 0 else prompt_length) for i, d in enumerate(spec.pshape)]
    shape = tuple(int(d) for d in dims)
    if name == "input_ids":
        vocab = vocabulary_size(model, next(iter(spec.names & {"input_ids"}))) or 10
        return np.asarray(rng.integers(0, vocab, size=shape), dtype=spec.dtype, order="C")
    return llm_companion(name, shape, spec.dtype)


def empty_cache_shape(spec: ParameterSpec) -> tuple[int, ...] | None:
    """The shape of an empty KV cache for a stateless LLM export's ``past_key_values.*`` input of dynamic shape
    (batch 1, a past of length 0: the prefill of a prompt), or None for any other input."""
    if not any(n.startswith("past_key_values") for n in spec.names) or not spec.pshape.rank.is_static \
            or spec.pshape.is_static or not np.issubdtype(spec.dtype, np.floating):
        return None
    dynamic = [i for i, d in enumerate(spec.pshape) if not d.is_static]
    return tuple(int(d.get_length()) if d.is_static else 1 if i == dynamic[0] else 0 for i, d in enumerate(spec.pshape))


def llm_role(names: set[str], fallback: str) -> str:
    """The LLM input a parameter plays (`LLM_INPUTS`), from its tensor and friendly names; else `fallback`."""
    return next((n for n in LLM_INPUTS if n in names), fallback)


def decode_value(name: str, prefill: np.ndarray, token: int, length: int, step: int) -> np.ndarray:
    """LLM input `name` at decode step `step` (1-based) after a prompt of `length` tokens, its prefill value
    `prefill`: the one new token, a mask over every position so far, the new token's position; the others (beam
    index, token types) keep their prefill value."""
    if name == "input_ids":
        return np.full((1, 1), token, dtype=prefill.dtype)
    if name == "attention_mask":
        return np.ones((1, length + step), dtype=prefill.dtype)
    if name == "position_ids":
        return np.full((1, 1), length + step - 1, dtype=prefill.dtype)
    return prefill


def llm_companion(name: str, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """The usual value of LLM input `name` beside the token ids, of `shape`: a full ``attention_mask``,
    ``position_ids`` from 0 along the last dimension, zeros for ``beam_idx`` and ``token_type_ids``."""
    value: np.ndarray
    if name == "attention_mask":
        value = np.ones(shape)
    elif name == "position_ids":
        value = np.broadcast_to(np.arange(shape[-1]), shape) if shape else np.zeros(shape)
    else:  # beam_idx, token_type_ids
        value = np.zeros(shape)
    return np.asarray(value, dtype=dtype, order="C")


def random_inputs(model: ov.Model, seed: int = 0, *, prompt_length: int = 16) -> list[np.ndarray]:
    """Seeded random inputs: standard normal floats, small non-negative integers (0..9), random booleans.

    LLM inputs (`LLM_INPUTS`, by name) get their usual values instead: token ids drawn within the vocabulary
    (the embedding table's rows), a full attention mask, consecutive positions from 0, a zero beam index; a
    dynamic batch dimension is 1 and a dynamic sequence dimension `prompt_length`; a stateless export's KV cache
    (``past_key_values.*``) is empty (`empty_cache_shape`).

    Raises
    ------
    InputError
        When an input shape is dynamic: random values need a concrete shape.
    """
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in parameter_specs(model):
        llm = _llm_input(spec, model, prompt_length, rng)
        if llm is not None:
            arrays.append(llm)
            continue
        if (cache := empty_cache_shape(spec)) is not None:
            arrays.append(np.zeros(cache, spec.dtype))
            continue
        if not spec.pshape.is_static:
            raise InputError(
                f"Input {spec.describe()} has a dynamic shape, so random inputs cannot be made. "
                "Pass inputs={name: array} (or --input NAME=FILE.npy) with concrete shapes."
            )
        shape = tuple(int(d.get_length()) for d in spec.pshape)
        try:
            if spec.dtype == np.bool_:
                arrays.append(rng.random(shape) < 0.5)
            elif np.issubdtype(spec.dtype, np.integer):
                arrays.append(rng.integers(0, 10, size=shape).astype(spec.dtype))
            else:
                arrays.append(rng.standard_normal(shape).astype(spec.dtype))
        except MemoryError:
            size = int(np.prod(shape, dtype=np.float64))
            raise InputError(f"Input {spec.describe()} holds {size:,} values ({size * spec.dtype.itemsize / 2**30:,.1f} GiB): "
                             "too many to make random values for in this machine's memory. Pass inputs={name: array} "
                             "(or --input NAME=FILE.npy) of the size you run it at.") from None
    return arrays


def prepare_inputs(model: ov.Model, inputs: Any = None, *, seed: int = 0, prompt_length: int = 16) -> list[np.ndarray]:
    """Return one checked array per parameter of `model`, in parameter order.

    Raises
    ------
    InputError
        Missing or unknown input names, wrong count, incompatible shape or element type, unreadable file.
    """
    return prepare_inputs_noted(model, inputs, seed=seed, prompt_length=prompt_length)[0]


def prepare_inputs_noted(model: ov.Model, inputs: Any = None, *, seed: int = 0,
                         prompt_length: int = 16) -> tuple[list[np.ndarray], tuple[str, ...]]:
    """`prepare_inputs`, and one note per input whose values were cast to the parameter's element type (a float64
    array for an f32 input), saying whether the cast changed them."""
    specs = parameter_specs(model)
    text = [s.describe() for s in specs if s.type_name == "string"]
    if text:
        raise InputError(f"Input {', '.join(text)} holds text (a string tensor): bisect_ov compares models on numeric "
                         "tensors. Compare the model that reads the tokenizer's output (its token ids) instead.")
    if inputs is None:
        return random_inputs(model, seed, prompt_length=prompt_length), ()
    if isinstance(inputs, (str, os.PathLike)):
        inputs = _read_file(pathlib.Path(inputs), specs)
    if isinstance(inputs, np.ndarray):
        inputs = [inputs]
    if isinstance(inputs, Mapping):
        arrays = _by_name(inputs, specs)
    elif isinstance(inputs, Sequence) and not isinstance(inputs, (str, bytes)):
        if len(inputs) != len(specs):
            raise InputError(
                f"Got {len(inputs)} input array(s) but the model has {len(specs)} input(s): "
                f"{', '.join(s.describe() for s in specs)}."
            )
        arrays = list(inputs)
    else:
        raise InputError(
            f"inputs must be None, a dict name->array, a list of arrays, an array, or a path to .npz/.npy; "
            f"got {type(inputs).__name__}."
        )
    checked, notes = [], []
    for a, spec in zip(arrays, specs):
        given = np.asarray(a)
        array = _check(given, spec)
        checked.append(array)
        if given.dtype != array.dtype:
            exact = bool(np.array_equal(array.astype(given.dtype), given, equal_nan=given.dtype.kind == "f"))
            notes.append(f"Input {spec.describe()} was given as {given.dtype} and cast to {spec.type_name}, the model's "
                         "input type" + (" (exactly: no value changed)." if exact else
                                         f"; the values were rounded to {spec.type_name} before either side ran."))
        if "input_ids" in spec.names and np.issubdtype(array.dtype, np.integer) and array.size:
            rows = vocabulary_size(model, "input_ids")
            beyond = int(np.count_nonzero(array >= rows)) if rows else 0
            if beyond:
                notes.append(f"Input {spec.describe()} holds {beyond:,} token id(s) of {rows:,} or more, past the "
                             f"embedding table's {rows:,} rows: its lookup gives no token's values there, on both sides.")
    return checked, tuple(notes)


def align_inputs(ref_model: ov.Model, target_model: ov.Model, arrays: Sequence[np.ndarray]
                 ) -> tuple[list[np.ndarray], tuple[str, ...]]:
    """`arrays` (for `ref_model`'s parameters) reordered to `target_model`'s parameters as `pair_inputs` pairs
    them, and its note when some were paired otherwise than by name."""
    ref_specs, target_specs = parameter_specs(ref_model), parameter_specs(target_model)
    source, notes = pair_inputs(ref_specs, target_specs)
    return [_check(np.asarray(arrays[i]), spec) for i, spec in zip(source, target_specs)], notes


def pair_inputs(ref_specs: list[ParameterSpec], target_specs: list[ParameterSpec]) -> tuple[list[int], tuple[str, ...]]:
    """The model's input index feeding each of the target model's inputs, and a note for inputs paired otherwise
    than by a shared name: by name first; then a lone input left on each side; then by shape and type where
    exactly one input left on each side has them. Inputs that neither tells apart are refused (`InputError`): fed
    by position, a twin's token ids could go into its mask unseen."""
    def listing(specs: list[ParameterSpec]) -> str:
        return ", ".join(s.describe() for s in specs)

    if len(ref_specs) != len(target_specs):
        raise InputError(f"The target model has {len(target_specs)} input(s) ({listing(target_specs)}) and the model "
                         f"{len(ref_specs)} ({listing(ref_specs)}); they must match.")
    source: dict[int, int] = {}
    for spec in target_specs:
        hit = next((r.index for r in ref_specs if r.names & spec.names and r.index not in source.values()), None)
        if hit is not None:
            source[spec.index] = hit
    left_ref = [r for r in ref_specs if r.index not in source.values()]
    left_target = [t for t in target_specs if t.index not in source]
    paired: list[str] = []
    if len(left_target) == 1:
        source[left_target[0].index] = left_ref[0].index
        paired.append(f"{left_ref[0].describe()} -> {left_target[0].describe()} (the one input left)")
    elif left_target:
        def key(s: ParameterSpec) -> tuple[str, str]:
            return str(s.pshape), s.type_name

        for t in left_target:
            same = [r for r in left_ref if key(r) == key(t)]
            if len(same) == 1 and sum(key(o) == key(t) for o in left_target) == 1:
                source[t.index] = same[0].index
                paired.append(f"{same[0].describe()} -> {t.describe()} (the one input of its shape and type)")
        unpaired = [t for t in left_target if t.index not in source]
        if unpaired:
            free = [r for r in left_ref if r.index not in source.values()]
            raise InputError(
                f"The target model's input(s) {listing(unpaired)} share no name with the model's ({listing(free)}), "
                "and their shapes and types do not tell them apart. Give them the model's names before the run, e.g. "
                "twin.inputs[i].get_tensor().set_names({'name'}), or save the twin with the model's input names.")
    notes = (f"The target model's inputs were paired with the model's otherwise than by name: {'; '.join(paired)}.",) \
        if paired else ()
    return [source[t.index] for t in target_specs], notes


def _by_name(mapping: Mapping, specs: list[ParameterSpec]) -> list[np.ndarray]:
    arrays: list[Any] = [None] * len(specs)
    unknown = []
    for key, value in mapping.items():
        hits = [s for s in specs if str(key) in s.names]
        if not hits:
            unknown.append(str(key))
            continue
        arrays[hits[0].index] = value
    if unknown:
        raise InputError(f"Unknown input name(s) {unknown}. The model's inputs: {', '.join(s.describe() for s in specs)}.")
    missing = [s.describe() for s, a in zip(specs, arrays) if a is None]
    if missing:
        given = "an empty dict names none of them. " if not mapping else ""
        raise InputError(f"Missing value(s) for input(s) {', '.join(missing)}: {given}Give a value for every input "
                         "(--input NAME=FILE.npy each), or none for seeded random values.")
    return arrays


def numpy_reason(path: str | os.PathLike, err: BaseException) -> str:
    """Why numpy could not read `path`, in the user's terms: numpy takes a file with neither the .npy nor the .npz
    signature for pickled data and suggests loading it unsafely, which is no advice for a file that is not
    NumPy's at all."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError:
        return str(err)
    if head.startswith((b"\x93NUMPY", b"PK\x03\x04", b"PK\x05\x06")):
        return str(err)  # a NumPy file numpy refused: its own reason
    if head[:1] == b"\x80":
        return ("it holds pickled Python data, which is not read (loading it can run code); save arrays with "
                "np.save (.npy) or np.savez (.npz)")
    return "it is not a NumPy file (it has neither the .npy nor the .npz signature)"


def _read_file(path: pathlib.Path, specs: list[ParameterSpec]) -> Any:
    if path.is_dir():
        raise InputError(f"'{path}' is a folder: here one input set is read, from a .npz (one array per input) or a "
                         ".npy (one input). A folder of samples goes to bisect (--inputs FOLDER); a capture records one "
                         "sample: record each and merge them (bisect_ov.capture.merge_captures).")
    if not path.is_file():
        raise InputError(f"Input file not found: '{path}'.")
    if path.suffix not in (".npy", ".npz"):
        raise InputError(f"Input file '{path}' must be .npz (one array per input) or .npy (one input).")
    try:
        loaded = load_arrays(path)
    except Exception as err:
        raise InputError(f"Cannot read input file '{path}': {numpy_reason(path, err)}.") from err
    return [loaded] if path.suffix == ".npy" else loaded


def load_arrays(path: str | os.PathLike) -> Any:
    """A .npy's array, or a .npz's arrays: by name (a dict), or in order (a list) when saved unnamed (``arr_0``,
    ``arr_1``, ...). What numpy raises on a file it cannot read, this raises."""
    path = pathlib.Path(path)
    if path.suffix == ".npy":
        return np.load(path, allow_pickle=False)
    with np.load(path, allow_pickle=False) as data:
        loaded = {k: data[k] for k in data.files}
    positional = [f"arr_{i}" for i in range(len(loaded))]
    return [loaded[k] for k in positional] if sorted(loaded) == sorted(positional) else loaded


def _check(array: np.ndarray, spec: ParameterSpec) -> np.ndarray:
    if array.dtype.kind in "USOV":
        kind = {"U": "text", "S": "bytes", "O": "Python objects", "V": "raw records"}[array.dtype.kind]
        raise InputError(f"Input {spec.describe()} got {kind} (dtype {array.dtype}); pass a numeric array of "
                         f"dtype {np.dtype(spec.dtype).name}.")
    if not spec.pshape.compatible(ov.PartialShape(list(array.shape))):
        raise InputError(
            f"Input {spec.describe()} got an array of shape {list(array.shape)}. Pass an array of shape {spec.pshape}."
        )
    if array.dtype.kind == "f" and array.size and not np.isfinite(array).any():
        raise InputError(f"Input {spec.describe()} holds no finite value ({int(np.isnan(array).sum()):,} NaN, "
                         f"{int(np.isinf(array).sum()):,} Inf of {array.size:,}): both sides would carry them to "
                         "every output and agree on nothing that can be measured. Pass real values.")
    want = spec.dtype
    if array.dtype == want:
        return np.asarray(array, order="C")
    same_kind = (np.issubdtype(array.dtype, np.floating) and np.issubdtype(want, np.floating)) or (
        np.issubdtype(array.dtype, np.integer) and np.issubdtype(want, np.integer)
    )
    if same_kind:
        with np.errstate(over="ignore"):
            cast = array.astype(want)
        if np.issubdtype(want, np.floating):
            overflow = np.isinf(cast) & np.isfinite(array)
            if overflow.any():
                raise InputError(
                    f"Input {spec.describe()}: {int(overflow.sum())} of {array.size} {array.dtype} value(s) exceed the "
                    f"{spec.type_name} range (largest magnitude {float(np.max(np.abs(array[overflow]))):.3g}, "
                    f"{spec.type_name} holds up to {float(np.finfo(want).max):.3g}) and would become inf. Scale or "
                    "clip them first.")
        if np.issubdtype(want, np.integer) and not np.array_equal(cast, array):
            raise InputError(f"Input {spec.describe()}: values do not fit {spec.type_name} (got {array.dtype}).")
        return np.asarray(cast, order="C")
    raise InputError(
        f"Input {spec.describe()} got dtype {array.dtype}. Pass {np.dtype(want).name} values, e.g. array.astype(np.{np.dtype(want).name})."
    )
