"""`bisect_pipeline()`: which component of a pipeline of models diverges first, then which node.

The pipeline's own loop runs three times, each time with bisect_ov's requests in place of optimum-intel's
(`components.calls`):

1. on the reference, every component call replayed at once on the target with exactly the reference's inputs,
   the state included (teacher-forced): each component's own error per call, with the inputs of its worst call
   kept;
2. on the target alone (free-running): the generated tokens, compared with the reference's;
3. the first component in data-flow order whose own error passes its tolerance (or whose outputs gain NaN/Inf)
   is bisected with `bisect()` on its worst call's inputs (a stateful decoder in its stateless form, the
   reference's cache as its state inputs), and its report is the node-level part of the `PipelineReport`.
"""

from __future__ import annotations

import math
import os
import pathlib
import time
from dataclasses import replace
from functools import partial
from typing import Any, Mapping

import numpy as np

from bisect_ov.analysis.metrics import compare
from bisect_ov.analysis.tolerance import Tolerance
from bisect_ov.components.calls import Component, ComponentRequest, compile_component
from bisect_ov.components.folder import Pipeline, offline, open_pipeline, quiet
from bisect_ov.core.errors import BisectError, DeviceError, InputError, first_line
from bisect_ov.model.graph import ModelGraph
from bisect_ov.model.load import load_model
from bisect_ov.pipeline.api import run
from bisect_ov.pipeline.assemble import save_marked
from bisect_ov.pipeline.options import BisectOptions
from bisect_ov.pipeline.plan import make_plan
from bisect_ov.report.pipeline import ComponentResult, PipelineReport
from bisect_ov.run.devices import Device, make_device
from bisect_ov.run.inputs import numpy_reason

__all__ = ["bisect_pipeline", "run_pipeline", "generation_inputs", "DEFAULT_MAX_NEW_TOKENS", "DEFAULT_DENOISING_STEPS"]

DEFAULT_MAX_NEW_TOKENS = 16
DEFAULT_DENOISING_STEPS = 4
DEFAULT_PROMPT = "a photo of a red house"  # a diffusion pipeline's prompt when none is given


def bisect_pipeline(
    pipeline: Any,
    ref: str | Device = "CPU",
    target: str | Device = "GPU",
    inputs: Any = None,
    *,
    prompt: str | None = None,
    target_models: Mapping[str, Any] | None = None,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    denoising_steps: int = DEFAULT_DENOISING_STEPS,
    **options: Any,
) -> PipelineReport:
    """Compare a pipeline of models on two devices: which component diverges first, then which node.

    Parameters
    ----------
    pipeline
        An optimum-intel export folder (`OVModelForSeq2SeqLM`'s or, for Whisper, `OVModelForSpeechSeq2Seq`'s:
        ``openvino_encoder_model.xml``, ``openvino_decoder_model.xml``, ``config.json``) or such a pipeline
        object already loaded.
    ref, target
        Devices as for `bisect()` (``"CPU"``, ``"CPU:f32"``, ``"GPU"``, ``"EMU:f16"``, or a `Device`).
    inputs
        The pipeline's input: token ids (a list or a 1-D/2-D array) or a dict with ``input_ids`` (and
        ``attention_mask``); None with no `prompt`: eight seeded random token ids. For Whisper, its log-mel
        features (an array ``[1, mel bins, 2 x max_source_positions]``, as its feature extractor makes them, or a
        dict with ``input_features``); None: seeded random features of that shape. Either may come from a
        .npy (one array) or .npz (arrays by name) file.
    prompt
        Text, tokenized with the tokenizer saved in the export folder (not for a speech model).
    target_models
        Component name -> a model to run on the target in place of that component (a modified IR, a
        fault-injected copy), as `bisect()`'s ``target_model``.
    max_new_tokens
        Bound on the generation (a random-weight model rarely emits its end token).
    denoising_steps
        A diffusion pipeline's denoising steps (each a call of its UNet), from the same seeded latents on both
        sides.
    **options
        `bisect()`'s keywords (``ref_config=``, ``seed=``, ``fix=True``, ``strategy=``, ``tolerance=``, ...): the
        devices' configurations, the seed of random token ids, and the options of the component's bisection.

    Raises
    ------
    InputError
        A folder that is not a supported pipeline export (the message says what was found and what is
        missing), an unknown component in `target_models`, inputs that are not token ids, an unknown option.
    """
    return run_pipeline(pipeline, ref, target, inputs, BisectOptions.from_keywords(**options), prompt=prompt,
                        target_models=target_models, max_new_tokens=max_new_tokens, denoising_steps=denoising_steps)


