"""An eleventh held-out set for the needle benchmark, built after the judge's last changes (an absorbed node hands its
measured error to its readers; a movement op walks up the input carrying most error for its tolerance; taps handed
back in another shape are not compared) and measured once: architectures in none of the zoo, needle_bench's OUTSIDE
set or the first ten held-out sets.

Built and exported exactly as `holdout.py` builds its entries (the same sizes, seeds, export paths ``@trace``,
``@export`` and ``@onnx``, static shapes; entries whose export fails are in `LEFT_OUT11`), into
``<cache>/<zoo version key>/needle-holdout11-v<HOLDOUT11_BUILD>``.

Architectures: transformers Gemma 3 (text: sliding-window and global layers, norms around each block), EXAONE 4
(norms after attention and MLP, QK norms), Apertus (xIELU activation, QK norms) and CTRL (sinusoidal positions)
(decoders), CANINE (characters hashed, downsampled by a strided convolution) (encoder); timm CAFormer-S18
(convolution then attention MetaFormer stages), CoAtNet-nano (MBConv then relative-position attention), SHViT-S1
(single-head attention on part of the channels), EfficientViT-M0 (cascaded group attention) and Visformer-Tiny
(convolution stages then attention with BatchNorm), at 64x64 images.

    python benchmarks/holdout11.py            # build every entry and list it
    python benchmarks/needle_bench.py --models --holdout11 NAME --target CPU ...
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import holdout  # noqa: E402
from holdout6 import _decoder, _encoder  # noqa: E402

HOLDOUT11_BUILD = 1
_timm = holdout._timm  # timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)


def _ctrl():
    import transformers

    config = transformers.CTRLConfig(n_embd=64, n_layer=2, n_head=4, dff=128, n_positions=256, vocab_size=holdout.VOCAB,
                                     use_cache=False)
    return transformers.CTRLLMHeadModel(config)


# name -> (library and class, the output kept or "image", factory), as `holdout.ARCHITECTURES`
ARCHITECTURES: dict[str, tuple[str, str, Callable[[], Any]]] = {
    "gemma3": ("transformers Gemma3ForCausalLM", "logits",
               functools.partial(_decoder, "Gemma3TextConfig", "Gemma3ForCausalLM", num_key_value_heads=2, head_dim=16,
                                 sliding_window=8, pad_token_id=0)),
    "exaone4": ("transformers Exaone4ForCausalLM", "logits",
                functools.partial(_decoder, "Exaone4Config", "Exaone4ForCausalLM", num_key_value_heads=2,
                                  pad_token_id=0)),
    "apertus": ("transformers ApertusForCausalLM", "logits",
                functools.partial(_decoder, "ApertusConfig", "ApertusForCausalLM", num_key_value_heads=2,
                                  pad_token_id=0)),
    "ctrl": ("transformers CTRLLMHeadModel", "logits", _ctrl),
    "canine": ("transformers CanineModel", "last_hidden_state",
               functools.partial(_encoder, "CanineConfig", "CanineModel", num_hash_buckets=64)),
    "caformer": ("timm CAFormer-S18", "image", functools.partial(_timm, "caformer_s18")),
    "coatnet": ("timm CoAtNet-nano", "image", functools.partial(_timm, "coatnet_nano_rw_224", img_size=64)),
    "shvit": ("timm SHViT-S1", "image", functools.partial(_timm, "shvit_s1")),
    "efficientvit_m": ("timm EfficientViT-M0", "image", functools.partial(_timm, "efficientvit_m0", img_size=64)),
    "visformer": ("timm Visformer-Tiny", "image", functools.partial(_timm, "visformer_tiny", img_size=64)),
}

# Entries that cannot be built, and why (as `holdout.LEFT_OUT`)
LEFT_OUT11 = {"apertus@onnx": "torch.onnx.export (TorchScript, opset 17) has no aten::expm1 (Apertus's xIELU)",
              "canine@onnx": "OpenVINO's ONNX reader fails the shape inference of the final character encoder's "
                             "attention MatMul"}

HOLDOUT11: dict[str, tuple[str, Callable[[], tuple[Any, dict]]]] = holdout.entries(ARCHITECTURES, LEFT_OUT11)


# An entry of `HOLDOUT11` as (`ov.Model`, meta), built once; `main` builds every entry (or those named), runs each
# once and lists it (`holdout.main`).
load_holdout11 = holdout.loader(f"needle-holdout11-v{HOLDOUT11_BUILD}", HOLDOUT11)


main = functools.partial(holdout.main, table=HOLDOUT11, load=load_holdout11)


if __name__ == "__main__":
    sys.exit(main())
