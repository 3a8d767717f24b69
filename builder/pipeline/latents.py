"""Latent bookkeeping of Flux2KleinPipeline in NumPy: position ids of image and text tokens, packing [1, C, H, W] into
[1, H*W, C] tokens and back, the float32 Euler update, and inpainting's noising, mask blend and mask on the latent
grid. Bit-exact with diffusers 0.42.1 + torch 2.13 (CPU, float32).

web_src/src/pipeline/latents.js is its twin (tests/test_twins.py holds their constants and their results equal;
tests/test_latents.py and tests/test_reference_editing.py hold this module equal to diffusers).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from builder.errors import InputError
from builder.pipeline.rng import fma32

LATENT_CHANNELS = 128  # transformer.config.in_channels: 32 VAE latent channels x 2x2 patch
PATCH = 16  # vae_scale_factor * 2: one latent token per 16x16 pixels
IMAGE_ID_SCALE = 10  # _prepare_image_ids' scale: conditioning image k's tokens sit at time coordinate 10 * (k + 1)


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


# Port of diffusers.schedulers.scheduling_flow_match_euler_discrete.FlowMatchEulerDiscreteScheduler.step @ 0.42.1
def euler_step(sample: np.ndarray, velocity: np.ndarray, sigma: np.float32, sigma_next: np.float32) -> np.ndarray:
    """x + (sigma_next - sigma) * v in float32, with torch's two separate roundings (no FMA)."""
    dt = np.float32(np.float32(sigma_next) - np.float32(sigma))
    return (sample.astype(np.float32) + (dt * velocity.astype(np.float32))).astype(np.float32)


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline._prepare_image_ids and
# pipeline_flux2_klein_inpaint.Flux2KleinInpaintPipeline._prepare_image_ids (batch 1) @ 0.42.1
def prepare_image_ids(sizes: Sequence[tuple[int, int]]) -> np.ndarray:
    """int64 [sum(h*w), 4]: for the k-th (latent_h, latent_w) in `sizes`, rows (IMAGE_ID_SCALE * (k + 1), y, x, 0) in
    raster order: the first conditioning image sits at t=10, the next at 20, ...

    Both pipelines give every conditioning image its own time coordinate; the inpainting pipeline's source image
    is the first of them (t=10) and its references follow (t=20, 30, ...), also when they come as one batch.
    """
    blocks = []
    for k, (height, width) in enumerate(sizes):
        ids = prepare_latent_ids(height, width)
        ids[:, 0] = IMAGE_ID_SCALE * (k + 1)
        blocks.append(ids)
    if not blocks:
        return np.zeros((0, 4), dtype=np.int64)
    return np.concatenate(blocks, axis=0)


# Port of diffusers.schedulers.scheduling_flow_match_euler_discrete.FlowMatchEulerDiscreteScheduler.scale_noise @ 0.42.1
def scale_noise(sample: np.ndarray, sigma: np.float32 | float, noise: np.ndarray) -> np.ndarray:
    """sigma * noise + (1 - sigma) * sample in float32, each operation rounded as torch's separate kernels do."""
    s = np.float32(sigma)
    return (s * noise.astype(np.float32) + (np.float32(1.0) - s) * sample.astype(np.float32)).astype(np.float32)


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein_inpaint.Flux2KleinInpaintPipeline.__call__ mask blend @ 0.42.1
def blend_mask(latents: np.ndarray, image_latents: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(1 - mask) * image_latents + mask * latents in float32: keep the image where the mask is 0."""
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
    out = fma32(top[:, x0], weight(h0, w0), top[:, x1] * weight(h0, w1))
    out = fma32(bottom[:, x0], weight(h1, w0), out)
    out = fma32(bottom[:, x1], weight(h1, w1), out)
    return np.ascontiguousarray(out.reshape(1, latent_h * latent_w, 1), dtype=np.float32)