def run_pipeline(pipeline: Any, ref: str | Device, target: str | Device, inputs: Any, options: BisectOptions, *,
                 prompt: str | None = None, target_models: Mapping[str, Any] | None = None,
                 max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                 denoising_steps: int = DEFAULT_DENOISING_STEPS) -> PipelineReport:
    """`bisect_pipeline` with its options as one record (what the command line builds from its flags)."""
    for name, value in (("max_new_tokens", max_new_tokens), ("denoising_steps", denoising_steps)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{name} must be a positive integer; got {value!r}.")
    # Options of one model's run that a pipeline's run has no place for: refused, not silently dropped.
    foreign = [flag for flag, given in (("steps (--steps)", options.steps), ("prompt_lengths (--prompt-lengths)",
               options.prompt_lengths), ("executor (--executor)", options.executor), ("classifier_outputs "
               "(--classifier-output)", options.classifier_outputs)) if given]
    if foreign:
        raise InputError(f"{', '.join(foreign)} apply to bisect() of one model, not to a pipeline, which generates "
                         "with its own loop (max_new_tokens, --max-new-tokens) on one input: leave them out.")
    pipe = open_pipeline(pipeline)
    unknown = sorted(set(target_models or ()) - set(pipe.models))
    if unknown:
        raise InputError(f"target_models names {unknown}, not components of this {pipe.family.name} pipeline "
                         f"({list(pipe.models)}).")
    ref_device = make_device(ref, dict(options.ref_config), role="ref")
    target_device = make_device(target, dict(options.target_config), role="target")
    given = _generation_inputs(pipe, inputs, prompt, options.seed)
    components = {n: Component(n, m) for n, m in pipe.models.items()}
    replaced = {n: Component(n, load_model(m)) for n, m in (target_models or {}).items()}
    for name, component in replaced.items():  # another model altogether failed in its first call, in the plugin's words
        theirs, ours = (sorted(i.get_any_name() for i in c.model.inputs) for c in (component, components[name]))
        if theirs != ours:
            raise InputError(f"target_models['{name}'] takes the inputs {theirs}; the pipeline's {name} takes {ours}: "
                             "give a model of that component (its export quantized or converted otherwise).")
    on_target = {n: replaced.get(n, c) for n, c in components.items()}
    ref_compiled = {n: compile_component(ref_device, c) for n, c in components.items()}
    target_compiled = {n: compile_component(target_device, c) for n, c in on_target.items()}
    precision = next(iter(target_compiled.values())).info.precision
    tolerances: dict[str, Any] = {n: partial(_output_tolerance, c, precision) for n, c in components.items()}
    seconds: dict[str, float] = {}
    saved = pipe.requests()
    try:
        shadowed = {n: ComponentRequest(c, ref_compiled[n], target_compiled[n], tolerances[n], keep=True)
                    for n, c in components.items()}
        start = time.perf_counter()
        ref_tokens, ref_image = _generate(pipe, shadowed, given, max_new_tokens, denoising_steps, options.seed)
        seconds["teacher_forced"] = time.perf_counter() - start
        alone = {n: ComponentRequest(c, target_compiled[n], against=shadowed[n].kept) for n, c in on_target.items()}
        start = time.perf_counter()
        target_tokens, target_image = _generate(pipe, alone, given, max_new_tokens, denoising_steps, options.seed)
        seconds["free_running"] = time.perf_counter() - start
    finally:
        pipe.use(saved)
    tolerances = {n: r.tolerance if not callable(r.tolerance) else r.tolerance({}) for n, r in shadowed.items()}
    results = tuple(_result(n, shadowed[n], alone[n], tolerances[n], precision) for n in components)
    # A pipeline whose result is an image: how far the target's free-running image is from the reference's, against
    # the tolerance of the component that makes it (the last).
    output_error = compare(ref_image, target_image).rel_l2 if ref_image is not None and target_image is not None else None
    output_tolerance = tolerances[list(components)[-1]] if output_error is not None else None
    for request in shadowed.values():
        request.kept.clear()
    examined = next((r.name for r in results if r.diverges), None)
    report, notes = None, []
    if examined is not None:
        request = shadowed[examined]
        start = time.perf_counter()
        shapes = {name: list(np.shape(value)) for name, value in request.worst.inputs.items()}
        # At its call's static shapes, as the pipeline ran it; failing those (a cache of length 0), as exported.
        failed: DeviceError | None = None
        for form in (partial(_static, shapes=shapes), _clone):
            model = form(components[examined].run_model)
            model.set_friendly_name(examined)  # named after its component in the report's header
            try:
                # The patched model is saved below, from the component as exported, not from this static copy.
                report = run(model, ref_device, target_device, request.worst.inputs, replace(options, patched_model=None),
                             target_model=form(replaced[examined].run_model) if examined in replaced else None)
                break
            except DeviceError as err:
                failed = err
        else:
            notes.append(f"bisect() of '{examined}' on its call {request.worst.index} could not run ({failed}): no "
                         "node is named; the component figures above stand.")
        if report is not None and failed is not None:
            notes.append(f"'{examined}' is bisected with the shapes it was exported with: at call "
                         f"{request.worst.index}'s own shapes the target did not compile ({failed}).")
        if report is not None and report.fix is not None and report.fix.solved and options.patched_model is not None:
            # From the component as exported: the bisected copy had its call's static shapes, and the patched model
            # goes back into the pipeline for any input.
            saved_to = save_marked(components[examined].model, report.ignored_scope(), options.patched_model)
            report = replace(report, fix=replace(report.fix, patched_model=str(saved_to)))
        seconds["bisect"] = time.perf_counter() - start
        if report is not None and components[examined].stateless is not None:
            notes.append(f"'{examined}' is stateful: it is bisected in its stateless form, fed the reference's "
                         f"cache of call {request.worst.index} as its state:* inputs.")
        if report is not None and not report.diverges:  # the judgements differ: say why where each is read
            worst = max((o.error for o in report.outputs), default=0.0)
            said = (f"'{examined}' diverges on its own inputs (call {request.worst.index}: {request.worst.ratio:.1f}x "
                    f"its component tolerance {tolerances[examined]:.1e}), but bisect() of that call finds no "
                    f"divergence (outputs {worst:.1e} against their node-level tolerance"
                    + (", in the stateless form, which the target may compile differently" if
                       components[examined].stateless is not None else "") + "): no node is named.")
            notes.append(said)
            report = replace(report, notes=(*report.notes, said))
    return PipelineReport(pipe.family.name, pipe.source, ref_device.name, target_device.name, results,
                          ref_tokens, target_tokens, examined, report, tuple(notes), seconds,
                          output_error=output_error, output_tolerance=output_tolerance)


def _clone(model: Any) -> Any:
    return model.clone()


def _static(model: Any, shapes: Mapping[str, list[int]]) -> Any:
    """A copy of `model` reshaped to the shapes of the call it is bisected on: a component exported with dynamic
    dimensions (a decoder's sequence and cache lengths) is compiled for exactly those, as the pipeline ran it
    (the CPU plugin's bf16 kernels refuse some dynamic subgraphs: "SetLoadStoreScalar expects static shapes").
    Left dynamic where the inputs do not name every parameter or the model cannot take the shapes."""
    copy = model.clone()
    names = {p.output(0).get_any_name() for p in copy.get_parameters()}
    if names <= set(shapes):
        try:
            copy.reshape({name: shapes[name] for name in names})
        except RuntimeError:
            copy = model.clone()
    return copy


def _generate(pipe: Pipeline, requests: Mapping[str, ComponentRequest], given: Mapping[str, Any],
              max_new_tokens: int, denoising_steps: int, seed: int) -> tuple[tuple[int, ...], np.ndarray | None]:
    """Run the pipeline's own generation with `requests` in place of its components' requests (greedy): the
    generated tokens, or a diffusion pipeline's image (from latents seeded with `seed`)."""
    import torch

    pipe.use(dict(requests))
    try:
        with offline(), quiet(), torch.no_grad():
            if pipe.family.main_input == "prompt":
                pipe.obj.set_progress_bar_config(disable=True)  # its own bar per denoising loop
                out = pipe.obj(given["prompt"], num_inference_steps=denoising_steps, output_type="np",
                               generator=torch.Generator().manual_seed(seed))
                return (), np.asarray(out.images, dtype=np.float32)
            out = pipe.obj.generate(**{k: torch.from_numpy(v) for k, v in given.items()}, max_new_tokens=max_new_tokens,
                                    do_sample=False, num_beams=1)
    except BisectError:
        raise
    except Exception as err:  # the pipeline's own code (optimum's, transformers') refused the inputs: the user's error
        images = " (token ids holding its image token once per image, pixel values of its image size)" if \
            pipe.family.name == "visual_causal_lm" else ""
        raise InputError(f"The {pipe.family.name} pipeline's own generation failed on these inputs: "
                         f"{type(err).__name__}: {first_line(err)} Give inputs as its processor makes them for this "
                         f"model{images}.") from err
    return tuple(int(t) for t in np.asarray(out)[0]), None


def _generation_inputs(pipe: Pipeline, inputs: Any, prompt: str | None, seed: int) -> dict[str, Any]:
    """The pipeline's ``input_ids`` and ``attention_mask``, from token ids, a dict, a file, a prompt or the seed;
    a speech model's ``input_features`` (`_speech_inputs`)."""
    vocab = int(pipe.config.get("vocab_size") or 0)
    if prompt is not None and inputs is not None:
        raise InputError("Give the pipeline's input as a prompt or as inputs, not both.")
    if pipe.family.main_input == "prompt":
        text = prompt if prompt is not None else inputs if inputs is not None else DEFAULT_PROMPT
        if isinstance(text, os.PathLike):
            raise InputError(f"A {pipe.family.name} pipeline takes a prompt (--prompt), not an inputs file ('{text}').")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"A {pipe.family.name} pipeline takes a prompt (text); got {type(text).__name__}.")
        return {"prompt": text}
    if isinstance(inputs, (str, os.PathLike)):
        inputs = _read_inputs(inputs)
    if pipe.family.main_input == "input_features":
        if prompt is not None:
            raise InputError(f"A {pipe.family.name} pipeline takes audio features (input_features), not a prompt: "
                             "give them as inputs, or none for seeded random ones.")
        return _speech_inputs(pipe, inputs, seed)
    if pipe.family.main_input == "pixel_values":
        if prompt is not None:
            raise InputError(f"A {pipe.family.name} pipeline takes token ids with an image token and the image's "
                             "pixel_values (as its processor makes them), not a prompt: give them as inputs, or none "
                             "for seeded random ones.")
        return _visual_inputs(pipe, inputs, seed)
    if prompt is not None:
        tokenizer = _tokenizer(pipe)
        ids = np.asarray(tokenizer(prompt, return_tensors="np")["input_ids"], dtype=np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    if inputs is None:
        rng = np.random.default_rng(seed)
        ids = rng.integers(2, max(vocab, 3), size=(1, 8), dtype=np.int64)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    given = dict(inputs) if isinstance(inputs, Mapping) else {"input_ids": inputs}
    if "input_ids" not in given:
        raise InputError(f"The pipeline's inputs are token ids or a dict with 'input_ids'; got keys {sorted(given)}.")
    ids = np.asarray(given["input_ids"])
    if ids.dtype.kind not in "iu" or ids.ndim not in (1, 2) or ids.size == 0:
        raise InputError(f"input_ids must be a non-empty 1-D or 2-D array of integer token ids; got {ids.dtype} "
                         f"of shape {ids.shape}.")
    ids = ids.reshape(1, -1) if ids.ndim == 1 else ids
    if vocab and (ids.min() < 0 or ids.max() >= vocab):
        raise InputError(f"Token ids must lie in [0, {vocab}) (the config's vocab_size); got {ids.min()}..{ids.max()}.")
    mask = np.asarray(given.get("attention_mask", np.ones_like(ids))).reshape(ids.shape)
    return {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64)}


