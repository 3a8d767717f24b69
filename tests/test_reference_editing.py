"""`klein-web reference` editing and inpainting against diffusers' Flux2KleinPipeline / Flux2KleinInpaintPipeline
(float32) on the make-tiny model; the sampling helpers against torch and the scheduler; bad inputs via the CLI.

The oracle gets its images the way diffusers reads files, `diffusers.utils.load_image(path)`, which is what
builder.pipeline.inputs mirrors.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from PIL import Image

from builder import REPO_ROOT
from builder.errors import InputError, ModelRepoError
from builder.pipeline import imaging, inpaint, inputs, latents, limits, reference, reference_models, schedule
from builder.repo import manifest as repo_manifest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

PROMPT = "a red fox sitting in the snow"
SEED = 3
STEPS = 4
# The CPU reference and diffusers run the same float32 math; what is left is onnxruntime's kernels against
# torch's (a uint8 level here and there). Measured: 88.8 dB and up, most runs identical.
PSNR_MIN = 80.0


def save_image(path: Path, width: int, height: int, seed: int, mode: str = "RGB") -> Path:
    """A smooth random picture (a noise grid scaled up), so resizes and crops change real content."""
    rng = np.random.default_rng(seed)
    grid = rng.integers(0, 256, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
    Image.fromarray(grid).resize((width, height), Image.Resampling.BILINEAR).convert(mode).save(path)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("inputs")
    mask = Image.new("L", (50, 40), 0)  # not the image's size: the mask processor's LANCZOS resize runs
    mask.paste(255, (10, 5, 35, 30))
    mask.save(root / "mask.png")
    return {
        "small": save_image(root / "small.png", 200, 150, seed=1),  # not multiples of 16: the centre crop runs
        "large": save_image(root / "large.jpg", 1100, 1000, seed=2),  # > 1024^2 pixels: the LANCZOS resize runs
        "source": save_image(root / "source.png", 100, 80, seed=3),  # inpainting: resized (squeezed) to 96x80
        "mask": root / "mask.png",
    }


@pytest.fixture(scope="module")
def edit_pipe(tiny_models: dict[str, Path]) -> Any:
    return diffusers.Flux2KleinPipeline.from_pretrained(str(tiny_models["diffusers"]), dtype=torch.float32)


@pytest.fixture(scope="module")
def inpaint_pipe(tiny_models: dict[str, Path]) -> Any:
    return diffusers.Flux2KleinInpaintPipeline.from_pretrained(str(tiny_models["diffusers"]), dtype=torch.float32)


def oracle(pipe: Any, **kwargs: Any) -> np.ndarray:
    """diffusers in float32, output_type="np", then numpy_to_pil's rounding."""
    images = pipe(
        prompt=PROMPT,
        num_inference_steps=STEPS,
        guidance_scale=1.0,
        generator=torch.Generator("cpu").manual_seed(SEED),
        output_type="np",
        **kwargs,
    ).images
    pixels: np.ndarray = np.round(images[0] * 255).astype(np.uint8)
    return pixels


def load(path: Path) -> Any:
    from diffusers.utils import load_image

    return load_image(str(path))


def assert_close(result: np.ndarray, expected: np.ndarray, what: str) -> None:
    comparison = imaging.compare(result, expected)
    print(f"{what} vs diffusers: {comparison.summary()}")
    assert comparison.psnr >= PSNR_MIN, comparison.summary()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "builder", "reference", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


# --------------------------------------------------------------------------------------------------------------------
# Against diffusers
# --------------------------------------------------------------------------------------------------------------------


