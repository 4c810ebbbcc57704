"""A second held-out set for the needle benchmark, built after the one judge's rules and its first held-out set
(`holdout.py`) were written, and measured once: architectures in none of the zoo, needle_bench's OUTSIDE set or
`holdout.HOLDOUT`.

Built and exported exactly as `holdout.py` builds its entries (the same sizes, seeds, export paths ``@trace``,
``@export`` and ``@onnx``, static shapes), into ``<cache>/<zoo version key>/needle-holdout2-v<HOLDOUT2_BUILD>``.

Architectures: transformers Mistral, StableLM, GPT-J (decoders) and MobileBERT (an encoder); timm ReXNet-1.0,
DLA-34, MLP-Mixer-S/16 and TinyNet-A; torchvision MobileNetV2 and Swin-T.

    python benchmarks/holdout2.py            # build every entry and list it
    python benchmarks/needle_bench.py --models --holdout2 --target EMU:f16 ...
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import holdout  # noqa: E402
from holdout import CLASSES, IMAGE, VOCAB  # noqa: E402

HOLDOUT2_BUILD = 1


def _mistral():
    import transformers

    config = transformers.MistralConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                        intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=256,
                                        sliding_window=8, use_cache=False)
    return transformers.MistralForCausalLM(config)


def _stablelm():
    import transformers

    config = transformers.StableLmConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                                         intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=256,
                                         partial_rotary_factor=0.25, use_cache=False)
    return transformers.StableLmForCausalLM(config)


def _gptj():
    import transformers

    config = transformers.GPTJConfig(n_layer=2, n_embd=64, n_head=4, rotary_dim=8, n_inner=128, vocab_size=VOCAB,
                                     n_positions=256, use_cache=False)
    return transformers.GPTJForCausalLM(config)


def _mobilebert():
    import transformers

    config = transformers.MobileBertConfig(num_hidden_layers=2, hidden_size=64, embedding_size=32, intra_bottleneck_size=32,
                                           num_attention_heads=4, intermediate_size=64, num_feedforward_networks=2,
                                           vocab_size=VOCAB, max_position_embeddings=256)
    return transformers.MobileBertModel(config, add_pooling_layer=False)


_timm = holdout._timm  # timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)


def _mobilenet_v2():
    import torchvision

    return torchvision.models.mobilenet_v2(weights=None, num_classes=CLASSES)


def _swin_t():
    import torchvision

    return torchvision.models.swin_t(weights=None, num_classes=CLASSES)


# name -> (library and class, the output kept or "image", factory), as `holdout.ARCHITECTURES`
ARCHITECTURES: dict[str, tuple[str, str, Callable[[], Any]]] = {
    "mistral": ("transformers MistralForCausalLM", "logits", _mistral),
    "stablelm": ("transformers StableLmForCausalLM", "logits", _stablelm),
    "gptj": ("transformers GPTJForCausalLM", "logits", _gptj),
    "mobilebert": ("transformers MobileBertModel", "last_hidden_state", _mobilebert),
    "rexnet": ("timm ReXNet-1.0", "image", functools.partial(_timm, "rexnet_100")),
    "dla": ("timm DLA-34", "image", functools.partial(_timm, "dla34")),
    "mixer": ("timm MLP-Mixer-S/16", "image", functools.partial(_timm, "mixer_s16_224", img_size=IMAGE)),
    "tinynet": ("timm TinyNet-A", "image", functools.partial(_timm, "tinynet_a")),
    "mobilenet_v2": ("torchvision MobileNetV2", "image", _mobilenet_v2),
    "swin_t": ("torchvision Swin-T", "image", _swin_t),
}

HOLDOUT2: dict[str, tuple[str, Callable[[], tuple[Any, dict]]]] = holdout.entries(ARCHITECTURES)


# An entry of `HOLDOUT2` as (`ov.Model`, meta), built once; `main` builds every entry (or those named), runs each
# once and lists it (`holdout.main`).
load_holdout2 = holdout.loader(f"needle-holdout2-v{HOLDOUT2_BUILD}", HOLDOUT2)
main = functools.partial(holdout.main, table=HOLDOUT2, load=load_holdout2)


if __name__ == "__main__":
    sys.exit(main())
