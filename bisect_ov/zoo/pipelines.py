"""Pipelines of models exported with optimum-intel from random-init configs, as export folders users hand over.

`folder("t5")` returns an ``OVModelForSeq2SeqLM`` export folder of a tiny T5 (two encoder layers, three decoder
layers, a gated-GELU FFN): ``openvino_encoder_model.xml``, a stateful ``openvino_decoder_model.xml``,
``config.json``, ``generation_config.json`` and a word-level tokenizer built in code (so prompts work; nothing
is downloaded). ``"t5-overflow"`` is the same T5 with its first encoder FFN's output projection (``wo``)
scaled so that the next norm's ``x*x`` passes f16's largest value (65,504), as in T5 checkpoints that overflow
in f16 (the hidden states stay finite in f32). ``"whisper"`` is an ``OVModelForSpeechSeq2Seq`` export of a tiny
Whisper (two encoder and two decoder layers, 16 mel bins, Whisper's 1,500 encoder positions: its input features
are ``[1, 16, 3000]``, 30 s of audio), driven by Whisper's own ``generate``. ``"llava"`` is an
``OVModelForVisualCausalLM`` export of a tiny LLaVA (a two-layer CLIP vision tower on 32x32 images in 8x8 patches,
a two-layer Llama; image token 127): ``vision_embeddings``, ``text_embeddings``, a stateful ``language_model``.
``"sd"`` is an ``OVStableDiffusionPipeline`` export of a tiny Stable Diffusion (a two-layer CLIP text encoder with
a byte-level tokenizer, a two-block UNet on 8x8 latents, a two-block VAE: 16x16 images, DDIM): ``text_encoder``,
``unet``, ``vae_decoder`` (and ``vae_encoder``, which text-to-image does not call); it needs diffusers.

Each folder is built once into the zoo's cache (`zoo.cache.cache_root()` / `version_key()` / ``pipelines``),
under a file lock, into a temporary folder renamed into place when complete.

Assumptions: the ``zoo`` extra (torch, transformers, optimum-intel, diffusers).
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import tempfile
import warnings
from typing import Any

from bisect_ov.core.errors import InputError
from bisect_ov.core.extras import hub_offline
from bisect_ov.zoo import cache

__all__ = ["PIPELINES", "folder", "t5_config", "whisper_config", "llava_config", "stable_diffusion"]

WORDS = ("the", "a", "cat", "dog", "sat", "on", "mat", "ran", "to", "house", "red", "blue", "big", "small", "and",
         "is", "was", "in", "green", "tree", "translate", "english", "german", "summarize", ":", ".")


def t5_config():
    from transformers import T5Config

    return T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=3, num_heads=4,
                    decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, feed_forward_proj="gated-gelu",
                    tie_word_embeddings=False)


def _t5(overflow: bool):
    import torch
    from transformers import T5ForConditionalGeneration

    torch.manual_seed(0)
    model = T5ForConditionalGeneration(t5_config()).eval()
    if overflow:
        with torch.no_grad():
            model.encoder.block[0].layer[1].DenseReluDense.wo.weight.mul_(2000.0)
    return model


def whisper_config():
    from transformers import WhisperConfig

    return WhisperConfig(vocab_size=96, num_mel_bins=16, d_model=32, encoder_layers=2, decoder_layers=2,
                         encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                         decoder_ffn_dim=64, max_source_positions=1500, max_target_positions=64,
                         decoder_start_token_id=2, bos_token_id=1, eos_token_id=1, pad_token_id=0,
                         begin_suppress_tokens=None, suppress_tokens=None)


def _whisper():
    import torch
    from transformers import WhisperForConditionalGeneration

    torch.manual_seed(0)
    return WhisperForConditionalGeneration(whisper_config()).eval()


def llava_config():
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig

    vision = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              image_size=32, patch_size=8, projection_dim=32)
    text = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, max_position_embeddings=128)
    return LlavaConfig(vision_config=vision, text_config=text, image_token_index=127, vision_feature_layer=-1,
                       vision_feature_select_strategy="default", pad_token_id=0)


def _llava():
    import torch
    from transformers import LlavaForConditionalGeneration

    torch.manual_seed(0)
    return LlavaForConditionalGeneration(llava_config()).eval()


def _byte_tokenizer(folder: pathlib.Path):
    """A CLIP tokenizer whose vocabulary is the 256 byte characters (alone and ending a word) and the two
    special tokens, with no merges: every character is a token."""
    import json

    from transformers import CLIPTokenizer

    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = [chr(b) for b in printable] + [chr(256 + n) for n in range(256 - len(printable))]
    tokens = chars + [c + "</w>" for c in chars] + ["<|startoftext|>", "<|endoftext|>"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    return CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), model_max_length=32)


def stable_diffusion(tmp: pathlib.Path):
    """The tiny Stable Diffusion pipeline (diffusers, random init), its tokenizer's files written under `tmp`."""
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(block_out_channels=(32, 64), layers_per_block=1, sample_size=8, in_channels=4,
                                out_channels=4, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=32,
                                norm_num_groups=8, attention_head_dim=8)
    vae = AutoencoderKL(block_out_channels=(32, 64), in_channels=3, out_channels=3, latent_channels=4,
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        norm_num_groups=8, sample_size=16)
    tokenizer = _byte_tokenizer(tmp / "tokenizer_files")
    vocab = tokenizer.get_vocab()
    settings: dict[str, Any] = dict(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, max_position_embeddings=32,
                                    bos_token_id=vocab["<|startoftext|>"], eos_token_id=vocab["<|endoftext|>"],
                                    pad_token_id=vocab["<|endoftext|>"])
    text = CLIPTextModel(CLIPTextConfig(**settings))
    return StableDiffusionPipeline(vae=vae, text_encoder=text, tokenizer=tokenizer, unet=unet,
                                   scheduler=DDIMScheduler(), safety_checker=None, feature_extractor=None,
                                   requires_safety_checker=False)


