"""Stages 3 to 8 of the CPU reference (builder.pipeline.reference): the prompt and the input images encoded, the
noise and the schedule prepared, the denoising loop, the decoded image. Each mirrors its diffusers 0.42.1 pipeline
step; those with a graph run it through a session of reference_models.Models."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from builder.pipeline import imaging, inputs
from builder.pipeline import prompt as prompt_module
from builder.pipeline.guidance import Guidance, guided
from builder.pipeline.inpaint import inpaint_start
from builder.pipeline.latents import (
    LATENT_CHANNELS,
    PATCH,
    blend_mask,
    euler_step,
    mask_latents,
    pack_latents,
    prepare_image_ids,
    prepare_latent_ids,
    prepare_text_ids,
    scale_noise,
    unpack_latents,
)
from builder.pipeline.reference_models import Models
from builder.pipeline.reference_request import InputPlan
from builder.pipeline.rng import torch_randn
from builder.pipeline.schedule import model_timestep, retrieve_timesteps


def encode_prompt(
    models: Models, prompt: str, *, log: Callable[[str], None]
) -> tuple[np.ndarray, prompt_module.PromptTokens]:
    """Stage 3: chat template, tokens padded to 512, then the text encoder -> prompt_embeds [1, 512, joint_dim]."""
    tokens = prompt_module.load_tokenizer(models.model_dir).encode(prompt)
    if tokens.dropped:
        log(f"reference: the prompt is {tokens.dropped} tokens over the 512-token limit; they were dropped")
    with models.session("text_encoder") as session:
        (prompt_embeds,) = session.run(
            ["prompt_embeds"], {"input_ids": tokens.input_ids, "attention_mask": tokens.attention_mask}
        )
    return np.ascontiguousarray(prompt_embeds, dtype=np.float32), tokens


@dataclass(frozen=True)
class Inpainting:
    """What inpainting adds to the denoising loop."""

    image_latents: np.ndarray  # float32 [1, h*w, 128]: the image to inpaint, packed
    mask: np.ndarray  # float32 [1, h*w, 1]: one weight per noise token (1 repaints)


@dataclass(frozen=True)
class Conditioning:
    """Stage 4's output: the input images as tokens the transformer sees after the noise tokens."""

    tokens: np.ndarray  # float32 [1, R, 128]: the packed latents of every image, one after the other
    ids: np.ndarray  # int64 [R, 4]: their rows (10 * (k + 1), y, x, 0)
    inpainting: Inpainting | None


