"""A held-out set of architectures for the needle benchmark: in neither the zoo nor needle_bench's OUTSIDE set.

Each architecture is built from its library's config (or constructor) with seeded random weights, at a small size
(2 layers, width 64, a 1,000-token vocabulary and 16-token inputs; 64x64 images and 10 classes, BatchNorm statistics
set from seeded random images as needle_bench does), and exported several ways, each a separate entry:

* ``<arch>@trace``: ``ov.convert_model(module, example_input=..., input=<static shapes>)`` (TorchScript tracing);
* ``<arch>@export``: ``torch.export.export`` of a wrapper that returns one plain tensor, then ``ov.convert_model``;
* ``<arch>@onnx``: ``torch.onnx.export`` (the TorchScript-based exporter, opset 17) to a temporary file, then
  ``openvino.Core().read_model``.

Every input has a static shape. Token models take ``input_ids`` and ``attention_mask`` and give one output
(``last_hidden_state`` of an encoder, ``logits`` of a decoder with its LM head); image models take one
``[1, 3, 64, 64]`` image and give 10 logits. `HOLDOUT` maps each entry name to (description, builder), the builder
returning ``(ov.Model, meta)`` in the format `needle_bench.outside_inputs` reads; `load_holdout` builds an entry
once into ``<cache>/<zoo version key>/needle-holdout-v<HOLDOUT_BUILD>`` (beside needle_bench's outside folder,
f32 weights) and reads it from there afterwards.

Architectures: transformers ELECTRA, DeBERTa-v2, BART's encoder (encoders); OPT, GPT-NeoX, BLOOM, Falcon, Phi, MPT
(decoders); timm ResNeSt-14d, EfficientNetV2-B0, PoolFormer-S12, EdgeNeXt-XXS, CoaT-Lite-Tiny, RepVGG-A0,
GhostNet-1.0; torchvision GoogLeNet, MNASNet 0.5, RegNetY-400MF, a one-block-per-stage ResNeXt (32x4d).

Tracing transformers 5.5 models fails in their attention-mask builders: under ``torch.jit.trace`` the sequence
length is a 0-d tensor, which ``sdpa_mask`` takes for the deprecated ``cache_position`` argument and indexes
(``IndexError: tuple index out of range``). While a transformers model is traced here (``@trace`` and ``@onnx``),
the mask builders receive that length as an int (`_traceable_masks`); this only fixes the length into the
graph, which static shapes do anyway.

Left out (the export path fails with torch 2.14, transformers 5.5, OpenVINO 2026.4):

* ``falcon@trace``: ``FalconForCausalLM`` builds its causal mask with an extra ``and_mask_function``, which makes
  transformers expand the mask with ``torch.vmap``; ``torch.jit.trace`` cannot record that
  (``RuntimeError: unordered_map::at`` inside functorch), so ``ov.convert_model`` cannot trace the model.
* ``falcon@onnx``: ``torch.onnx.export``'s TorchScript exporter traces the same way and fails the same way.
  (``falcon@export`` works: ``torch.export`` handles the vmap.)

Usage::

    python benchmarks/holdout.py                 # build (or read) every entry, run it once on CPU f32, list them
    python benchmarks/holdout.py electra@onnx --cache /tmp/holdout-cache
    python benchmarks/needle_bench.py --holdout  # the measurement

Assumptions: building needs torch, torchvision, transformers and timm; nothing is downloaded (``HF_HUB_OFFLINE``
is set). Builds run torch on one thread so the weights are the same bits whatever the machine's load.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import pathlib
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from benchmarks.needle_bench import (  # noqa: E402 - after the checkout is put on the path
    CLASSES,
    IMAGE,
    SEQ_LEN,
    _calibrate_batchnorm,
    _token_meta,
    load_built,
    outside_folder,
    outside_inputs,
)

# Bump when a builder changes what it builds: older builds in the cache are then ignored.
HOLDOUT_BUILD = 1
VOCAB = 1000
OPSET = 17
METHODS = ("trace", "export", "onnx")
# Entries whose export path fails with the installed libraries, and why (as in the module docstring).
LEFT_OUT = {"falcon@trace": "torch.jit.trace cannot record the torch.vmap of Falcon's causal mask",
            "falcon@onnx": "torch.onnx.export (TorchScript) traces, and fails like falcon@trace"}


# ------------------------------------------------------------------------------------------------------------
# Architectures: each factory returns a torch module in eval mode
# ------------------------------------------------------------------------------------------------------------

def _electra():
    import transformers

    config = transformers.ElectraConfig(num_hidden_layers=2, embedding_size=32, hidden_size=64, num_attention_heads=4,
                                        intermediate_size=128, vocab_size=VOCAB, max_position_embeddings=256)
    return transformers.ElectraModel(config)


def _deberta_v2():
    import transformers

    config = transformers.DebertaV2Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                          vocab_size=VOCAB, max_position_embeddings=256, relative_attention=True,
                                          position_buckets=32, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
                                          share_att_key=True, position_biased_input=False)
    return transformers.DebertaV2Model(config)


def _bart_encoder():
    import transformers

    config = transformers.BartConfig(encoder_layers=2, decoder_layers=2, d_model=64, encoder_attention_heads=4,
                                     decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, vocab_size=VOCAB,
                                     max_position_embeddings=256, use_cache=False)
    return transformers.BartModel(config).get_encoder()


def _opt():
    import transformers

    config = transformers.OPTConfig(num_hidden_layers=2, hidden_size=64, word_embed_proj_dim=64, ffn_dim=128,
                                    num_attention_heads=4, vocab_size=VOCAB, max_position_embeddings=256, use_cache=False)
    return transformers.OPTForCausalLM(config)


def _gpt_neox():
    import transformers

    config = transformers.GPTNeoXConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                        vocab_size=VOCAB, max_position_embeddings=256, rotary_pct=0.25, use_cache=False)
    return transformers.GPTNeoXForCausalLM(config)


def _bloom():
    import transformers

    config = transformers.BloomConfig(n_layer=2, hidden_size=64, n_head=4, vocab_size=VOCAB, use_cache=False)
    return transformers.BloomForCausalLM(config)


def _falcon():
    import transformers

    config = transformers.FalconConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=VOCAB,
                                       max_position_embeddings=256, new_decoder_architecture=False, multi_query=True,
                                       parallel_attn=True, alibi=False, use_cache=False)
    return transformers.FalconForCausalLM(config)


def _phi():
    import transformers

    config = transformers.PhiConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                    vocab_size=VOCAB, max_position_embeddings=256, partial_rotary_factor=0.5, use_cache=False)
    return transformers.PhiForCausalLM(config)


def _mpt():
    import transformers

    config = transformers.MptConfig(n_layers=2, d_model=64, n_heads=4, expansion_ratio=2, vocab_size=VOCAB, max_seq_len=256,
                                    use_cache=False)
    return transformers.MptForCausalLM(config)


def _timm(name: str, **kwargs):
    import timm

    return timm.create_model(name, pretrained=False, num_classes=CLASSES, **kwargs)


def _googlenet():
    import torchvision

    return torchvision.models.googlenet(weights=None, num_classes=CLASSES, aux_logits=False, init_weights=True)


def _mnasnet():
    import torchvision

    return torchvision.models.mnasnet0_5(weights=None, num_classes=CLASSES)


def _regnet_y():
    import torchvision

    return torchvision.models.regnet_y_400mf(weights=None, num_classes=CLASSES)


def _resnext():
    from torchvision.models.resnet import Bottleneck, ResNet

    return ResNet(Bottleneck, [1, 1, 1, 1], groups=32, width_per_group=4, num_classes=CLASSES)


# name -> (library and class, "tokens" with the output kept, or "image", factory)
ARCHITECTURES: dict[str, tuple[str, str, Callable[[], Any]]] = {
    "electra": ("transformers ElectraModel", "last_hidden_state", _electra),
    "deberta_v2": ("transformers DebertaV2Model", "last_hidden_state", _deberta_v2),
    "bart_encoder": ("transformers BartModel's encoder", "last_hidden_state", _bart_encoder),
    "opt": ("transformers OPTForCausalLM", "logits", _opt),
    "gpt_neox": ("transformers GPTNeoXForCausalLM", "logits", _gpt_neox),
    "bloom": ("transformers BloomForCausalLM", "logits", _bloom),
    "falcon": ("transformers FalconForCausalLM", "logits", _falcon),
    "phi": ("transformers PhiForCausalLM", "logits", _phi),
    "mpt": ("transformers MptForCausalLM", "logits", _mpt),
    "resnest": ("timm ResNeSt-14d", "image", functools.partial(_timm, "resnest14d")),
    "efficientnetv2": ("timm EfficientNetV2-B0", "image", functools.partial(_timm, "tf_efficientnetv2_b0")),
    "poolformer": ("timm PoolFormer-S12 (MetaFormer)", "image", functools.partial(_timm, "poolformer_s12")),
    "edgenext": ("timm EdgeNeXt-XXS", "image", functools.partial(_timm, "edgenext_xx_small")),
    "coat": ("timm CoaT-Lite-Tiny", "image", functools.partial(_timm, "coat_lite_tiny", img_size=IMAGE)),
    "repvgg": ("timm RepVGG-A0", "image", functools.partial(_timm, "repvgg_a0")),
    "ghostnet": ("timm GhostNet-1.0", "image", functools.partial(_timm, "ghostnet_100")),
    "googlenet": ("torchvision GoogLeNet", "image", _googlenet),
    "mnasnet": ("torchvision MNASNet 0.5", "image", _mnasnet),
    "regnet_y": ("torchvision RegNetY-400MF", "image", _regnet_y),
    "resnext": ("torchvision ResNeXt 32x4d, one block per stage", "image", _resnext),
}


# ------------------------------------------------------------------------------------------------------------
# Export paths
# ------------------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _traceable_masks() -> Iterator[None]:
    """transformers' attention-mask builders, taking a traced (0-d tensor) length as the int it is.

    Under ``torch.jit.trace`` a shape is a 0-d tensor; transformers 5.5's ``sdpa_mask`` reads a tensor
    ``q_length`` as the deprecated ``cache_position`` and indexes it, which fails. Nothing is changed where
    transformers has no such registry.
    """
    try:
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError:
        yield
        return
    import torch

    mapping = AttentionMaskInterface._global_mapping
    saved = dict(mapping)

    def as_ints(function):
        @functools.wraps(function)
        def call(*args, **kwargs):
            for key in ("q_length", "kv_length", "q_offset", "kv_offset"):
                value = kwargs.get(key)
                if isinstance(value, torch.Tensor) and value.dim() == 0:
                    kwargs[key] = int(value)
            return function(*args, **kwargs)
        return call

    for key in ("sdpa", "eager"):
        if key in mapping:
            mapping[key] = as_ints(mapping[key])
    try:
        yield
    finally:
        mapping.clear()
        mapping.update(saved)


def _plain(module, key: str | None):
    """`module` as a torch module whose forward returns one plain tensor: output `key` of a transformers model
    called with ``input_ids`` and ``attention_mask``, or the image model itself."""
    import torch

    if key is None:
        return module

    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = module

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)[key]

    return Plain().eval()


def _static(model, converter: str) -> None:
    for parameter in model.get_parameters():
        if parameter.get_output_partial_shape(0).is_dynamic:
            raise RuntimeError(f"{converter} left input {parameter.get_friendly_name()} "
                               f"{parameter.get_output_partial_shape(0)} dynamic")


def _convert(module, key: str | None, example: tuple, names: list[str], method: str) -> tuple[Any, str]:
    """`module` converted to an ``ov.Model`` by `method`, with the example's shapes fixed; and how, in words."""
    import openvino as ov
    import torch

    shapes = [ov.PartialShape(list(x.shape)) for x in example]
    if method == "trace":
        example_input: Any = dict(zip(names, example)) if key is not None else example[0]
        with contextlib.ExitStack() as stack:
            if key is not None:
                stack.enter_context(_traceable_masks())
            converted = ov.convert_model(module, example_input=example_input,
                                         input=shapes if key is not None else shapes[0])
        return converted, "ov.convert_model(example_input=..., input=static shapes)"
    if method == "export":
        with torch.no_grad():
            program = torch.export.export(_plain(module, key), example)
        return (ov.convert_model(program, input=shapes),
                "torch.export.export + ov.convert_model(input=static shapes)")
    with tempfile.TemporaryDirectory(prefix="holdout-onnx-") as tmp, contextlib.ExitStack() as stack:
        if key is not None:
            stack.enter_context(_traceable_masks())
        path = pathlib.Path(tmp) / "model.onnx"
        with torch.no_grad():
            torch.onnx.export(_plain(module, key), example, str(path), dynamo=False, input_names=names,
                              output_names=[key or "logits"], opset_version=OPSET)
        converted = ov.Core().read_model(str(path))
    return converted, f"torch.onnx.export (TorchScript exporter, opset {OPSET}) + openvino.Core().read_model"


