"""Numeric facts of the formats the tool reasons about, in one place: largest finite values, smallest normal
values and unit roundoffs. Pure constants; every layer may import this module.
"""

from __future__ import annotations

__all__ = ["F16_MAX", "F16_MIN_NORMAL", "BF16_MAX", "F32_MAX", "UNIT_ROUNDOFF"]

F16_MAX = 65504.0
"""Largest finite IEEE binary16 value."""
F16_MIN_NORMAL = 2.0**-14
"""Smallest normal binary16 value (about 6.1e-5); below it values lose precision (subnormals)."""
BF16_MAX = 3.3895313892515355e38
"""Largest finite bfloat16 value."""
F32_MAX = 3.4028234663852886e38
"""Largest finite float32 value (Hugging Face masks add its negative)."""

UNIT_ROUNDOFF = {
    "f64": 2.0**-53,
    "f32": 2.0**-24,
    "tf32": 2.0**-11,
    "f16": 2.0**-11,
    "bf16": 2.0**-8,
    "f8e4m3": 2.0**-4,
    "f8e5m2": 2.0**-3,
    "i8": 2.0**-7,
    "u8": 2.0**-8,
}
"""Unit roundoff (half the distance from 1 to the next value) per precision name."""

# Errors this small are f32-level agreement: different f32 kernels of one op differ by about 1e-7..1e-6, so
# below this a ratio of two errors, or a share of one, says nothing about a defect.
F32_AGREEMENT = 1e-5
