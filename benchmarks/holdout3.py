"""A third held-out set for the needle benchmark, built after the index-output rule, the experiments plan, f16
headroom and the activation scale factor were written, and measured once: architectures in none of the zoo,
needle_bench's OUTSIDE set, `holdout.HOLDOUT` or `holdout2.HOLDOUT2`.

Built and exported exactly as `holdout.py` builds its entries (the same sizes, seeds, export paths ``@trace``,
``@export`` and ``@onnx``, static shapes), into ``<cache>/<zoo version key>/needle-holdout3-v<HOLDOUT3_BUILD>``.

Architectures: transformers GPTBigCode (StarCoder's), Gemma, Qwen3 (decoders) and SqueezeBERT (an encoder of
grouped 1x1 convolutions); timm FastViT-T8, LeViT-128S, HGNetV2-B0, VoVNet-19 (slim) and LCNet-0.5;
torchvision ResNet-18.

    python benchmarks/holdout3.py            # build every entry and list it
    python benchmarks/needle_bench.py --models --holdout3 NAME --target EMU:f16 ...
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import holdout  # noqa: E402
from holdout import CLASSES, VOCAB  # noqa: E402

HOLDOUT3_BUILD = 1


def _gpt_bigcode():
    import transformers

    config = transformers.GPTBigCodeConfig(n_layer=2, n_embd=64, n_head=4, n_inner=128, vocab_size=VOCAB,
                                           n_positions=256, multi_query=True, use_cache=False)
    return transformers.GPTBigCodeForCausalLM(config)


def _gemma():
    import transformers

    config = transformers.GemmaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=1,
                                      head_dim=16, intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=256,
                                      use_cache=False)
    return transformers.GemmaForCausalLM(config)


def _qwen3():
    import transformers

    config = transformers.Qwen3Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=16, intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=256,
                                      use_cache=False)
    return transformers.Qwen3ForCausalLM(config)


def _squeezebert():
    import transformers

    config = transformers.SqueezeBertConfig(num_hidden_layers=2, hidden_size=64, embedding_size=64, num_attention_heads=4,
                                            intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=256,
                                            q_groups=2, k_groups=2, v_groups=2, post_attention_groups=2,
                                            intermediate_groups=4, output_groups=4)
    return transformers.SqueezeBertModel(config)


_timm = holdout._timm  # timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)


def _resnet18():
    import torchvision

    return torchvision.models.resnet18(weights=None, num_classes=CLASSES)


# name -> (library and class, the output kept or "image", factory), as `holdout.ARCHITECTURES`
ARCHITECTURES: dict[str, tuple[str, str, Callable[[], Any]]] = {
    "gpt_bigcode": ("transformers GPTBigCodeForCausalLM", "logits", _gpt_bigcode),
    "gemma": ("transformers GemmaForCausalLM", "logits", _gemma),
    "qwen3": ("transformers Qwen3ForCausalLM", "logits", _qwen3),
    "squeezebert": ("transformers SqueezeBertModel", "last_hidden_state", _squeezebert),
    "fastvit": ("timm FastViT-T8", "image", functools.partial(_timm, "fastvit_t8")),
    "levit": ("timm LeViT-128S", "image", functools.partial(_timm, "levit_128s", img_size=holdout.IMAGE)),
    "hgnetv2": ("timm HGNetV2-B0", "image", functools.partial(_timm, "hgnetv2_b0")),
    "vovnet": ("timm VoVNet-19 slim", "image", functools.partial(_timm, "ese_vovnet19b_slim")),
    "lcnet": ("timm LCNet-0.5", "image", functools.partial(_timm, "lcnet_050")),
    "resnet18": ("torchvision ResNet-18", "image", _resnet18),
}

HOLDOUT3: dict[str, tuple[str, Callable[[], tuple[Any, dict]]]] = holdout.entries(ARCHITECTURES)


# An entry of `HOLDOUT3` as (`ov.Model`, meta), built once; `main` builds every entry (or those named), runs each
# once and lists it (`holdout.main`).
load_holdout3 = holdout.loader(f"needle-holdout3-v{HOLDOUT3_BUILD}", HOLDOUT3)
main = functools.partial(holdout.main, table=HOLDOUT3, load=load_holdout3)


if __name__ == "__main__":
    sys.exit(main())
