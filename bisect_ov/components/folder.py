"""An optimum-intel export folder (or a pipeline object already loaded) as the components bisect_ov runs.

`open_pipeline` says which family a folder holds, from its ``config.json`` and the IR files beside it, and
loads it with optimum-intel's own class, uncompiled: bisect_ov compiles each component on its own devices
(`components.calls`). What is supported, in data-flow order of the components:

* ``seq2seq``: `OVModelForSeq2SeqLM` (T5, BART, Marian, ...): ``encoder``, ``decoder`` (stateful, its KV
  cache in variables) or ``decoder`` and ``decoder_with_past`` (an older, stateless export);
* ``speech_seq2seq``: `OVModelForSpeechSeq2Seq` for Whisper: the same components, the encoder fed log-mel
  ``input_features``, the generation Whisper's own;
* ``visual_causal_lm``: `OVModelForVisualCausalLM` for LLaVA: ``vision_embeddings`` (the vision tower and its
  projector), ``text_embeddings`` and ``language_model`` (stateful), fed token ids with an image token and the
  image's ``pixel_values``;
* ``diffusion``: `OVDiffusionPipeline` for Stable Diffusion (``StableDiffusionPipeline`` in ``model_index.json``):
  ``text_encoder``, ``unet`` (called once per denoising step), ``vae_decoder``, each in its own subfolder; fed a
  prompt, its result an image rather than tokens.

Each component is reached through a `Slot`: the pipeline's object that holds it, the attribute of its request
(``request``; the text embeddings' is the language model's ``text_emb_request``) and of its model.

A folder of another family (another speech model, another vision-language model, a diffusion pipeline) is named
in the error with the families supported; a folder of one IR is sent to `bisect()`.

Assumptions: optimum-intel and transformers are installed (the ``zoo`` extra); the hub is switched off while
loading, so nothing is fetched.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import openvino as ov

from bisect_ov.core.errors import InputError
from bisect_ov.core.extras import hub_offline as offline

__all__ = ["FAMILIES", "Family", "Pipeline", "open_pipeline", "family_of", "offline", "quiet"]


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """transformers', diffusers' and optimum's own warnings held back for the duration (while the pipeline is loaded and
    generates): what optimum-intel tries when it loads a Whisper folder, generation settings it overrides, a
    disabled safety checker, are not the user's to act on. Their verbosity is restored afterwards."""
    import importlib

    loggers, levels = [], []
    for name, variable in (("transformers.utils.logging", "TRANSFORMERS_VERBOSITY"),
                           ("diffusers.utils.logging", "DIFFUSERS_VERBOSITY")):
        # Importing it logs already (diffusers: "Multiple distributions found for package optimum"): at its first
        # import its level comes from the environment, unless the user set one; afterwards it is its default.
        first = name.split(".")[0] not in sys.modules and variable not in os.environ
        if first:
            os.environ[variable] = "error"
        try:
            loggers.append(importlib.import_module(name))
        except ImportError:  # diffusers is needed for diffusion pipelines only
            continue
        finally:
            if first:
                del os.environ[variable]
        levels.append(logging.WARNING if first else loggers[-1].get_verbosity())
    for lg in loggers:
        lg.set_verbosity_error()
    optimum = logging.getLogger("optimum")  # optimum-intel's own ("Could not infer whether the model was already
    before = optimum.level                   # converted ...", read from a hub cache a local folder never has)
    optimum.setLevel(logging.ERROR)
    try:
        yield
    finally:
        optimum.setLevel(before)
        for lg, level in zip(loggers, levels):
            lg.set_verbosity(level)


@dataclass(frozen=True)
class Slot:
    """Where a component lives in the loaded pipeline: the attribute of the object that holds it, and that
    object's attributes for the component's request and model."""

    holder: str
    request: str = "request"
    model: str = "model"


@dataclass(frozen=True)
class Family:
    """A pipeline family: its optimum-intel class, the component files it needs, in data-flow order, the
    optional ones, what its generate takes, and where each component lives (a component without a slot is
    the attribute of its own name)."""

    name: str
    loader: str
    required: tuple[tuple[str, str], ...]
    optional: tuple[tuple[str, str], ...] = ()
    main_input: str = "input_ids"  # what the pipeline's generate takes: token ids, a speech model's features, ...
    # ("prompt": a diffusion pipeline, called with its prompt, whose result is an image)
    slots: tuple[tuple[str, Slot], ...] = ()

    def slot(self, component: str) -> Slot:
        return dict(self.slots).get(component, Slot(component))

    def missing(self, folder: pathlib.Path) -> list[str]:
        """The component files `folder` lacks (paths relative to it)."""
        return [f for _, f in self.required if not (folder / f).is_file()]


