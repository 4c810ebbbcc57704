"""A fourth held-out set for the needle benchmark, built after the concentrated-error rule was written, and
measured once: architectures in none of the zoo, needle_bench's OUTSIDE set or the first three held-out sets.

Built and exported exactly as `holdout.py` builds its entries (the same sizes, seeds, export paths ``@trace``,
``@export`` and ``@onnx``, static shapes), into ``<cache>/<zoo version key>/needle-holdout4-v<HOLDOUT4_BUILD>``.

Architectures: transformers GPT-Neo, Phi-3 (decoders), MPNet and ConvBERT (encoders, the latter with separable
convolutions beside attention); timm MixNet-S (mixed depthwise kernels), SK-ResNet-18 (selective kernels: a
softmax over branches), EfficientViT-B0 (ReLU linear attention), StarNet-S1 (elementwise products of branches),
RepViT-M0.9 and Inception-NeXt-atto.

    python benchmarks/holdout4.py            # build every entry and list it
    python benchmarks/needle_bench.py --models --holdout4 NAME --target EMU:f16 ...
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import holdout  # noqa: E402
from holdout import VOCAB  # noqa: E402

HOLDOUT4_BUILD = 1


def _gpt_neo():
    import transformers

    config = transformers.GPTNeoConfig(num_layers=2, hidden_size=64, num_heads=4, intermediate_size=128,
                                       vocab_size=VOCAB, max_position_embeddings=256, attention_types=[[["global", "local"], 1]],
                                       window_size=8, use_cache=False)
    return transformers.GPTNeoForCausalLM(config)


def _phi3():
    import transformers

    config = transformers.Phi3Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                                     intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=256,
                                     pad_token_id=0, use_cache=False)
    return transformers.Phi3ForCausalLM(config)


def _mpnet():
    import transformers

    config = transformers.MPNetConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                      vocab_size=VOCAB, max_position_embeddings=256)
    return transformers.MPNetModel(config)


def _convbert():
    import transformers

    config = transformers.ConvBertConfig(num_hidden_layers=2, hidden_size=64, embedding_size=64, num_attention_heads=4,
                                         intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=256,
                                         head_ratio=2, conv_kernel_size=5)
    return transformers.ConvBertModel(config)


_timm = holdout._timm  # timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)

# name -> (library and class, the output kept or "image", factory), as `holdout.ARCHITECTURES`
ARCHITECTURES: dict[str, tuple[str, str, Callable[[], Any]]] = {
    "gpt_neo": ("transformers GPTNeoForCausalLM", "logits", _gpt_neo),
    "phi3": ("transformers Phi3ForCausalLM", "logits", _phi3),
    "mpnet": ("transformers MPNetModel", "last_hidden_state", _mpnet),
    "convbert": ("transformers ConvBertModel", "last_hidden_state", _convbert),
    "mixnet": ("timm MixNet-S", "image", functools.partial(_timm, "mixnet_s")),
    "skresnet": ("timm SK-ResNet-18", "image", functools.partial(_timm, "skresnet18")),
    "efficientvit": ("timm EfficientViT-B0", "image", functools.partial(_timm, "efficientvit_b0")),
    "starnet": ("timm StarNet-S1", "image", functools.partial(_timm, "starnet_s1")),
    "repvit": ("timm RepViT-M0.9", "image", functools.partial(_timm, "repvit_m0_9")),
    "inception_next": ("timm Inception-NeXt-atto", "image", functools.partial(_timm, "inception_next_atto")),
}

HOLDOUT4: dict[str, tuple[str, Callable[[], tuple[Any, dict]]]] = holdout.entries(ARCHITECTURES)


# An entry of `HOLDOUT4` as (`ov.Model`, meta), built once; `main` builds every entry (or those named), runs each
# once and lists it (`holdout.main`).
load_holdout4 = holdout.loader(f"needle-holdout4-v{HOLDOUT4_BUILD}", HOLDOUT4)
main = functools.partial(holdout.main, table=HOLDOUT4, load=load_holdout4)


if __name__ == "__main__":
    sys.exit(main())
