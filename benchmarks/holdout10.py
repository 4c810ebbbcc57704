"""A tenth held-out set for the needle benchmark, built after the unfaithful-tap localization took twins (target pieces
cut from the twin) and measured once: architectures in none of the zoo, needle_bench's OUTSIDE set or the first nine
held-out sets.

Built and exported exactly as `holdout.py` builds its entries (the same sizes, seeds, export paths ``@trace``,
``@export`` and ``@onnx``, static shapes; entries whose export fails are in `LEFT_OUT10`), into
``<cache>/<zoo version key>/needle-holdout10-v<HOLDOUT10_BUILD>``.

Architectures: transformers XGLM (sinusoidal positions, scaled embeddings), BioGPT (learned positions), CodeGen
(rotary on part of each head, queries, keys and values from one projection in four groups) and LFM2 (short gated
convolutions between attention layers) (decoders), DeBERTa (disentangled relative attention, the first version)
(encoder); timm MViTv2-Tiny (pooling attention with relative positions), Twins-SVT-Small (locally grouped and
global sub-sampled attention), gMLP-S16 (spatial gating), ResMLP-12 (affine normalization) and BoTNet-26t (a
ResNet whose last stage is self-attention), and SelecSLS-42b (a CNN of concatenated stages), at 64x64 images.

    python benchmarks/holdout10.py            # build every entry and list it
    python benchmarks/needle_bench.py --models --holdout10 NAME --target CPU ...
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import holdout  # noqa: E402
from holdout6 import _decoder, _encoder  # noqa: E402

HOLDOUT10_BUILD = 1
_timm = holdout._timm  # timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)


def _xglm():
    import transformers

    config = transformers.XGLMConfig(d_model=64, num_layers=2, attention_heads=4, ffn_dim=128, vocab_size=holdout.VOCAB,
                                     max_position_embeddings=256, use_cache=False, pad_token_id=0)
    return transformers.XGLMForCausalLM(config)


def _codegen():
    import transformers

    config = transformers.CodeGenConfig(n_embd=64, n_layer=2, n_head=4, n_inner=128, rotary_dim=8, n_positions=256,
                                        n_ctx=256, vocab_size=holdout.VOCAB, use_cache=False)
    return transformers.CodeGenForCausalLM(config)


# name -> (library and class, the output kept or "image", factory), as `holdout.ARCHITECTURES`
ARCHITECTURES: dict[str, tuple[str, str, Callable[[], Any]]] = {
    "xglm": ("transformers XGLMForCausalLM", "logits", _xglm),
    "biogpt": ("transformers BioGptForCausalLM", "logits",
               functools.partial(_decoder, "BioGptConfig", "BioGptForCausalLM", pad_token_id=0)),
    "codegen": ("transformers CodeGenForCausalLM", "logits", _codegen),
    "lfm2": ("transformers Lfm2ForCausalLM", "logits",
             functools.partial(_decoder, "Lfm2Config", "Lfm2ForCausalLM", num_key_value_heads=2, pad_token_id=0,
                               layer_types=["conv", "full_attention"])),
    "deberta": ("transformers DebertaModel", "last_hidden_state",
                functools.partial(_encoder, "DebertaConfig", "DebertaModel", relative_attention=True,
                                  pos_att_type=["c2p", "p2c"], max_relative_positions=64)),
    "mvitv2": ("timm MViTv2-Tiny", "image", functools.partial(_timm, "mvitv2_tiny", img_size=64)),
    "twins": ("timm Twins-SVT-Small", "image", functools.partial(_timm, "twins_svt_small", img_size=64)),
    "gmlp": ("timm gMLP-S16", "image", functools.partial(_timm, "gmlp_s16_224", img_size=64)),
    "resmlp": ("timm ResMLP-12", "image", functools.partial(_timm, "resmlp_12_224", img_size=64)),
    "botnet": ("timm BoTNet-26t", "image", functools.partial(_timm, "botnet26t_256", img_size=64)),
    "selecsls": ("timm SelecSLS-42b", "image", functools.partial(_timm, "selecsls42b")),
}

# Entries that cannot be built, and why (as `holdout.LEFT_OUT`)
LEFT_OUT10: dict[str, str] = {}

HOLDOUT10: dict[str, tuple[str, Callable[[], tuple[Any, dict]]]] = holdout.entries(ARCHITECTURES, LEFT_OUT10)


# An entry of `HOLDOUT10` as (`ov.Model`, meta), built once; `main` builds every entry (or those named), runs each
# once and lists it (`holdout.main`).
load_holdout10 = holdout.loader(f"needle-holdout10-v{HOLDOUT10_BUILD}", HOLDOUT10)
main = functools.partial(holdout.main, table=HOLDOUT10, load=load_holdout10)


if __name__ == "__main__":
    sys.exit(main())
