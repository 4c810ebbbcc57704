"""What to install for an optional part, said in a way that works: the dependency itself, or the extra from a
checkout of bisect_ov.

The project is installed from its source (``pip install -e .``), not from a package index, so a hint that names
the project with an extra names nothing a user can install (and unquoted brackets fail in zsh). Every
install hint in the package is built here (`install_hint`), from `EXTRAS`, which mirrors the extras of
pyproject.toml (a test keeps the two equal).
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

__all__ = ["EXTRAS", "install_hint", "hub_offline"]

# extra -> the packages it brings (as pip names them, without versions), in pyproject.toml's order.
EXTRAS: dict[str, tuple[str, ...]] = {
    "plot": ("matplotlib",),
    "dataframe": ("pandas",),
    "cluster": ("dask[distributed]",),
    "ray": ("ray",),
    "notebook": ("matplotlib", "pandas", "ipykernel", "nbclient", "nbformat", "nbconvert", "jupyterlab"),
    "model-explorer": ("ai-edge-model-explorer", "model-explorer-onnx"),
    "zoo": ("torch", "torchvision", "transformers", "timm", "optimum-intel", "nncf", "filelock", "diffusers"),
    "ort": ("onnxruntime",),
}


def install_hint(extra: str, *packages: str) -> str:
    """The command that installs `packages` (default: all of `extra`'s), and the extra from a checkout.

    Examples
    --------
    >>> install_hint("plot")
    "pip install matplotlib (or, in a checkout of bisect_ov: pip install -e '.[plot]')"
    >>> install_hint("cluster")
    "pip install 'dask[distributed]' (or, in a checkout of bisect_ov: pip install -e '.[cluster]')"
    """
    names = packages or EXTRAS[extra]
    quoted = " ".join(f"'{name}'" if "[" in name else name for name in names)
    return f"pip install {quoted} (or, in a checkout of bisect_ov: pip install -e '.[{extra}]')"


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """The Hugging Face hub switched off for the duration (``HF_HUB_OFFLINE``, ``TRANSFORMERS_OFFLINE``): the
    optional libraries that export or load models (optimum-intel, transformers) fetch nothing. The variables are
    restored afterwards, unset where they were unset."""
    keys = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: "1" for k in keys})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
