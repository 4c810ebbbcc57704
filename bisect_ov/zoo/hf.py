"""Hugging Face `transformers` architectures with random weights, converted as users convert them.

Each builder makes the library's own model class from a config (no weights are downloaded: the library's
random initialisation, seeded with `torch.manual_seed`) and converts it to an `ov.Model`:

* `bert` (encoder, ``BertModel``), `bert_large` (24 layers in full size), `vit` (``ViTModel``) and
  `whisper_encoder` (``WhisperEncoder``): ``ov.convert_model(model, example_input=...)`` where tracing works;
* `gpt2` (``GPT2LMHeadModel``, learned positions) and `llama` (``LlamaForCausalLM``: RMSNorm, rotary
  embeddings, grouped-query attention, SiLU MLP): tracing fails in current ``transformers`` (cache objects as
  outputs, mask helpers that index empty tuples), so a wrapper that returns the plain logits tensor goes
  through ``torch.export.export`` with a dynamic sequence length, then ``ov.convert_model``. BERT takes the
  same route when tracing fails, as it does with ``transformers`` 5.5.

``size="small"`` is a test configuration (2 layers, width 64, a 1,000-token vocabulary); ``size="full"`` the
published architecture's sizes (BERT-base, BERT-large, GPT-2 124M, ViT-B/16, Whisper-base's encoder; Llama is a
12-layer, 768-wide model with 4 key/value heads and a 32,000-token vocabulary, large enough to benchmark and
small enough for a shared machine). Every builder returns the converted model and its input description
(`Meta`), from which `bisect_ov.zoo.cache.sample_inputs` makes matching inputs.

Assumptions: torch and transformers are installed (the ``zoo`` extra); they are imported only when a builder
runs. Batch and sequence dimensions stay dynamic, as the converters leave them.
"""

from __future__ import annotations

import warnings
from typing import Any

import openvino as ov

__all__ = ["BUILDERS", "bert", "bert_large", "gpt2", "llama", "llama_config", "vit", "vit_module", "whisper_encoder",
           "export_plain", "plain_module"]

# Layers, width, heads, MLP width, vocabulary; the sequence length of the sample inputs.
_BERT = {
    "small": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
              "vocab_size": 1000},
    "full": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072,
             "vocab_size": 30522},
}
_BERT_LARGE = {
    "small": {"num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 256,
              "vocab_size": 1000},
    "full": {"num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16, "intermediate_size": 4096,
             "vocab_size": 30522},
}
_GPT2 = {
    "small": {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 1000},
    "full": {"n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257},
}
_LLAMA = {
    "small": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 128, "vocab_size": 1000},
    "full": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "num_key_value_heads": 4,
             "intermediate_size": 2048, "vocab_size": 32000},
}
_VIT = {
    "small": {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128,
              "image_size": 32, "patch_size": 8},
    "full": {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072,
             "image_size": 224, "patch_size": 16},
}
# Whisper checks that the mel frames are twice its source positions.
_WHISPER = {
    "small": {"encoder_layers": 2, "d_model": 64, "encoder_attention_heads": 4, "encoder_ffn_dim": 128,
              "max_source_positions": 50},
    "full": {"encoder_layers": 6, "d_model": 512, "encoder_attention_heads": 8, "encoder_ffn_dim": 2048,
             "max_source_positions": 1500},
}
SEQ_LEN = {"small": 16, "full": 128}
MAX_POSITIONS = 512

# {"inputs": {name: {"shape": [...], "vocab": V}}, "converter": how it was converted}; "vocab" for token ids.
Meta = dict
# The configs' call-arg ignores: transformers 5 makes each config class a dataclass of its fields at run time
# (`__init_subclass__`), so mypy sees only `PreTrainedConfig.__init__`'s few keywords; 4.x declares them all.


def _torch():
    from bisect_ov.zoo import require_zoo

    require_zoo("The zoo's real architectures", "torch")
    import torch

    return torch


