"""What to install for an optional part, said in a way that works: the dependency itself, or the extra from a
checkout of bisect_ov.

The project is installed from its source (``pip install -e .``), not from a package index, so a hint that names
the project with an extra names nothing a user can install (and unquoted brackets fail in zsh). Every
install hint in the package is built here (`install_hint`), from `EXTRAS`, which mirrors the extras of
pyproject.toml (a test keeps the two equal).
"""

from __future__ import annotations

__all__ = ["EXTRAS", "install_hint"]

# extra -> the packages it brings (as pip names them, without versions), in pyproject.toml's order.
EXTRAS: dict[str, tuple[str, ...]] = {
    "plot": ("matplotlib",),
    "dataframe": ("pandas",),
    "cluster": ("dask[distributed]",),
    "ray": ("ray",),
    "notebook": ("matplotlib", "pandas", "ipykernel", "nbclient", "nbformat", "nbconvert", "jupyterlab"),
    "model-explorer": ("ai-edge-model-explorer", "model-explorer-onnx"),
    "zoo": ("torch", "torchvision", "transformers", "timm", "optimum-intel", "nncf", "filelock"),
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
