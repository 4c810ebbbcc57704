"""Prompts for an LLM: token ids made into the model's inputs, a stateful model's variables reset per prompt,
and the prompts of a prompt-length sweep.

A prompt is given as token ids (a 1-D integer array, or ``[1, n]``) or as a dict of the model's inputs. Token
ids become what LLM exports take, by input name (`bisect_ov.run.inputs.LLM_INPUTS`): ``input_ids``, a full
``attention_mask``, positions from 0, a zero ``beam_idx``. For a stateful model (KV-cache variables, compared
as its stateless form, `bisect_ov.model.state`), every prompt starts from the variables as ``reset_state()``
leaves them: their initial values, computed from the prompt's own inputs by the variables' initialiser, are
added as the ``state:<variable>`` inputs. `PromptInputs` does both; it travels to an executor's workers (the
initialiser as IR bytes, compiled once per process).

Token ids outside the vocabulary (negative, or past the rows of the embedding table ``input_ids`` indexes,
when that table is found) are refused (`check_token_ids`): a Gather reading past its table gives no error on
every device, so such a prompt would compare values no real prompt makes.

Assumes batch 1 when token ids are given, and that the sequence is the last dimension of the token inputs.
"""

from __future__ import annotations

import os
import pathlib
import zipfile
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import openvino as ov

from bisect_ov.core.errors import InputError
from bisect_ov.model.state import STATE_PREFIX, Stateless, compile_initialiser, run_initialiser
from bisect_ov.run.inputs import LLM_INPUTS, empty_cache_shape, llm_companion, load_arrays, numpy_reason, parameter_specs, vocabulary_size
from bisect_ov.samples.batches import ModelPayload

__all__ = ["PromptInputs", "check_token_ids", "is_prompt", "is_token_ids", "sequence_input", "position_range", "read_prompt",
           "sweep_prompts"]

_COMPILED: dict[str, Any] = {}  # initialiser digest -> compiled model, once per process


def is_token_ids(sample: Any) -> bool:
    """Whether `sample` is one prompt's token ids: an integer array of rank 1, or rank 2 with batch 1."""
    array = sample if isinstance(sample, np.ndarray) else None
    return (array is not None and np.issubdtype(array.dtype, np.integer)
            and (array.ndim == 1 or (array.ndim == 2 and array.shape[0] == 1)))


def is_prompt(sample: Any) -> bool:
    """Whether `PromptInputs.expand` takes `sample` as one prompt: token ids, a dict of inputs, or a file of either."""
    return isinstance(sample, (Mapping, str, os.PathLike)) or is_token_ids(sample)


def check_token_ids(tokens: Any, vocabulary: int | None, what: str = "The prompt") -> None:
    """Refuse no token ids at all, and token ids outside [0, `vocabulary`) (only negative ones when the
    vocabulary is unknown).

    Raises
    ------
    InputError
        Naming the first id outside, its position and the vocabulary.
    """
    if np.ndim(tokens) == 0:
        raise InputError(f"{what} must be a list or array of token ids; got {type(tokens).__name__} "
                         f"{str(tokens)[:60]!r}.")
    ids = np.asarray(tokens).reshape(-1)
    if not ids.size and np.issubdtype(ids.dtype, np.integer):
        raise InputError(f"{what} holds no token ids: a prompt needs at least one token.")
    if not np.issubdtype(ids.dtype, np.integer):
        return
    bad = (ids < 0) | (ids >= vocabulary) if vocabulary is not None else ids < 0
    if bad.any():
        at = int(np.argmax(bad))
        within = f"0 to {vocabulary - 1:,} (the model's embedding table has {vocabulary:,} rows)" if vocabulary else "0 or more"
        raise InputError(f"{what} holds token id {int(ids[at]):,} at position {at} ({int(bad.sum()):,} id(s) outside the "
                         f"vocabulary); token ids must be {within}. Give ids from the model's tokenizer.")


