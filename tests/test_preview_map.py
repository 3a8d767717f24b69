"""The step preview's colour map (builder/convert/preview_map.py): its layout against diffusers, the least-squares fit,
the procedural images it is fitted on, and the map `convert` writes for the tiny model's VAE.

What the app does with the map (pipeline/preview.js) is tested in tests/js/test_preview.mjs and, in the browser,
tests/browser/test_preview.py.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder.convert import preview_map
from builder.errors import ModelRepoError
from builder.pipeline import reference
from builder.pipeline.latents import unpack_latents
from builder.repo import manifest as repo

# On the tiny model's VAE (random weights: its decoder is barely linear in its latents, docs/preview.md) the fitted
# map's RMSE on held-out latents is about 93% of the mean colour's; a trained VAE's is far lower.
HELD_OUT_RMSE_MAX_SHARE = 0.95
# Per colour channel, the map's picture of the final latents against the image averaged over 8x8 blocks, on the
# tiny model at 256x256 over three seeds: measured 0.14-0.30 per seed; a map unrelated to the image gives about
# 0 +- 0.02 on these 3 x 1024 pixels.
CORRELATION_MIN = 0.1


def reference_run(
    model_dir: Path, *, prompt: str, seed: int, width: int, height: int, monkeypatch: pytest.MonkeyPatch
) -> tuple[np.ndarray, np.ndarray]:
    """The CPU reference's 4-step image [H, W, 3] uint8 and the denoised latents it decoded [1, 128, h, w] (read as
    its decode stage receives them)."""
    seen: list[np.ndarray] = []
    decode = reference.decode

    def recording(models: Any, denoised: np.ndarray, prepared: Any) -> tuple[np.ndarray, np.ndarray]:
        seen.append(unpack_latents(denoised, prepared.latent_height, prepared.latent_width))
        return decode(models, denoised, prepared)

    monkeypatch.setattr(reference, "decode", recording)
    result = reference.generate(
        model_dir, prompt=prompt, seed=seed, width=width, height=height, steps=4, log=lambda _m: None
    )
    assert len(seen) == 1
    return seen[0], result.image


def structured_latents(rng: np.random.Generator, count: int, height: int, width: int) -> np.ndarray:
    """[count, 128, h, w]: smooth fields plus noise, channels mixed, so neighbouring tokens and channels correlate."""
    smooth = rng.standard_normal((count, 128, height // 2 + 1, width // 2 + 1)).repeat(2, axis=2).repeat(2, axis=3)
    mixed = np.einsum("bchw,cd->bdhw", smooth[:, :, :height, :width], rng.standard_normal((128, 128)) / 11)
    latents: np.ndarray = (mixed + 0.3 * rng.standard_normal(mixed.shape)).astype(np.float32)
    return latents


@pytest.mark.torch
def test_apply_colours_each_pixel_from_its_token_as_diffusers_unpatchifies() -> None:
    import torch
    from diffusers.pipelines.flux2.pipeline_flux2_klein import Flux2KleinPipeline

    rng = np.random.default_rng(0)
    latents = rng.standard_normal((2, 128, 3, 5)).astype(np.float32)
    # Packed channel c*4 + dy*2 + dx is VAE channel c at (dy, dx): show VAE channels 0, 1, 2 as R, G, B.
    weights = np.zeros((preview_map.OUTPUTS, 128))
    for dy in range(2):
        for dx in range(2):
            for k in range(3):
                weights[(dy * 2 + dx) * 3 + k, k * 4 + dy * 2 + dx] = 1
    shown = preview_map.PreviewMap(weights, np.full(preview_map.OUTPUTS, 0.25), {}).apply(latents)
    pixels = Flux2KleinPipeline._unpatchify_latents(torch.from_numpy(latents)).numpy()  # [2, 32, 6, 10]
    assert shown.shape == (2, 3, 6, 10)
    np.testing.assert_allclose(shown, pixels[:, :3] + 0.25, rtol=0, atol=1e-6)


def test_the_fit_recovers_an_affine_map_from_its_output(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    latents = structured_latents(rng, 24, 8, 8)
    planted = preview_map.PreviewMap(
        rng.standard_normal((preview_map.OUTPUTS, 128)) * 0.05, rng.uniform(0.2, 0.8, preview_map.OUTPUTS), {}
    )
    held = structured_latents(rng, 4, 8, 8)
    wanted = planted.apply(held)

    def error() -> float:
        weights, bias = preview_map.solve(latents, planted.apply(latents))
        return preview_map.rmse(preview_map.PreviewMap(weights, bias, {}).apply(held), wanted)

    # The ridge term shrinks weakly-driven directions a little: well below the colours' own spread.
    assert error() < 0.1 * wanted.std()
    # Without it, least squares finds the map itself.
    monkeypatch.setattr(preview_map, "RIDGE", 0.0)
    assert error() < 1e-6


def test_the_procedural_images_have_the_statistics_of_natural_images() -> None:
    images = preview_map.synthetic_images(np.random.default_rng(2), 12, 128)
    assert images.dtype == np.float32 and images.shape == (12, 3, 128, 128)
    assert images.min() >= 0 and images.max() <= 1
    # Power spectrum ~ 1/f^2: the slope of log power against log frequency, radially averaged, near -2.
    luma = images.mean(axis=1)
    power = np.abs(np.fft.fft2(luma - luma.mean(axis=(1, 2), keepdims=True))) ** 2
    freq = np.hypot(*np.meshgrid(np.fft.fftfreq(128), np.fft.fftfreq(128), indexing="ij"))
    bands = np.geomspace(2 / 128, 0.5, 12)
    centres = np.sqrt(bands[:-1] * bands[1:])
    mean_power = [power[:, (freq >= lo) & (freq < hi)].mean() for lo, hi in itertools.pairwise(bands)]
    slope = np.polyfit(np.log(centres), np.log(mean_power), 1)[0]
    assert -3.0 < slope < -1.5, slope
    # Flat regions with edges between them: differences of neighbouring pixels are heavy-tailed (a Gaussian
    # field's kurtosis is 3; natural images' is 10 or more).
    steps = np.diff(luma, axis=2).ravel()
    assert ((steps - steps.mean()) ** 4).mean() / steps.var() ** 2 > 6
    # Colours, not greys: the channels differ.
    assert np.abs(images - images.mean(axis=1, keepdims=True)).mean() > 0.02


def test_a_map_file_that_is_not_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "preview_map.json"
    good = preview_map.PreviewMap(np.zeros((preview_map.OUTPUTS, 128)), np.zeros(preview_map.OUTPUTS), {"x": 1})
    preview_map.write(tmp_path, good)
    assert preview_map.load(tmp_path / repo.PREVIEW_MAP_FILE).fit == {"x": 1}
    for text in (
        "{",
        json.dumps({"format": "other", "weights": [], "bias": []}),
        json.dumps({**good.to_json(), "weights": [[0.0] * 128] * 11}),
    ):
        path.write_text(text)
        with pytest.raises(ModelRepoError, match="re-convert"):
            preview_map.load(path)


def test_convert_writes_a_map_that_reproduces_the_decoder_better_than_a_trivial_one(
    tiny_models: dict[str, Path],
) -> None:
    maps = {}
    for name in ("q4", "fp32"):
        manifest = repo.load(tiny_models[name])
        assert repo.PREVIEW_MAP_FILE in manifest.files
        maps[name] = (tiny_models[name] / repo.PREVIEW_MAP_FILE).read_bytes()
    # Both repositories fit from their fp32 VAE graphs, the q4 one's weights stored in fp16 (the compact format):
    # the same map within that rounding (measured: 1.1e-5 on weights up to 0.0097, 2.6e-5 on biases up to 0.62).
    fitted = preview_map.load(tiny_models["fp32"] / repo.PREVIEW_MAP_FILE)
    from_q4 = preview_map.load(tiny_models["q4"] / repo.PREVIEW_MAP_FILE)
    assert maps["q4"] != maps["fp32"]
    np.testing.assert_allclose(from_q4.weights, fitted.weights, rtol=0, atol=1e-4)
    np.testing.assert_allclose(from_q4.bias, fitted.bias, rtol=0, atol=1e-3)

    # Held-out latents drawn as the fit draws them, with a seed the fit never used.
    vae = preview_map.VaeGraphs.open(tiny_models["fp32"])
    latents = preview_map.draw_latents(vae, np.random.default_rng(12345), 16, preview_map.IMAGE_SIDE)
    colours = preview_map.block_colours(vae.decode(latents))
    error = preview_map.rmse(fitted.apply(latents), colours)
    trivial = preview_map.mean_colour_rmse(colours, colours)
    # The best affine map from the first three packed channels, fitted on these very latents.
    three_weights, three_bias = preview_map.solve(latents[:, :3], colours)
    three = preview_map.rmse(
        latents[:, :3].transpose(0, 2, 3, 1).reshape(-1, 3) @ three_weights.T + three_bias,
        preview_map.token_targets(colours),
    )
    print(f"held-out RMSE: fitted {error:.4f}, mean colour {trivial:.4f}, first three channels {three:.4f}")
    assert error <= HELD_OUT_RMSE_MAX_SHARE * trivial
    assert error < three
    assert fitted.fit["held_out_rmse"] <= HELD_OUT_RMSE_MAX_SHARE * fitted.fit["mean_colour_rmse"]


def test_the_maps_picture_of_the_final_latents_looks_like_the_image(
    tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the last step preview shows (tests/browser/test_preview.py: the browser's equals this) against the image."""
    fitted = preview_map.load(tiny_models["fp32"] / repo.PREVIEW_MAP_FILE)
    shown, blocks = [], []
    for seed in (0, 1, 1234):
        latents, image = reference_run(
            tiny_models["fp32"],
            prompt="a lighthouse on a cliff at dusk, oil painting",
            seed=seed,
            width=256,
            height=256,
            monkeypatch=monkeypatch,
        )
        shown.append(np.round(np.clip(fitted.apply(latents)[0], 0, 1) * 255).reshape(3, -1))
        blocks.append(preview_map.block_colours(image.transpose(2, 0, 1)[None].astype(np.float64))[0].reshape(3, -1))
    pictures, images = np.concatenate(shown, axis=1), np.concatenate(blocks, axis=1)
    correlations = [float(np.corrcoef(pictures[k], images[k])[0, 1]) for k in range(3)]
    print(f"preview vs image in 8x8 blocks, per channel: {np.round(correlations, 3)}")
    assert min(correlations) >= CORRELATION_MIN
