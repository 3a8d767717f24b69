"""Sampling numerics of Flux2KleinPipeline in pure NumPy: torch-exact noise, the flow-match schedule, ids, packing.

Everything here is bit-exact with diffusers 0.42.1 + torch 2.13 (CPU, float32) and is what the web app's
`pipeline/rng.js`, `pipeline/schedule.js` and `pipeline/latents.js` port to JavaScript. The reference for
each function is the diffusers (or ATen) source named in its "Port of" line, which also fixes its exact float
semantics.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from builder.errors import InputError

# --------------------------------------------------------------------------------------------------------------------
# torch.randn on a CPU generator
# --------------------------------------------------------------------------------------------------------------------

_MT_N = 624
_MT_M = 397
_MT_MATRIX_A = np.uint32(0x9908B0DF)
_MT_UPPER = np.uint32(0x80000000)
_MT_LOWER = np.uint32(0x7FFFFFFF)


# Port of aten/src/ATen/core/MT19937RNGEngine.h (mt19937::init_with_uint32 + next/twist) @ torch 2.13
class _MT19937:
    """The 32-bit Mersenne Twister exactly as torch's CPU generator runs it, producing blocks at a time."""

    def __init__(self, seed: int) -> None:
        state = [0] * _MT_N
        state[0] = seed & 0xFFFFFFFF  # manual_seed keeps the low 32 bits
        for j in range(1, _MT_N):
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
            mixed: np.ndarray = far ^ (y >> np.uint32(1)) ^ np.where(y & np.uint32(1), _MT_MATRIX_A, np.uint32(0))
            return mixed

        k = _MT_N - _MT_M  # 227
        mt[0:k] = mix(mt[0:k], mt[1 : k + 1], mt[_MT_M:_MT_N])
        mt[k : 2 * k] = mix(mt[k : 2 * k], mt[k + 1 : 2 * k + 1], mt[0:k])
        mt[2 * k : _MT_N - 1] = mix(mt[2 * k : _MT_N - 1], mt[2 * k + 1 : _MT_N], mt[k : _MT_N - 1 - k])
        mt[_MT_N - 1 : _MT_N] = mix(mt[_MT_N - 1 : _MT_N], mt[0:1], mt[_MT_M - 1 : _MT_M])

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
                self._left = _MT_N
            start = _MT_N - self._left
            take = min(self._left, count - filled)
            out[filled : filled + take] = self._temper(self._state[start : start + take])
            self._left -= take
            filled += take
        return out


def _fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
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
_SQRTHF = _F32(0.707106781186547524)
_LOG_P = [
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
]
_LOG_Q1 = _F32(-2.12194440e-4)
_LOG_Q2 = _F32(0.693359375)
_MINUS_DP = (_F32(-0.78515625), _F32(-2.4187564849853515625e-4), _F32(-3.77489497744594108e-8))
_SINCOF = (_F32(-1.9515295891e-4), _F32(8.3321608736e-3), _F32(-1.6666654611e-1))
_COSCOF = (_F32(2.443315711809948e-005), _F32(-1.388731625493765e-003), _F32(4.166664568298827e-002))
_FOPI = _F32(1.27323954473516)
_TWO_PI_F32 = _F32(2.0 * math.pi)


# Port of aten/src/ATen/native/cpu/avx_mathfun.h log256_ps @ torch 2.13, with GCC's -ffp-contract=fast FMAs
def _log256_ps(x: np.ndarray) -> np.ndarray:
    one = _F32(1.0)
    x = np.maximum(x, np.array(0x00800000, dtype=np.uint32).view(np.float32))  # cut off denormals
    bits = x.view(np.uint32)
    exponent = (bits >> np.uint32(23)).astype(np.int32) - 127
    x = ((bits & np.uint32(~0x7F800000 & 0xFFFFFFFF)) | np.uint32(0x3F000000)).view(np.float32)  # mantissa in [.5,1)
    e = exponent.astype(np.float32) + one
    mask = x < _SQRTHF
    tmp = np.where(mask, x, _F32(0.0))
    x = x - one
    e = e - np.where(mask, one, _F32(0.0))
    x = x + tmp
    z = x * x
    y = np.full_like(x, _LOG_P[0])
    for coefficient in _LOG_P[1:]:
        y = _fma32(y, x, np.full_like(x, coefficient))
    y = y * x
    y = _fma32(y, z, e * _LOG_Q1)
    y = _fma32(z, np.full_like(z, _F32(-0.5)), y)
    x = x + y
    return _fma32(e, np.full_like(e, _LOG_Q2), x)