def generation_inputs(pipeline: Any, inputs: Any = None, *, prompt: str | None = None, seed: int = 0) -> dict[str, Any]:
    """What `bisect_pipeline` feeds the pipeline's own generate for these `inputs` or `prompt` (checked, or
    seeded from `seed` when neither is given): token ids and their mask, a speech model's features, a vision model's
    token ids and pixels, or a diffusion pipeline's prompt. For running the plain pipeline on the same input."""
    return _generation_inputs(open_pipeline(pipeline), inputs, prompt, seed)


def _read_inputs(path: str | os.PathLike) -> Any:
    """A pipeline's input read from a .npy (one array) or a .npz (arrays by name)."""
    file = pathlib.Path(path)
    if not file.is_file():
        raise InputError(f"Inputs file not found: '{file}'.")
    try:
        loaded = np.load(file, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise InputError(f"'{file}' is not a .npy or .npz file numpy can read: {numpy_reason(file, err)}.") from None
    if isinstance(loaded, np.ndarray):  # a .npy
        return loaded
    with loaded:
        return {k: loaded[k] for k in loaded.files}


def _visual_inputs(pipe: Pipeline, inputs: Any, seed: int) -> dict[str, np.ndarray]:
    """A vision-language model's ``input_ids`` (holding its image token), ``attention_mask`` and ``pixel_values``
    ``[1, 3, size, size]``: given (a dict) and checked, or seeded (the image token after the first token, then six
    random tokens; standard-normal pixels, as a processor's normalized ones)."""
    config = pipe.config
    image_token = config.get("image_token_index", config.get("image_token_id"))
    size = int((config.get("vision_config") or {}).get("image_size") or 0)
    vocab = int((config.get("text_config") or {}).get("vocab_size") or config.get("vocab_size") or 0)
    if image_token is None or not size or not vocab:
        raise InputError("The export's config.json does not give the image token, the image size and the vocabulary "
                         "size: give input_ids and pixel_values.")
    if inputs is None:
        rng = np.random.default_rng(seed)
        text = rng.integers(2, vocab, size=6)
        text[text == image_token] = 2
        ids = np.concatenate([[1, image_token], text]).reshape(1, -1).astype(np.int64)
        pixels = rng.standard_normal((1, 3, size, size)).astype(np.float32)
        return {"input_ids": ids, "attention_mask": np.ones_like(ids), "pixel_values": pixels}
    if not isinstance(inputs, Mapping) or not {"input_ids", "pixel_values"} <= set(inputs):
        got = sorted(inputs) if isinstance(inputs, Mapping) else type(inputs).__name__
        raise InputError(f"A {pipe.family.name} pipeline's inputs are a dict with 'input_ids' and 'pixel_values' (and "
                         f"'attention_mask'); got {got}.")
    ids = np.asarray(inputs["input_ids"])
    ids = ids.reshape(1, -1) if ids.ndim == 1 else ids
    integer = ids.dtype.kind in "iu"
    if not integer or ids.ndim != 2 or ids.shape[0] != 1 or not (ids == image_token).any():
        lacking = " without it" if integer and not (ids == image_token).any() else ""
        raise InputError(f"input_ids must be one row of integer token ids holding the image token {image_token}; got "
                         f"{ids.dtype} of shape {ids.shape}{lacking}.")
    pixels = np.asarray(inputs["pixel_values"])
    if pixels.dtype.kind != "f" or pixels.shape != (1, 3, size, size):
        raise InputError(f"pixel_values must be a float array [1, 3, {size}, {size}] for this export (its vision "
                         f"config's image_size); got {pixels.dtype} of shape {list(pixels.shape)}.")
    mask = np.asarray(inputs.get("attention_mask", np.ones_like(ids))).reshape(ids.shape)
    return {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64),
            "pixel_values": pixels.astype(np.float32)}


