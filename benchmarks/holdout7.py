"""A seventh held-out set for the needle benchmark, built after the judge's concentrated-error test against each
element's own size (`TensorStats.max_elem_rel`) was written, and measured once: architectures in none of the zoo,
needle_bench's OUTSIDE set or the first six held-out sets.

Built and exported exactly as `holdout.py` builds its entries (the same sizes, seeds, export paths ``@trace``,
``@export`` and ``@onnx``, static shapes; entries whose export fails are in `LEFT_OUT7`), into
``<cache>/<zoo version key>/needle-holdout7-v<HOLDOUT7_BUILD>``.

Architectures: transformers Granite (scaled embeddings, residuals, attention and logits) and StarCoder2 (LayerNorm
with bias, GELU MLP) (decoders), Megatron-BERT (pre-norm) and RemBERT (decoupled input embeddings) (encoders);
timm PVT-v2-B0 (spatial-reduction attention, depthwise convolution in the MLP), DaViT-Tiny (window and channel
attention), MobileViTv2-0.5 (separable linear attention), MambaOut-Femto (gated convolution blocks) and
GhostNetV2-1.0 (decoupled fully connected attention) and FasterNet-T0 (partial convolution on a slice of the
channels).

    python benchmarks/holdout7.py            # build every entry and list it
    python benchmarks/needle_bench.py --models --holdout7 NAME --target EMU:f16 ...
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import holdout  # noqa: E402
from holdout6 import _decoder, _encoder  # noqa: E402

HOLDOUT7_BUILD = 1
_timm = holdout._timm  # timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)


# name -> (library and class, the output kept or "image", factory), as `holdout.ARCHITECTURES`
ARCHITECTURES: dict[str, tuple[str, str, Callable[[], Any]]] = {
    "granite": ("transformers GraniteForCausalLM", "logits",
                functools.partial(_decoder, "GraniteConfig", "GraniteForCausalLM", num_key_value_heads=2,
                                  embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.0078125,
                                  logits_scaling=8.0, pad_token_id=0)),
    "starcoder2": ("transformers Starcoder2ForCausalLM", "logits",
                   functools.partial(_decoder, "Starcoder2Config", "Starcoder2ForCausalLM", num_key_value_heads=2,
                                     pad_token_id=0)),
    "megatron_bert": ("transformers MegatronBertModel", "last_hidden_state",
                      functools.partial(_encoder, "MegatronBertConfig", "MegatronBertModel")),
    "rembert": ("transformers RemBertModel", "last_hidden_state",
                functools.partial(_encoder, "RemBertConfig", "RemBertModel", input_embedding_size=32,
                                  output_embedding_size=64, pad_token_id=0)),
    "pvt_v2": ("timm PVT-v2-B0", "image", functools.partial(_timm, "pvt_v2_b0")),
    "davit": ("timm DaViT-Tiny", "image", functools.partial(_timm, "davit_tiny")),
    "mobilevitv2": ("timm MobileViTv2-0.5", "image", functools.partial(_timm, "mobilevitv2_050")),
    "mambaout": ("timm MambaOut-Femto", "image", functools.partial(_timm, "mambaout_femto")),
    "ghostnetv2": ("timm GhostNetV2-1.0", "image", functools.partial(_timm, "ghostnetv2_100")),
    "fasternet": ("timm FasterNet-T0", "image", functools.partial(_timm, "fasternet_t0")),
}

# Entries that cannot be built, and why (as `holdout.LEFT_OUT`)
LEFT_OUT7: dict[str, str] = {}

HOLDOUT7: dict[str, tuple[str, Callable[[], tuple[Any, dict]]]] = holdout.entries(ARCHITECTURES, LEFT_OUT7)


# An entry of `HOLDOUT7` as (`ov.Model`, meta), built once; `main` builds every entry (or those named), runs each
# once and lists it (`holdout.main`).
load_holdout7 = holdout.loader(f"needle-holdout7-v{HOLDOUT7_BUILD}", HOLDOUT7)
main = functools.partial(holdout.main, table=HOLDOUT7, load=load_holdout7)


if __name__ == "__main__":
    sys.exit(main())
