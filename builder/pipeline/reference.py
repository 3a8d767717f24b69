"""`klein-web reference`: the whole pipeline on onnxruntime CPU, the browser app's reference.

`generate()` runs one of three modes, each mirroring a diffusers 0.42.1 pipeline stage by stage; its stages are
numbered and named as the worker's `pipeline/generate.js` numbers them, one function each: stage 1 in
reference_request, stage 2 (and the onnxruntime sessions) in reference_models, stages 3 to 8 in reference_stages.

    text     no input images: Flux2KleinPipeline(prompt)
    edit     `images` are references: Flux2KleinPipeline(prompt, image=[...]); their tokens follow the noise
             tokens in every step, each image at its own time coordinate (10, 20, ...)
    inpaint  `mask` given: Flux2KleinInpaintPipeline(prompt, image=images[0], mask_image=mask,
             image_reference=images[1:], strength); the image to inpaint is also the first conditioning image

It runs the graphs of a model repository (the fetched seed repo or `klein-web convert` / `make-tiny` output) as
its manifest describes them; editing and inpainting also need the VAE encoder, which only converted repos have.
The numerics outside the graphs come from builder.pipeline.rng (noise), schedule, latents (ids, packing, Euler
steps, masks), inpaint and imaging (uint8 rounding), and the input images are prepared by builder.pipeline.inputs,
all bit-exact with diffusers + torch + PIL on CPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from builder.memory import peak_rss_bytes
from builder.pipeline import imaging, limits
from builder.pipeline.guidance import Guidance, resolve_guidance
from builder.pipeline.outpaint import Extension
from builder.pipeline.reference_models import load_models, model_defaults, parse_variants
from builder.pipeline.reference_request import InputInfo, check_inputs, check_request
from builder.pipeline.reference_stages import (
    decode,
    denoise,
    encode_images,
    encode_prompt,
    prepare_latents,
    prepare_timesteps,
)
from builder.repo.files import check_output_file

# What callers import from here; generate() finds its stage functions in this module, so a test can wrap one.
__all__ = [
    "DEFAULT_STRENGTH",
    "InputInfo",
    "ReferenceResult",
    "check_inputs",
    "decode",
    "generate",
    "generate_png",
    "parse_variants",
]

DEFAULT_STRENGTH = limits.STRENGTH_DEFAULT


@dataclass(frozen=True)
class ReferenceResult:
    image: np.ndarray  # uint8 [H, W, 3]
    image_float: np.ndarray  # float32 [1, 3, H, W] in [0, 1], the decoder output
    stage_seconds: dict[str, float]  # check, load, encode, [images,] latents, timesteps, denoise, decode -> seconds
    peak_rss_bytes: int | None  # peak resident memory of this process so far (None where unknown)
    prompt_tokens: int  # real tokens fed to the text encoder (<= 512)
    prompt_dropped: int  # tokens cut by truncation to 512
    variants: dict[str, str] = field(default_factory=dict)  # component -> variant that ran
    model: str = ""  # a one-line description for PNG metadata
    mode: str = "text"  # text | edit | inpaint
    width: int = 0  # the output size
    height: int = 0
    images: tuple[InputInfo, ...] = ()  # edit: the references; inpaint: the image to inpaint, then its references
    mask: InputInfo | None = None
    strength: float | None = None  # inpaint only
    extension: Extension | None = None  # outpainting: the pixels added on each side
    steps_run: int = 0  # denoising steps that ran (inpainting runs the last strength x steps of the schedule)
    steps: int = 0  # the schedule's steps (the model's default where none was asked for)
    guidance: Guidance | None = None  # base models: the classifier-free guidance that ran (two calls a step)

    @property
    def reference_tokens(self) -> int:
        """Tokens the input images added to every denoising step."""
        return sum(info.tokens for info in self.images)


def generate(
    model_dir: Path,
    *,
    prompt: str,
    seed: int,
    width: int | None = None,
    height: int | None = None,
    steps: int | None,
    log: Callable[[str], None],
    variants: Mapping[str, str] | None = None,
    images: Sequence[Path] = (),
    mask: Path | None = None,
    strength: float = DEFAULT_STRENGTH,
    guidance_scale: float | None = None,
    negative_prompt: str | None = None,
    extend: Mapping[str, int] | None = None,
) -> ReferenceResult:
    """Text (+ images, + mask) -> image with onnxruntime on the CPU, exactly as the diffusers pipeline computes it.

    Without `images` and `mask` WIDTH and HEIGHT are required. With `images` (edit) they default to the first
    image's used size. With `mask` (inpaint) `images[0]` is the image to inpaint, the output has its used size
    (a different WIDTH/HEIGHT is refused), `images[1:]` are its references and `strength` in [0, 1] says how
    much of the schedule runs. `extend` ({"right": 128, ...}) outpaints: inpainting of `images[0]` padded on those
    sides under a mask white on the new area (builder.pipeline.outpaint), `mask` optional. `variants` pins a
    variant per component (e.g. {"transformer": "q4"}); otherwise VARIANT_PREFERENCE picks. `steps` None and
    `guidance_scale` None take the model's defaults (manifest.json
    `pipeline`): 4 steps and no guidance for distilled models, diffusers' defaults for base models, which run
    classifier-free guidance against `negative_prompt` (builder.pipeline.guidance).
    """
    seconds: dict[str, float] = {}

    # 1. Check inputs (the model's kind and defaults come from its manifest, read before any model work)
    with _stage("check", seconds, log):
        defaults = model_defaults(Path(model_dir))
        steps = defaults.steps if steps is None else steps
        plan, files, mask_file = check_request(
            prompt=prompt,
            seed=seed,
            width=width,
            height=height,
            steps=steps,
            images=images,
            mask=mask,
            strength=strength,
            extend=extend,
            log=log,
        )
        guidance = resolve_guidance(
            defaults, mode=plan.mode, scale=guidance_scale, negative_prompt=negative_prompt, log=log
        )
    width, height = plan.width, plan.height

    # 2. Load models
    with _stage("load", seconds, log):
        models = load_models(Path(model_dir), plan, variants or {}, log=log)

    # 3. Encode prompt (and, with guidance, the negative prompt the same way)
    with _stage("encode", seconds, log):
        prompt_embeds, tokens = encode_prompt(models, prompt, log=log)
        negative_embeds = encode_prompt(models, guidance.negative_prompt, log=log)[0] if guidance else None

    # 4. Encode images (and inpainting's mask)
    conditioning = None
    if plan.mode != "text":
        with _stage("images", seconds, log):
            conditioning = encode_images(models, plan, files, mask_file)

    # 5. Prepare latents
    with _stage("latents", seconds, log):
        prepared = prepare_latents(seed, width=width, height=height, text_seq_len=prompt_embeds.shape[1])

    # 6. Prepare timesteps (mu from the noise tokens alone); inpainting starts part-way, from the image noised to
    # that step's sigma.
    with _stage("timesteps", seconds, log):
        schedule, start_latents = prepare_timesteps(steps, prepared, conditioning, plan.strength)

    # 7. Denoising loop
    with _stage("denoise", seconds, log):
        denoised = denoise(
            models,
            start_latents,
            prepared,
            prompt_embeds,
            schedule,
            conditioning,
            log=log,
            guidance=guidance,
            negative_embeds=negative_embeds,
        )

    # 8. Decode
    with _stage("decode", seconds, log):
        image, image_float = decode(models, denoised, prepared)

    peak = peak_rss_bytes()
    if peak is not None:
        log(f"reference: peak RSS {peak / 2**20:.0f} MiB")
    chosen = {component: graph.variant for component, graph in models.graphs.items()}
    return ReferenceResult(
        image=image,
        image_float=image_float,
        stage_seconds=seconds,
        peak_rss_bytes=peak,
        prompt_tokens=tokens.token_count,
        prompt_dropped=tokens.dropped,
        variants=chosen,
        model=f"{models.repo.source} ({', '.join(f'{c} {v}' for c, v in chosen.items())})",
        mode=plan.mode,
        width=width,
        height=height,
        images=plan.images,
        mask=plan.mask,
        strength=plan.strength,
        extension=plan.extension,
        steps_run=steps - schedule.start,
        steps=steps,
        guidance=guidance,
    )


def generate_png(
    model_dir: Path,
    *,
    prompt: str,
    seed: int,
    width: int | None,
    height: int | None,
    steps: int | None,
    out: Path,
    log: Callable[[str], None],
    images: Sequence[Path] = (),
    mask: Path | None = None,
    strength: float = DEFAULT_STRENGTH,
    variants: Mapping[str, str] | None = None,
    guidance_scale: float | None = None,
    negative_prompt: str | None = None,
    extend: Mapping[str, int] | None = None,
) -> ReferenceResult:
    """`generate()` and write the image to OUT as PNG with tEXt metadata (atomically)."""
    # Before the pipeline: a folder, a device or an unwritable place must not cost a whole run.
    check_output_file(Path(out), what="--out")
    result = generate(
        model_dir,
        prompt=prompt,
        seed=seed,
        width=width,
        height=height,
        steps=steps,
        log=log,
        images=images,
        mask=mask,
        strength=strength,
        variants=variants,
        guidance_scale=guidance_scale,
        negative_prompt=negative_prompt,
        extend=extend,
    )
    text = imaging.png_text(
        prompt=prompt,
        seed=seed,
        steps=result.steps,
        width=result.width,
        height=result.height,
        model=result.model,
        mode=result.mode,
        images=[info.metadata_line() for info in result.images],
        mask=result.mask.metadata_line() if result.mask else None,
        strength=result.strength,
        outpaint=result.extension.text() if result.extension else None,
        guidance_scale=result.guidance.scale if result.guidance else None,
        negative_prompt=result.guidance.negative_prompt if result.guidance else None,
    )
    imaging.write_png(Path(out), result.image, text=text)
    log(f"reference: wrote {out}")
    return result


@contextmanager
def _stage(name: str, seconds: dict[str, float], log: Callable[[str], None]) -> Iterator[None]:
    start = time.perf_counter()
    yield
    seconds[name] = time.perf_counter() - start
    log(f"reference: {name} {seconds[name]:.2f} s")