def _speech_inputs(pipe: Pipeline, inputs: Any, seed: int) -> dict[str, np.ndarray]:
    """A speech model's ``input_features`` ``[1, mel bins, frames]``: given (an array, or a dict with them) and
    checked against the config's bins and the frames its encoder takes, or seeded standard-normal values."""
    bins = int(pipe.config.get("num_mel_bins") or 0)
    frames = 2 * int(pipe.config.get("max_source_positions") or 0)  # the encoder's two convolutions, stride 2
    if inputs is None:
        if not bins or not frames:
            raise InputError("The export's config.json gives no num_mel_bins/max_source_positions: give the "
                             "input_features.")
        rng = np.random.default_rng(seed)
        return {"input_features": rng.standard_normal((1, bins, frames)).astype(np.float32)}
    given = dict(inputs) if isinstance(inputs, Mapping) else {"input_features": inputs}
    if "input_features" not in given:
        raise InputError(f"A speech pipeline's inputs are its input_features (an array, or a dict with "
                         f"'input_features'); got keys {sorted(given)}.")
    features = np.asarray(given["input_features"])
    features = features[None] if features.ndim == 2 else features
    if features.dtype.kind != "f" or features.ndim != 3 or features.shape[0] != 1:
        raise InputError(f"input_features must be a float array [1, mel bins, frames] (or [mel bins, frames]); got "
                         f"{features.dtype} of shape {features.shape}.")
    if bins and frames and features.shape[1:] != (bins, frames):
        raise InputError(f"input_features must be [1, {bins}, {frames}] for this export (its num_mel_bins, and twice "
                         f"its max_source_positions); got {list(features.shape)}.")
    return {"input_features": features.astype(np.float32)}


