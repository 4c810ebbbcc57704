"""Fixtures of the zoo tier: real architectures from `bisect_ov.zoo`, built once per session into the cache.

Without the ``zoo`` extra (torch, transformers, timm, torchvision, optimum-intel, nncf) the tests that need
it are skipped with the list of what is missing; a cache that already holds the built models still works.
"""

from __future__ import annotations

import functools

import pytest

from bisect_ov.zoo import cache

MISSING = cache.missing_packages()
needs_zoo = pytest.mark.skipif(bool(MISSING), reason=f"the zoo extra is not installed (missing {MISSING}): "
                                                      "pip install -e '.[zoo]'")


@functools.lru_cache(maxsize=None)
def zoo_model(name: str, compressed: bool = False):
    """A small zoo model (f32 weights unless `compressed`), built on first use by any worker."""
    return cache.load(name, "small", compressed=compressed)


@functools.lru_cache(maxsize=None)
def zoo_inputs(name: str, seed: int = 1):
    entry = cache.TWINS.get(name)
    base = entry.base if entry else name
    return cache.sample_inputs(base, "small", seed, model=zoo_model(base))