_ENCODER_DECODER = (("encoder", "openvino_encoder_model.xml"), ("decoder", "openvino_decoder_model.xml"))
_WITH_PAST = (("decoder_with_past", "openvino_decoder_with_past_model.xml"),)
FAMILIES = {
    "seq2seq": Family("seq2seq", "OVModelForSeq2SeqLM", _ENCODER_DECODER, _WITH_PAST),
    "speech_seq2seq": Family("speech_seq2seq", "OVModelForSpeechSeq2Seq", _ENCODER_DECODER, _WITH_PAST,
                             main_input="input_features"),
    "visual_causal_lm": Family(
        "visual_causal_lm", "OVModelForVisualCausalLM",
        (("vision_embeddings", "openvino_vision_embeddings_model.xml"),
         ("text_embeddings", "openvino_text_embeddings_model.xml"),
         ("language_model", "openvino_language_model.xml")),
        main_input="pixel_values",
        slots=(("text_embeddings", Slot("language_model", "text_emb_request", "text_emb_model")),)),
    "diffusion": Family("diffusion", "OVDiffusionPipeline",
                        (("text_encoder", "text_encoder/openvino_model.xml"), ("unet", "unet/openvino_model.xml"),
                         ("vae_decoder", "vae_decoder/openvino_model.xml")),
                        main_input="prompt"),
}
# The config's model_type of the vision-language models handled (their inputs are checked: LLaVA's).
VISUAL = ("llava",)
# The diffusion pipelines handled, by model_index.json's _class_name.
DIFFUSION = ("StableDiffusionPipeline",)
# The config's model_type of the speech models handled (their generation is checked: Whisper's own).
SPEECH = ("whisper",)
# Families optimum-intel exports that are not handled yet, by the config's model_type.
NOT_YET = {
    "speech_to_text": "speech seq2seq (OVModelForSpeechSeq2Seq, Speech2Text)",
}


@dataclass(frozen=True)
class Pipeline:
    """A loaded pipeline: its family, the optimum-intel object, its components' models in data-flow order and
    the optimum-intel parts that hold their requests (with the request's attribute name)."""

    family: Family
    source: str
    obj: Any
    models: dict[str, ov.Model]
    parts: dict[str, tuple[Any, str]]
    config: dict

    def requests(self) -> dict[str, Any]:
        """Each component's request as the pipeline holds it now."""
        return {n: getattr(holder, attr) for n, (holder, attr) in self.parts.items()}

    def use(self, requests: dict[str, Any]) -> None:
        """Put `requests` in place of the components' requests."""
        for n, (holder, attr) in self.parts.items():
            setattr(holder, attr, requests[n])


def _supported() -> str:
    return ", ".join(f"{f.name} ({f.loader})" for f in FAMILIES.values())


