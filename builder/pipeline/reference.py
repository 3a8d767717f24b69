"""`klein-web reference`: the whole pipeline on onnxruntime CPU, the browser app's reference.

`generate()` runs one of three modes, each mirroring a diffusers 0.42.1 pipeline stage by stage; its stages are
numbered and named as the worker's `pipeline/generate.js` numbers them, one function each:

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

Only one onnxruntime session lives at a time: the real model is 5.6 GB, so each graph is loaded, run and
released before the next one is created, like the browser does.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import InputError, ModelRepoError
from builder.memory import peak_rss_bytes
from builder.pipeline import capacity, imaging, inputs, limits
from builder.pipeline import prompt as prompt_module
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
from builder.pipeline.rng import torch_randn
from builder.pipeline.schedule import SCHEDULER_CONFIG, model_timestep, retrieve_timesteps
from builder.repo import local, manifest, verify
from builder.repo.files import check_output_file

# Which variant of each graph to run on the CPU, best first. fp32 is the exact one; q4 is what the seed
# repo ships; fp16 VAE weights run on the CPU EP too, just slower.
VARIANT_PREFERENCE: Mapping[str, tuple[str, ...]] = {
    "text_encoder": ("fp32", "q4", "q4f16"),
    "transformer": ("fp32", "q4", "q4f16"),
    "vae_decoder": ("fp32", "fp16"),
    "vae_encoder": ("fp32", "fp16"),
}

# Scheduler settings that change the math away from what builder.pipeline.schedule computes.
UNSUPPORTED_SCHEDULER_FLAGS = (
    "use_karras_sigmas",
    "use_exponential_sigmas",
    "use_beta_sigmas",
    "invert_sigmas",
    "stochastic_sampling",
)

DEFAULT_STRENGTH = limits.STRENGTH_DEFAULT


@dataclass(frozen=True)
class InputInfo:
    """What the pipeline made of one input file (the protocol's InputImageInfo)."""

    name: str
    sha256: str
    width: int  # decoded
    height: int
    used_width: int  # the size it was used at
    used_height: int
    tokens: int  # transformer tokens it added to every step (0 for the mask)

    def metadata_line(self) -> str:
        return imaging.input_line(self.sha256, self.used_width, self.used_height, self.name)


@dataclass(frozen=True)
class InputPlan:
    """The mode of a request and the sizes of everything in it, known before any model work."""

    mode: str  # text | edit | inpaint
    width: int  # the output size
    height: int
    images: tuple[InputInfo, ...] = ()
    mask: InputInfo | None = None
    strength: float | None = None
    encoder_runs: tuple[tuple[int, int, int], ...] = ()  # (batch, width, height) of each VAE encoder run

    @property
    def reference_tokens(self) -> int:
        return sum(info.tokens for info in self.images)


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
    steps_run: int = 0  # denoising steps that ran (inpainting runs the last strength x steps of the schedule)

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
    steps: int,
    log: Callable[[str], None],
    variants: Mapping[str, str] | None = None,
    images: Sequence[Path] = (),
    mask: Path | None = None,
    strength: float = DEFAULT_STRENGTH,
) -> ReferenceResult:
    """Text (+ images, + mask) -> image with onnxruntime on the CPU, exactly as the diffusers pipeline computes it.

    Without `images` and `mask` WIDTH and HEIGHT are required. With `images` (edit) they default to the first
    image's used size. With `mask` (inpaint) `images[0]` is the image to inpaint, the output has its used size
    (a different WIDTH/HEIGHT is refused), `images[1:]` are its references and `strength` in [0, 1] says how
    much of the schedule runs. `variants` pins a variant per component (e.g. {"transformer": "q4"}); otherwise
    VARIANT_PREFERENCE picks.
    """
    seconds: dict[str, float] = {}

    # 1. Check inputs
    with _stage("check", seconds, log):
        plan, files, mask_file = check_request(
            prompt=prompt,
            seed=seed,
            width=width,
            height=height,
            steps=steps,
            images=images,
            mask=mask,
            strength=strength,
            log=log,
        )
    width, height = plan.width, plan.height

    # 2. Load models
    with _stage("load", seconds, log):
        models = load_models(Path(model_dir), plan, variants or {}, log=log)

    # 3. Encode prompt
    with _stage("encode", seconds, log):
        prompt_embeds, tokens = encode_prompt(models, prompt, log=log)

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
        denoised = denoise(models, start_latents, prepared, prompt_embeds, schedule, conditioning, log=log)

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
        steps_run=steps - schedule.start,
    )


