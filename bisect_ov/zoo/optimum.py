"""The stateful LLM IR that optimum-intel exports, from a random-init Llama saved with ``save_pretrained``.

`llama_stateful` saves the zoo's Llama (`bisect_ov.zoo.hf.llama_model`) to a temporary folder, then exports it
the way users do, ``OVModelForCausalLM.from_pretrained(folder, export=True)``, and returns the IR that
OpenVINO GenAI runs: KV-cache variables (ReadValue/Assign pairs, one per layer and per key/value) and the
inputs ``input_ids``, ``attention_mask``, ``position_ids`` and ``beam_idx``; output ``logits``.

Assumptions: optimum-intel, transformers and torch are installed (the ``zoo`` extra). Nothing is fetched:
the hub is switched off (``HF_HUB_OFFLINE``) for the export and no tokenizer is needed or saved.
"""

from __future__ import annotations

import pathlib
import tempfile
import warnings

import openvino as ov

from bisect_ov.core.extras import hub_offline
from bisect_ov.zoo import hf

__all__ = ["BUILDERS", "export_folder", "export_pretrained", "llama_stateful"]


def export_folder(size: str, folder: pathlib.Path, seed: int = 0) -> pathlib.Path:
    """Save the random-init Llama to `folder`/hf and its optimum-intel export to `folder`/ov; the IR's path."""
    return export_pretrained(hf.llama_model(size, seed), folder)


def export_pretrained(model, folder: pathlib.Path) -> pathlib.Path:
    """Save a transformers causal LM to `folder`/hf and export it with optimum-intel, hub switched off, to
    `folder`/ov, as users do (``OVModelForCausalLM.from_pretrained(dir, export=True)``); the IR's path."""
    folder = pathlib.Path(folder)
    source, exported = folder / "hf", folder / "ov"
    model.save_pretrained(source)
    from optimum.intel import OVModelForCausalLM

    with hub_offline(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = OVModelForCausalLM.from_pretrained(source, export=True, compile=False, load_in_8bit=False)
        model.save_pretrained(exported)
    return exported / "openvino_model.xml"


def llama_stateful(size: str = "small", seed: int = 0) -> tuple[ov.Model, dict]:
    """The optimum-intel stateful export of the zoo's Llama, read back into memory, and its input description."""
    config = hf.llama_config(size)
    seq = hf.SEQ_LEN[size]
    with tempfile.TemporaryDirectory(prefix="bisect_ov_optimum_") as tmp:
        model = ov.Core().read_model(export_folder(size, pathlib.Path(tmp), seed))
        # Weights must not stay tied to files about to be deleted.
        model = model.clone()
    inputs = {"input_ids": {"shape": [1, seq], "vocab": config.vocab_size}, "attention_mask": {"shape": [1, seq]},
              "position_ids": {"shape": [1, seq]}, "beam_idx": {"shape": [1]}}
    meta = {"inputs": inputs, "converter": "optimum-intel OVModelForCausalLM.from_pretrained(export=True)"}
    return model, meta


BUILDERS = {"llama_stateful": llama_stateful}
