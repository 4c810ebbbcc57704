"""LLM cases built from the zoo's Llama: "massive activations" that overflow f16 in every layer's RMSNorm.

Trained LLMs carry a few hidden channels whose activations reach 1e3-1e5 (the "massive activations" of
Sun et al., 2024); random-init models do not. `massive_llama` makes them: a random-init ``LlamaForCausalLM``
(`bisect_ov.zoo.hf.llama_config`, with `layers` layers) whose embedding table is scaled in a few channels so
that the residual stream holds values near `peak` in those channels in every layer. In f32 the RMSNorms handle
them; in f16, ``x.pow(2)`` of values above 256 is beyond 65,504 and becomes inf, and the norm's output is lost
in every layer. The model is exported by optimum-intel, as users export LLMs (the stateful IR, with module
names such as ``__module.model.layers.3.input_layernorm/aten::pow/Power``).

Built once per library versions into ``<zoo cache>/<version key>/llm_cases/`` (`bisect_ov.zoo.cache`), as IR
with f32 weights. Assumptions: the ``zoo`` extra (torch, transformers, optimum-intel) is installed to build;
reading a built case needs only OpenVINO. Nothing is downloaded.
"""

from __future__ import annotations

import os
import pathlib
import tempfile

import openvino as ov

from bisect_ov.zoo import cache, hf, require_zoo
from bisect_ov.zoo.optimum import export_pretrained

__all__ = ["massive_llama", "deep_llama", "llama_1b", "MASSIVE_CHANNELS", "DEEP", "ONE_B"]

# A full-depth decoder for the benchmark: 24 layers (as many 1-3B LLMs), narrow enough for a shared machine.
DEEP = dict(num_hidden_layers=24, hidden_size=512, num_attention_heads=8, num_key_value_heads=4,
            intermediate_size=1408, vocab_size=32000)

# A 1B-class decoder, the shape of TinyLlama-1.1B: 22 layers of width 2048, 32 query and 4 key-value heads of
# 64, a 5,632-wide MLP, 32,000 tokens, positions up to 2,048 (1.1 billion parameters; 4.4 GB in f32).
ONE_B = dict(num_hidden_layers=22, hidden_size=2048, num_attention_heads=32, num_key_value_heads=4, head_dim=64,
             intermediate_size=5632, vocab_size=32000, max_position_embeddings=2048)
ONE_B_WEIGHTS = ("f32", "int8", "int4")  # int4: symmetric, groups of 128

MASSIVE_CHANNELS = (7, 41)  # hidden channels that carry the massive activations


def _build(layers: int, peak: float | None, seed: int, path: pathlib.Path, **config_kwargs) -> None:
    require_zoo("Building the zoo's Llama (a transformers model exported by optimum-intel)", "torch", "transformers",
                "optimum.intel")
    import torch
    import transformers

    torch.manual_seed(seed)
    config = hf.llama_config("small")
    config.num_hidden_layers = layers
    for key, value in config_kwargs.items():
        setattr(config, key, value)
    model = transformers.LlamaForCausalLM(config).eval()
    table = model.model.embed_tokens.weight
    if peak is not None:
        for channel in MASSIVE_CHANNELS:
            # Every token's value in this channel near +-peak: the residual stream keeps it through each layer.
            with torch.no_grad():
                sign = torch.sign(table[:, channel]).clamp(min=0) * 2 - 1
                table[:, channel] = sign * peak * (0.8 + 0.2 * torch.rand(table.shape[0]))
    with tempfile.TemporaryDirectory(prefix="bisect_ov_massive_") as tmp:
        _save(ov.Core().read_model(export_pretrained(model, pathlib.Path(tmp))), path)


def _save(model: ov.Model, path: pathlib.Path) -> None:
    """Save `model` as IR with f32 weights at `path`, under a temporary name first, the .xml moved last: a
    reader (another test worker) sees the model complete or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.stem}-{os.getpid()}.xml")
    ov.save_model(model, str(partial), compress_to_fp16=False)
    os.replace(partial.with_suffix(".bin"), path.with_suffix(".bin"))
    os.replace(partial, path)  # the .xml last: it says the model is complete


def massive_llama(layers: int = 4, peak: float = 400.0, seed: int = 0) -> ov.Model:
    """The optimum-intel export of a small Llama whose activations reach about `peak` in a few channels.

    Parameters
    ----------
    layers
        Decoder layers (each has two RMSNorms that overflow in f16, plus the final norm).
    peak
        Magnitude of the massive activations; above 256, their square is beyond f16's 65,504.
    seed
        Seed of the random initialisation.
    """
    path = cache.cache_root() / cache.version_key() / "llm_cases" / f"massive_llama-{layers}-{peak:g}-{seed}.xml"
    if not path.is_file():
        _build(layers, peak, seed, path)
    return ov.Core().read_model(path)


def deep_llama(seed: int = 0) -> ov.Model:
    """The optimum-intel export of a 24-layer random-init Llama (`DEEP`), for the benchmark of the default job."""
    path = cache.cache_root() / cache.version_key() / "llm_cases" / f"deep_llama-{seed}.xml"
    if not path.is_file():
        _build(DEEP["num_hidden_layers"], None, seed, path, **{k: v for k, v in DEEP.items()
                                                                if k != "num_hidden_layers"})
    return ov.Core().read_model(path)


def llama_1b(weights: str = "f32", seed: int = 0) -> ov.Model:
    """The optimum-intel stateful export of a random-init 1B-class Llama (`ONE_B`), with f32 weights or
    compressed by ``nncf.compress_weights`` (``"int8"``: asymmetric per channel; ``"int4"``: symmetric, groups
    of 128). Built once into the zoo cache (minutes, and about 10 GB of memory for the f32 build)."""
    if weights not in ONE_B_WEIGHTS:
        from bisect_ov.core.errors import InputError

        raise InputError(f"weights must be one of {ONE_B_WEIGHTS}; got {weights!r}.")
    folder = cache.cache_root() / cache.version_key() / "llm_cases"
    base = folder / f"llama_1b-{seed}.xml"
    if not base.is_file():
        _build(ONE_B["num_hidden_layers"], None, seed, base, **{k: v for k, v in ONE_B.items()
                                                               if k != "num_hidden_layers"})
    if weights == "f32":
        return ov.Core().read_model(base)
    path = folder / f"llama_1b-{seed}-{weights}.xml"
    if not path.is_file():
        from bisect_ov.zoo.twins import compress_weights

        _save(compress_weights(ov.Core().read_model(base), 8 if weights == "int8" else 4,
                               group_size=128 if weights == "int4" else None), path)
    return ov.Core().read_model(path)