def generate_png(
    model_dir: Path,
    *,
    prompt: str,
    seed: int,
    width: int | None,
    height: int | None,
    steps: int,
    out: Path,
    log: Callable[[str], None],
    images: Sequence[Path] = (),
    mask: Path | None = None,
    strength: float = DEFAULT_STRENGTH,
    variants: Mapping[str, str] | None = None,
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
    )
    text = imaging.png_text(
        prompt=prompt,
        seed=seed,
        steps=steps,
        width=result.width,
        height=result.height,
        model=result.model,
        mode=result.mode,
        images=[info.metadata_line() for info in result.images],
        mask=result.mask.metadata_line() if result.mask else None,
        strength=result.strength,
    )
    imaging.write_png(Path(out), result.image, text=text)
    log(f"reference: wrote {out}")
    return result


# --------------------------------------------------------------------------------------------------------------------
# The stages, in order
# --------------------------------------------------------------------------------------------------------------------


def check_request(
    *,
    prompt: str,
    seed: int,
    width: int | None,
    height: int | None,
    steps: int,
    images: Sequence[Path],
    mask: Path | None,
    strength: float,
    log: Callable[[str], None],
) -> tuple[InputPlan, list[inputs.InputFile], inputs.InputFile | None]:
    """Stage 1: the parameters, then every input file decoded and checked, before any model work."""
    limits.check_prompt(prompt)
    limits.check_steps(steps)
    limits.check_seed(seed)
    if mask is not None:
        strength = limits.check_strength(strength)
    files, mask_file = inputs.read_inputs(list(images), mask)
    plan = plan_inputs(files, mask_file, width=width, height=height, strength=strength)
    check_inputs(prompt=prompt, seed=seed, width=plan.width, height=plan.height, steps=steps)
    if plan.strength is not None:
        inpaint_start(steps, plan.strength)  # a strength that leaves no step fails here, not in stage 6
    for info in plan.images:
        log(
            f"reference: input {info.name} {info.width}x{info.height} used at {info.used_width}x"
            f"{info.used_height} ({info.tokens} tokens)"
        )
    return plan, files, mask_file


@dataclass(frozen=True)
class Models:
    """Stage 2's output: the graph of each component and how to open a session on it."""

    model_dir: Path
    repo: manifest.Manifest
    graphs: dict[str, manifest.GraphEntry]
    onnxruntime: Any

    @contextmanager
    def session(self, component: str) -> Iterator[_Session]:
        with _session(self.onnxruntime, self.model_dir, self.graphs[component]) as session:
            yield session


