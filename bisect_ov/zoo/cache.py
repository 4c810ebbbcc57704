"""The zoo's registry and build cache: each real model built once, saved as IR, reused while the libraries stay.

`load("bert")` returns the small BERT as an `ov.Model`, building it the first time and reading the saved IR
after that; `sample_inputs("bert")` gives inputs that match it (token ids within the vocabulary, a full
attention mask, consecutive positions, a zero beam index, standard-normal images and features). Twins
(`TWINS`: ``mobilenetv3-int8``, ``llama-int4w``, ...) are built from their base model's f32 IR with NNCF and
cached the same way.

Every build is saved twice, as users save models: ``ov.save_model(model, path)`` (its default compresses
weights to f16; ``load(..., compressed=True)``) and with ``compress_to_fp16=False`` (the default here, f32
weights), with a JSON file that describes the inputs and how the model was converted.

Layout: ``<root>/<key>/<name>-<size>.{f32,f16}.{xml,bin}`` and ``<name>-<size>.json``, where `root` is
``$BISECT_OV_ZOO_CACHE`` (or ``~/.cache/bisect_ov/zoo``) and `key` is `version_key()`: the zoo's build
version and the versions of torch, torchvision, transformers, timm, optimum-intel, nncf and openvino, so a
change of any of them builds afresh. Several processes (pytest-xdist workers) may ask for one model at once:
a file lock per model lets one build while the others wait, and files are written under temporary names
and renamed into place, the JSON last, so a model is visible only when complete.

Assumptions: building needs the ``zoo`` extra (torch, transformers, ...); reading a built model needs only
OpenVINO. Nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import pathlib
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import openvino as ov

from bisect_ov.core.errors import InputError
from bisect_ov.core.extras import install_hint

__all__ = ["MODELS", "TWINS", "ZOO_PACKAGES", "Entry", "cache_root", "describe", "load", "missing_packages",
           "model_path", "sample_inputs", "version_key"]

# Bump when a builder changes what it builds: cached models of older builds are then ignored.
# 2: torch builds on one thread (a BatchNorm calibration's sums, and so the weights, followed the thread count).
BUILD_VERSION = 2

# Distribution names whose versions key the cache (and which building needs).
ZOO_PACKAGES = ("torch", "torchvision", "transformers", "timm", "optimum-intel", "nncf")
_IMPORTS = {"torch": "torch", "torchvision": "torchvision", "transformers": "transformers", "timm": "timm",
            "optimum-intel": "optimum.intel", "nncf": "nncf"}


@dataclass(frozen=True)
class Entry:
    """One zoo model: its library and class, and the function that builds it (size, seed) -> (model, meta)."""

    name: str
    library: str
    builder: str  # "module:function" under bisect_ov.zoo, imported when building
    base: str | None = None  # for twins: the model it is made from
    twin: str | None = None  # "int8" (nncf.quantize), "int8w" or "int4w" (nncf.compress_weights)

    def build_function(self) -> Callable:
        import importlib

        module, function = self.builder.split(":")
        return getattr(importlib.import_module(f"bisect_ov.zoo.{module}"), function)


MODELS = {e.name: e for e in (
    Entry("bert", "transformers BertModel", "hf:bert"),
    Entry("bert_large", "transformers BertModel (BERT-large shape)", "hf:bert_large"),
    Entry("gpt2", "transformers GPT2LMHeadModel", "hf:gpt2"),
    Entry("llama", "transformers LlamaForCausalLM", "hf:llama"),
    Entry("whisper_encoder", "transformers WhisperEncoder", "hf:whisper_encoder"),
    Entry("vit", "transformers ViTModel", "hf:vit"),
    Entry("convnext", "timm ConvNeXt", "vision:convnext"),
    Entry("efficientnet", "timm EfficientNet-B0", "vision:efficientnet"),
    Entry("mobilenetv3", "timm MobileNetV3", "vision:mobilenetv3"),
    Entry("resnet50", "torchvision ResNet-50", "vision:resnet50"),
    Entry("llama_stateful", "optimum-intel OVModelForCausalLM (Llama)", "optimum:llama_stateful"),
)}
TWINS = {e.name: e for e in (
    Entry("mobilenetv3-int8", "nncf.quantize int8", "twins:quantize_int8", base="mobilenetv3", twin="int8"),
    Entry("resnet50-int8", "nncf.quantize int8", "twins:quantize_int8", base="resnet50", twin="int8"),
    Entry("llama-int8w", "nncf.compress_weights int8", "twins:compress_weights", base="llama", twin="int8w"),
    Entry("llama-int4w", "nncf.compress_weights int4", "twins:compress_weights", base="llama", twin="int4w"),
)}
SIZES = ("small", "full")


def missing_packages() -> list[str]:
    """The ``zoo`` extra's packages that cannot be imported here (empty when building works)."""
    import importlib.util

    missing = []
    for dist, module in _IMPORTS.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(dist)
    return missing


def version_key() -> str:
    """Build version plus the versions of the libraries that build the models, as a folder name."""
    versions = [f"zoo={BUILD_VERSION}", f"openvino={ov.get_version()}"]
    for dist in ZOO_PACKAGES:
        try:
            versions.append(f"{dist}={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{dist}=absent")
    return f"v{BUILD_VERSION}-" + hashlib.sha256(";".join(versions).encode()).hexdigest()[:12]


def cache_root() -> pathlib.Path:
    """``$BISECT_OV_ZOO_CACHE``, or ``bisect_ov/zoo`` under the user's cache folder."""
    env = os.environ.get("BISECT_OV_ZOO_CACHE")
    if env:
        return pathlib.Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "bisect_ov" / "zoo"