def _build(arch: str, method: str, table: dict | None = None) -> tuple[Any, dict]:
    """One entry: architecture `arch` of `table` (default `ARCHITECTURES`) with seeded weights (the caller seeds
    torch), exported by `method`."""
    import torch

    _, key, factory = (table or ARCHITECTURES)[arch]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = factory().eval()
        if key == "image":
            _calibrate_batchnorm(module)
            example: tuple = (torch.randn(1, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(1)),)
            model, converter = _convert(module, None, example, ["pixel_values"], method)
        else:
            ids = torch.randint(0, VOCAB, (1, SEQ_LEN), generator=torch.Generator().manual_seed(1))
            mask = torch.ones(1, SEQ_LEN, dtype=torch.int64)
            model, converter = _convert(module, key, (ids, mask), ["input_ids", "attention_mask"], method)
    _static(model, converter)
    if key == "image":
        meta = {"inputs": {model.inputs[0].get_any_name(): {"shape": [1, 3, IMAGE, IMAGE]}}, "converter": converter}
    else:
        names = {name for p in model.get_parameters() for name in p.output(0).get_names()}
        meta = _token_meta(VOCAB, converter, mask="attention_mask" in names)
    missing = [name for name in meta["inputs"] if name not in {n for i in model.inputs for n in i.get_names()}]
    if missing or len(meta["inputs"]) != len(model.inputs):
        raise RuntimeError(f"inputs {[i.get_names() for i in model.inputs]} do not match {sorted(meta['inputs'])}")
    return model, meta