def sequence_input(model: ov.Model) -> str | None:
    """The name of the model's ``input_ids`` when its last (sequence) dimension is dynamic, else None."""
    for spec in parameter_specs(model):
        if "input_ids" in spec.names and spec.pshape.rank.is_static and spec.pshape.rank.get_length() >= 1:
            return "input_ids" if not spec.pshape[spec.pshape.rank.get_length() - 1].is_static else None
    return None


def position_range(model: ov.Model) -> int | None:
    """Rows of the learned position-embedding table (GPT-2's): the table ``position_ids`` index, or one a Range
    of positions made inside the model indexes; None when positions have no table (rotary embeddings), so no
    range is known."""
    rows = vocabulary_size(model, "position_ids")
    if rows is not None:
        return rows
    for op in model.get_ordered_ops():
        if op.get_type_name() != "Gather" or op.input_value(0).get_node().get_type_name() != "Constant":
            continue
        source = op.input_value(1).get_node()
        for _ in range(6):  # through the Converts and Unsqueezes between the Range and the Gather
            if source.get_type_name() == "Range":
                table = op.get_input_partial_shape(0)
                return int(table[0].get_length()) if table.rank.is_static and table[0].is_static else None
            if source.get_type_name() not in ("Convert", "Unsqueeze", "Reshape", "Squeeze", "Add") or not source.get_input_size():
                break
            source = source.input_value(0).get_node()
    return None