def _entry(name: str) -> Entry:
    entry = MODELS.get(name) or TWINS.get(name)
    if entry is None:
        raise InputError(f"Unknown zoo model '{name}'. Available: {sorted(MODELS)}; twins: {sorted(TWINS)}.")
    return entry


def _folder(root: str | os.PathLike | None) -> pathlib.Path:
    return pathlib.Path(root) if root is not None else cache_root() / version_key()


def model_path(name: str, size: str = "small", *, compressed: bool = False,
               root: str | os.PathLike | None = None) -> pathlib.Path:
    """The IR ``.xml`` of a zoo model, built (and cached) if it is not there yet.

    Parameters
    ----------
    name
        A key of `MODELS` or `TWINS`.
    size
        ``"small"`` (test configuration) or ``"full"`` (the published sizes, for benchmarks).
    compressed
        True for the IR saved with ``ov.save_model``'s default f16 weight compression; False for f32 weights.
    root
        The folder holding the built files; None for ``cache_root() / version_key()``.

    Raises
    ------
    InputError
        Unknown name or size, or the ``zoo`` extra is missing and the model is not built yet.
    """
    entry = _entry(name)
    if size not in SIZES:
        raise InputError(f"Unknown zoo size '{size}'. Available: {list(SIZES)}.")
    folder = _folder(root)
    stem = f"{name}-{size}"
    xml = folder / f"{stem}.{'f16' if compressed else 'f32'}.xml"
    if (folder / f"{stem}.json").is_file():
        return xml
    missing = missing_packages()
    if missing:
        raise InputError(f"Zoo model '{name}' is not built in {folder} and building it needs {missing}. "
                         f"Install them with: {install_hint('zoo')}.")
    folder.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock

    with FileLock(str(folder / f"{stem}.lock")):
        if not (folder / f"{stem}.json").is_file():  # another process may have built it while we waited
            _build(entry, size, folder, stem)
    return xml


def _build(entry: Entry, size: str, folder: pathlib.Path, stem: str) -> None:
    if entry.base is None:
        with _one_thread():
            model, meta = entry.build_function()(size)
    else:
        base = ov.Core().read_model(model_path(entry.base, size, root=folder))
        meta = describe(entry.base, size, root=folder)
        model = _make_twin(entry, base, meta)
        meta = {**meta, "converter": f"{meta['converter']}, then {entry.library}", "base": entry.base}
    meta = {**meta, "name": entry.name, "size": size, "library": entry.library}
    with tempfile.TemporaryDirectory(dir=folder, prefix=f".{stem}-") as tmp:
        tmp_path = pathlib.Path(tmp)
        for tag, compress in (("f32", False), ("f16", True)):
            ov.save_model(model, str(tmp_path / f"{stem}.{tag}.xml"), compress_to_fp16=compress)
        (tmp_path / f"{stem}.json").write_text(json.dumps(meta, indent=1))
        # The IRs first, the JSON last: the JSON says the model is complete.
        for tag in ("f32", "f16"):
            for ext in ("bin", "xml"):
                os.replace(tmp_path / f"{stem}.{tag}.{ext}", folder / f"{stem}.{tag}.{ext}")
        os.replace(tmp_path / f"{stem}.json", folder / f"{stem}.json")


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """torch on one thread while a model is built: its reductions (a BatchNorm calibration's running sums) then
    add in one order, so a model is the same bits whatever the machine's load or core count (on two threads
    MobileNetV3's weights came out different from one thread's)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _make_twin(entry: Entry, base: ov.Model, meta: dict) -> ov.Model:
    build = entry.build_function()
    if entry.twin == "int8":
        return build(base, lambda seed: _inputs_from(meta, base, seed))
    return build(base, bits=8 if entry.twin == "int8w" else 4)


def describe(name: str, size: str = "small", *, root: str | os.PathLike | None = None) -> dict:
    """The JSON description of a built zoo model: inputs, converter, library (built if needed)."""
    xml = model_path(name, size, root=root)
    return json.loads((xml.parent / f"{name}-{size}.json").read_text())


def load(name: str, size: str = "small", *, compressed: bool = False,
         root: str | os.PathLike | None = None) -> ov.Model:
    """A zoo model as an `ov.Model` (built and cached on first use); see `model_path`."""
    return ov.Core().read_model(model_path(name, size, compressed=compressed, root=root))


def sample_inputs(name: str, size: str = "small", seed: int = 0, *, root: str | os.PathLike | None = None,
                  model: ov.Model | None = None) -> dict[str, np.ndarray]:
    """Seeded inputs that match a zoo model, keyed by input name.

    Token ids are drawn within the vocabulary, attention masks are all ones, positions count from 0, the beam
    index is 0 for each batch row, float inputs (images, mel features) are standard normal.
    """
    meta = describe(name, size, root=root)
    return _inputs_from(meta, model if model is not None else load(name, size, root=root), seed)


def _inputs_from(meta: dict, model: ov.Model, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    types = {p.output(0).get_any_name(): p.output(0).get_element_type().to_dtype() for p in model.get_parameters()}
    arrays = {}
    for name, spec in meta["inputs"].items():
        shape = tuple(spec["shape"])
        dtype = types.get(name, np.float32)
        value: np.ndarray
        if "vocab" in spec:
            value = rng.integers(0, spec["vocab"], shape)
        elif name == "attention_mask":
            value = np.ones(shape)
        elif name == "position_ids":
            value = np.broadcast_to(np.arange(shape[-1]), shape)
        elif name == "beam_idx":
            value = np.zeros(shape)
        else:
            value = rng.standard_normal(shape)
        arrays[name] = np.asarray(value, dtype=dtype, order="C")
    return arrays