def entries(architectures: dict[str, tuple[str, str, Callable[[], Any]]], left_out: dict[str, str] | None = None
            ) -> dict[str, tuple[str, Callable[[], tuple[Any, dict]]]]:
    """The entries of a held-out set: each architecture of `architectures` (as `ARCHITECTURES`) exported each way
    of `METHODS`, as ``"arch@method"`` -> (its description, its builder), but those in `left_out` (default
    `LEFT_OUT`: entries whose export fails, and why)."""
    left_out = LEFT_OUT if left_out is None else left_out
    return {f"{arch}@{method}": (f"{library}, {method}", functools.partial(_build, arch, method, architectures))
            for arch, (library, _, _) in architectures.items() for method in METHODS
            if f"{arch}@{method}" not in left_out}


HOLDOUT: dict[str, tuple[str, Callable[[], tuple[Any, dict]]]] = entries(ARCHITECTURES)


# ------------------------------------------------------------------------------------------------------------
# The cache
# ------------------------------------------------------------------------------------------------------------

def holdout_folder(cache: str | os.PathLike | None) -> pathlib.Path:
    """Where the held-out entries are built: beside needle_bench's outside folder, ``needle-holdout-v<N>``."""
    return outside_folder(cache).parent / f"needle-holdout-v{HOLDOUT_BUILD}"