def _tokenizer(pipe: Pipeline):
    from pathlib import Path

    folder = Path(pipe.source)
    if not folder.is_dir() or not any((folder / f).exists() for f in ("tokenizer.json", "tokenizer_config.json",
                                                                      "spiece.model", "vocab.json")):
        raise InputError(f"A prompt needs the tokenizer saved with the export; '{pipe.source}' has none. Give the "
                         "token ids as inputs instead.")
    from transformers import AutoTokenizer

    with offline():
        return AutoTokenizer.from_pretrained(folder)


def _output_tolerance(component: Component, precision: str, shapes: Mapping[str, list[int]]) -> float:
    """The smallest of the component's own outputs' tolerances (as `bisect()`'s plan computes them) for the
    target's precision, at the input `shapes` of its first call (as bisect() of a call sees it: `_static`)."""
    graph = ModelGraph(_static(component.run_model, shapes) if shapes else component.run_model)
    plan = make_plan(Tolerance(precision=precision), graph)
    keys = [r.key for r in graph.results()][: len(component.outputs)]
    return min((plan.output(k) for k in keys), default=plan.limit)


def _result(name: str, request: ComponentRequest, alone: ComponentRequest, tolerance: float,
            precision: str) -> ComponentResult:
    errors = tuple(max((s.rel_l2 for s in c.errors.values()), default=0.0) for c in request.calls)
    first_over = next((c.index for c in request.calls if c.ratio > 1.0), None)
    nonfinite = sum(1 for c in request.calls if math.isinf(c.ratio))
    sequences = max((c.sequence for c in request.calls), default=-1) + 1
    return ComponentResult(name, len(request.calls), sequences, tolerance, errors, max(request.worst.index, 0),
                           first_over, nonfinite, request.component.stateless is not None, precision,
                           tuple(alone.free_errors), alone.n_calls)
