"""The step preview's colour map, fitted to the model's own VAE when `klein-web convert` writes a repository.

After each denoising step the app shows what the image is becoming without running the VAE decoder: every packed
latent token (128 channels = 32 VAE latent channels x a 2x2 patch, BN-normalised, exactly what the transformer
sees) is mapped by one affine map to the colours of its 2x2 block of VAE-latent pixels, 1/8 of the image's size:

    rgb[(dy * 2 + dx) * 3 + k] = bias[(dy * 2 + dx) * 3 + k] + sum_c weights[(dy * 2 + dx) * 3 + k][c] * token[c]

in [0, 1] like the decoder's output (k = R, G, B; dy, dx the pixel's place in the 2x2 block). The map works on the
normalised tokens, so the BatchNorm de-normalisation the decoder folds in is inside it.

The fit (docs/preview.md) draws latents like the ones the preview shows, the transformer's predictions of clean
latents: three in four are procedural images with natural-image statistics (a dead-leaves model of occluding
shapes over 1/f-noise shading) encoded by the repository's own fp32 VAE encoder, so they have the spatial and
cross-channel structure of encoded images, each channel then rescaled to zero mean and unit variance (what the
pipeline's BatchNorm makes the latents of real images); one in four is N(0, 1) noise, where every run starts, so
the map also holds on latents no image encodes to (early steps, and untrained models such as the tiny test model).
The repository's own fp32 decoder decodes them; each decoded image is averaged over 8x8 pixel blocks (one value per
VAE-latent pixel); and the map is the ridge-regularised least-squares fit from the tokens to those block colours. A
quarter of the latents is held out: the file records the map's error on them next to the error of the mean colour
(the trivial map), and the converter's log prints both.

Repositories without this file (the seed repository) get the published FLUX.2 map (web_src/src/pipeline/preview.js).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builder.errors import ConversionError, ModelRepoError
from builder.repo.files import atomic_write_bytes
from builder.repo.manifest import PREVIEW_MAP_FILE, graph_path

FORMAT = "klein-web-preview-map"
FORMAT_VERSION = 1

LATENT_CHANNELS = 128  # packed: 32 VAE channels x 2 x 2
PATCH = 2  # each token covers PATCH x PATCH VAE-latent pixels
OUTPUTS = PATCH * PATCH * 3
BLOCK = 8  # image pixels per VAE-latent pixel, along each side

# The fit's latents: their count, side (in image pixels) and random seed (fixed, so a conversion writes the same
# bytes every time). Every NOISE_EVERY-th is N(0, 1) noise, the others encoded images.
IMAGES = 64
NOISE_EVERY = 4
IMAGE_SIDE = 128
SEED = 20260301
BATCH = 4
# Ridge weight relative to the mean squared token value: keeps channels the images barely move from getting wild
# weights, at no visible cost to the fit.
RIDGE = 1e-2
SIGNIFICANT_DIGITS = 6

Log = Callable[[str], None]


@dataclass(frozen=True)
class PreviewMap:
    """weights [OUTPUTS, LATENT_CHANNELS] and bias [OUTPUTS]: token -> colours of its 2x2 block, in [0, 1]."""

    weights: np.ndarray
    bias: np.ndarray
    fit: dict[str, Any]

    def apply(self, latents: np.ndarray) -> np.ndarray:
        """Latents [B, 128, h, w] (NCHW, normalised) -> the preview [B, 3, 2h, 2w], not clamped."""
        batch, channels, height, width = latents.shape
        tokens = latents.transpose(0, 2, 3, 1).reshape(-1, channels).astype(np.float64)
        blocks = tokens @ self.weights.T + self.bias  # [B*h*w, (dy, dx, k)]
        blocks = blocks.reshape(batch, height, width, PATCH, PATCH, 3)
        return np.asarray(blocks.transpose(0, 5, 1, 3, 2, 4).reshape(batch, 3, height * PATCH, width * PATCH))

    def to_json(self) -> dict[str, Any]:
        def rounded(values: np.ndarray) -> list[Any]:
            return [float(f"{v:.{SIGNIFICANT_DIGITS}g}") for v in values.ravel()]

        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "layout": "rgb[(dy*2+dx)*3+k] = bias[...] + weights[...] . token (128 BN-normalised packed channels), "
            "RGB in [0, 1]",
            "latent_channels": LATENT_CHANNELS,
            "outputs": OUTPUTS,
            "weights": [rounded(row) for row in self.weights],
            "bias": rounded(self.bias),
            "fit": self.fit,
        }


# --- Images with natural-image statistics ----------------------------------------------------------------------


def pink_noise(rng: np.random.Generator, side: int, *, exponent: float = 2.0) -> np.ndarray:
    """A [side, side] field with power spectrum 1/f^exponent (natural images: about 2), scaled to unit std."""
    fy = np.fft.fftfreq(side)[:, None]
    fx = np.fft.rfftfreq(side)[None, :]
    radius = np.sqrt(fx**2 + fy**2)
    radius[0, 0] = 1.0
    spectrum = (rng.standard_normal(radius.shape) + 1j * rng.standard_normal(radius.shape)) / radius ** (exponent / 2)
    spectrum[0, 0] = 0
    field = np.fft.irfft2(spectrum, s=(side, side))
    return np.asarray(field / (field.std() + 1e-12))


def random_colour(rng: np.random.Generator) -> np.ndarray:
    """An RGB colour as photographs have them: mostly muted, sometimes saturated, any brightness."""
    grey = rng.uniform(0.05, 0.95)
    saturation = rng.beta(1.2, 2.5)
    hue = rng.standard_normal(3)
    hue -= hue.mean()
    colour = grey + saturation * 0.5 * hue / (np.abs(hue).max() + 1e-12)
    return np.asarray(np.clip(colour, 0.0, 1.0))


def dead_leaves(rng: np.random.Generator, side: int) -> np.ndarray:
    """[3, side, side]: occluding discs and rectangles with power-law sizes (scale-invariant, flat regions and sharp
    edges as in natural images), each shaded by a gradient and 1/f noise."""
    image = np.empty((3, side, side))
    image[:] = random_colour(rng)[:, None, None]
    shapes = int(rng.integers(20, 60))
    for _ in range(shapes):
        # Radius with density ~ r^-3 (the dead-leaves model of natural images), from 1/64 to 1/2 of the side.
        radius = 1 / 64 * (1 - rng.uniform() * (1 - (1 / 32) ** 2)) ** -0.5
        cy, cx = rng.uniform(-0.1, 1.1, size=2)
        disc = rng.uniform() < 0.5
        aspect = rng.uniform(0.3, 3.0)
        colour = random_colour(rng)
        slope = rng.standard_normal(2) * 0.3
        # Only the shape's bounding box is touched.
        half_h, half_w = (radius, radius) if disc else (radius * aspect**0.5, radius / aspect**0.5)
        top, bottom = max(0, int((cy - half_h) * side)), min(side, int((cy + half_h) * side) + 1)
        left, right = max(0, int((cx - half_w) * side)), min(side, int((cx + half_w) * side) + 1)
        if top >= bottom or left >= right:
            continue
        yy, xx = np.mgrid[top:bottom, left:right] / side
        inside = (
            (yy - cy) ** 2 + (xx - cx) ** 2 < radius**2
            if disc
            else (np.abs(yy - cy) < half_h) & (np.abs(xx - cx) < half_w)
        )
        shade = 1 + slope[0] * (yy - cy) + slope[1] * (xx - cx)
        box = image[:, top:bottom, left:right]
        box[:, inside] = (colour[:, None, None] * shade[None])[:, inside]
    return image


def synthetic_images(rng: np.random.Generator, count: int, side: int) -> np.ndarray:
    """[count, 3, side, side] float32 in [0, 1]: dead leaves with 1/f texture, some plain 1/f-noise scenes."""
    images = np.empty((count, 3, side, side), dtype=np.float32)
    for i in range(count):
        if i % 3 == 2:
            # A smooth scene: luminance and two weaker colour-difference fields, each 1/f^2.
            luma = 0.5 + 0.18 * pink_noise(rng, side)
            tint = random_colour(rng) - 0.5
            image = luma[None] + 0.6 * tint[:, None, None] * np.stack([pink_noise(rng, side) for _ in range(3)]) * 0.3
            image += tint[:, None, None] * 0.5
        else:
            image = dead_leaves(rng, side)
        texture = rng.uniform(0.0, 0.08)
        image = image + texture * pink_noise(rng, side, exponent=1.5)[None]
        images[i] = np.clip(image, 0.0, 1.0)
    return images


# --- The fit ---------------------------------------------------------------------------------------------------


def block_colours(decoded: np.ndarray) -> np.ndarray:
    """Decoded images [B, 3, H, W] -> their mean colour per BLOCK x BLOCK block [B, 3, H/8, W/8]."""
    batch, channels, height, width = decoded.shape
    blocks = decoded.reshape(batch, channels, height // BLOCK, BLOCK, width // BLOCK, BLOCK)
    return np.asarray(blocks.mean(axis=(3, 5), dtype=np.float64))


def token_targets(colours: np.ndarray) -> np.ndarray:
    """Block colours [B, 3, 2h, 2w] -> per token its 2x2 block's colours [B*h*w, OUTPUTS] in (dy, dx, k) order."""
    batch, _, height, width = colours.shape
    grid = colours.reshape(batch, 3, height // PATCH, PATCH, width // PATCH, PATCH)
    return grid.transpose(0, 2, 4, 3, 5, 1).reshape(-1, OUTPUTS)


def solve(latents: np.ndarray, colours: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ridge least squares from the tokens of `latents` [B, 128, h, w] to `colours` [B, 3, 2h, 2w]; the bias is
    not penalised (the tokens are centred first)."""
    tokens = latents.transpose(0, 2, 3, 1).reshape(-1, latents.shape[1]).astype(np.float64)
    targets = token_targets(colours)
    token_mean, target_mean = tokens.mean(axis=0), targets.mean(axis=0)
    centred = tokens - token_mean
    gram = centred.T @ centred
    ridge = RIDGE * np.trace(gram) / gram.shape[0]
    weights = np.linalg.solve(gram + ridge * np.eye(gram.shape[0]), centred.T @ (targets - target_mean)).T
    return weights, target_mean - weights @ token_mean


def rmse(predicted: np.ndarray, wanted: np.ndarray) -> float:
    return float(np.sqrt(np.mean((predicted - wanted) ** 2)))


def mean_colour_rmse(train_colours: np.ndarray, colours: np.ndarray) -> float:
    """The trivial map's error: every block gets the training images' mean colour."""
    mean = train_colours.mean(axis=(0, 2, 3))[None, :, None, None]
    return rmse(np.broadcast_to(mean, colours.shape), colours)


@dataclass
class VaeGraphs:
    """The repository's fp32 VAE encoder and decoder on onnxruntime's CPU provider."""

    encoder: Any
    decoder: Any

    @classmethod
    def open(cls, repo_dir: Path) -> VaeGraphs:
        import onnxruntime

        def session(component: str) -> Any:
            path = repo_dir / graph_path(component, "fp32")
            if not path.is_file():
                raise ConversionError(f"{path} is missing: the preview map is fitted to the fp32 VAE graphs.")
            options = onnxruntime.SessionOptions()
            options.log_severity_level = 3
            try:
                return onnxruntime.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])
            except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/... types
                raise ModelRepoError(f"onnxruntime cannot load {path} ({exc}).") from exc

        return cls(encoder=session("vae_encoder"), decoder=session("vae_decoder"))

    def encode(self, images: np.ndarray) -> np.ndarray:
        return np.concatenate(
            [
                self.encoder.run(["image_latents"], {"image": images[i : i + BATCH]})[0]
                for i in range(0, len(images), BATCH)
            ]
        )

    def decode(self, latents: np.ndarray) -> np.ndarray:
        return np.concatenate(
            [self.decoder.run(["image"], {"latents": latents[i : i + BATCH]})[0] for i in range(0, len(latents), BATCH)]
        )


def draw_latents(vae: VaeGraphs, rng: np.random.Generator, count: int, side: int) -> np.ndarray:
    """[count, 128, side/16, side/16] float32: every NOISE_EVERY-th N(0, 1), the others encoded procedural images
    with each channel standardised over all of them."""
    noise = np.arange(count) % NOISE_EVERY == NOISE_EVERY - 1
    encoded = vae.encode(synthetic_images(rng, int((~noise).sum()), side)).astype(np.float64)
    encoded = (encoded - encoded.mean(axis=(0, 2, 3), keepdims=True)) / (
        encoded.std(axis=(0, 2, 3), keepdims=True) + 1e-6
    )
    latents = np.empty((count, *encoded.shape[1:]), dtype=np.float32)
    latents[~noise] = encoded
    latents[noise] = rng.standard_normal((int(noise.sum()), *encoded.shape[1:]))
    return latents


def fit_preview_map(
    repo_dir: Path, *, log: Log, images: int = IMAGES, side: int = IMAGE_SIDE, seed: int = SEED
) -> PreviewMap:
    """The preview map of the VAE in `repo_dir` (a repository, or the converter's staging folder)."""
    vae = VaeGraphs.open(Path(repo_dir))
    latents = draw_latents(vae, np.random.default_rng(seed), images, side)
    colours = block_colours(vae.decode(latents))
    held = max(NOISE_EVERY, images // 4)
    weights, bias = solve(latents[held:], colours[held:])
    fitted = PreviewMap(weights=weights, bias=bias, fit={})
    held_rmse = rmse(fitted.apply(latents[:held]), colours[:held])
    trivial_rmse = mean_colour_rmse(colours[held:], colours[:held])
    fit = {
        "images": images,
        "held_out": held,
        "side": side,
        "seed": seed,
        "ridge": RIDGE,
        "held_out_rmse": round(held_rmse, 5),
        "mean_colour_rmse": round(trivial_rmse, 5),
        "method": "ridge least squares from latents (3/4 VAE-encoded procedural images, each channel standardised; "
        "1/4 N(0, 1)) to the fp32 VAE decoder's output averaged over 8x8 pixel blocks",
    }
    if not (math.isfinite(held_rmse) and np.isfinite(weights).all() and np.isfinite(bias).all()):
        raise ConversionError("The preview map's fit is not finite: the VAE decoder produced NaN or infinite values.")
    log(
        f"preview map: fitted on {images} latents of {side}x{side} pixels, held-out RMSE {held_rmse:.4f} "
        f"(mean colour: {trivial_rmse:.4f})"
    )
    return PreviewMap(weights=weights, bias=bias, fit=fit)


def write(repo_dir: Path, preview_map: PreviewMap) -> str:
    """Write PREVIEW_MAP_FILE into `repo_dir`; returns its repo-relative path (for the manifest)."""
    data = (json.dumps(preview_map.to_json(), separators=(",", ":")) + "\n").encode("utf-8")
    atomic_write_bytes(Path(repo_dir) / PREVIEW_MAP_FILE, data, what="preview map")
    return PREVIEW_MAP_FILE


def load(path: Path) -> PreviewMap:
    """A preview map file, its shapes checked."""
    try:
        data = json.loads(Path(path).read_bytes())
        weights = np.asarray(data["weights"], dtype=np.float64)
        bias = np.asarray(data["bias"], dtype=np.float64)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelRepoError(
            f"{path} is not a preview map ({type(exc).__name__}: {exc}); re-convert the model."
        ) from None
    if data.get("format") != FORMAT or weights.shape != (OUTPUTS, LATENT_CHANNELS) or bias.shape != (OUTPUTS,):
        raise ModelRepoError(f"{path} is not a {FORMAT} of {OUTPUTS}x{LATENT_CHANNELS} weights; re-convert the model.")
    return PreviewMap(weights=weights, bias=bias, fit=dict(data.get("fit") or {}))


def write_fitted(repo_dir: Path, *, log: Log) -> list[str]:
    """Fit the map to the VAE graphs in `repo_dir` and write it there (what `convert` calls)."""
    return [write(repo_dir, fit_preview_map(repo_dir, log=log))]