def _export_diffusion(out: pathlib.Path) -> None:
    with tempfile.TemporaryDirectory(prefix="bisect_ov_sd_") as tmp:
        stable_diffusion(pathlib.Path(tmp)).save_pretrained(pathlib.Path(tmp) / "pipeline")
        from optimum.intel import OVStableDiffusionPipeline

        with hub_offline(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exported = OVStableDiffusionPipeline.from_pretrained(pathlib.Path(tmp) / "pipeline", export=True,
                                                                 compile=False)
            exported.save_pretrained(out)


def _tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


def _export(model, out: pathlib.Path, loader: str = "OVModelForSeq2SeqLM", tokenizer: bool = True) -> None:
    """`model` saved, exported with optimum-intel's `loader` into `out` (and the word-level tokenizer, with `tokenizer`)."""
    with tempfile.TemporaryDirectory(prefix="bisect_ov_hf_") as tmp:
        model.save_pretrained(tmp)
        import optimum.intel

        with hub_offline(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exported = getattr(optimum.intel, loader).from_pretrained(tmp, export=True, compile=False,
                                                                      load_in_8bit=False)
            exported.save_pretrained(out)
    if tokenizer:
        _tokenizer().save_pretrained(out)


PIPELINES = {"t5": lambda out: _export(_t5(False), out),
             "t5-overflow": lambda out: _export(_t5(True), out),
             "whisper": lambda out: _export(_whisper(), out, "OVModelForSpeechSeq2Seq", tokenizer=False),
             "llava": lambda out: _export(_llava(), out, "OVModelForVisualCausalLM", tokenizer=False),
             "sd": _export_diffusion}


# What a pipeline needs beyond the zoo's packages (they do not key the cache: the other builds do not use them).
NEEDS = {"sd": ("diffusers",)}


def _built(out: pathlib.Path) -> bool:
    """Whether `out` holds a finished export (folders are renamed into place only when complete)."""
    return (out / "config.json").is_file() or (out / "model_index.json").is_file()


def folder(name: str, *, root: str | os.PathLike | None = None) -> pathlib.Path:
    """The export folder of pipeline `name` (a key of `PIPELINES`), built the first time."""
    if name not in PIPELINES:
        raise InputError(f"Unknown zoo pipeline '{name}'. Available: {sorted(PIPELINES)}.")
    base = pathlib.Path(root) if root is not None else cache.cache_root() / cache.version_key()
    out = base / "pipelines" / name
    if _built(out):
        return out
    missing = cache.missing_packages() + [m for m in NEEDS.get(name, ()) if importlib.util.find_spec(m) is None]
    if missing:
        raise InputError(f"Zoo pipeline '{name}' is not built in {base} and building it needs {missing}.")
    out.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(out.parent / f"{name}.lock")):
        if not _built(out):
            tmp = pathlib.Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{name}-"))
            try:
                PIPELINES[name](tmp / "export")
                os.replace(tmp / "export", out)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return out