def loader(folder: str, table: dict[str, tuple[str, Callable[[], tuple[Any, dict]]]]
           ) -> Callable[..., tuple[Any, dict]]:
    """The loader of a later held-out set: ``load(name, cache=None)`` gives an entry of `table` as (`ov.Model`,
    meta), built once into `folder` beside needle_bench's outside folder (as `load_holdout`)."""
    def load(name: str, cache: str | os.PathLike | None = None) -> tuple[Any, dict]:
        return load_built(name, outside_folder(cache).parent / folder, table)

    return load


def load_holdout(name: str, cache: str | os.PathLike | None = None) -> tuple[Any, dict]:
    """A held-out entry as (`ov.Model`, meta), built and saved (f32 weights) the first time.

    Parameters
    ----------
    name
        A key of `HOLDOUT`, such as ``"electra@onnx"``.
    cache
        The cache root; None for the zoo's (``$BISECT_OV_ZOO_CACHE`` or ``~/.cache/bisect_ov/zoo``).

    Returns
    -------
    tuple
        The model read from its IR, and its description (inputs, converter, library).
    """
    return load_built(name, holdout_folder(cache), HOLDOUT)


# ------------------------------------------------------------------------------------------------------------
# Listing
# ------------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None, *, table: dict | None = None,
         load: Callable[[str, Any], tuple[Any, dict]] | None = None) -> int:
    """Build (or read) entries of `table` (default `HOLDOUT`, read by `load`), run each once on CPU f32 with
    `outside_inputs`, and list them.

    Per entry: op count, build-and-load seconds, and the largest relative difference of its output from the
    architecture's first built entry (the export paths should agree to f32 rounding).
    """
    table = HOLDOUT if table is None else table
    load = load_holdout if load is None else load
    import numpy as np
    import openvino as ov

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help=f"entries (default: all {len(table)})")
    parser.add_argument("--cache", help="root of the model cache (default: the zoo's)")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in table]
    if unknown:
        parser.error(f"unknown entries {unknown}; known: {sorted(table)}")

    core = ov.Core()
    first: dict[str, np.ndarray] = {}
    failed = []
    print(f"{'entry':<24} {'ops':>6} {'seconds':>8} {'vs first':>9}  converter")
    for name in args.names or list(table):
        start = time.perf_counter()
        try:
            model, meta = load(name, args.cache)
            seconds = time.perf_counter() - start
            inputs = outside_inputs(meta, model, 0)
            compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
            output = np.asarray(compiled.create_infer_request().infer(inputs)[compiled.outputs[0]], dtype=np.float64)
            if not np.all(np.isfinite(output)):
                raise RuntimeError("output not finite")
        except Exception as exc:  # noqa: BLE001 - a failing entry is reported, the others still run
            failed.append(name)
            print(f"{name:<24} FAILED {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300], flush=True)
            continue
        arch = name.split("@")[0]
        base = first.setdefault(arch, output)
        diff = float(np.max(np.abs(output - base)) / (np.max(np.abs(base)) or 1.0)) if base.shape == output.shape else np.inf
        print(f"{name:<24} {len(model.get_ops()):>6} {seconds:>8.1f} {diff:>9.1e}  {meta['converter']}", flush=True)
    print(f"{len(args.names or table) - len(failed)} built, {len(failed)} failed" + (f": {failed}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
