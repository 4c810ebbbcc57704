"""What the host's CPU can do, as its operating system lists it: the model name and the instruction-set flags.

Read once per process from ``/proc/cpuinfo`` (Linux: ``flags`` on x86, ``Features`` on Arm); elsewhere, or when the
file cannot be read, nothing is known and callers keep to what the plugin says.
"""

from __future__ import annotations

import functools
import pathlib
import platform

__all__ = ["cpu_model", "cpu_flags"]


@functools.lru_cache(maxsize=1)
def _read() -> tuple[str | None, frozenset[str] | None]:
    cpuinfo = pathlib.Path("/proc/cpuinfo")
    if platform.system() != "Linux" or not cpuinfo.is_file():
        return None, None
    model, flags = None, None
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and model is None:
                model = value.strip()
            elif key in ("flags", "Features") and flags is None:
                flags = frozenset(value.split())
    except OSError:
        return None, None
    return model, flags


def cpu_model() -> str | None:
    """The CPU's model name (``None`` where the system does not say)."""
    return _read()[0]


def cpu_flags() -> frozenset[str] | None:
    """The CPU's instruction-set flags (``avx2``, ``avx512_bf16``, ``asimddp`` ...); ``None`` where unknown."""
    return _read()[1]
