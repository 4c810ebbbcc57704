"""Turn whatever the user passed as a model into an `openvino.Model`.

Accepted: an `ov.Model` (used as is: nothing here modifies it), a path to an OpenVINO IR `.xml`, an `.onnx`
file, any other file OpenVINO's frontends read (`.pb`, `.tflite`, `.pdmodel`), an `onnx.ModelProto`, or any
object `openvino.convert_model` takes (a PyTorch module, a TensorFlow function, ...). Every failure becomes an
`InputError` that says what was given and what would work.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import re
import sys
import tempfile
from typing import Any, Iterator

import openvino as ov

from bisect_ov.core.errors import InputError, first_line, raise_if_interrupted
from bisect_ov.core.fileio import onnx_external_files

log = logging.getLogger(__name__)

__all__ = ["load_model", "model_label"]

_FILE_SUFFIXES = (".xml", ".onnx", ".pb", ".tflite", ".pdmodel", ".savedmodel")


def load_model(model: Any, *, core: ov.Core | None = None) -> ov.Model:
    """Return an `ov.Model` for `model`.

    Parameters
    ----------
    model
        An `ov.Model`, a path (str or `os.PathLike`) to `.xml`/`.onnx`/other framework file, an
        `onnx.ModelProto`, or anything `openvino.convert_model` accepts.
    core
        The `ov.Core` to read files with; a new one when None.

    Returns
    -------
    openvino.Model
        The user's model itself when an `ov.Model` was passed: callers clone before rewriting.

    Raises
    ------
    InputError
        Missing file, unknown format, or a file or object OpenVINO cannot read.
    """
    if isinstance(model, ov.Model):
        return model
    if isinstance(model, (str, os.PathLike)):
        return _read_file(pathlib.Path(model), core or ov.Core())
    if type(model).__name__ == "ModelProto" and type(model).__module__.startswith("onnx"):
        return _read_onnx_proto(model, core or ov.Core())
    try:
        return ov.convert_model(model)
    except Exception as err:  # convert_model raises many unrelated types
        raise_if_interrupted(err)
        raise InputError(
            f"Cannot convert a {type(model).__name__} to an OpenVINO model: {first_line(err)}. "
            "Pass an ov.Model, a path to .xml or .onnx, or an object openvino.convert_model accepts."
        ) from err


def model_label(model: Any) -> str:
    """A short human-readable label for the model argument, used in reports."""
    if isinstance(model, (str, os.PathLike)):
        return pathlib.Path(model).name
    if isinstance(model, ov.Model):
        name = model.get_friendly_name()
        frontend = re.fullmatch(r"([A-Za-z]+)_Frontend_IR", name)  # a frontend's name for any model it read
        return f"ov.Model from {frontend.group(1).upper()}" if frontend else name or "ov.Model"
    return type(model).__name__


def _read_file(path: pathlib.Path, core: ov.Core) -> ov.Model:
    if not path.exists():
        raise InputError(f"Model file not found: '{path}'. Check the path; the current directory is '{os.getcwd()}'.")
    if path.is_dir():
        if (path / "model_index.json").is_file():  # a diffusers export: its models in subfolders
            parts = sorted(p.parent.name for p in path.glob("*/openvino_model.xml"))
            raise InputError(f"'{path}' is a diffusion pipeline export (model_index.json; models in {', '.join(parts)}): "
                             f"compare the whole pipeline with bisect-ov pipeline '{path}', or pass one model, e.g. "
                             f"'{path / (parts or ['unet'])[0] / 'openvino_model.xml'}'.")
        irs = sorted(p.name for p in path.glob("openvino*.xml"))
        if irs and not (path / "saved_model.pb").exists():  # an optimum-intel export: its IRs, not a SavedModel
            models = [name for name in irs if "tokenizer" not in name]  # a tokenizer turns text into the ids
            if not models:
                raise InputError(f"'{path}' holds only a tokenizer ({', '.join(irs)}): it turns text into token ids. "
                                 "Compare the model that reads them (in the export folder above it).")
            if len(models) == 1:
                raise InputError(f"'{path}' is an export folder ({', '.join(irs)}): pass its model, "
                                 f"'{path / models[0]}'.")
            raise InputError(f"'{path}' is a folder of OpenVINO IRs ({', '.join(irs)}): pass one of them, e.g. "
                             f"'{path / (models or irs)[0]}', or compare the whole pipeline with bisect-ov pipeline '{path}'.")
        # A TensorFlow SavedModel is a folder; convert_model reads it.
        try:
            return ov.convert_model(str(path))
        except Exception as err:
            raise_if_interrupted(err)
            raise InputError(
                f"Cannot read the folder '{path}' as a model: {first_line(err)}. "
                "Pass an IR .xml, an .onnx file, or a SavedModel folder."
            ) from err
    suffix = path.suffix.lower()
    if suffix == ".bin":
        raise InputError(f"'{path}' is the weights file of an IR; pass the '.xml' beside it.")
    if suffix not in _FILE_SUFFIXES:
        raise InputError(
            f"Unknown model format '{suffix or '(no suffix)'}' for '{path}'. "
            f"Supported: {', '.join(_FILE_SUFFIXES)} files, an ov.Model, or an object openvino.convert_model accepts."
        )
    if suffix == ".onnx":  # its weights kept in files beside it: a missing one read "Invalid usage of method ..."
        missing = [f.name for f in onnx_external_files(path) if not f.is_file()]
        if missing:
            raise InputError(f"'{path}' keeps its weights in external data file(s) that are missing: "
                             f"{', '.join(missing[:4])}. Put them beside it, as the model names them.")
    try:
        with native_stderr_to_log(f"reading '{path.name}'"):
            if suffix in (".xml", ".onnx"):
                return core.read_model(str(path))
            return ov.convert_model(str(path))
    except Exception as err:
        raise_if_interrupted(err)
        if "opset: extension" in str(err) and "tokenizer" in path.name:
            raise InputError(f"'{path}' is an openvino-tokenizers model (text in, token ids out): bisect_ov compares "
                             "models on numeric tensors. Compare the model that reads its token ids.") from err
        raise InputError(f"Cannot read model '{path}': {first_line(err)}. Is the file complete and valid?") from err


@contextlib.contextmanager
def native_stderr_to_log(what: str) -> Iterator[None]:
    """Route what native code writes to file descriptor 2 meanwhile into the `bisect_ov` log.

    OpenVINO's frontends try every format on a file they cannot read, and some print parser messages straight
    to the process's stderr (an unreadable .onnx file gives TensorFlow text-format errors); the user gets one
    clear error instead, and the lines stay available at DEBUG level.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (some notebook kernels): nothing to route
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode(errors="replace").strip()
            if text:
                log.debug("Native messages while %s:\n%s", what, text)


def _read_onnx_proto(proto: Any, core: ov.Core) -> ov.Model:
    # Going through a file keeps ONNX tensor names exactly as core.read_model keeps them for a path.
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "model.onnx"
        path.write_bytes(proto.SerializeToString())
        return _read_file(path, core)

