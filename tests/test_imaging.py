"""builder.pipeline.imaging: the uint8 step against diffusers, PNG metadata round trip, metrics against independent code."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from builder.errors import InputError
from builder.pipeline import imaging


def random_pixels(seed: int, height: int = 48, width: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(height, width, 3), dtype=np.uint8)


@pytest.mark.torch
def test_to_uint8_matches_diffusers_postprocess() -> None:
    import torch
    from diffusers.image_processor import VaeImageProcessor

    rng = np.random.default_rng(0)
    image = rng.random((1, 3, 32, 48), dtype=np.float32)
    # Exact .5 / 255 midpoints exercise round-half-to-even; 0 and 1 the ends.
    image[0, 0, 0, :6] = np.array([0.5 / 255, 1.5 / 255, 2.5 / 255, 127.5 / 255, 0.0, 1.0], dtype=np.float32)
    numpy_hwc = VaeImageProcessor.pt_to_numpy(torch.from_numpy(image))
    expected = np.asarray(VaeImageProcessor.numpy_to_pil(numpy_hwc)[0])
    actual = imaging.to_uint8(image)
    assert actual.dtype == np.uint8 and actual.shape == (32, 48, 3)
    assert np.array_equal(actual, expected)


def test_to_uint8_rejects_nan_and_bad_shapes() -> None:
    image = np.zeros((1, 3, 4, 4), dtype=np.float32)
    image[0, 1, 2, 3] = np.nan
    with pytest.raises(InputError, match="NaN"):
        imaging.to_uint8(image)
    with pytest.raises(InputError, match="shape"):
        imaging.to_uint8(np.zeros((1, 4, 4, 3), dtype=np.float32))


def test_png_round_trip_keeps_pixels_and_text(tmp_path: Path) -> None:
    pixels = random_pixels(1)
    text = imaging.png_text(prompt="雪の中の狐 — a fox", seed=42, steps=4, width=64, height=48, model="tiny/q4")
    path = imaging.write_png(tmp_path / "out" / "image.png", pixels, text=text)
    assert [p.name for p in path.parent.iterdir()] == ["image.png"]  # no temp file left behind
    read_pixels, read_text = imaging.read_png(path)
    assert np.array_equal(read_pixels, pixels)
    assert read_text == text
    with Image.open(path) as image:  # a PNG any viewer opens
        assert image.format == "PNG" and image.size == (64, 48)


def test_read_png_rejects_garbage(tmp_path: Path) -> None:
    (tmp_path / "bad.png").write_bytes(b"<html>not a png</html>")
    with pytest.raises(InputError, match=r"bad\.png"):
        imaging.read_png(tmp_path / "bad.png")


def test_psnr_and_diffs() -> None:
    a = random_pixels(2)
    assert imaging.psnr(a, a) == math.inf
    assert imaging.max_abs_diff(a, a) == 0 and imaging.share_off_by(a, a) == 0.0
    b = a.astype(np.int16)
    b[0, 0, 0] = 255 - a[0, 0, 0]
    b[1, :, 2] = np.clip(b[1, :, 2] + 9, 0, 255)
    b = b.astype(np.uint8)
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    assert imaging.psnr(a, b) == pytest.approx(10 * math.log10(255**2 / mse), rel=1e-12)
    assert imaging.max_abs_diff(a, b) == int(np.abs(a.astype(int) - b.astype(int)).max())
    off = (np.abs(a.astype(int) - b.astype(int)).max(axis=2) > 8).mean()
    assert imaging.share_off_by(a, b) == pytest.approx(off)
    with pytest.raises(InputError, match="size"):
        imaging.psnr(a, a[:-1])


def torch_ssim(a: np.ndarray, b: np.ndarray) -> float:
    """An independent SSIM: conv2d with the 2-D Gaussian kernel, valid padding, per channel."""
    import torch

    coords = torch.arange(11, dtype=torch.float64) - 5
    g = torch.exp(-(coords**2) / (2 * 1.5**2))
    g = g / g.sum()
    kernel = (g[:, None] * g[None, :])[None, None].repeat(3, 1, 1, 1)

    def blur(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.conv2d(x, kernel, groups=3)

    x = torch.from_numpy(a).permute(2, 0, 1)[None].double()
    y = torch.from_numpy(b).permute(2, 0, 1)[None].double()
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    mx, my = blur(x), blur(y)
    vx, vy, cxy = blur(x * x) - mx**2, blur(y * y) - my**2, blur(x * y) - mx * my
    smap = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    return float(smap.mean(dim=(2, 3)).mean())


@pytest.mark.torch
def test_ssim_matches_independent_implementation() -> None:
    a = random_pixels(3)
    noise = np.random.default_rng(4).normal(0, 12, a.shape)
    b = np.clip(a + noise, 0, 255).astype(np.uint8)
    assert imaging.ssim(a, a) == pytest.approx(1.0, abs=1e-12)
    value = imaging.ssim(a, b)
    assert value == pytest.approx(torch_ssim(a, b), rel=1e-9)
    assert 0 < value < 1
    with pytest.raises(InputError, match="11x11"):
        imaging.ssim(a[:8, :8], b[:8, :8])


def test_compare_and_heatmap(tmp_path: Path) -> None:
    a = random_pixels(5)
    b = a.copy()
    b[10:20, 10:20] = 0
    result = imaging.compare(a, b)
    assert result.psnr == pytest.approx(imaging.psnr(a, b)) and result.ssim < 1.0
    assert "PSNR" in result.summary()
    heat = imaging.diff_heatmap(a, b)
    assert heat.shape == a.shape and heat.dtype == np.uint8
    changed = np.abs(a.astype(int) - b.astype(int)).max(axis=2) > 0
    assert heat[~changed].max() == 0 and heat[changed].max() > 0
    imaging.write_png(tmp_path / "diff.png", heat)
    assert np.array_equal(imaging.read_png(tmp_path / "diff.png")[0], heat)
