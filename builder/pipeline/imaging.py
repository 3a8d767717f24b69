"""Images: decoder output -> uint8, PNG files with tEXt metadata, and image-comparison metrics.

All metrics take two uint8 HxWx3 arrays of the same shape (what `to_uint8` and `read_png` return):

    psnr(a, b)            peak signal-to-noise ratio in dB over all channels (inf when identical)
    ssim(a, b)            mean SSIM: Wang et al. 2004 (11x11 Gaussian window, sigma 1.5, K1 0.01, K2 0.03,
                          L 255, "valid" windows only), computed per RGB channel and averaged
    max_abs_diff(a, b)    largest per-channel difference, 0..255
    share_off_by(a, b)    share of pixels with some channel off by more than `threshold` (default 8/255)
    compare(a, b)         all of the above in one `ImageComparison`
    diff_heatmap(a, b)    a uint8 HxWx3 picture of |a - b| for reports
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, PngImagePlugin

from builder.errors import InputError
from builder.repo.files import atomic_write_bytes

SOFTWARE = "klein-web"


# Port of diffusers.image_processor.VaeImageProcessor.pt_to_numpy + numpy_to_pil (the uint8 step) @ 0.42.1
def to_uint8(image: np.ndarray) -> np.ndarray:
    """Float image [1, 3, H, W] (or [3, H, W]) in [0, 1] -> uint8 [H, W, 3] with round(x * 255) half-to-even.

    The decoder graph already clamps to [0, 1] (diffusers' `denormalize`), so the clip here never changes a
    valid output; NaN is rejected because it would silently become 0 (a black image).
    """
    array = np.asarray(image)
    if array.ndim == 4:
        if array.shape[0] != 1:
            raise InputError(f"`image` must hold one image, got a batch of {array.shape[0]}.")
        array = array[0]
    if array.ndim != 3 or array.shape[0] != 3:
        raise InputError(f"`image` must be [1, 3, H, W] or [3, H, W], got shape {list(np.shape(image))}.")
    nan_count = int(np.isnan(array).sum())
    if nan_count:
        raise InputError(f"`image` contains {nan_count} NaN values: the model produced an invalid output.")
    hwc = np.clip(array.astype(np.float32), 0.0, 1.0).transpose(1, 2, 0)  # [3, H, W] -> [H, W, 3]
    return np.round(hwc * np.float32(255)).astype(np.uint8)


def png_text(
    *,
    prompt: str,
    seed: int,
    steps: int,
    width: int,
    height: int,
    model: str,
    mode: str = "text",
    images: Sequence[str] = (),
    mask: str | None = None,
    strength: float | None = None,
    outpaint: str | None = None,
    guidance_scale: float | None = None,
    negative_prompt: str | None = None,
) -> dict[str, str]:
    """The tEXt chunks klein-web writes (the web app's Download PNG uses the same keys).

    Editing adds `mode` (`edit`) and `images`; inpainting `mode` (`inpaint`), `images` (the image to inpaint
    first), `mask` and `strength` (repr of the float); outpainting adds `outpaint` (`left=0 right=128 top=0
    bottom=64`, builder.pipeline.outpaint) and has `mask` only when a mask file was given. Each image is one
    `input_line`. Text-to-image has none
    of them. A base model's classifier-free guidance adds `guidance_scale` (repr of the float) and
    `negative_prompt` in every mode; a distilled model's image has neither.
    """
    text = {
        "prompt": prompt,
        "seed": str(seed),
        "steps": str(steps),
        "size": f"{width}x{height}",
        "model": model,
        "software": SOFTWARE,
    }
    if guidance_scale is not None:
        text["guidance_scale"] = repr(float(guidance_scale))
        text["negative_prompt"] = negative_prompt or ""
    if mode == "text":
        return text
    if mode not in ("edit", "inpaint"):
        raise InputError(f"`mode` must be text, edit or inpaint, got {mode!r}.")
    text["mode"] = mode
    text["images"] = "\n".join(images)
    if mode == "inpaint":
        if (mask is None and outpaint is None) or strength is None:
            raise InputError("Inpainting metadata needs the mask and the strength.")
        if mask is not None:
            text["mask"] = mask
        text["strength"] = repr(float(strength))
        if outpaint is not None:
            text["outpaint"] = outpaint
    return text


def input_line(sha256: str, width: int, height: int, name: str) -> str:
    """`<sha256> <W>x<H> <name>`: one input image of the metadata, at the size it was used; control characters
    in the name (a newline would split the line) become U+FFFD."""
    clean = "".join("\ufffd" if ord(c) < 32 or ord(c) == 127 else c for c in name)
    return f"{sha256} {width}x{height} {clean}"


def write_png(path: Path, pixels: np.ndarray, *, text: dict[str, str] | None = None) -> Path:
    """Write uint8 [H, W, 3] as PNG with tEXt (iTXt for non-Latin-1 values), atomically (temp file + rename)."""
    pixels = _check_pixels(pixels, "pixels")
    path = Path(path)
    info = PngImagePlugin.PngInfo()
    for key, value in (text or {}).items():
        try:
            value.encode("latin-1")
            info.add_text(key, value)
        except UnicodeEncodeError:
            info.add_itxt(key, value)  # tEXt is Latin-1 only; iTXt carries UTF-8 prompts
    encoded = io.BytesIO()
    Image.fromarray(pixels).save(encoded, format="PNG", pnginfo=info)
    atomic_write_bytes(path, encoded.getvalue())
    return path


def read_png(path: Path) -> tuple[np.ndarray, dict[str, str]]:
    """(uint8 [H, W, 3], text chunks) of a PNG file."""
    try:
        with warnings.catch_warnings():  # a header beyond Pillow's bomb limit fails here instead of being decoded
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as image:
                image.load()
                text = {str(k): str(v) for k, v in getattr(image, "text", {}).items()}
                pixels = np.asarray(image.convert("RGB"), dtype=np.uint8).copy()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise InputError(
            f"{path} declares more pixels than Pillow decodes safely ({Image.MAX_IMAGE_PIXELS}); "
            "pass a PNG of the image size compared."
        ) from None
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        raise InputError(f"{path} is not a readable PNG image ({exc}).") from exc
    return pixels, text


def _check_pixels(pixels: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(pixels)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3:
        raise InputError(f"`{name}` must be a uint8 [H, W, 3] array, got {array.dtype} {list(array.shape)}.")
    return array


def _check_pair(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = _check_pixels(a, "a"), _check_pixels(b, "b")
    if a.shape != b.shape:
        raise InputError(f"Images differ in size: {a.shape[1]}x{a.shape[0]} vs {b.shape[1]}x{b.shape[0]}.")
    return a, b


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """10 log10(255^2 / MSE) over all pixels and channels; inf for identical images."""
    a, b = _check_pair(a, b)
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10.0 * math.log10(255.0**2 / mse)


def _gaussian_window(size: int = 11, sigma: float = 1.5) -> np.ndarray:
    offsets = np.arange(size, dtype=np.float64) - (size - 1) / 2
    weights: np.ndarray = np.exp(-(offsets**2) / (2 * sigma**2))
    normalised: np.ndarray = weights / weights.sum()
    return normalised


def _filter_valid(channel: np.ndarray, window: np.ndarray) -> np.ndarray:
    """Separable 2-D correlation with `window` on both axes, keeping only fully covered positions."""
    k = len(window)
    height, width = channel.shape[0] - k + 1, channel.shape[1] - k + 1
    rows = np.zeros((height, channel.shape[1]), dtype=np.float64)
    for i in range(k):
        rows += window[i] * channel[i : i + height, :]
    out = np.zeros((height, width), dtype=np.float64)
    for i in range(k):
        out += window[i] * rows[:, i : i + width]
    return out


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Mean SSIM (Wang et al. 2004 reference settings, see the module docstring), averaged over R, G, B."""
    a, b = _check_pair(a, b)
    window = _gaussian_window()
    if min(a.shape[0], a.shape[1]) < len(window):
        raise InputError(f"SSIM needs images of at least 11x11 pixels, got {a.shape[1]}x{a.shape[0]}.")
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    scores = []
    for channel in range(3):
        x = a[:, :, channel].astype(np.float64)
        y = b[:, :, channel].astype(np.float64)
        mu_x, mu_y = _filter_valid(x, window), _filter_valid(y, window)
        var_x = _filter_valid(x * x, window) - mu_x**2
        var_y = _filter_valid(y * y, window) - mu_y**2
        cov = _filter_valid(x * y, window) - mu_x * mu_y
        ssim_map = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / ((mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2))
        scores.append(float(ssim_map.mean()))
    return float(np.mean(scores))


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> int:
    """Largest absolute per-channel difference (0 = identical, 255 = black vs white somewhere)."""
    a, b = _check_pair(a, b)
    return int(np.max(np.abs(a.astype(np.int16) - b.astype(np.int16)), initial=0))


def share_off_by(a: np.ndarray, b: np.ndarray, *, threshold: int = 8) -> float:
    """Share (0..1) of pixels where some channel differs by more than `threshold` levels."""
    a, b = _check_pair(a, b)
    off = np.abs(a.astype(np.int16) - b.astype(np.int16)).max(axis=2) > threshold
    return float(off.mean()) if off.size else 0.0


def diff_heatmap(a: np.ndarray, b: np.ndarray, *, gain: float = 8.0) -> np.ndarray:
    """uint8 [H, W, 3]: black where equal, through red and yellow to white as max |a - b| grows (x `gain`)."""
    a, b = _check_pair(a, b)
    level = np.abs(a.astype(np.float32) - b.astype(np.float32)).max(axis=2) * np.float32(gain) / 255.0
    level = np.clip(level, 0.0, 1.0)
    red = np.clip(level * 3.0, 0.0, 1.0)
    green = np.clip(level * 3.0 - 1.0, 0.0, 1.0)
    blue = np.clip(level * 3.0 - 2.0, 0.0, 1.0)
    return np.round(np.stack([red, green, blue], axis=2) * 255.0).astype(np.uint8)


@dataclass(frozen=True)
class ImageComparison:
    psnr: float  # dB, inf when identical
    ssim: float  # 1.0 when identical
    max_abs_diff: int  # 0..255
    share_off_by_8: float  # share of pixels with some channel off by more than 8/255

    def summary(self) -> str:
        return (
            f"PSNR {self.psnr:.2f} dB, SSIM {self.ssim:.4f}, max |diff| {self.max_abs_diff}/255, "
            f"{self.share_off_by_8 * 100:.2f}% of pixels off by > 8/255"
        )


def compare(a: np.ndarray, b: np.ndarray) -> ImageComparison:
    """Every metric above for two uint8 [H, W, 3] images of the same size."""
    return ImageComparison(
        psnr=psnr(a, b),
        ssim=ssim(a, b),
        max_abs_diff=max_abs_diff(a, b),
        share_off_by_8=share_off_by(a, b, threshold=8),
    )