def test_cli_edit_with_one_reference(
    tiny_models: dict[str, Path], files: dict[str, Path], edit_pipe: Any, tmp_path: Path
) -> None:
    out = tmp_path / "edit.png"
    result = run_cli(
        str(tiny_models["fp32"]),
        "--prompt",
        PROMPT,
        "--seed",
        str(SEED),
        "--image",
        str(files["small"]),
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    for stage in ("check", "load", "encode", "images", "latents", "timesteps", "denoise", "decode"):
        assert f"reference: {stage} " in result.stderr
    pixels, text = imaging.read_png(out)
    assert pixels.shape == (144, 192, 3)  # the first image's used size: 200x150 cropped to 192x144
    assert_close(pixels, oracle(edit_pipe, image=[load(files["small"])]), "edit, 1 reference (CLI)")
    digest = inputs.read_image(files["small"]).sha256
    assert text["mode"] == "edit" and text["images"] == f"{digest} 192x144 small.png"
    assert text["size"] == "192x144" and "vae_encoder fp32" in text["model"]
    assert "mask" not in text and "strength" not in text
    # The tiny random model draws little on its references (~60 dB from text-to-image with the same seed), but
    # enough for the bound above to tell them apart; test_transformer_inputs_are_the_pipelines checks the tokens.
    plain = reference.generate(
        tiny_models["fp32"], prompt=PROMPT, seed=SEED, width=192, height=144, steps=STEPS, log=lambda _m: None
    )
    assert imaging.psnr(plain.image, pixels) < PSNR_MIN - 10


def test_edit_with_two_references_of_different_sizes(
    tiny_models: dict[str, Path], files: dict[str, Path], edit_pipe: Any
) -> None:
    result = reference.generate(
        tiny_models["fp32"],
        prompt=PROMPT,
        seed=SEED,
        steps=STEPS,
        log=lambda _m: None,
        images=[files["small"], files["large"]],
    )
    expected = oracle(edit_pipe, image=[load(files["small"]), load(files["large"])])
    assert_close(result.image, expected, "edit, 200x150 + 1100x1000 references")
    assert result.mode == "edit" and (result.width, result.height) == (192, 144) and result.steps_run == STEPS
    small, large = result.images
    assert (small.used_width, small.used_height, small.tokens) == (192, 144, 12 * 9)
    # 1100x1000 is over 1024^2: scaled to int(1100 s) x int(1000 s) = 1073x976, then cropped to 1072x976.
    assert (large.width, large.height, large.used_width, large.used_height) == (1100, 1000, 1072, 976)
    assert large.tokens == limits.input_image_tokens(1100, 1000) == 67 * 61
    assert result.reference_tokens == 12 * 9 + 67 * 61
    assert list(result.stage_seconds) == [
        "check",
        "load",
        "encode",
        "images",
        "latents",
        "timesteps",
        "denoise",
        "decode",
    ]


@pytest.mark.parametrize(("strength", "steps_run"), [(0.8, 4), (0.5, 2)])
def test_inpainting_without_reference(
    tiny_models: dict[str, Path], files: dict[str, Path], inpaint_pipe: Any, strength: float, steps_run: int
) -> None:
    result = reference.generate(
        tiny_models["fp32"],
        prompt=PROMPT,
        seed=SEED,
        steps=STEPS,
        log=lambda _m: None,
        images=[files["source"]],
        mask=files["mask"],
        strength=strength,
    )
    expected = oracle(inpaint_pipe, image=load(files["source"]), mask_image=load(files["mask"]), strength=strength)
    assert_close(result.image, expected, f"inpaint, strength {strength}")
    # 4 x 0.8 = 3.2000000000000002 in float64, so t_start = int(0.7999...) = 0: all four steps run.
    assert result.steps_run == steps_run and result.strength == strength
    assert (result.width, result.height) == (96, 80)
    assert result.mask is not None and (result.mask.used_width, result.mask.used_height, result.mask.tokens) == (
        96,
        80,
        0,
    )


def test_inpainting_with_one_reference(
    tiny_models: dict[str, Path], files: dict[str, Path], inpaint_pipe: Any, tmp_path: Path
) -> None:
    out = tmp_path / "inpaint.png"
    result = reference.generate_png(
        tiny_models["fp32"],
        prompt=PROMPT,
        seed=SEED,
        width=None,
        height=None,
        steps=STEPS,
        out=out,
        log=lambda _m: None,
        images=[files["source"], files["small"]],
        mask=files["mask"],
        strength=0.8,
    )
    expected = oracle(
        inpaint_pipe, image=load(files["source"]), mask_image=load(files["mask"]), image_reference=load(files["small"])
    )
    assert_close(result.image, expected, "inpaint, 1 reference")
    pixels, text = imaging.read_png(out)
    assert np.array_equal(pixels, result.image)
    source, small = result.images
    assert text["mode"] == "inpaint" and text["strength"] == "0.8"
    assert text["images"].split("\n") == [f"{source.sha256} 96x80 source.png", f"{small.sha256} 192x144 small.png"]
    assert text["mask"] == f"{result.mask.sha256 if result.mask else ''} 96x80 mask.png"


def test_inpainting_with_a_list_of_references(
    tiny_models: dict[str, Path], files: dict[str, Path], inpaint_pipe: Any
) -> None:
    """Several references reach diffusers as a list, which it never resizes: all are cropped to the first's size."""
    result = reference.generate(
        tiny_models["fp32"],
        prompt=PROMPT,
        seed=SEED,
        steps=STEPS,
        log=lambda _m: None,
        images=[files["source"], files["small"], files["large"]],
        mask=files["mask"],
        strength=0.6,
    )
    expected = oracle(
        inpaint_pipe,
        image=load(files["source"]),
        mask_image=load(files["mask"]),
        strength=0.6,
        image_reference=[load(files["small"]), load(files["large"])],
    )
    assert_close(result.image, expected, "inpaint, 2 references")
    assert [(i.used_width, i.used_height) for i in result.images] == [(96, 80), (192, 144), (192, 144)]
    assert result.steps_run == 3  # int(4 - 2.4) = 1


def capture_ours(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, np.ndarray]]:
    """The feeds of every transformer run of reference.generate."""
    feeds: list[dict[str, np.ndarray]] = []
    original = reference_models.Session.run

    def run(self: Any, outputs: list[str], inputs_: dict[str, np.ndarray]) -> list[np.ndarray]:
        if "hidden_states" in inputs_:
            feeds.append({k: np.array(v) for k, v in inputs_.items()})
        return original(self, outputs, inputs_)

    monkeypatch.setattr(reference_models.Session, "run", run)
    return feeds