def _size(table: dict, size: str) -> dict:
    if size not in table:
        from bisect_ov.core.errors import InputError

        raise InputError(f"Unknown zoo size '{size}'. Available: {sorted(table)}.")
    return table[size]


def _token_example(vocab: int, seq: int):
    torch = _torch()
    ids = torch.randint(0, vocab, (1, seq), generator=torch.Generator().manual_seed(1))
    return ids, torch.ones(1, seq, dtype=torch.int64)


def _token_meta(vocab: int, seq: int, converter: str) -> Meta:
    return {"inputs": {"input_ids": {"shape": [1, seq], "vocab": vocab}, "attention_mask": {"shape": [1, seq]}},
            "converter": converter}


class _Plain:
    """Wraps a transformers model so its forward returns one plain tensor (what torch.export needs)."""

    @staticmethod
    def make(model, key: str):
        import torch  # by name, not `_torch()`: mypy resolves a base class only through a module name

        class Plain(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask):
                out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, return_dict=True)
                return out[key]

        return Plain().eval()


def export_plain(model, key: str, example: tuple, max_length: int = MAX_POSITIONS) -> ov.Model:
    """torch.export with a dynamic sequence length (up to `max_length`), then ov.convert_model: how users get
    past failed tracing."""
    torch = _torch()
    seq = torch.export.Dim("seq", min=2, max=max_length)
    with torch.no_grad():
        program = torch.export.export(_Plain.make(model, key), example, dynamic_shapes=({1: seq}, {1: seq}))
    return ov.convert_model(program)


def _convert_tokens(model, key: str, vocab: int, size: str, *, trace: bool) -> tuple[ov.Model, Meta]:
    seq = SEQ_LEN[size]
    example = _token_example(vocab, seq)
    converted = None
    if trace:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                converted = ov.convert_model(model, example_input={"input_ids": example[0],
                                                                   "attention_mask": example[1]})
        except Exception:  # noqa: BLE001 - tracing fails in ways that depend on the transformers version
            converted = None
    if converted is not None:
        return converted, _token_meta(vocab, seq, "ov.convert_model(example_input=...)")
    return export_plain(model, key, example), _token_meta(vocab, seq, "torch.export.export + ov.convert_model")


def _bert_model(config_kwargs: dict, seed: int) -> Any:
    import transformers

    _torch().manual_seed(seed)
    config = transformers.BertConfig(  # type: ignore[call-arg, unused-ignore]  # transformers 5 (note at Meta)
        max_position_embeddings=MAX_POSITIONS, **config_kwargs)
    return transformers.BertModel(config, add_pooling_layer=False).eval()


def _gpt2_model(size: str, seed: int) -> Any:
    import transformers

    _torch().manual_seed(seed)
    config = transformers.GPT2Config(  # type: ignore[call-arg, unused-ignore]  # transformers 5 (note at Meta)
        n_positions=MAX_POSITIONS, use_cache=False, **_size(_GPT2, size))
    return transformers.GPT2LMHeadModel(config).eval()


def _encoder(config_kwargs: dict, size: str, seed: int) -> tuple[ov.Model, Meta]:
    model = _bert_model(config_kwargs, seed)
    return _convert_tokens(model, "last_hidden_state", model.config.vocab_size, size, trace=True)


def plain_module(kind: str, size: str = "small", seed: int = 0) -> Any:
    """The zoo's ``bert``, ``gpt2`` or ``llama`` as the torch module the zoo converts: token ids and an attention
    mask in, one tensor out (the last hidden state, or the logits), seeded random weights."""
    if kind == "bert":
        return _Plain.make(_bert_model(_size(_BERT, size), seed), "last_hidden_state")
    if kind == "gpt2":
        return _Plain.make(_gpt2_model(size, seed), "logits")
    if kind == "llama":
        model = llama_model(size, seed)
        model.config.use_cache = False
        return _Plain.make(model, "logits")
    raise ValueError(f"plain_module: unknown kind {kind!r} (bert, gpt2, llama)")