# Port of aten/src/ATen/native/cpu/avx_mathfun.h sincos256_ps @ torch 2.13, with GCC's -ffp-contract=fast FMAs
def _sincos256_ps(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sign_sin = np.signbit(x)
    x = np.abs(x)
    j = (x * _FOPI).astype(np.int32)  # cvttps: truncation
    j = (j + 1) & ~1
    y = j.astype(np.float32)
    sign_sin = sign_sin ^ ((j & 4) != 0)
    sign_cos = (~(j - 2) & 4) != 0
    poly_sin = (j & 2) == 0  # this quadrant takes the sine polynomial for sin, the cosine one for cos
    for dp in _MINUS_DP:  # extended-precision range reduction x = ((x - y*DP1) - y*DP2) - y*DP3
        x = _fma32(y, np.full_like(y, dp), x)
    z = x * x
    yc = _fma32(_fma32(np.full_like(z, _COSCOF[0]), z, np.full_like(z, _COSCOF[1])), z, np.full_like(z, _COSCOF[2]))
    yc = yc * z
    yc = _fma32(yc, z, -(z * _F32(0.5)))
    yc = yc + _F32(1.0)
    ys = _fma32(_fma32(np.full_like(z, _SINCOF[0]), z, np.full_like(z, _SINCOF[1])), z, np.full_like(z, _SINCOF[2]))
    ys = ys * z
    ys = _fma32(ys, x, x)
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
    theta = _TWO_PI_F32 * u2
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


# --------------------------------------------------------------------------------------------------------------------
# Schedule
# --------------------------------------------------------------------------------------------------------------------

NUM_TRAIN_TIMESTEPS = 1000  # scheduler_config num_train_timesteps of FLUX.2


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein.compute_empirical_mu @ 0.42.1
def compute_empirical_mu(image_seq_len: int, num_steps: int) -> float:
    """The time-shift `mu` for `image_seq_len` packed image tokens and `num_steps` steps (float64, as Python does)."""
    a1, b1 = 8.73809524e-05, 1.89833333
    a2, b2 = 0.00016927, 0.45666666

    if image_seq_len > 4300:
        return float(a2 * image_seq_len + b2)

    m_200 = a2 * image_seq_len + b2
    m_10 = a1 * image_seq_len + b1
    a = (m_200 - m_10) / 190.0
    b = m_200 - 200.0 * a
    return float(a * num_steps + b)


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein.retrieve_timesteps +
# diffusers.schedulers.scheduling_flow_match_euler_discrete.FlowMatchEulerDiscreteScheduler.set_timesteps
# (sigmas given, use_dynamic_shifting=True, time_shift_type="exponential") @ 0.42.1
def retrieve_timesteps(num_steps: int, image_seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(sigmas float32 [N+1] ending in 0, scheduler timesteps float32 [N]) exactly as diffusers computes them."""
    if int(num_steps) < 1:
        raise InputError(f"`num_steps` must be at least 1, got {num_steps}; klein is distilled for 4 steps.")
    mu = compute_empirical_mu(image_seq_len, num_steps)
    # float64 linspace -> float32 (scheduler L349), as Flux2KleinPipeline.__call__ builds it.
    base = np.linspace(1.0, 1 / num_steps, num_steps).astype(np.float32)
    # _time_shift_exponential: math.exp(mu) / (math.exp(mu) + (1 / t - 1) ** 1.0); the Python floats are
    # "weak" under NumPy 2 promotion, so every operation rounds to float32.
    shift = np.float32(math.exp(mu))
    shifted = shift / (shift + (np.float32(1.0) / base - np.float32(1.0)))
    timesteps = (shifted * np.float32(NUM_TRAIN_TIMESTEPS)).astype(np.float32)
    sigmas = np.concatenate([shifted, np.zeros(1, dtype=np.float32)]).astype(np.float32)
    return sigmas, timesteps


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline.__call__ `timestep=timestep / 1000` @ 0.42.1
def model_timestep(timestep: np.float32 | float) -> np.ndarray:
    """The transformer's `timestep` input [1]: f32(t / 1000). Not always equal to sigma (512², step 1 differs)."""
    return np.array([np.float32(timestep) / np.float32(NUM_TRAIN_TIMESTEPS)], dtype=np.float32)


# Port of diffusers.schedulers.scheduling_flow_match_euler_discrete.FlowMatchEulerDiscreteScheduler.step @ 0.42.1
def euler_step(sample: np.ndarray, velocity: np.ndarray, sigma: np.float32, sigma_next: np.float32) -> np.ndarray:
    """x + (sigma_next - sigma) * v in float32, with torch's two separate roundings (no FMA)."""
    dt = np.float32(np.float32(sigma_next) - np.float32(sigma))
    return (sample.astype(np.float32) + (dt * velocity.astype(np.float32))).astype(np.float32)


# --------------------------------------------------------------------------------------------------------------------
# Position ids and packing
# --------------------------------------------------------------------------------------------------------------------


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline._prepare_latent_ids @ 0.42.1
def prepare_latent_ids(height: int, width: int) -> np.ndarray:
    """int64 [h*w, 4] rows (0, y, x, 0) in raster order, for a latent grid of `height` x `width` tokens."""
    y, x = np.meshgrid(np.arange(height, dtype=np.int64), np.arange(width, dtype=np.int64), indexing="ij")
    ids = np.zeros((height * width, 4), dtype=np.int64)
    ids[:, 1] = y.reshape(-1)
    ids[:, 2] = x.reshape(-1)
    return ids


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline._prepare_text_ids @ 0.42.1
def prepare_text_ids(length: int) -> np.ndarray:
    """int64 [L, 4] rows (0, 0, 0, l)."""
    ids = np.zeros((length, 4), dtype=np.int64)
    ids[:, 3] = np.arange(length, dtype=np.int64)
    return ids


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline._pack_latents @ 0.42.1
def pack_latents(latents: np.ndarray) -> np.ndarray:
    """[B, C, H, W] -> [B, H*W, C] (token y*W + x holds channel c = latents[b, c, y, x])."""
    batch, channels, height, width = latents.shape
    return np.ascontiguousarray(latents.reshape(batch, channels, height * width).transpose(0, 2, 1))


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline._unpack_latents_with_ids @ 0.42.1
def unpack_latents(tokens: np.ndarray, height: int, width: int) -> np.ndarray:
    """[B, H*W, C] -> [B, C, H, W], the inverse of `pack_latents` for the raster-order ids above."""
    batch, seq, channels = tokens.shape
    if seq != height * width:
        raise InputError(f"`tokens` has {seq} tokens but the latent grid {height}x{width} needs {height * width}.")
    return np.ascontiguousarray(tokens.transpose(0, 2, 1).reshape(batch, channels, height, width))


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline._prepare_image_ids and
# pipeline_flux2_klein_inpaint.Flux2KleinInpaintPipeline._prepare_image_ids (batch 1) @ 0.42.1
def prepare_image_ids(sizes: Sequence[tuple[int, int]], *, scale: int = 10, start: int | None = None) -> np.ndarray:
    """int64 [sum(h*w), 4]: for the k-th (latent_h, latent_w) in `sizes`, rows (start + scale*k, y, x, 0) in raster
    order. `start` defaults to `scale`: the first conditioning image sits at t=10, the next at 20, ...

    Both pipelines give every conditioning image its own time coordinate; the inpainting pipeline's source image
    is the first of them (t=10) and its references follow (t=20, 30, ...), also when they come as one batch.
    """
    first = scale if start is None else start
    blocks = []
    for k, (height, width) in enumerate(sizes):
        ids = prepare_latent_ids(height, width)
        ids[:, 0] = first + scale * k
        blocks.append(ids)
    if not blocks:
        return np.zeros((0, 4), dtype=np.int64)
    return np.concatenate(blocks, axis=0)


# --------------------------------------------------------------------------------------------------------------------
# Inpainting: strength, noising the source, the mask
# --------------------------------------------------------------------------------------------------------------------


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein_inpaint.Flux2KleinInpaintPipeline.get_timesteps and the
# "steps is < 1" check of its __call__ @ 0.42.1
def inpaint_start(num_steps: int, strength: float) -> int:
    """`t_start`: inpainting runs timesteps[t_start:] with sigmas[t_start:], num_steps - t_start steps.

    In float64 as Python computes it, so 4 steps at strength 0.8 start at 0 (4 - 3.2000000000000002 truncates
    to 0) and run all four; at 0.5 they run the last two.
    """
    init_timestep = min(num_steps * strength, num_steps)
    t_start = int(max(num_steps - init_timestep, 0))
    if num_steps - t_start < 1:
        raise InputError(
            f"`strength` {strength} leaves no denoising step of {num_steps}: inpainting runs "
            f"strength x steps of them; raise the strength or the steps."
        )
    return t_start


# Port of diffusers.schedulers.scheduling_flow_match_euler_discrete.FlowMatchEulerDiscreteScheduler.scale_noise @ 0.42.1
def scale_noise(sample: np.ndarray, sigma: np.float32 | float, noise: np.ndarray) -> np.ndarray:
    """sigma * noise + (1 - sigma) * sample in float32, each operation rounded as torch's separate kernels do."""
    s = np.float32(sigma)
    return (s * noise.astype(np.float32) + (np.float32(1.0) - s) * sample.astype(np.float32)).astype(np.float32)


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein_inpaint.Flux2KleinInpaintPipeline.__call__ mask blend @ 0.42.1
def blend(image_latents: np.ndarray, latents: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(1 - mask) * image_latents + mask * latents in float32: keep the source where the mask is 0."""
    m = mask.astype(np.float32)
    kept = (np.float32(1.0) - m) * image_latents.astype(np.float32)
    return (kept + m * latents.astype(np.float32)).astype(np.float32)


def _linear_taps(input_size: int, output_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Source indices and weights of one axis, as aten's compute_source_index_and_lambda gives them (float32)."""
    index = np.arange(output_size)
    if output_size == input_size:
        return index, index, np.ones(output_size, np.float32), np.zeros(output_size, np.float32)
    # area_pixel_compute_scale (no scale_factor given, align_corners False): float(input) / output
    ratio = np.float32(np.float32(input_size) / np.float32(output_size))
    # area_pixel_compute_source_index: ratio * (dst + 0.5) - 0.5, clamped below at 0
    real = np.maximum(ratio * (index.astype(np.float32) + np.float32(0.5)) - np.float32(0.5), np.float32(0.0))
    index0 = np.minimum(np.floor(real).astype(np.int64), input_size - 1)  # guard_index_and_lambda
    lambda1 = np.minimum(np.maximum(real - index0.astype(np.float32), np.float32(0.0)), np.float32(1.0))
    index1 = index0 + (index0 < input_size - 1)
    return index0, index1, (np.float32(1.0) - lambda1).astype(np.float32), lambda1.astype(np.float32)


# Port of torch.nn.functional.interpolate(mode="bilinear", align_corners=False) on CPU (aten UpSampleKernel.cpp
# cpu_upsample_linear_channels_last, its scalar loop for one channel) @ torch 2.13, as
# Flux2KleinInpaintPipeline.prepare_mask_latents uses it @ diffusers 0.42.1
def mask_latents(mask: np.ndarray, latent_h: int, latent_w: int) -> np.ndarray:
    """Binary pixel mask float32 [H, W] -> float32 [1, latent_h * latent_w, 1], one value per latent token.

    Bilinear with half-pixel centres and no antialiasing: at the pipeline's exact 16x reduction each token is
    the mean of the 2x2 pixels around its centre (weights 0.25 each), so on a 0/1 mask every product and sum is
    exact and the result is bit-exact whichever of aten's kernels runs. For other reductions and fractional
    values this is the kernel aten picks when output height + width <= 128 (bit-exact there); aten's generic
    kernel (larger outputs) and upsampling can differ in the last bit.
    """
    source = np.asarray(mask, dtype=np.float32)
    y0, y1, h0, h1 = _linear_taps(source.shape[0], latent_h)
    x0, x1, w0, w1 = _linear_taps(source.shape[1], latent_w)
    shape = (latent_h, latent_w)

    def weight(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.broadcast_to((a[:, None] * b[None, :]).astype(np.float32), shape)

    # i00*w00 + i01*w01 + i10*w10 + i11*w11 as GCC contracts it for AVX2: the first pair one FMA, then two more.
    top, bottom = source[y0], source[y1]
    out = _fma32(top[:, x0], weight(h0, w0), top[:, x1] * weight(h0, w1))
    out = _fma32(bottom[:, x0], weight(h1, w0), out)
    out = _fma32(bottom[:, x1], weight(h1, w1), out)
    return np.ascontiguousarray(out.reshape(1, latent_h * latent_w, 1), dtype=np.float32)
