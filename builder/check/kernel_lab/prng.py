"""The lab's inputs, bit for bit as its page makes them (web_src/src/lab/prng.js).

Value i of a tensor is a 32-bit integer hash of (i + seed * 0x9E3779B9) mod 2**32. A float input keeps the hash's
top 10 bits k as (k - 512) / 512 * scale + offset: exact in fp16 and fp32 for power-of-two scales, so the float64
reference starts from the very numbers the GPU got.
"""

from __future__ import annotations

import numpy as np

GOLDEN = 0x9E3779B9


def hash32(x: np.ndarray) -> np.ndarray:
    """The page's hash32 on a uint32 array (uint32 arithmetic wraps as Math.imul does)."""
    x = x.astype(np.uint32, copy=True)
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
    return x


def random_words(seed: int, count: int) -> np.ndarray:
    base = (seed * GOLDEN) & 0xFFFFFFFF
    index = (np.arange(count, dtype=np.uint64) + np.uint64(base)) & np.uint64(0xFFFFFFFF)
    return hash32(index.astype(np.uint32))


def random_floats(seed: int, count: int, *, scale: float = 1.0, offset: float = 0.0) -> np.ndarray:
    """float64 values on the page's grid (before it stores them as float32 or fp16)."""
    top = (random_words(seed, count) >> np.uint32(22)).astype(np.int64)
    return (top - 512) * (scale / 512) + offset


def stored(values: np.ndarray, dtype: str) -> np.ndarray:
    """`values` as the page uploads them in `dtype` ('f16', 'f32'), back in float64."""
    if dtype == "f16":
        return values.astype(np.float16).astype(np.float64)
    if dtype == "f32":
        return values.astype(np.float32).astype(np.float64)
    raise ValueError(f"no float dtype {dtype!r}")