def load_models(model_dir: Path, plan: InputPlan, variants: Mapping[str, str], *, log: Callable[[str], None]) -> Models:
    """Stage 2: the graph of each component (the VAE encoder too when there are input images), checked against the
    size and this machine's memory, its files verified before any session exists."""
    # onnxruntime is imported here and in check/bench/ort_timing.py (the bench's GPU timing), nowhere else in builder/.
    import onnxruntime

    repo = local.open_folder(model_dir, log=log)
    components = manifest.COMPONENTS + (("vae_encoder",) if plan.mode != "text" else ())
    graphs = {component: choose_graph(repo, component, variants.get(component)) for component in components}
    capacity.check_size(
        graphs["transformer"],
        plan.width,
        plan.height,
        reference_tokens=plan.reference_tokens,
        encoder_runs=plan.encoder_runs,
        encoder_blocks=graphs["vae_encoder"].attention_query_blocks if plan.encoder_runs else 1,
    )
    verify_repo(model_dir, repo, graphs, log=log)
    check_scheduler_config(model_dir)
    log("reference: graphs " + ", ".join(f"{g.path}" for g in graphs.values()))
    return Models(model_dir, repo, graphs, onnxruntime)


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
) -> np.ndarray:
    """Stage 7: one transformer call per step on the noise tokens followed by the input images' tokens; the
    prediction for the noise tokens takes a float32 Euler step. Inpainting runs the steps from `schedule.start` on
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
            (noise_pred,) = session.run(
                ["noise_pred"],
                {
                    "hidden_states": (
                        np.concatenate([latents, conditioning.tokens], axis=1) if conditioning is not None else latents
                    ),
                    "encoder_hidden_states": prompt_embeds,
                    "timestep": model_timestep(timesteps[i]),  # f32(t / 1000), as the pipeline passes it
                    "img_ids": img_ids,
                    "txt_ids": prepared.txt_ids,
                },
            )
            latents = euler_step(latents, noise_pred[:, :count], sigmas[i], sigmas[i + 1])
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


# --------------------------------------------------------------------------------------------------------------------
# What the stages use
# --------------------------------------------------------------------------------------------------------------------


def check_inputs(*, prompt: str, seed: int, width: int, height: int, steps: int) -> None:
    """Reject bad parameters before any work starts (the limits of builder.pipeline.limits); never adjust them."""
    limits.check_prompt(prompt)
    limits.check_side(width, name="`width`")
    limits.check_side(height, name="`height`")
    limits.check_steps(steps)
    limits.check_seed(seed)


def plan_inputs(
    files: Sequence[inputs.InputFile],
    mask: inputs.InputFile | None,
    *,
    width: int | None,
    height: int | None,
    strength: float,
) -> InputPlan:
    """The mode, the output size and each input's used size and tokens, as the pipelines will use them."""

    def info(item: inputs.InputFile, used: tuple[int, int], *, tokens: bool = True) -> InputInfo:
        count = (used[0] // limits.SIZE_MULTIPLE) * (used[1] // limits.SIZE_MULTIPLE) if tokens else 0
        return InputInfo(item.name, item.sha256, item.width, item.height, used[0], used[1], count)

    if mask is None and not files:
        if width is None or height is None:
            raise InputError("Text-to-image needs the image size: pass --size WIDTHxHEIGHT (e.g. 512x512).")
        return InputPlan("text", width, height)
    if mask is None:
        # Flux2KleinPipeline: `height = height or image_height` for the first image, each side on its own.
        used = [limits.input_image_size(item.width, item.height) for item in files]
        if (width is None or height is None) and not all(limits.side_allowed(side) for side in used[0]):
            raise InputError(
                f"Reference image 1 ({files[0].name}) is used at {used[0][0]}x{used[0][1]}, beyond the "
                f"{limits.SIZE_MAX} pixels an output side may have; pass --size for the output."
            )
        return InputPlan(
            "edit",
            width or used[0][0],
            height or used[0][1],
            images=tuple(info(item, size) for item, size in zip(files, used, strict=True)),
            encoder_runs=tuple((1, w, h) for w, h in used),
        )
    # Flux2KleinInpaintPipeline ignores a height/width it is given and uses the image's; asking for another
    # size is a mistake worth a message, not a silent change.
    source_size = limits.input_image_size(files[0].width, files[0].height)
    if (width is not None and width != source_size[0]) or (height is not None and height != source_size[1]):
        raise InputError(
            f"Inpainting keeps the size of the image to inpaint: {files[0].name} is used at "
            f"{source_size[0]}x{source_size[1]}, but --size {width}x{height} was asked; leave --size out."
        )
    if not all(limits.side_allowed(side) for side in source_size):
        raise InputError(
            f"The image to inpaint ({files[0].name}) is used at {source_size[0]}x{source_size[1]}, beyond "
            f"the {limits.SIZE_MAX} pixels an output side may have; crop it first."
        )
    references = files[1:]
    reference_size = inputs.inpaint_reference_size(references) if references else (0, 0)
    runs = [(1, *source_size)] + ([(len(references), *reference_size)] if references else [])
    return InputPlan(
        "inpaint",
        *source_size,
        images=(info(files[0], source_size), *(info(item, reference_size) for item in references)),
        mask=info(mask, source_size, tokens=False),
        strength=strength,
        encoder_runs=tuple(runs),
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


def parse_variants(pairs: Sequence[str]) -> dict[str, str]:
    """`COMPONENT=VARIANT` pairs (the CLI's --variant) as a mapping; a component the pipeline does not run, or a
    pair without `=`, is refused with the accepted form."""
    pinned: dict[str, str] = {}
    for pair in pairs:
        component, sep, variant = pair.partition("=")
        if not sep or not variant or component not in VARIANT_PREFERENCE:
            raise InputError(
                f"--variant {pair!r}: give COMPONENT=VARIANT with COMPONENT one of "
                f"{', '.join(VARIANT_PREFERENCE)}, e.g. vae_decoder=fp16."
            )
        pinned[component] = variant
    return pinned


def choose_graph(repo: manifest.Manifest, component: str, pinned: str | None) -> manifest.GraphEntry:
    """The manifest entry to run for `component`: the pinned variant, else the best available one."""
    available = repo.variants(component)
    if component == "vae_encoder" and not available:
        raise ModelRepoError(
            "Editing and inpainting need the VAE encoder, which this model repository lacks (the seed repo on the Hub "
            "has none): use a repository converted by `klein-web convert`."
        )
    if pinned is not None:
        return repo.graph(component, pinned)  # ModelRepoError listing what the repo has
    for variant in VARIANT_PREFERENCE[component]:
        if variant in available:
            return repo.graph(component, variant)
    raise ModelRepoError(
        f"The model repository has no {component} graph the CPU reference can run (it has: "
        f"{', '.join(available) or 'none'}; supported: {', '.join(VARIANT_PREFERENCE[component])})."
    )


def verify_repo(
    model_dir: Path, repo: manifest.Manifest, graphs: Mapping[str, manifest.GraphEntry], *, log: Callable[[str], None]
) -> None:
    """Sizes and sha256 of every file we will read, so a corrupt file fails here, not as a different image."""
    paths = [path for graph in graphs.values() for path in graph.files()]
    others = [*manifest.TOKENIZER_FILES, *manifest.OPTIONAL_TOKENIZER_FILES, manifest.SCHEDULER_CONFIG]
    verify.check_files(model_dir, repo, paths + [p for p in others if p in repo.files], log=log)
    for rel in (*manifest.TOKENIZER_FILES, manifest.SCHEDULER_CONFIG):
        if not (model_dir / rel).is_file():
            raise ModelRepoError(
                f"Model file {model_dir / rel} is missing. Run `klein-web fetch` again to complete it."
            )


def check_scheduler_config(model_dir: Path) -> None:
    """The schedule in builder.pipeline.schedule is the one this config describes; refuse any other."""
    path = model_dir / manifest.SCHEDULER_CONFIG
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelRepoError(f"{path} is not readable JSON ({exc}); run `klein-web fetch` again.") from exc
    for key, expected in SCHEDULER_CONFIG.items():
        if config.get(key, expected) != expected:
            raise ModelRepoError(f"{path}: `{key}` is {config.get(key)!r}, but klein's sampler needs {expected!r}.")
    for key in UNSUPPORTED_SCHEDULER_FLAGS:
        if config.get(key):
            raise ModelRepoError(f"{path}: `{key}` is set, which the klein reference sampler does not support.")
    if config.get("shift_terminal"):
        raise ModelRepoError(f"{path}: `shift_terminal` is set, which the klein reference sampler does not support.")


@contextmanager
def _stage(name: str, seconds: dict[str, float], log: Callable[[str], None]) -> Iterator[None]:
    start = time.perf_counter()
    yield
    seconds[name] = time.perf_counter() - start
    log(f"reference: {name} {seconds[name]:.2f} s")


class _Session:
    """An onnxruntime session that can be dropped while callers still hold this wrapper."""

    def __init__(self, session: Any, path: Path) -> None:
        self._session: Any = session
        self._path = path

    def run(self, outputs: list[str], feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if self._session is None:
            raise RuntimeError(f"the session of {self._path} was already released")
        return list(self._session.run(outputs, feeds))

    def release(self) -> None:
        self._session = None
        gc.collect()


@contextmanager
def _session(onnxruntime: Any, model_dir: Path, graph: manifest.GraphEntry) -> Iterator[_Session]:
    """One CPU session for `graph`, released (and its memory returned) when the block ends."""
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # warnings about unused initialisers etc. are noise here
    path = model_dir / graph.path
    try:
        session = onnxruntime.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/... types
        raise ModelRepoError(f"onnxruntime cannot load {path} ({exc}). Re-fetch or re-convert the model.") from exc
    wrapper = _Session(session, path)
    del session
    try:
        yield wrapper
    finally:
        wrapper.release()