def encode_images(
    models: Models, plan: InputPlan, files: Sequence[inputs.InputFile], mask_file: inputs.InputFile | None
) -> Conditioning:
    """Stage 4: each input prepared as the pipeline does (inputs), the VAE encoder -> BN-normalised latents, packed
    one image after the other; inpainting's mask brought to the latent grid."""
    encoded: list[np.ndarray] = []  # [n, 128, h, w] per encoder run, in token order
    with models.session("vae_encoder") as session:
        for pixels in prepare_images(plan, files):
            (run,) = session.run(["image_latents"], {"image": pixels})
            encoded.append(np.ascontiguousarray(run, dtype=np.float32))
    # Each image of each run, in order, gets its own time coordinate (prepare_image_ids).
    per_image = [run[k : k + 1] for run in encoded for k in range(run.shape[0])]
    inpainting = None
    if mask_file is not None:
        mask_pixels = inputs.inpaint_mask(mask_file, plan.width, plan.height)
        inpainting = Inpainting(
            image_latents=pack_latents(encoded[0]),
            mask=mask_latents(mask_pixels, plan.height // PATCH, plan.width // PATCH),
        )
    return Conditioning(
        tokens=np.concatenate([pack_latents(x) for x in per_image], axis=1),
        ids=prepare_image_ids([(x.shape[2], x.shape[3]) for x in per_image]),
        inpainting=inpainting,
    )


def prepare_images(plan: InputPlan, files: Sequence[inputs.InputFile]) -> Iterator[np.ndarray]:
    """The VAE encoder's input of each run of `plan.encoder_runs`, float32 [n, 3, H, W] in [0, 1]."""
    if plan.mode == "edit":
        # Flux2KleinPipeline encodes the images one by one, each at its own size.
        for item in files:
            yield inputs.edit_image(item)
        return
    yield inputs.inpaint_image(files[0])
    if len(files) > 1:
        # Flux2KleinInpaintPipeline encodes the references as one batch (inputs.inpaint_references).
        yield inputs.inpaint_references(files[1:])


@dataclass(frozen=True)
class Latents:
    """Stage 5's output: the packed noise and the position ids of both token sets."""

    noise: np.ndarray  # float32 [1, h*w, 128]: the noise, packed (inpainting re-noises the image with it)
    img_ids: np.ndarray  # int64 [h*w, 4] rows (0, y, x, 0)
    txt_ids: np.ndarray  # int64 [L, 4] rows (0, 0, 0, l)
    latent_height: int
    latent_width: int


def prepare_latents(seed: int, *, width: int, height: int, text_seq_len: int) -> Latents:
    """Stage 5: noise drawn in the packed 128-channel space, float32, exactly as torch.randn on a CPU generator
    draws it (diffusers randn_tensor), and the position ids of the image and text tokens."""
    latent_height, latent_width = height // PATCH, width // PATCH
    noise = torch_randn((1, LATENT_CHANNELS, latent_height, latent_width), seed)
    return Latents(
        noise=pack_latents(noise),  # [1, 128, h, w] -> [1, h*w, 128]
        img_ids=prepare_latent_ids(latent_height, latent_width),
        txt_ids=prepare_text_ids(text_seq_len),
        latent_height=latent_height,
        latent_width=latent_width,
    )


@dataclass(frozen=True)
class Schedule:
    """Stage 6's output: the sigmas and timesteps of every step, and the first step that runs."""

    sigmas: np.ndarray  # float32 [N+1], the last one 0
    timesteps: np.ndarray  # float32 [N]
    start: int  # the first step that runs: 0, or inpainting's inpaint_start


def prepare_timesteps(
    steps: int, prepared: Latents, conditioning: Conditioning | None, strength: float | None
) -> tuple[Schedule, np.ndarray]:
    """Stage 6: the schedule, `mu` from the noise tokens alone, and the latents the loop starts from: the noise, or
    for inpainting the image noised to the first sigma that runs (prepare_latents with begin_index = t_start)."""
    sigmas, timesteps = retrieve_timesteps(steps, prepared.noise.shape[1])
    inpainting = conditioning.inpainting if conditioning is not None else None
    if inpainting is None or strength is None:
        return Schedule(sigmas, timesteps, start=0), prepared.noise
    start = inpaint_start(steps, strength)
    return Schedule(sigmas, timesteps, start), scale_noise(inpainting.image_latents, sigmas[start], prepared.noise)


def denoise(
    models: Models,
    start_latents: np.ndarray,
    prepared: Latents,
    prompt_embeds: np.ndarray,
    schedule: Schedule,
    conditioning: Conditioning | None,
    *,
    log: Callable[[str], None],
    guidance: Guidance | None = None,
    negative_embeds: np.ndarray | None = None,
) -> np.ndarray:
    """Stage 7: one transformer call per step on the noise tokens followed by the input images' tokens (with
    `guidance`, a second on `negative_embeds`, the two combined by guidance.guided); the prediction for the noise
    tokens takes a float32 Euler step. Inpainting runs the steps from `schedule.start` on
    and, after each, puts the image (re-noised to the next sigma, clean after the last step) back where the mask
    keeps it. Returns the denoised tokens [1, h*w, 128]."""
    latents = start_latents
    count = latents.shape[1]
    img_ids = (
        np.concatenate([prepared.img_ids, conditioning.ids], axis=0) if conditioning is not None else prepared.img_ids
    )
    inpainting = conditioning.inpainting if conditioning is not None else None
    sigmas, timesteps = schedule.sigmas, schedule.timesteps
    last = len(timesteps) - 1
    with models.session("transformer") as session:
        for i in range(schedule.start, len(timesteps)):
            step_start = time.perf_counter()
            feeds = {
                "hidden_states": (
                    np.concatenate([latents, conditioning.tokens], axis=1) if conditioning is not None else latents
                ),
                "encoder_hidden_states": prompt_embeds,
                "timestep": model_timestep(timesteps[i]),  # f32(t / 1000), as the pipeline passes it
                "img_ids": img_ids,
                "txt_ids": prepared.txt_ids,
            }
            (noise_pred,) = session.run(["noise_pred"], feeds)
            noise_pred = noise_pred[:, :count]
            if guidance is not None and negative_embeds is not None:
                # The negative prompt's embeddings are as long as the prompt's (both padded to 512): same txt_ids.
                (negative_pred,) = session.run(["noise_pred"], {**feeds, "encoder_hidden_states": negative_embeds})
                noise_pred = guided(noise_pred, negative_pred[:, :count], guidance.scale)
            latents = euler_step(latents, noise_pred, sigmas[i], sigmas[i + 1])
            if inpainting is not None:
                # Outside the mask the image, noised to the next step's sigma (none after the last step).
                image = (
                    inpainting.image_latents
                    if i == last
                    else scale_noise(inpainting.image_latents, sigmas[i + 1], prepared.noise)
                )
                latents = blend_mask(latents, image, inpainting.mask)
            log(
                f"reference: step {i - schedule.start + 1}/{len(timesteps) - schedule.start} "
                f"(t={float(timesteps[i]):.3f}) {time.perf_counter() - step_start:.2f} s"
            )
    return latents


def decode(models: Models, denoised: np.ndarray, prepared: Latents) -> tuple[np.ndarray, np.ndarray]:
    """Stage 8: unpack the tokens, run the VAE decoder (its graph folds in BN de-normalisation, unpatchify and
    (x/2+0.5).clamp(0,1)), round to uint8. Returns (uint8 [H, W, 3], the decoder's float32 [1, 3, H, W])."""
    latents_nchw = unpack_latents(denoised, prepared.latent_height, prepared.latent_width)
    with models.session("vae_decoder") as session:
        (image_float,) = session.run(["image"], {"latents": latents_nchw})
    image_float = np.asarray(image_float, dtype=np.float32)
    return imaging.to_uint8(image_float), image_float