def capture_diffusers(pipe: Any) -> tuple[list[dict[str, np.ndarray]], Any]:
    feeds: list[dict[str, np.ndarray]] = []

    def hook(_module: Any, _args: Any, kwargs: dict[str, Any]) -> None:
        feeds.append({k: kwargs[k].detach().numpy().copy() for k in ("hidden_states", "img_ids", "timestep")})

    return feeds, pipe.transformer.register_forward_pre_hook(hook, with_kwargs=True)


@pytest.mark.parametrize("mode", ["edit", "inpaint"])
def test_transformer_inputs_are_the_pipelines(
    tiny_models: dict[str, Path],
    files: dict[str, Path],
    edit_pipe: Any,
    inpaint_pipe: Any,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    """Every step's tokens (noise + conditioning), ids and timestep, as the pipeline hands them to its transformer."""
    ours = capture_ours(monkeypatch)
    if mode == "edit":
        reference.generate(
            tiny_models["fp32"],
            prompt=PROMPT,
            seed=SEED,
            steps=STEPS,
            log=lambda _m: None,
            images=[files["small"], files["large"]],
        )
        theirs, handle = capture_diffusers(edit_pipe)
        oracle(edit_pipe, image=[load(files["small"]), load(files["large"])])
    else:
        reference.generate(
            tiny_models["fp32"],
            prompt=PROMPT,
            seed=SEED,
            steps=STEPS,
            log=lambda _m: None,
            images=[files["source"], files["small"], files["large"]],
            mask=files["mask"],
            strength=0.6,
        )
        theirs, handle = capture_diffusers(inpaint_pipe)
        oracle(
            inpaint_pipe,
            image=load(files["source"]),
            mask_image=load(files["mask"]),
            strength=0.6,
            image_reference=[load(files["small"]), load(files["large"])],
        )
    handle.remove()
    assert len(ours) == len(theirs) == (STEPS if mode == "edit" else 3)
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert np.array_equal(a["img_ids"], b["img_ids"][0]), step
        assert np.array_equal(a["timestep"], b["timestep"]), step
        assert a["hidden_states"].shape == b["hidden_states"].shape, step
        # The pixels are diffusers' bit for bit; the VAE encoder graph against torch's VAE is float32 rounding,
        # which grows with the input (GroupNorm statistics over 1M values, attention over 16k pixels). Measured
        # relative to max |value|: 1.6e-4 with the 1072x976 reference, 2.7e-6 with 192x144 ones.
        error = float(np.abs(a["hidden_states"] - b["hidden_states"]).max() / np.abs(b["hidden_states"]).max())
        print(f"{mode} step {step}: tokens {a['hidden_states'].shape[1]}, max |diff| / max |value| {error:.3g}")
        assert error < 1e-3, step
    if mode == "edit":  # the first step's noise tokens are the same draw, bit for bit
        count = 12 * 9
        assert np.array_equal(ours[0]["hidden_states"][:, :count], theirs[0]["hidden_states"][:, :count])


# --------------------------------------------------------------------------------------------------------------------
# The numerics against torch and the scheduler
# --------------------------------------------------------------------------------------------------------------------


def make_scheduler(tiny_models: dict[str, Path], steps: int, seq: int) -> Any:
    from diffusers import FlowMatchEulerDiscreteScheduler

    scheduler = FlowMatchEulerDiscreteScheduler.from_pretrained(str(tiny_models["diffusers"]), subfolder="scheduler")
    scheduler.set_timesteps(sigmas=np.linspace(1.0, 1 / steps, steps), mu=schedule.compute_empirical_mu(seq, steps))
    return scheduler


@pytest.mark.parametrize("steps", [1, 2, 3, 4, 7, 10])
def test_inpaint_start_is_get_timesteps(tiny_models: dict[str, Path], steps: int) -> None:
    sigmas, timesteps = schedule.retrieve_timesteps(steps, 30)
    for strength in (0.0, 1e-17, 0.1, 0.2, 0.25, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 0.99, 1.0):
        scheduler = make_scheduler(tiny_models, steps, 30)
        expected, remaining = diffusers.Flux2KleinInpaintPipeline.get_timesteps(
            SimpleNamespace(scheduler=scheduler), steps, strength, "cpu"
        )
        if remaining < 1:  # the pipeline's ValueError
            with pytest.raises(InputError, match="leaves no denoising step"):
                inpaint.inpaint_start(steps, strength)
            continue
        t_start = inpaint.inpaint_start(steps, strength)
        assert steps - t_start == remaining and scheduler.begin_index == t_start
        assert np.array_equal(timesteps[t_start:], expected.numpy())
        assert np.array_equal(sigmas[t_start:], scheduler.sigmas[t_start:].numpy())


def test_scale_noise_and_blend_are_the_schedulers(tiny_models: dict[str, Path]) -> None:
    steps, seq = 4, 30
    sigmas, timesteps = schedule.retrieve_timesteps(steps, seq)
    rng = np.random.default_rng(5)
    sample, noise = (rng.standard_normal((1, seq, 128)).astype(np.float32) for _ in range(2))
    current = rng.standard_normal((1, seq, 128)).astype(np.float32)
    mask = (rng.integers(0, 5, (1, seq, 1)) / 4).astype(np.float32)  # the 0, 0.25, ... 1 of mask_latents
    for t_start in range(steps):
        scheduler = make_scheduler(tiny_models, steps, seq)
        scheduler.set_begin_index(t_start)
        # prepare_latents: begin_index set, no step taken yet -> sigmas[begin_index]
        expected = scheduler.scale_noise(
            torch.from_numpy(sample), torch.from_numpy(timesteps[t_start : t_start + 1]), torch.from_numpy(noise)
        )
        assert np.array_equal(latents.scale_noise(sample, sigmas[t_start], noise), expected.numpy())
        # In the loop, after scheduler.step: step_index -> sigmas[step_index], the next timestep's sigma
        scheduler.step(torch.from_numpy(current), torch.tensor(timesteps[t_start]), torch.from_numpy(sample))
        if t_start + 1 < steps:
            expected = scheduler.scale_noise(
                torch.from_numpy(sample), torch.tensor([timesteps[t_start + 1]]), torch.from_numpy(noise)
            )
            assert np.array_equal(latents.scale_noise(sample, sigmas[t_start + 1], noise), expected.numpy())
    m, s, x = torch.from_numpy(mask), torch.from_numpy(sample), torch.from_numpy(current)
    assert np.array_equal(latents.blend_mask(current, sample, mask), ((1 - m) * s + m * x).numpy())


@pytest.mark.parametrize(
    ("height", "width"), [(64, 64), (80, 96), (1024, 1024), (2048, 2048), (2048, 1024), (368, 1200), (64, 512)]
)
def test_mask_latents_is_f_interpolate_on_binary_masks(height: int, width: int) -> None:
    rng = np.random.default_rng(height * 7 + width)
    for _ in range(2):
        mask = (rng.random((height, width)) < 0.5).astype(np.float32)
        expected = torch.nn.functional.interpolate(
            torch.from_numpy(mask)[None, None], size=(height // 16, width // 16), mode="bilinear"
        )
        packed = expected.reshape(1, 1, -1).permute(0, 2, 1)  # prepare_mask_latents' _pack_latents
        assert np.array_equal(latents.mask_latents(mask, height // 16, width // 16), packed.numpy())


@pytest.mark.parametrize(
    ("size", "out", "exact"),
    [
        ((37, 53), (5, 7), True),
        ((64, 48), (4, 3), True),
        ((100, 30), (7, 11), True),
        ((300, 200), (60, 50), True),
        ((20, 17), (40, 33), False),  # upsampling: aten's kernel may round the last bit differently
    ],
)
def test_mask_latents_on_other_factors(size: tuple[int, int], out: tuple[int, int], exact: bool) -> None:
    mask = np.random.default_rng(size[0]).random(size).astype(np.float32)
    expected = torch.nn.functional.interpolate(torch.from_numpy(mask)[None, None], size=out, mode="bilinear")
    got = latents.mask_latents(mask, *out).reshape(out)
    if exact:
        assert np.array_equal(got, expected.numpy()[0, 0])
    else:
        assert np.abs(got - expected.numpy()[0, 0]).max() < 1e-6


def test_image_ids_are_both_pipelines() -> None:
    images = [torch.zeros(1, 128, 3, 5), torch.zeros(1, 128, 2, 2)]
    expected = diffusers.Flux2KleinPipeline._prepare_image_ids(images)[0].numpy()
    ids = latents.prepare_image_ids([(3, 5), (2, 2)])
    assert np.array_equal(ids, expected) and ids.dtype == np.int64
    assert sorted(set(ids[:, 0])) == [10, 20]
    # Inpainting: the source, then the references as one batch of 2: t = 10, 20, 30
    batch = [torch.zeros(1, 128, 3, 5), torch.zeros(2, 128, 2, 2)]
    expected = diffusers.Flux2KleinInpaintPipeline._prepare_image_ids(batch, 1)[0].numpy()
    assert np.array_equal(latents.prepare_image_ids([(3, 5), (2, 2), (2, 2)]), expected)
    assert latents.prepare_image_ids([]).shape == (0, 4)


def test_mask_preparation_is_the_mask_processor(inpaint_pipe: Any, tmp_path: Path) -> None:
    # A grey RGB mask with soft edges, at another size: resize in RGB, then L, then the 0.5 threshold.
    grey = np.random.default_rng(0).integers(0, 256, (37, 41), dtype=np.uint8)
    path = tmp_path / "soft.png"
    Image.fromarray(np.stack([grey] * 3, axis=2)).save(path)
    ours = inputs.inpaint_mask(inputs.read_mask(path), 96, 80)
    expected = inpaint_pipe.mask_processor.preprocess(load(path), height=80, width=96, resize_mode="default")
    assert np.array_equal(ours, expected.numpy()[0, 0])


def test_reading_is_load_image(tmp_path: Path) -> None:
    """EXIF orientation applied, then RGB: a JPEG stored sideways and a half-transparent PNG."""
    sideways = tmp_path / "sideways.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 degrees clockwise to display
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (64, 128, 3), dtype=np.uint8)).save(sideways, exif=exif)
    alpha = tmp_path / "alpha.png"
    rgba = np.random.default_rng(2).integers(0, 256, (70, 90, 4), dtype=np.uint8)
    Image.fromarray(rgba, "RGBA").save(alpha)
    for path, size in ((sideways, (64, 128)), (alpha, (90, 70))):
        loaded = inputs.read_image(path)
        assert (loaded.width, loaded.height) == size and loaded.image.mode == "RGB"
        assert np.array_equal(np.asarray(loaded.image), np.asarray(load(path)))


@pytest.mark.parametrize("mode", ["RGBA", "L", "P"])
def test_image_preparation_is_the_image_processor(edit_pipe: Any, tmp_path: Path, mode: str) -> None:
    path = save_image(tmp_path / f"x-{mode}.png", 1030, 1030, seed=4, mode=mode)  # over 1024^2 and not 16s
    image = load(path)
    width, height = limits.input_image_size(1030, 1030)
    resized = edit_pipe.image_processor._resize_to_target_area(image, 1024 * 1024)
    expected = edit_pipe.image_processor.preprocess(resized, height=height, width=width, resize_mode="crop")
    ours = inputs.edit_image(inputs.read_image(path))
    assert np.array_equal(ours * np.float32(2) - np.float32(1), expected.numpy())  # the graph does the 2x - 1


# --------------------------------------------------------------------------------------------------------------------
# Bad inputs: one line, no output file, nothing slow first
# --------------------------------------------------------------------------------------------------------------------


def png_header_only(path: Path, width: int, height: int) -> Path:
    """A PNG whose IHDR claims WIDTHxHEIGHT but whose data is a few bytes: decoding it would be a bomb."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b"")
    )
    return path


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad")
    good = save_image(root / "good.png", 96, 80, seed=9)
    (root / "folder.png").mkdir()
    (root / "text.png").write_text("not an image")
    data = good.read_bytes()
    (root / "truncated.png").write_bytes(data[: len(data) // 2])
    with open(root / "huge.png", "wb") as handle:  # sparse: over the byte limit without writing 64 MiB
        handle.truncate(limits.IMAGE_FILE_BYTES_MAX + 1)
    colour = Image.new("RGB", (64, 64), (255, 255, 255))
    colour.putpixel((3, 3), (255, 0, 0))
    colour.save(root / "red-dot-mask.png")
    Image.new("L", (64, 64), 255).save(root / "grey-mask.png")
    return {
        "good": good,
        "folder": root / "folder.png",
        "missing": root / "missing.png",
        "text": root / "text.png",
        "truncated": root / "truncated.png",
        "huge": root / "huge.png",
        "bomb": png_header_only(root / "bomb.png", 9000, 8000),  # over our limit, under Pillow's
        "pillow-warning": png_header_only(root / "pillow-warning.png", 10000, 10000),  # Pillow warns
        "pillow-bomb": png_header_only(root / "pillow-bomb.png", 20000, 10000),  # Pillow refuses
        "small": save_image(root / "small.png", 50, 64, seed=1),
        "thin": save_image(root / "thin.png", 640, 64, seed=1),  # 10:1
        "wide": save_image(root / "wide.png", 2400, 320, seed=1),  # 7.5:1, used at 2400x320: wider than 2048
        "red-dot-mask": root / "red-dot-mask.png",
        "grey-mask": root / "grey-mask.png",
        "out-folder": root / "out",
    }


def image_args(*paths: Path) -> list[str]:
    return [arg for path in paths for arg in ("--image", str(path))]


BAD_CASES: dict[str, tuple[Any, str]] = {
    "folder": (lambda b: image_args(b["folder"]), "is not a file"),
    "missing": (lambda b: image_args(b["missing"]), "does not exist"),
    "not-an-image": (lambda b: image_args(b["text"]), "is not a PNG, JPEG or WebP file; save it as PNG."),
    "truncated": (lambda b: image_args(b["truncated"]), "cannot be decoded"),
    "too-many-bytes": (lambda b: image_args(b["huge"]), "MiB an input image may have"),
    "decompression-bomb": (lambda b: image_args(b["bomb"]), "megapixels"),
    "pillow-warning": (lambda b: image_args(b["pillow-warning"]), "megapixels"),
    "pillow-bomb": (lambda b: image_args(b["pillow-bomb"]), "megapixels"),
    "too-small": (lambda b: image_args(b["small"]), "both sides must be at least 64 pixels"),
    "aspect": (lambda b: image_args(b["thin"]), "aspect ratio beyond 8:1"),
    "too-many-references": (lambda b: image_args(*[b["good"]] * 5), "at most 4 are allowed"),
    "coloured-mask": (lambda b: [*image_args(b["good"]), "--mask", str(b["red-dot-mask"])], "must be greyscale"),
    "mask-without-image": (lambda b: ["--mask", str(b["grey-mask"])], "needs the image to inpaint"),
    "strength-without-mask": (lambda b: [*image_args(b["good"]), "--strength", "0.5"], "--strength only applies"),
    "strength-out-of-range": (
        lambda b: [*image_args(b["good"]), "--mask", str(b["grey-mask"]), "--strength", "1.5"],
        "outside 0..1",
    ),
    "strength-nan": (
        lambda b: [*image_args(b["good"]), "--mask", str(b["grey-mask"]), "--strength", "nan"],
        "must be a number from 0 to 1",
    ),
    "strength-leaves-no-step": (
        lambda b: [*image_args(b["good"]), "--mask", str(b["grey-mask"]), "--strength", "0"],
        "leaves no denoising step",
    ),
    "inpaint-other-size": (
        lambda b: [*image_args(b["good"]), "--mask", str(b["grey-mask"]), "--size", "64x64"],
        "keeps the size of the image to inpaint",
    ),
    "edit-output-too-wide": (lambda b: image_args(b["wide"]), "pass --size for the output"),
    "inpaint-output-too-wide": (lambda b: [*image_args(b["wide"]), "--mask", str(b["grey-mask"])], "crop it first"),
    "edit-size-not-16": (lambda b: [*image_args(b["good"]), "--size", "100x64"], "multiples of 16"),
}


@pytest.mark.parametrize("name", sorted(BAD_CASES))
def test_bad_inputs_give_one_line_and_no_file(bad: dict[str, Path], name: str) -> None:
    make_args, expected = BAD_CASES[name]
    out = bad["out-folder"] / f"{name}.png"  # its folder does not exist yet either
    # No model folder: every input problem must be found before the model is looked at.
    result = run_cli("no-model-needed", "--prompt", "a fox", *make_args(bad), "--out", str(out))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: ") and expected in lines[0], result.stderr
    assert not out.exists()


def test_a_repo_without_the_encoder_refuses_editing(
    tiny_models: dict[str, Path], files: dict[str, Path], tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    shutil.copytree(tiny_models["fp32"], plain)
    shutil.rmtree(plain / "vae_encoder")
    data = json.loads((plain / repo_manifest.MANIFEST_NAME).read_text())
    data["graphs"] = [g for g in data["graphs"] if g["component"] != "vae_encoder"]
    data["files"] = {p: e for p, e in data["files"].items() if not p.startswith("vae_encoder/")}
    (plain / repo_manifest.MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(ModelRepoError, match=r"need the VAE encoder.*klein-web convert"):
        reference.generate(plain, prompt=PROMPT, seed=SEED, steps=1, log=lambda _m: None, images=[files["small"]])


def test_reference_tokens_count_against_the_graph_limit(
    tiny_models: dict[str, Path], files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from builder.pipeline import capacity

    graph = repo_manifest.load(tiny_models["fp32"]).graph("transformer", "fp32")
    limited = type(graph)(**{**graph.__dict__, "attention_max_tokens": 512 + 108 + 4087})
    capacity.check_size(limited, 192, 144, reference_tokens=4087, available=1 << 40)  # just fits
    with pytest.raises(
        InputError,
        match=r"with 4087 reference-image tokens needs 4719 attention tokens.*built for "
        r"at most 4707; try \d+x\d+ or smaller, or smaller reference images",
    ):
        capacity.check_size(limited, 192, 160, reference_tokens=4087, available=1 << 40)
    with pytest.raises(InputError, match="use fewer or smaller reference images"):
        capacity.check_size(limited, 64, 64, reference_tokens=5000, available=1 << 40)
    # The VAE encoder's attention over a large input counts in the memory estimate.
    plain = capacity.estimate_bytes(graph, 64, 64)
    assert capacity.estimate_bytes(graph, 64, 64, encoder_runs=[(1, 1024, 1024)]) > plain
    assert capacity.estimate_bytes(graph, 64, 64, encoder_runs=[(2, 1024, 1024)]) == 2 * capacity.estimate_bytes(
        graph, 64, 64, encoder_runs=[(1, 1024, 1024)]
    )
