"""A ninth held-out set for the needle benchmark, built after the judge's own-size test took its final bounds (nothing
that sums products among what made the node, twice `min_growth`), and measured once: architectures in none of the
zoo, needle_bench's OUTSIDE set or the first eight held-out sets.

Built and exported exactly as `holdout.py` builds its entries (the same sizes, seeds, export paths ``@trace``,
``@export`` and ``@onnx``, static shapes; entries whose export fails are in `LEFT_OUT9`), into
``<cache>/<zoo version key>/needle-holdout9-v<HOLDOUT9_BUILD>``.

Architectures: transformers SmolLM3 (layers without rotary embeddings), Arcee (squared-ReLU MLP) and OLMo 2 (norms of
queries and keys, norms after each block) (decoders), Funnel (pooled queries between blocks) (encoder); timm
ConViT-Tiny (gated positional self-attention), PiT-Ti (pooling between transformer stages), VOLO-D1 (outlook
attention), GCViT-XXTiny (global context attention), EVA-02-Tiny (rotary embeddings, SwiGLU) and LambdaResNet-26t
(lambda layers), at 64x64 images. Funnel's and GCViT's `torch.export` entries give outputs 9% and 12% away from
their traced entries on CPU f32 (the builder's "vs first" column); each entry is measured against itself.

    python benchmarks/holdout9.py            # build every entry and list it
    python benchmarks/needle_bench.py --models --holdout9 NAME --target EMU:f16 ...
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import holdout  # noqa: E402
from holdout6 import _decoder  # noqa: E402

HOLDOUT9_BUILD = 1
_timm = holdout._timm  # timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)


def _funnel():
    import transformers

    # two blocks of one layer: the second block's queries are pooled to half the tokens
    config = transformers.FunnelConfig(block_sizes=[1, 1], num_decoder_layers=1, d_model=64, n_head=4, d_head=16,
                                       d_inner=128, vocab_size=holdout.VOCAB, max_position_embeddings=256)
    return transformers.FunnelBaseModel(config)


# name -> (library and class, the output kept or "image", factory), as `holdout.ARCHITECTURES`
ARCHITECTURES: dict[str, tuple[str, str, Callable[[], Any]]] = {
    "smollm3": ("transformers SmolLM3ForCausalLM", "logits",
                functools.partial(_decoder, "SmolLM3Config", "SmolLM3ForCausalLM", num_key_value_heads=2,
                                  no_rope_layer_interval=2, pad_token_id=0)),
    "arcee": ("transformers ArceeForCausalLM", "logits",
              functools.partial(_decoder, "ArceeConfig", "ArceeForCausalLM", num_key_value_heads=2, pad_token_id=0)),
    "olmo2": ("transformers Olmo2ForCausalLM", "logits",
              functools.partial(_decoder, "Olmo2Config", "Olmo2ForCausalLM", num_key_value_heads=4, pad_token_id=0)),
    "funnel": ("transformers FunnelBaseModel", "last_hidden_state", _funnel),
    "convit": ("timm ConViT-Tiny", "image", functools.partial(_timm, "convit_tiny", img_size=64)),
    "pit": ("timm PiT-Ti", "image", functools.partial(_timm, "pit_ti_224", img_size=64)),
    "volo": ("timm VOLO-D1", "image", functools.partial(_timm, "volo_d1_224", img_size=64)),
    "gcvit": ("timm GCViT-XXTiny", "image", functools.partial(_timm, "gcvit_xxtiny", img_size=64)),
    "eva02": ("timm EVA-02-Tiny", "image", functools.partial(_timm, "eva02_tiny_patch14_224", img_size=64)),
    "lambda_resnet": ("timm LambdaResNet-26t", "image", functools.partial(_timm, "lambda_resnet26t", img_size=64)),
}

# Entries that cannot be built, and why (as `holdout.LEFT_OUT`)
LEFT_OUT9 = {"convit@trace": "torch.jit.trace cannot trace ConViT's gated positional attention",
             "volo@onnx": "torch.onnx.export at opset 17 has no aten::col2im (VOLO's outlook attention folds)",
             "eva02@onnx": "torch.onnx.export (TorchScript) passes a tensor to scaled_dot_product_attention's is_causal"}

HOLDOUT9: dict[str, tuple[str, Callable[[], tuple[Any, dict]]]] = holdout.entries(ARCHITECTURES, LEFT_OUT9)


# An entry of `HOLDOUT9` as (`ov.Model`, meta), built once; `main` builds every entry (or those named), runs each
# once and lists it (`holdout.main`).
load_holdout9 = holdout.loader(f"needle-holdout9-v{HOLDOUT9_BUILD}", HOLDOUT9)
main = functools.partial(holdout.main, table=HOLDOUT9, load=load_holdout9)


if __name__ == "__main__":
    sys.exit(main())
