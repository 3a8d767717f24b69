"""The app's icons and web app manifest, made at build time (no image files in the repository).

The icon is the page's logo (style.css `.logo`: a violet-to-pink diagonal gradient with a light spot) with the
page's empty-frame picture (a framed sun over hills) in white. Two shapes per size: `any` (rounded corners,
transparent outside) and `maskable` (the gradient to every edge, the picture inside the central 80% circle that
every launcher mask keeps). The shapes are drawn at 4x and scaled down, for smooth edges.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import numpy as np
from PIL import Image, ImageDraw

SIZES = (192, 512)
PURPOSES = ("any", "maskable")
SUPERSAMPLE = 4
# style.css: .logo's gradient stops, and --accent (the browser's title bar colour).
GRADIENT = ((0.0, (0x63, 0x66, 0xF1)), (0.55, (0xA8, 0x55, 0xF7)), (1.0, (0xEC, 0x48, 0x99)))
THEME_COLOR = "#4f46e5"
BACKGROUND_COLOR = "#f4f5f7"  # --bg: the splash screen while the app starts
NAME = "FLUX.2 [klein] in your browser"
SHORT_NAME = "klein"
DESCRIPTION = "FLUX.2 [klein] 4B text-to-image, running entirely in your browser on WebGPU."


def background(side: int) -> np.ndarray:
    """The diagonal gradient with the light spot at (30%, 30%), as float RGB in [0, 255]."""
    y, x = np.mgrid[0:side, 0:side].astype(np.float64) / (side - 1)
    t = (x + y) / 2  # 135deg: top left to bottom right
    stops = np.array([stop for stop, _ in GRADIENT])
    colours = np.array([colour for _, colour in GRADIENT], dtype=np.float64)
    rgb = np.stack([np.interp(t, stops, colours[:, c]) for c in range(3)], axis=-1)
    spot = np.clip(1 - np.hypot(x - 0.3, y - 0.3) / 0.45, 0, 1) * 0.55  # radial-gradient(white 55%, transparent 45%)
    lit: np.ndarray = rgb + (255 - rgb) * spot[..., None]
    return lit


def _picture(draw: ImageDraw.ImageDraw, side: int, *, inset: float) -> None:
    """The framed picture in white; `inset`: the share of the side left empty around it."""
    lo, hi = side * inset, side * (1 - inset)
    span = hi - lo
    stroke = max(1, round(span * 0.075))
    top, bottom = lo + span * 0.12, hi - span * 0.12
    draw.rounded_rectangle((lo, top, hi, bottom), radius=span * 0.14, outline=255, width=stroke)
    sun_x, sun_y, sun_r = lo + span * 0.33, top + (bottom - top) * 0.36, span * 0.09
    draw.ellipse((sun_x - sun_r, sun_y - sun_r, sun_x + sun_r, sun_y + sun_r), fill=255)
    hills = [(0.06, 0.86), (0.36, 0.55), (0.58, 0.76), (0.74, 0.62), (0.94, 0.82)]
    draw.line([(lo + span * fx, top + (bottom - top) * fy) for fx, fy in hills], fill=255, width=stroke, joint="curve")


def _smooth_mask(draw: Callable[[ImageDraw.ImageDraw, int], None], size: int) -> np.ndarray:
    """A shape drawn at SUPERSAMPLE times the size and scaled down: coverage in [0, 1] with smooth edges."""
    side = size * SUPERSAMPLE
    mask = Image.new("L", (side, side), 0)
    draw(ImageDraw.Draw(mask), side)
    return np.asarray(mask.resize((size, size), Image.Resampling.BOX), dtype=np.float64)[..., None] / 255


def icon_png(size: int, purpose: str) -> bytes:
    """One icon as PNG bytes."""
    if size not in SIZES or purpose not in PURPOSES:
        raise ValueError(f"no icon {size} px {purpose!r}; sizes {SIZES}, purposes {PURPOSES}")
    maskable = purpose == "maskable"
    # Maskable: the picture within the central 80% circle (its square fits inside with 0.2 of the side to spare).
    picture = _smooth_mask(lambda draw, side: _picture(draw, side, inset=0.25 if maskable else 0.2), size)
    rgb = background(size) * (1 - picture) + 255 * picture
    if maskable:
        alpha = np.ones((size, size, 1))
    else:
        alpha = _smooth_mask(
            lambda draw, side: draw.rounded_rectangle((0, 0, side - 1, side - 1), radius=side * 0.22, fill=255), size
        )
    rgba = np.concatenate([rgb, 255 * alpha], axis=-1)
    out = io.BytesIO()
    Image.fromarray(np.round(rgba).astype(np.uint8), "RGBA").save(out, format="PNG")
    return out.getvalue()


def web_manifest(icons: dict[tuple[int, str], str]) -> str:
    """The web app manifest; `icons`: (size, purpose) -> the icon's URL relative to the manifest (the site root)."""
    manifest = {
        "id": "./",
        "name": NAME,
        "short_name": SHORT_NAME,
        "description": DESCRIPTION,
        "start_url": "./",
        "scope": "./",
        "display": "standalone",
        "background_color": BACKGROUND_COLOR,
        "theme_color": THEME_COLOR,
        "icons": [
            {"src": url, "sizes": f"{size}x{size}", "type": "image/png", "purpose": purpose}
            for (size, purpose), url in sorted(icons.items())
        ],
    }
    return json.dumps(manifest, indent=2) + "\n"