@dataclass(frozen=True)
class PromptInputs:
    """Turns one prompt (token ids or a dict) into the compared model's inputs, the variables reset.

    Attributes
    ----------
    inputs
        The LLM inputs of the user's model, in its parameter order: (name, numpy dtype name).
    init
        The variables' initialiser (the user's inputs in, each variable's initial value out), or None for a
        model without variables.
    variables
        The variable ids, in the order of the stateless model's ``state:`` inputs.
    """

    inputs: tuple[tuple[str, str], ...]
    init: ModelPayload | None = None
    variables: tuple[str, ...] = ()
    vocabulary: int | None = None  # rows of the embedding table input_ids index, when found
    aliases: tuple[frozenset[str], ...] = ()  # every name of each input, in `inputs`' order
    ids_rank: int | None = None  # the rank of input_ids, when static
    positions: int | None = None  # rows of the model's learned position table (`position_range`), when it has one
    caches: tuple[tuple[str, tuple[int, ...]], ...] = ()  # a stateless export's KV-cache inputs: their empty shapes

    @classmethod
    def of(cls, user_model: ov.Model, state: Stateless | None) -> "PromptInputs":
        names = []
        specs = parameter_specs(user_model)
        for spec in specs:
            name = next((n for n in LLM_INPUTS if n in spec.names), spec.name)
            names.append((name, np.dtype(spec.dtype).name))
        vocabulary = vocabulary_size(user_model, "input_ids")
        aliases = tuple(frozenset(spec.names) for spec in specs)
        ids = next((spec.pshape.rank for spec in specs if "input_ids" in spec.names), None)
        rank = ids.get_length() if ids is not None and ids.is_static else None
        init, variables = (ModelPayload.of(state.init), tuple(state.variables)) if state is not None else (None, ())
        caches = tuple((name, shape) for (name, _), spec in zip(names, specs)
                       if (shape := empty_cache_shape(spec)) is not None)
        return cls(tuple(names), init, variables, vocabulary, aliases, rank, position_range(user_model), caches)

    def check_length(self, length: int) -> None:
        """Refuse a prompt of `length` tokens beyond the model's position table: a Gather past its table is no
        error on every device, so such a prompt compares values no real prompt makes."""
        if self.positions is not None and length > self.positions:
            raise InputError(f"A prompt of {length} tokens reaches position {length - 1}, beyond the model's position "
                             f"range (positions 0 to {self.positions - 1}: its position table has {self.positions} "
                             f"rows). Give a prompt of at most {self.positions} tokens.")

    def expand(self, sample: Any) -> Any:
        """`sample` as the compared model's inputs: token ids become the LLM inputs (a dict's LLM inputs other
        than ``input_ids``, when not given, follow from it the same way), and a stateful model's ``state:`` inputs
        are added with the variables' initial values; a file is read first (`read_prompt`). Other samples are
        returned as given."""
        if isinstance(sample, (str, os.PathLike)):
            sample = read_prompt(sample)
        if isinstance(sample, (list, tuple)) and len(sample) == len(self.inputs):  # arrays in input order
            sample = {name: array for (name, _), array in zip(self.inputs, sample)}
        if isinstance(sample, Mapping) and "input_ids" in sample:
            check_token_ids(sample["input_ids"], self.vocabulary, "The prompt's input_ids")
            if np.ndim(sample["input_ids"]) == 1 and self.ids_rank == 2:  # one prompt's ids: a batch of one
                sample = {**sample, "input_ids": np.asarray(sample["input_ids"]).reshape(1, -1)}
            # the LLM inputs not given follow from input_ids, as for bare token ids
            shape = np.shape(sample["input_ids"])
            present = {str(k) for k in sample}
            sample = {**sample, **{name: llm_companion(name, shape[:1] if name == "beam_idx" else shape, dtype)
                                   for (name, dtype), names in zip(self.inputs, self.aliases or [{n} for n, _ in self.inputs])
                                   if name in LLM_INPUTS and name != "input_ids" and not names & present}}
        if isinstance(sample, Mapping) and "input_ids" in sample:
            self.check_length(int(np.shape(sample["input_ids"])[-1]))
        if is_token_ids(sample):
            check_token_ids(sample, self.vocabulary)
            self.check_length(int(np.size(sample)))
            tokens = np.asarray(sample).reshape(1, -1)
            given: dict[str, Any] = {}
            caches = dict(self.caches)
            for name, dtype in self.inputs:
                if name == "input_ids":
                    given[name] = tokens.astype(dtype)
                elif name in LLM_INPUTS:
                    given[name] = llm_companion(name, (1,) if name == "beam_idx" else tokens.shape, dtype)
                elif name in caches:  # a stateless export's KV cache: empty, the prompt's prefill
                    given[name] = np.zeros(caches[name], dtype)
                else:
                    raise InputError(f"A prompt given as token ids fills the inputs {list(LLM_INPUTS)}; the model also "
                                     f"takes '{name}'. Give each prompt as a dict of the model's inputs.")
            sample = given
        if self.init is None:
            return sample
        if not isinstance(sample, Mapping):
            raise InputError("A prompt for a stateful model is given as token ids or as a dict of the model's inputs "
                             f"({[n for n, _ in self.inputs]}); got {type(sample).__name__}.")
        if any(str(k).startswith(STATE_PREFIX) for k in sample):
            return dict(sample)  # the variables given explicitly: not reset
        return {**sample, **dict(zip((STATE_PREFIX + v for v in self.variables), self._initial(sample)))}

    def _initial(self, sample: Mapping[str, Any]) -> list[np.ndarray]:
        assert self.init is not None
        compiled = _COMPILED.get(self.init.digest)
        if compiled is None:
            compiled = _COMPILED[self.init.digest] = compile_initialiser(self.init.load())
        arrays = []
        for param in compiled.inputs:
            names = param.get_names()
            hit = next((sample[n] for n in names if n in sample), None)
            if hit is None:
                raise InputError(f"The prompt lacks the input {sorted(names)}, from which the model's variables (its "
                                 f"cache) start; it has {sorted(map(str, sample))}. Give that input too (--input "
                                 "NAME=FILE.npy, or a key of the dict or .npz), or token ids alone, from which the "
                                 "usual mask and positions follow.")
            arrays.append(np.asarray(hit))
        return run_initialiser(compiled, arrays, self.variables)