def bert(size: str = "small", seed: int = 0) -> tuple[ov.Model, Meta]:
    """BERT encoder (``BertModel``, no pooler): inputs ``input_ids``, ``attention_mask``."""
    return _encoder(_size(_BERT, size), size, seed)


def bert_large(size: str = "small", seed: int = 0) -> tuple[ov.Model, Meta]:
    """BERT-large's shape (24 layers, width 1024) in full size; 4 narrow layers in small size."""
    return _encoder(_size(_BERT_LARGE, size), size, seed)


def gpt2(size: str = "small", seed: int = 0) -> tuple[ov.Model, Meta]:
    """GPT-2 with its LM head (``GPT2LMHeadModel``), through torch.export; output: logits."""
    model = _gpt2_model(size, seed)
    return _convert_tokens(model, "logits", model.config.vocab_size, size, trace=False)


def llama_config(size: str = "small") -> Any:
    """The ``LlamaConfig`` of the zoo's Llama (shared with the optimum-intel export)."""
    import transformers

    return transformers.LlamaConfig(  # type: ignore[call-arg, unused-ignore]  # transformers 5 (note at Meta)
        max_position_embeddings=MAX_POSITIONS, **_size(_LLAMA, size))


def llama_model(size: str = "small", seed: int = 0) -> Any:
    """The random-init ``LlamaForCausalLM`` itself (torch), seeded."""
    import transformers

    _torch().manual_seed(seed)
    return transformers.LlamaForCausalLM(llama_config(size)).eval()


def llama(size: str = "small", seed: int = 0) -> tuple[ov.Model, Meta]:
    """Llama (``LlamaForCausalLM``: RMSNorm, rotary, GQA, SiLU MLP), through torch.export; output: logits."""
    model = llama_model(size, seed)
    model.config.use_cache = False
    return _convert_tokens(model, "logits", model.config.vocab_size, size, trace=False)


def vit_module(size: str = "small", seed: int = 0) -> Any:
    """The random-init ``ViTModel`` itself (torch, eval mode), seeded: the module `vit` converts."""
    import transformers

    _torch().manual_seed(seed)
    config = transformers.ViTConfig(**_size(_VIT, size))
    return transformers.ViTModel(config, add_pooling_layer=False).eval()


def vit(size: str = "small", seed: int = 0) -> tuple[ov.Model, Meta]:
    """Vision transformer (``ViTModel``, no pooler), traced; input ``pixel_values`` [1, 3, H, W]."""
    torch = _torch()
    model = vit_module(size, seed)
    config = model.config
    shape = [1, 3, config.image_size, config.image_size]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converted = ov.convert_model(model, example_input=torch.randn(*shape))
    return converted, {"inputs": {"pixel_values": {"shape": shape}}, "converter": "ov.convert_model(example_input=...)"}


def whisper_encoder(size: str = "small", seed: int = 0) -> tuple[ov.Model, Meta]:
    """Whisper's speech encoder (``WhisperEncoder``), traced; input ``input_features`` [1, 80, frames]."""
    import transformers
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch = _torch()
    torch.manual_seed(seed)
    config = transformers.WhisperConfig(  # type: ignore[call-arg, unused-ignore]  # transformers 5 (note at Meta)
        num_mel_bins=80, **_size(_WHISPER, size))
    model = WhisperEncoder(config).eval()
    shape = [1, 80, 2 * config.max_source_positions]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converted = ov.convert_model(model, example_input=torch.randn(*shape))
    return converted, {"inputs": {"input_features": {"shape": shape}},
                       "converter": "ov.convert_model(example_input=...)"}


BUILDERS = {"bert": bert, "bert_large": bert_large, "gpt2": gpt2, "llama": llama, "vit": vit,
            "whisper_encoder": whisper_encoder}
