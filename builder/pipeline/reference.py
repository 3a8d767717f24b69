"""`klein-web reference`: the whole text-to-image pipeline on onnxruntime CPU, the browser app's reference.

`generate()` mirrors `Flux2KleinPipeline.__call__` (diffusers 0.42.1) stage by stage, with the stage names
the worker's `pipeline/generate.js` uses, and runs the graphs of a model repository (the fetched seed repo
or `klein-web convert` / `make-tiny` output) as its manifest describes them. The numerics outside the
graphs (noise, schedule, Euler steps, ids, packing, uint8 rounding) come from builder.pipeline.sampling and
builder.pipeline.imaging, which are bit-exact with diffusers + torch on CPU.

Only one onnxruntime session lives at a time: the real model is 5.6 GB, so each graph is loaded, run and
released before the next one is created, like the browser does.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import ModelRepoError
from builder.memory import peak_rss_bytes
from builder.pipeline import capacity, imaging, limits, sampling
from builder.pipeline import prompt as prompt_module
from builder.repo import local, manifest, verify
from builder.repo.files import check_output_file

# Which variant of each graph to run on the CPU, best first. fp32 is the exact one; q4 is what the seed
# repo ships; fp16 VAE weights run on the CPU EP too, just slower.
VARIANT_PREFERENCE: Mapping[str, tuple[str, ...]] = {
    "text_encoder": ("fp32", "q4", "q4f16"),
    "transformer": ("fp32", "q4", "q4f16"),
    "vae_decoder": ("fp32", "fp16"),
}

# Scheduler settings Flux2KleinPipeline's schedule depends on (its scheduler_config.json); others change the math.
REQUIRED_SCHEDULER = {
    "use_dynamic_shifting": True,
    "time_shift_type": "exponential",
    "num_train_timesteps": sampling.NUM_TRAIN_TIMESTEPS,
}
UNSUPPORTED_SCHEDULER_FLAGS = ("use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "invert_sigmas",
                               "stochastic_sampling")


@dataclass(frozen=True)
class ReferenceResult:
    image: np.ndarray  # uint8 [H, W, 3]
    image_float: np.ndarray  # float32 [1, 3, H, W] in [0, 1], the decoder output
    stage_seconds: dict[str, float]  # check, load, encode, latents, timesteps, denoise, decode -> wall seconds
    peak_rss_bytes: int | None  # peak resident memory of this process so far (None where unknown)
    prompt_tokens: int  # real tokens fed to the text encoder (<= 512)
    prompt_dropped: int  # tokens cut by truncation to 512
    variants: dict[str, str] = field(default_factory=dict)  # component -> variant that ran
    model: str = ""  # a one-line description for PNG metadata


def generate(
    model_dir: Path,
    *,
    prompt: str,
    seed: int,
    width: int,
    height: int,
    steps: int,
    log: Callable[[str], None],
    variants: Mapping[str, str] | None = None,
) -> ReferenceResult:
    """Text -> image with onnxruntime on the CPU, exactly as Flux2KleinPipeline computes it.

    `variants` pins a variant per component (e.g. {"transformer": "q4"}); otherwise VARIANT_PREFERENCE picks.
    """
    # onnxruntime is imported here and in check/ort_timing.py (the bench's GPU timing), nowhere else in builder/.
    import onnxruntime

    model_dir = Path(model_dir)
    seconds: dict[str, float] = {}

    # 1. Check inputs
    with _stage("check", seconds, log):
        check_inputs(prompt=prompt, seed=seed, width=width, height=height, steps=steps)

    # 2. Load models: the graph of each component, its files checked before any session exists
    with _stage("load", seconds, log):
        repo = local.open_folder(model_dir, log=log)
        graphs = {component: choose_graph(repo, component, (variants or {}).get(component)) for component in
                  manifest.COMPONENTS}
        capacity.check_size(graphs["transformer"], width, height)
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

    # 4. Prepare latents
    with _stage("latents", seconds, log):
        latent_h, latent_w = height // limits.SIZE_MULTIPLE, width // limits.SIZE_MULTIPLE
        # Drawn in the patchified 128-channel space, float32, from a CPU generator (diffusers randn_tensor).
        noise = sampling.torch_randn((1, 128, latent_h, latent_w), seed)
        latents = sampling.pack_latents(noise)  # [1, 128, h, w] -> [1, h*w, 128]
        latent_ids = sampling.prepare_latent_ids(latent_h, latent_w)  # [h*w, 4]

    # 5. Prepare timesteps
    with _stage("timesteps", seconds, log):
        sigmas, timesteps = sampling.retrieve_timesteps(steps, latents.shape[1])

    # 6. Denoising loop
    with _stage("denoise", seconds, log), _session(onnxruntime, model_dir, graphs["transformer"]) as session:
        for i, t in enumerate(timesteps):
            step_start = time.perf_counter()
            (noise_pred,) = session.run(["noise_pred"], {
                "hidden_states": latents,
                "encoder_hidden_states": prompt_embeds,
                "timestep": sampling.model_timestep(t),  # f32(t / 1000), as the pipeline passes it
                "img_ids": latent_ids,
                "txt_ids": text_ids,
            })
            latents = sampling.euler_step(latents, noise_pred, sigmas[i], sigmas[i + 1])
            log(f"reference: step {i + 1}/{steps} (t={float(t):.3f}) {time.perf_counter() - step_start:.2f} s")

    # 7. Decode: unpack the tokens, run the VAE (its graph folds in BN de-normalisation, unpatchify and
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
    )


def generate_png(
    model_dir: Path,
    *,
    prompt: str,
    seed: int,
    width: int,
    height: int,
    steps: int,
    out: Path,
    log: Callable[[str], None],
) -> ReferenceResult:
    """`generate()` and write the image to OUT as PNG with tEXt metadata (atomically)."""
    # Before the pipeline: a folder, a device or an unwritable place must not cost a whole run.
    check_output_file(Path(out), what="--out")
    result = generate(model_dir, prompt=prompt, seed=seed, width=width, height=height, steps=steps, log=log)
    text = imaging.png_text(prompt=prompt, seed=seed, steps=steps, width=width, height=height, model=result.model)
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


def choose_graph(repo: manifest.Manifest, component: str, pinned: str | None) -> manifest.GraphEntry:
    """The manifest entry to run for `component`: the pinned variant, else the best available one."""
    if pinned is not None:
        return repo.graph(component, pinned)  # ModelRepoError listing what the repo has
    available = repo.variants(component)
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