def read_prompt(path: str | os.PathLike) -> Any:
    """One prompt from a file: a .npy of token ids (the array), or a .npz of the model's inputs by name (a dict;
    unnamed arrays, ``arr_0``, ``arr_1``, ..., are a list in input order, one alone that array).

    Raises
    ------
    InputError
        Another kind of file, or one numpy cannot read.
    """
    file = pathlib.Path(path)
    if not file.exists():
        raise InputError(f"Input file not found: '{file}'.")
    if not file.is_file() or file.suffix not in (".npy", ".npz"):
        raise InputError(f"A prompt is read from a .npy of token ids or a .npz of the model's inputs holding "
                         f"'input_ids'; '{file}' is not such a file.")
    try:
        given = load_arrays(file)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:  # not numpy's, or object arrays
        raise InputError(f"Cannot read the prompt '{file}': {numpy_reason(file, err)}. Save the token ids with "
                         "np.save(path, ids) (or np.savez(path, input_ids=ids, ...)).") from err
    return given[0] if isinstance(given, list) and len(given) == 1 else given


def sweep_prompts(model: ov.Model, lengths: Sequence[int], given: Any, seed: int) -> tuple[list[np.ndarray], list[str]]:
    """One prompt per length of a prompt-length sweep, with notes: the given prompt's token ids cut to each
    length, or a seeded random prompt within the vocabulary as long as the longest.

    Raises
    ------
    InputError
        A model without a dynamic sequence dimension on ``input_ids``, a length below 1, beyond the model's
        position range, or beyond the given prompt; a given prompt with token ids outside the vocabulary.
    """
    if sequence_input(model) is None:
        inputs = ", ".join(s.describe() for s in parameter_specs(model))
        raise InputError("A prompt-length sweep needs an LLM whose 'input_ids' has a dynamic sequence (last) "
                         f"dimension; this model's inputs are {inputs}.")
    lengths = sorted(set(int(n) for n in lengths))
    if lengths[0] < 1:
        raise InputError(f"Prompt lengths must be at least 1 token; got {lengths[0]}.")
    notes = []
    limit = position_range(model)
    if limit is not None and lengths[-1] > limit:
        raise InputError(f"Prompt length {lengths[-1]} is beyond the model's position range (positions 0 to "
                         f"{limit - 1}: its position table has {limit} rows). Ask for lengths up to {limit}.")
    if given is None:
        vocab = vocabulary_size(model, "input_ids") or 10
        tokens = np.random.default_rng(seed).integers(0, vocab, size=lengths[-1])
        notes.append(f"Prompt-length sweep over {lengths} tokens: one seeded random prompt of {lengths[-1]} tokens "
                     f"within the vocabulary ({vocab:,} ids), cut to each length.")
    else:
        if isinstance(given, (str, os.PathLike)):  # a .npy of token ids, or a .npz holding 'input_ids'
            given = read_prompt(given)
        if isinstance(given, Mapping) and "input_ids" in given:
            given = given["input_ids"]
        if not is_token_ids(given):
            raise InputError("A prompt-length sweep cuts one prompt to each length: give it as token ids (a 1-D "
                             "integer array) or as {'input_ids': array}, or give no inputs for a random prompt.")
        tokens = np.asarray(given).reshape(-1)
        check_token_ids(tokens, vocabulary_size(model, "input_ids"), "The prompt of the sweep")
        if lengths[-1] > tokens.size:
            raise InputError(f"The prompt has {tokens.size} tokens, fewer than the longest length asked "
                             f"({lengths[-1]}). Give a longer prompt, or lengths up to {tokens.size}.")
        if lengths[-1] < tokens.size:
            notes.append(f"The prompt of {tokens.size} tokens was cut to each length of the sweep ({lengths}).")
    return [tokens[:n].copy() for n in lengths], notes
