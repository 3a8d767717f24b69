"""`klein-web reference`: the whole pipeline on onnxruntime CPU, the browser app's reference.

`generate()` runs one of three modes, each mirroring a diffusers 0.42.1 pipeline stage by stage, with the stage
names the worker's `pipeline/generate.js` uses:

    text     no input images: Flux2KleinPipeline(prompt)
    edit     `images` are references: Flux2KleinPipeline(prompt, image=[...]); their tokens follow the noise
             tokens in every step, each image at its own time coordinate (10, 20, ...)
    inpaint  `mask` given: Flux2KleinInpaintPipeline(prompt, image=images[0], mask_image=mask,
             image_reference=images[1:], strength); the image to inpaint is also the first conditioning image

It runs the graphs of a model repository (the fetched seed repo or `klein-web convert` / `make-tiny` output) as
its manifest describes them; editing and inpainting also need the VAE encoder, which only converted repos have.
The numerics outside the graphs (noise, schedule, Euler steps, ids, packing, masks, uint8 rounding) come from
builder.pipeline.sampling and builder.pipeline.imaging, and the input images are prepared by
builder.pipeline.inputs, all bit-exact with diffusers + torch + PIL on CPU.

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
from builder.pipeline import capacity, imaging, inputs, limits, sampling
from builder.pipeline import prompt as prompt_module
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

# Scheduler settings Flux2KleinPipeline's schedule depends on (its scheduler_config.json); others change the math.
REQUIRED_SCHEDULER = {
    "use_dynamic_shifting": True,
    "time_shift_type": "exponential",
    "num_train_timesteps": sampling.NUM_TRAIN_TIMESTEPS,
}
UNSUPPORTED_SCHEDULER_FLAGS = ("use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "invert_sigmas",
                               "stochastic_sampling")

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
    # onnxruntime is imported here and in check/bench/ort_timing.py (the bench's GPU timing), nowhere else in builder/.
    import onnxruntime

    model_dir = Path(model_dir)
    seconds: dict[str, float] = {}

    # 1. Check inputs: the parameters, then every input file decoded and checked, before any model work
    with _stage("check", seconds, log):
        limits.check_prompt(prompt)
        limits.check_steps(steps)
        limits.check_seed(seed)
        if mask is not None:
            strength = limits.check_strength(strength)
        files, mask_file = inputs.read_inputs(list(images), mask)
        plan = plan_inputs(files, mask_file, width=width, height=height, strength=strength)
        check_inputs(prompt=prompt, seed=seed, width=plan.width, height=plan.height, steps=steps)
        width, height = plan.width, plan.height
        if plan.strength is not None:
            sampling.inpaint_start(steps, plan.strength)  # a strength that leaves no step fails now, not later
        for info in plan.images:
            log(f"reference: input {info.name} {info.width}x{info.height} used at {info.used_width}x"
                f"{info.used_height} ({info.tokens} tokens)")

    # 2. Load models: the graph of each component, its files checked before any session exists
    with _stage("load", seconds, log):
        repo = local.open_folder(model_dir, log=log)
        components = manifest.COMPONENTS + (("vae_encoder",) if plan.mode != "text" else ())
        graphs = {component: choose_graph(repo, component, (variants or {}).get(component)) for component in
                  components}
        capacity.check_size(graphs["transformer"], width, height, reference_tokens=plan.reference_tokens,
                            encoder_runs=plan.encoder_runs,
                            encoder_blocks=graphs["vae_encoder"].attention_query_blocks if plan.encoder_runs else 1)
        verify_repo(model_dir, repo, graphs, log=log)
        check_scheduler_config(model_dir)
        log("reference: graphs " + ", ".join(f"{g.path}" for g in graphs.values()))

    # 3. Encode prompt: chat template, tokens padded to 512, the text encoder's three hidden states
    with _stage("encode", seconds, log):
        tokens = prompt_module.load_tokenizer(model_dir).encode(prompt)
        if tokens.dropped:
            log(f"reference: the prompt is {tokens.dropped} tokens over the 512-token limit; they were dropped")
        with _session(onnxruntime, model_dir, graphs["text_encoder"]) as session:
            (prompt_embeds,) = session.run(
                ["prompt_embeds"], {"input_ids": tokens.input_ids, "attention_mask": tokens.attention_mask}
            )
        prompt_embeds = np.ascontiguousarray(prompt_embeds, dtype=np.float32)  # [1, 512, joint_dim]
        text_ids = sampling.prepare_text_ids(prompt_embeds.shape[1])  # [512, 4]

    # 4. Encode images: prepared as the pipeline does (inputs), BN-normalised latents from the VAE encoder graph
    conditioning: list[np.ndarray] = []  # [n, 128, h, w] per encoder run, in token order
    mask_pixels: np.ndarray | None = None
    if plan.mode != "text":
        with _stage("images", seconds, log), _session(onnxruntime, model_dir, graphs["vae_encoder"]) as session:
            for pixels in prepare_images(plan, files):
                (encoded,) = session.run(["image_latents"], {"image": pixels})
                conditioning.append(np.ascontiguousarray(encoded, dtype=np.float32))
            if mask_file is not None:
                mask_pixels = inputs.inpaint_mask(mask_file, width, height)

    # 5. Prepare latents: noise first (the same draw as text-to-image), then the conditioning tokens after it
    with _stage("latents", seconds, log):
        latent_h, latent_w = height // limits.SIZE_MULTIPLE, width // limits.SIZE_MULTIPLE
        # Drawn in the patchified 128-channel space, float32, from a CPU generator (diffusers randn_tensor).
        noise = sampling.torch_randn((1, 128, latent_h, latent_w), seed)
        latents = sampling.pack_latents(noise)  # [1, 128, h, w] -> [1, h*w, 128]
        latent_ids = sampling.prepare_latent_ids(latent_h, latent_w)  # [h*w, 4]
        # Each image of each run, in order, gets its own time coordinate (sampling.prepare_image_ids).
        per_image = [latent[k : k + 1] for latent in conditioning for k in range(latent.shape[0])]
        condition_tokens = (np.concatenate([sampling.pack_latents(x) for x in per_image], axis=1) if per_image
                            else np.zeros((1, 0, 128), dtype=np.float32))  # [1, R, 128]
        condition_ids = sampling.prepare_image_ids([(x.shape[2], x.shape[3]) for x in per_image])  # [R, 4]
        img_ids = np.concatenate([latent_ids, condition_ids], axis=0)
        source_tokens = mask_tokens = None  # inpainting only
        if mask_pixels is not None:
            source_tokens = sampling.pack_latents(conditioning[0])  # the image to inpaint, [1, h*w, 128]
            mask_tokens = sampling.mask_latents(mask_pixels, latent_h, latent_w)  # [1, h*w, 1]

    # 6. Prepare timesteps: mu from the noise tokens only; inpainting starts strength x steps from the end
    with _stage("timesteps", seconds, log):
        sigmas, timesteps = sampling.retrieve_timesteps(steps, latents.shape[1])
        t_start = 0
        if source_tokens is not None and plan.strength is not None:
            t_start = sampling.inpaint_start(steps, plan.strength)
            # prepare_latents: the source noised to the first sigma that runs (scheduler begin_index = t_start)
            latents = sampling.scale_noise(source_tokens, sigmas[t_start], latents)
        noise_tokens = sampling.pack_latents(noise)
        sigmas, timesteps = sigmas[t_start:], timesteps[t_start:]

    # 7. Denoising loop: the transformer sees noise + conditioning tokens and predicts the noise tokens' velocity
    with _stage("denoise", seconds, log), _session(onnxruntime, model_dir, graphs["transformer"]) as session:
        count = latents.shape[1]
        for i, t in enumerate(timesteps):
            step_start = time.perf_counter()
            (noise_pred,) = session.run(["noise_pred"], {
                "hidden_states": np.concatenate([latents, condition_tokens], axis=1) if per_image else latents,
                "encoder_hidden_states": prompt_embeds,
                "timestep": sampling.model_timestep(t),  # f32(t / 1000), as the pipeline passes it
                "img_ids": img_ids,
                "txt_ids": text_ids,
            })
            latents = sampling.euler_step(latents, noise_pred[:, :count], sigmas[i], sigmas[i + 1])
            if source_tokens is not None and mask_tokens is not None:
                # Outside the mask the source, noised to the next step's sigma (none after the last step).
                proper = (source_tokens if i == len(timesteps) - 1
                          else sampling.scale_noise(source_tokens, sigmas[i + 1], noise_tokens))
                latents = sampling.blend(proper, latents, mask_tokens)
            log(f"reference: step {i + 1}/{len(timesteps)} (t={float(t):.3f}) {time.perf_counter() - step_start:.2f} s")

    # 8. Decode: unpack the tokens, run the VAE (its graph folds in BN de-normalisation, unpatchify and
    # (x/2+0.5).clamp(0,1)), round to uint8
    with _stage("decode", seconds, log):
        latents_nchw = sampling.unpack_latents(latents, latent_h, latent_w)  # [1, h*w, 128] -> [1, 128, h, w]
        with _session(onnxruntime, model_dir, graphs["vae_decoder"]) as session:
            (image_float,) = session.run(["image"], {"latents": latents_nchw})
        image_float = np.asarray(image_float, dtype=np.float32)  # [1, 3, H, W]
        image = imaging.to_uint8(image_float)  # [1, 3, H, W] -> [H, W, 3]

    peak = peak_rss_bytes()
    if peak is not None:
        log(f"reference: peak RSS {peak / 2**20:.0f} MiB")
    chosen = {component: graph.variant for component, graph in graphs.items()}
    return ReferenceResult(
        image=image,
        image_float=image_float,
        stage_seconds=seconds,
        peak_rss_bytes=peak,
        prompt_tokens=tokens.token_count,
        prompt_dropped=tokens.dropped,
        variants=chosen,
        model=f"{repo.source} ({', '.join(f'{c} {v}' for c, v in chosen.items())})",
        mode=plan.mode,
        width=width,
        height=height,
        images=plan.images,
        mask=plan.mask,
        strength=plan.strength,
        steps_run=len(timesteps),
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
) -> ReferenceResult:
    """`generate()` and write the image to OUT as PNG with tEXt metadata (atomically)."""
    # Before the pipeline: a folder, a device or an unwritable place must not cost a whole run.
    check_output_file(Path(out), what="--out")
    result = generate(model_dir, prompt=prompt, seed=seed, width=width, height=height, steps=steps, log=log,
                      images=images, mask=mask, strength=strength)
    text = imaging.png_text(
        prompt=prompt, seed=seed, steps=steps, width=result.width, height=result.height, model=result.model,
        mode=result.mode, images=[info.metadata_line() for info in result.images],
        mask=result.mask.metadata_line() if result.mask else None, strength=result.strength,
    )
    imaging.write_png(Path(out), result.image, text=text)
    log(f"reference: wrote {out}")
    return result


# --------------------------------------------------------------------------------------------------------------------
# Stage helpers
# --------------------------------------------------------------------------------------------------------------------


def check_inputs(*, prompt: str, seed: int, width: int, height: int, steps: int) -> None:
    """Reject bad parameters before any work starts (the limits of builder.pipeline.limits); never adjust them."""
    limits.check_prompt(prompt)
    limits.check_side(width, name="`width`")
    limits.check_side(height, name="`height`")
    limits.check_steps(steps)
    limits.check_seed(seed)


def plan_inputs(files: Sequence[inputs.InputFile], mask: inputs.InputFile | None, *, width: int | None,
                height: int | None, strength: float) -> InputPlan:
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
            raise InputError(f"Reference image 1 ({files[0].name}) is used at {used[0][0]}x{used[0][1]}, beyond the "
                             f"{limits.SIZE_MAX} pixels an output side may have; pass --size for the output.")
        return InputPlan("edit", width or used[0][0], height or used[0][1],
                         images=tuple(info(item, size) for item, size in zip(files, used, strict=True)),
                         encoder_runs=tuple((1, w, h) for w, h in used))
    # Flux2KleinInpaintPipeline ignores a height/width it is given and uses the image's; asking for another
    # size is a mistake worth a message, not a silent change.
    source_size = limits.input_image_size(files[0].width, files[0].height)
    if (width is not None and width != source_size[0]) or (height is not None and height != source_size[1]):
        raise InputError(f"Inpainting keeps the size of the image to inpaint: {files[0].name} is used at "
                         f"{source_size[0]}x{source_size[1]}, but --size {width}x{height} was asked; leave --size out.")
    if not all(limits.side_allowed(side) for side in source_size):
        raise InputError(f"The image to inpaint ({files[0].name}) is used at {source_size[0]}x{source_size[1]}, beyond "
                         f"the {limits.SIZE_MAX} pixels an output side may have; crop it first.")
    references = files[1:]
    reference_size = inputs.inpaint_reference_size(references) if references else (0, 0)
    runs = [(1, *source_size)] + ([(len(references), *reference_size)] if references else [])
    return InputPlan("inpaint", *source_size,
                     images=(info(files[0], source_size), *(info(item, reference_size) for item in references)),
                     mask=info(mask, source_size, tokens=False), strength=strength, encoder_runs=tuple(runs))


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


def verify_repo(model_dir: Path, repo: manifest.Manifest, graphs: Mapping[str, manifest.GraphEntry], *,
                log: Callable[[str], None]) -> None:
    """Sizes and sha256 of every file we will read, so a corrupt file fails here, not as a different image."""
    paths = [path for graph in graphs.values() for path in graph.files()]
    others = [*manifest.TOKENIZER_FILES, *manifest.OPTIONAL_TOKENIZER_FILES, manifest.SCHEDULER_CONFIG]
    verify.check_files(model_dir, repo, paths + [p for p in others if p in repo.files], log=log)
    for rel in (*manifest.TOKENIZER_FILES, manifest.SCHEDULER_CONFIG):
        if not (model_dir / rel).is_file():
            raise ModelRepoError(f"Model file {model_dir / rel} is missing. Run `klein-web fetch` again to "
                                 "complete it.")


def check_scheduler_config(model_dir: Path) -> None:
    """The schedule in builder.pipeline.sampling is the one this config describes; refuse any other."""
    path = model_dir / manifest.SCHEDULER_CONFIG
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelRepoError(f"{path} is not readable JSON ({exc}); run `klein-web fetch` again.") from exc
    for key, expected in REQUIRED_SCHEDULER.items():
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
