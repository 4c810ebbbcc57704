"""Models built in code and real topologies with seeded weights, for examples, tests and benchmarks.

The code-built models (`bisect_ov.zoo.synthetic`, `bisect_ov.zoo.onnx_light`) need the core install; the real
architectures (`hf`, `vision`, `optimum`, `twins`, `llm_cases`) need the ``zoo`` extra, and say so
(`require_zoo`) instead of failing on a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib

from bisect_ov.core.extras import install_hint

__all__ = ["ZOO_EXTRA", "require_zoo"]

ZOO_EXTRA = install_hint("zoo")


def require_zoo(what: str, *modules: str) -> None:
    """Import `modules`, or raise `ModuleNotFoundError` saying that `what` needs the zoo extra and how to install it.

    Examples
    --------
    >>> require_zoo("a sum", "math")
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ModuleNotFoundError(f"{what} needs the zoo extra, and '{module}' is not installed: {ZOO_EXTRA}.",
                                      name=module) from err
