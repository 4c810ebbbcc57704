"""A fifth held-out set for the needle benchmark, built after the judge's current rules (through rule 5: a node
whose own error alone takes diverging outputs over their tolerance is a first divergence) were written, and
measured once: architectures in none of the zoo, needle_bench's OUTSIDE set or the first four held-out sets.

Built and exported exactly as `holdout.py` builds its entries (the same sizes, seeds, export paths ``@trace``,
``@export`` and ``@onnx``, static shapes), into ``<cache>/<zoo version key>/needle-holdout5-v<HOLDOUT5_BUILD>``.

Architectures: transformers Nemotron (LayerNorm1P, squared-ReLU MLP, partial rotary), OLMo (LayerNorm without
parameters) (decoders), Nystromformer (landmark attention with an iterated pseudo-inverse) and YOSO (LSH attention,
its expectation) (encoders); timm XCiT-nano-12 (cross-covariance attention), HRNet-W18-small (parallel resolutions
fused by upsampling), NF-RegNet-B0 (normalizer-free: scaled weight standardization), EfficientFormerV2-S0 and
DPN-68 (dual paths: residual sums beside dense concatenation); torchvision MaxViT (block and grid attention, three
stages of one block, 4x4 partitions to fit 64x64 images).

    python benchmarks/holdout5.py            # build every entry and list it
    python benchmarks/needle_bench.py --models --holdout5 NAME --target EMU:f16 ...
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import holdout  # noqa: E402
from holdout import CLASSES, IMAGE, SEQ_LEN, VOCAB  # noqa: E402

HOLDOUT5_BUILD = 1


def _nemotron():
    import transformers

    config = transformers.NemotronConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                                         intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=256,
                                         partial_rotary_factor=0.5, use_cache=False)
    return transformers.NemotronForCausalLM(config)


def _olmo():
    import transformers

    config = transformers.OlmoConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=4,
                                     intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=256,
                                     pad_token_id=0, use_cache=False)
    return transformers.OlmoForCausalLM(config)


def _nystromformer():
    import transformers

    # 4 landmarks over the 16 tokens (segment_means_seq_len is the input length): the landmark path, not full attention
    config = transformers.NystromformerConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                              intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=256,
                                              num_landmarks=4, segment_means_seq_len=SEQ_LEN)
    return transformers.NystromformerModel(config)


def _yoso():
    import transformers

    # use_expectation: the LSH collision probability computed in closed form (the sampled path needs a CUDA kernel)
    config = transformers.YosoConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                     vocab_size=VOCAB, max_position_embeddings=256, use_expectation=True)
    return transformers.YosoModel(config)


_timm = holdout._timm  # timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)


def _maxvit():
    from torchvision.models.maxvit import MaxVit

    return MaxVit(input_size=(IMAGE, IMAGE), stem_channels=32, partition_size=4, block_channels=[32, 64, 128],
                  block_layers=[1, 1, 1], head_dim=16, stochastic_depth_prob=0.0, num_classes=CLASSES)


# name -> (library and class, the output kept or "image", factory), as `holdout.ARCHITECTURES`
ARCHITECTURES: dict[str, tuple[str, str, Callable[[], Any]]] = {
    "nemotron": ("transformers NemotronForCausalLM", "logits", _nemotron),
    "olmo": ("transformers OlmoForCausalLM", "logits", _olmo),
    "nystromformer": ("transformers NystromformerModel", "last_hidden_state", _nystromformer),
    "yoso": ("transformers YosoModel", "last_hidden_state", _yoso),
    "xcit": ("timm XCiT-nano-12/16", "image", functools.partial(_timm, "xcit_nano_12_p16_224", img_size=IMAGE)),
    "hrnet": ("timm HRNet-W18-small", "image", functools.partial(_timm, "hrnet_w18_small")),
    "nf_regnet": ("timm NF-RegNet-B0", "image", functools.partial(_timm, "nf_regnet_b0")),
    "efficientformerv2": ("timm EfficientFormerV2-S0", "image",
                          functools.partial(_timm, "efficientformerv2_s0", img_size=IMAGE)),
    "dpn": ("timm DPN-68", "image", functools.partial(_timm, "dpn68")),
    "maxvit": ("torchvision MaxViT, one block in each of three stages, 4x4 partitions", "image", _maxvit),
}

HOLDOUT5: dict[str, tuple[str, Callable[[], tuple[Any, dict]]]] = holdout.entries(ARCHITECTURES)


# An entry of `HOLDOUT5` as (`ov.Model`, meta), built once; `main` builds every entry (or those named), runs each
# once and lists it (`holdout.main`).
load_holdout5 = holdout.loader(f"needle-holdout5-v{HOLDOUT5_BUILD}", HOLDOUT5)
main = functools.partial(holdout.main, table=HOLDOUT5, load=load_holdout5)


if __name__ == "__main__":
    sys.exit(main())