def family_of(folder: pathlib.Path) -> Family:
    """The family `folder` holds, or an `InputError` that says what was found and what is missing."""
    if not folder.exists():
        raise InputError(f"Pipeline folder not found: '{folder}'.")
    if folder.is_file():
        hint = " It is one model: give it to bisect() (or `bisect-ov MODEL`)." if folder.suffix in (".xml", ".onnx") else ""
        raise InputError(f"'{folder}' is a file, not a pipeline export folder.{hint}")
    files = sorted(p.name for p in folder.iterdir())
    if (folder / "model_index.json").is_file():
        return _diffusion(folder, files)
    config_path = folder / "config.json"
    if not config_path.exists():
        raise InputError(f"'{folder}' has no config.json: not an optimum-intel export folder (found "
                         f"{files[:8] or 'nothing'}). Supported: {_supported()}.")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"'{config_path}' cannot be read as JSON: {e}") from None
    model_type = str(config.get("model_type", ""))
    if model_type in NOT_YET:
        raise InputError(f"'{folder}' holds a {NOT_YET[model_type]} export, not supported yet; supported: {_supported()}.")
    irs = [f for f in files if f.endswith(".xml")]
    if not irs:  # a checkpoint (save_pretrained), not its OpenVINO export
        raise InputError(f"'{folder}' (model_type '{model_type}') holds no OpenVINO IR: export it first, e.g. "
                         f"optimum-cli export openvino --model '{folder}' OUT_FOLDER, and give OUT_FOLDER.")
    if (model_type in VISUAL or "vision_config" in config) and "openvino_vision_embeddings_model.xml" not in irs:
        # an export that stopped after its language model (optimum refused the vision part)
        raise InputError(f"'{folder}' looks like a vision-language export (config.json model_type '{model_type}') but "
                         f"lacks openvino_vision_embeddings_model.xml; it has {irs}: export it again, whole"
                         + ("." if model_type in VISUAL else f" (as a pipeline bisect_ov runs {', '.join(VISUAL)}; give "
                            "one of its models to bisect() meanwhile)."))
    if "openvino_vision_embeddings_model.xml" in irs:
        if model_type not in VISUAL:
            raise InputError(f"'{folder}' holds a vision-language export of model_type '{model_type}', not supported "
                             f"yet (of those: {', '.join(VISUAL)}); supported: {_supported()}.")
        family = FAMILIES["visual_causal_lm"]
        missing = family.missing(folder)
        if missing:
            raise InputError(f"'{folder}' looks like a {family.name} export (config.json model_type '{model_type}') "
                             f"but lacks {missing}; it has {irs}.")
        return family
    if config.get("is_encoder_decoder") or any(f == "openvino_encoder_model.xml" for f in irs):
        family = FAMILIES["speech_seq2seq" if model_type in SPEECH else "seq2seq"]
        missing = family.missing(folder)
        if missing:
            raise InputError(f"'{folder}' looks like a {family.name} export (config.json model_type '{model_type}') "
                             f"but lacks {missing}; it has {irs or 'no IR'}.")
        return family
    models = [f for f in irs if f not in ("openvino_tokenizer.xml", "openvino_detokenizer.xml")]  # text, not model
    if len(models) == 1:
        raise InputError(f"'{folder}' holds one model ({models[0]}"
                         + (f", with {sorted(set(irs) - set(models))}" if len(irs) > 1 else "")
                         + f"), not a pipeline of several: give '{folder / models[0]}' to bisect() (or `bisect-ov "
                         f"{folder / models[0]}`).")
    raise InputError(f"'{folder}' (model_type '{model_type}', IRs {irs or 'none'}) is not a pipeline family "
                     f"bisect_ov knows; supported: {_supported()}.")


def _diffusion(folder: pathlib.Path, files: list[str]) -> Family:
    """The diffusion family, when `folder`'s model_index.json names a pipeline handled and its components exist."""
    try:
        index = json.loads((folder / "model_index.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(f"'{folder / 'model_index.json'}' cannot be read as JSON: {e}") from None
    name = str(index.get("_class_name", "")) if isinstance(index, dict) else ""
    family = FAMILIES["diffusion"]
    if name not in DIFFUSION:
        raise InputError(f"'{folder}' holds a diffusion export of {name or 'an unnamed pipeline'}, not supported yet "
                         f"(of those: {', '.join(DIFFUSION)}); supported: {_supported()}.")
    missing = family.missing(folder)
    if missing:
        raise InputError(f"'{folder}' looks like a {family.name} export ({name}) but lacks {missing}; it has {files}.")
    return family


def open_pipeline(source: Any) -> Pipeline:
    """The pipeline in `source`: an export folder's path, or an optimum-intel pipeline object already loaded."""
    if isinstance(source, (str, os.PathLike)):
        folder = pathlib.Path(source)
        family = family_of(folder)
        try:
            import optimum.intel as oi
        except ImportError:
            raise InputError("Pipelines are loaded with optimum-intel: pip install optimum-intel "
                             "(or, from a checkout, pip install -e '.[zoo]').") from None
        with offline(), quiet(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = getattr(oi, family.loader).from_pretrained(str(folder), compile=False)  # a str: optimum calls str methods on it
        return _components(family, obj, str(folder))
    # The most derived class that is a family's loader decides (Whisper's class derives from both loaders).
    by_loader = {f.loader: f for f in FAMILIES.values()}
    for cls in type(source).__mro__:
        if cls.__name__ in by_loader:
            return _components(by_loader[cls.__name__], source, type(source).__name__)
    raise InputError(f"A pipeline is an optimum-intel export folder or a loaded pipeline object; got "
                     f"{type(source).__name__}. Supported: {_supported()}.")


def _components(family: Family, obj: Any, source: str) -> Pipeline:
    models, parts = {}, {}
    for name, _ in family.required + family.optional:
        slot = family.slot(name)
        holder = getattr(obj, slot.holder, None)
        model = getattr(holder, slot.model, None) if holder is not None else None
        if model is None:
            if (name, _) in family.required:
                raise InputError(f"The {family.loader} from '{source}' has no '{name}' component.")
            continue
        parts[name] = (holder, slot.request)
        models[name] = model
    config = (obj.config.to_dict() if hasattr(obj.config, "to_dict")
              else dict(obj.config) if isinstance(getattr(obj, "config", None), Mapping) else {})
    return Pipeline(family, source, obj, models, parts, config)
