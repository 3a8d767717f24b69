"""`torch_randn(shape, seed)`: the initial noise, bit for bit what torch 2.13 draws on an x86-64 CPU, in NumPy.

web_src/src/pipeline/rng.js is its twin (tests/test_twins.py holds their constants and their noise equal;
tests/test_rng.py holds this module equal to torch). The reference for each function is the ATen
source named in its "Port of" line, which also fixes its exact float semantics.
"""

from __future__ import annotations

import math

import numpy as np

from builder.errors import InputError

MT_N = 624
MT_M = 397
MT_MATRIX_A = np.uint32(0x9908B0DF)
_MT_UPPER = np.uint32(0x80000000)
_MT_LOWER = np.uint32(0x7FFFFFFF)


# Port of aten/src/ATen/core/MT19937RNGEngine.h (mt19937::init_with_uint32 + next/twist) @ torch 2.13
class _MT19937:
    """The 32-bit Mersenne Twister exactly as torch's CPU generator runs it, producing blocks at a time."""

    def __init__(self, seed: int) -> None:
        state = [0] * MT_N
        state[0] = seed & 0xFFFFFFFF  # manual_seed keeps the low 32 bits
        for j in range(1, MT_N):
            prev = state[j - 1]
            state[j] = (1812433253 * (prev ^ (prev >> 30)) + j) & 0xFFFFFFFF
        self._state = np.array(state, dtype=np.uint32)
        self._left = 0  # no output is buffered: the first draw twists

    def _twist(self) -> None:
        # mt[i] depends on mt[i+1] (old) and mt[i+397 mod 624]; for i >= 227 the latter is already new,
        # so the twist is three vectorised slices that respect that order.
        mt = self._state

        def mix(upper: np.ndarray, lower: np.ndarray, far: np.ndarray) -> np.ndarray:
            y = (upper & _MT_UPPER) | (lower & _MT_LOWER)
            mixed: np.ndarray = far ^ (y >> np.uint32(1)) ^ np.where(y & np.uint32(1), MT_MATRIX_A, np.uint32(0))
            return mixed

        k = MT_N - MT_M  # 227
        mt[0:k] = mix(mt[0:k], mt[1 : k + 1], mt[MT_M:MT_N])
        mt[k : 2 * k] = mix(mt[k : 2 * k], mt[k + 1 : 2 * k + 1], mt[0:k])
        mt[2 * k : MT_N - 1] = mix(mt[2 * k : MT_N - 1], mt[2 * k + 1 : MT_N], mt[k : MT_N - 1 - k])
        mt[MT_N - 1 : MT_N] = mix(mt[MT_N - 1 : MT_N], mt[0:1], mt[MT_M - 1 : MT_M])

    @staticmethod
    def _temper(y: np.ndarray) -> np.ndarray:
        y = y ^ (y >> np.uint32(11))
        y = y ^ ((y << np.uint32(7)) & np.uint32(0x9D2C5680))
        y = y ^ ((y << np.uint32(15)) & np.uint32(0xEFC60000))
        tempered: np.ndarray = y ^ (y >> np.uint32(18))
        return tempered

    def next_uint32(self, count: int) -> np.ndarray:
        """The next `count` 32-bit outputs, in order."""
        out = np.empty(count, dtype=np.uint32)
        filled = 0
        while filled < count:
            if self._left == 0:
                self._twist()
                self._left = MT_N
            start = MT_N - self._left
            take = min(self._left, count - filled)
            out[filled : filled + take] = self._temper(self._state[start : start + take])
            self._left -= take
            filled += take
        return out


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 fused multiply-add, correctly rounded, without a native fma.

    The product of two float32 values is exact in float64. The float64 sum is then rounded *to odd* (if the
    TwoSum residual is non-zero and the sum's last bit is even, step one ulp toward the residual), and a
    value rounded to odd with >= 2 extra bits rounds correctly to float32 (Boldo & Melquiond 2008).
    """
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = np.asarray(c, dtype=np.float64)
    s = p + c64
    bb = s - p
    residual = (p - (s - bb)) + (c64 - bb)
    even = (s.view(np.int64) & 1) == 0
    fix = (residual != 0) & even
    if np.any(fix):
        s = np.where(fix, np.nextafter(s, np.where(residual > 0, np.inf, -np.inf)), s)
    return s.astype(np.float32)


_F32 = np.float32
# Constants of aten/src/ATen/native/cpu/avx_mathfun.h, rounded to float32 as the header's float arrays are.
SQRTHF = _F32(0.707106781186547524)
LOG_P = tuple(
    _F32(v)
    for v in (
        7.0376836292e-2,
        -1.1514610310e-1,
        1.1676998740e-1,
        -1.2420140846e-1,
        1.4249322787e-1,
        -1.6668057665e-1,
        2.0000714765e-1,
        -2.4999993993e-1,
        3.3333331174e-1,
    )
)
LOG_Q1 = _F32(-2.12194440e-4)
LOG_Q2 = _F32(0.693359375)
MINUS_DP1 = _F32(-0.78515625)
MINUS_DP2 = _F32(-2.4187564849853515625e-4)
MINUS_DP3 = _F32(-3.77489497744594108e-8)
SINCOF_P0 = _F32(-1.9515295891e-4)
SINCOF_P1 = _F32(8.3321608736e-3)
SINCOF_P2 = _F32(-1.6666654611e-1)
COSCOF_P0 = _F32(2.443315711809948e-005)
COSCOF_P1 = _F32(-1.388731625493765e-003)
COSCOF_P2 = _F32(4.166664568298827e-002)
FOPI = _F32(1.27323954473516)
TWO_PI = _F32(2.0 * math.pi)


# Port of aten/src/ATen/native/cpu/avx_mathfun.h log256_ps @ torch 2.13, with GCC's -ffp-contract=fast FMAs
def _log256_ps(x: np.ndarray) -> np.ndarray:
    one = _F32(1.0)
    x = np.maximum(x, np.array(0x00800000, dtype=np.uint32).view(np.float32))  # cut off denormals
    bits = x.view(np.uint32)
    exponent = (bits >> np.uint32(23)).astype(np.int32) - 127
    x = ((bits & np.uint32(~0x7F800000 & 0xFFFFFFFF)) | np.uint32(0x3F000000)).view(np.float32)  # mantissa in [.5,1)
    e = exponent.astype(np.float32) + one
    mask = x < SQRTHF
    tmp = np.where(mask, x, _F32(0.0))
    x = x - one
    e = e - np.where(mask, one, _F32(0.0))
    x = x + tmp
    z = x * x
    y = np.full_like(x, LOG_P[0])
    for coefficient in LOG_P[1:]:
        y = fma32(y, x, np.full_like(x, coefficient))
    y = y * x
    y = fma32(y, z, e * LOG_Q1)
    y = fma32(z, np.full_like(z, _F32(-0.5)), y)
    x = x + y
    return fma32(e, np.full_like(e, LOG_Q2), x)


# Port of aten/src/ATen/native/cpu/avx_mathfun.h sincos256_ps @ torch 2.13, with GCC's -ffp-contract=fast FMAs
def _sincos256_ps(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sign_sin = np.signbit(x)
    x = np.abs(x)
    j = (x * FOPI).astype(np.int32)  # cvttps: truncation
    j = (j + 1) & ~1
    y = j.astype(np.float32)
    sign_sin = sign_sin ^ ((j & 4) != 0)
    sign_cos = (~(j - 2) & 4) != 0
    poly_sin = (j & 2) == 0  # this quadrant takes the sine polynomial for sin, the cosine one for cos
    for dp in (MINUS_DP1, MINUS_DP2, MINUS_DP3):  # extended-precision range reduction x = ((x - y*DP1) - y*DP2) - y*DP3
        x = fma32(y, np.full_like(y, dp), x)
    z = x * x
    yc = fma32(fma32(np.full_like(z, COSCOF_P0), z, np.full_like(z, COSCOF_P1)), z, np.full_like(z, COSCOF_P2))
    yc = yc * z
    yc = fma32(yc, z, -(z * _F32(0.5)))
    yc = yc + _F32(1.0)
    ys = fma32(fma32(np.full_like(z, SINCOF_P0), z, np.full_like(z, SINCOF_P1)), z, np.full_like(z, SINCOF_P2))
    ys = ys * z
    ys = fma32(ys, x, x)
    sin = np.where(poly_sin, ys, yc)
    cos = np.where(poly_sin, yc, ys)
    sin = np.where(sign_sin, -sin, sin)
    cos = np.where(sign_cos, -cos, cos)
    return sin, cos


# Port of aten/src/ATen/native/cpu/DistributionTemplates.h NormalFill16<float> (AVX2) @ torch 2.13
def _normal_fill_16(blocks: np.ndarray) -> np.ndarray:
    """[k, 16] uniforms -> [k, 16] normals: Box-Muller over the pairs (j, j+8) of each block."""
    u1 = _F32(1.0) - blocks[:, :8]  # [0, 1) -> (0, 1] for the log
    u2 = blocks[:, 8:]
    radius = np.sqrt(_F32(-2.0) * _log256_ps(u1))
    theta = TWO_PI * u2
    sin, cos = _sincos256_ps(theta)
    # The kernel's final fmadd(n, std=1, mean=0) is exact, except that it turns -0 into +0.
    return np.concatenate([radius * cos + _F32(0.0), radius * sin + _F32(0.0)], axis=1)


def _uniform_float(raw: np.ndarray) -> np.ndarray:
    # Port of aten/src/ATen/core/TransformationHelper.h uniform_real<float>: 24 random bits * 2^-24
    return (raw & np.uint32(0xFFFFFF)).astype(np.float32) * _F32(2.0**-24)


# Port of aten/src/ATen/core/DistributionsHelper.h normal_distribution<double> @ torch 2.13 (numel < 16 path)
def _randn_small(generator: _MT19937, count: int) -> np.ndarray:
    """Fewer than 16 values: torch draws each one in double with libm and caches the pair's sine."""
    out = np.empty(count, dtype=np.float32)
    cached: float | None = None
    for i in range(count):
        if cached is not None:
            out[i], cached = cached, None
            continue
        # uniform_real<double>: a 64-bit draw (first 32-bit output high) masked to 53 bits, times 2^-53
        raw = generator.next_uint32(4)
        u1 = ((int(raw[0]) << 32 | int(raw[1])) & ((1 << 53) - 1)) * 2.0**-53
        u2 = ((int(raw[2]) << 32 | int(raw[3])) & ((1 << 53) - 1)) * 2.0**-53
        radius = math.sqrt(-2.0 * math.log1p(-u2))  # math.* is the same glibc libm torch calls
        theta = 2.0 * math.pi * u1
        cached = radius * math.sin(theta)
        out[i] = radius * math.cos(theta)
    return out


# Port of torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed)) — aten normal_kernel @ torch 2.13
def torch_randn(shape: tuple[int, ...] | list[int], seed: int) -> np.ndarray:
    """Standard normal float32 noise, bit for bit what torch 2.13 draws on an x86-64 CPU.

    As in torch, seeds that agree modulo 2^32 give the same noise. x86-64 torch wheels run the AVX2
    kernel (also on AVX-512 machines); aarch64 torch builds differ in the last bits.
    """
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise InputError(f"`shape` must not have negative dimensions, got {shape}.")
    if not 0 <= int(seed) < 2**64:
        raise InputError(f"`seed` must be an integer in [0, 2**64), got {seed}; use e.g. 42.")
    count = math.prod(shape)
    generator = _MT19937(int(seed))
    if count < 16:
        return _randn_small(generator, count).reshape(shape)
    # All uniforms first, in memory order; then Box-Muller on each block of 16 in place.
    data = _uniform_float(generator.next_uint32(count))
    whole = count // 16 * 16
    data[:whole] = _normal_fill_16(data[:whole].reshape(-1, 16)).reshape(-1)
    if count % 16:
        # torch redraws 16 fresh uniforms for the last 16 slots, overwriting already transformed values.
        tail = _uniform_float(generator.next_uint32(16))
        data[count - 16 :] = _normal_fill_16(tail.reshape(1, 16)).reshape(-1)
    return data.reshape(shape)
