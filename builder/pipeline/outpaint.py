"""Outpainting: inpainting on a larger canvas, the image to inpaint extended on any side.

The rule, one for the CPU reference and the app (web_src/src/shared/outpaint.js is its twin; tests/test_twins.py
holds the two equal on the same cases):

- The padded image is the decoded image (RGB, EXIF orientation applied, as `load_image` reads it) with LEFT, RIGHT,
  TOP and BOTTOM columns and rows added, each new pixel a copy of the nearest pixel of the image's edge
  (`numpy.pad(mode="edge")`: rows and columns repeated outwards, corners the corner pixel). Edge copies give the
  VAE encoder colours the new area can continue from, where a flat fill would draw a frame.
- The padded mask is white (255, repaint) on every new pixel; on the original area it is the given mask, which
  must then have the image's decoded size (the painter's mask has), or black (0, keep) when none is given.

The padded image and mask then go to Flux2KleinInpaintPipeline(image=padded, mask_image=mask) exactly as an image
and mask read from files do: the area limit, the resize to multiples of 16 and the mask's LANCZOS resize and 50%
threshold all apply to the padded size. The output has the padded image's used size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from builder.errors import InputError
from builder.pipeline import limits

SIDES = ("left", "right", "top", "bottom")
EXTEND_MAX = limits.SIZE_MAX  # pixels added on one side at most
MASK_REPAINT = 255  # the mask's value on the new area
MASK_KEEP = 0  # the mask's value on the original area when no mask is given


@dataclass(frozen=True)
class Extension:
    """Pixels added on each side of the image to inpaint."""

    left: int = 0
    right: int = 0
    top: int = 0
    bottom: int = 0

    def __bool__(self) -> bool:
        return any(getattr(self, side) for side in SIDES)

    def padded_size(self, width: int, height: int) -> tuple[int, int]:
        return width + self.left + self.right, height + self.top + self.bottom

    def text(self) -> str:
        """The PNG key `outpaint` and how messages name it: `left=0 right=128 top=0 bottom=64`."""
        return " ".join(f"{side}={getattr(self, side)}" for side in SIDES)


def extension_problem(values: object) -> str | None:
    """Why `values` (a mapping of SIDES to pixels, missing sides 0) is no extension, or None."""
    if not isinstance(values, dict):
        return f"The extension must name sides (left, right, top, bottom) and pixels, got {values!r}."
    for side, value in values.items():
        if side not in SIDES:
            return f"The extension has no side {side!r}; use left, right, top and bottom."
        if isinstance(value, bool) or not isinstance(value, int):
            return f"The extension's {side} must be a whole number of pixels, got {value!r}."
        if not 0 <= value <= EXTEND_MAX:
            return f"The extension's {side} must be from 0 to {EXTEND_MAX} pixels, got {value}."
    return None


def check_extension(values: object) -> Extension:
    problem = extension_problem(values)
    if problem:
        raise InputError(problem)
    assert isinstance(values, dict)
    return Extension(**values)


def padded_problem(extension: Extension, width: int, height: int, name: str) -> str | None:
    """Why the image `name` (decoded WIDTHxHEIGHT) cannot be extended by `extension`, or None: the padded image must
    be an input image the app takes and its used size an output size it makes."""
    padded_width, padded_height = extension.padded_size(width, height)
    reason = None
    if padded_width * padded_height > limits.IMAGE_PIXELS_MAX:
        reason = f"more than the {limits.IMAGE_PIXELS_MAX // 2**20} megapixels an input image may have"
    elif max(padded_width / padded_height, padded_height / padded_width) > limits.IMAGE_ASPECT_MAX:
        reason = f"an aspect ratio beyond {limits.IMAGE_ASPECT_MAX}:1"
    else:
        used = limits.input_image_size(padded_width, padded_height)
        if not all(limits.side_allowed(side) for side in used):
            reason = f"used at {used[0]}x{used[1]}, beyond the {limits.SIZE_MAX} pixels an output side may have"
    if reason is None:
        return None
    return (
        f"Extending {name} ({width}x{height}) by {extension.text()} makes it {padded_width}x{padded_height}, "
        f"{reason}; extend it less."
    )


def mask_size_problem(width: int, height: int, mask_width: int, mask_height: int, name: str) -> str | None:
    """With an extension a given mask covers the original area, so it must have the image's decoded size."""
    if (mask_width, mask_height) == (width, height):
        return None
    return (
        f"{name} is {mask_width}x{mask_height}; with an extension the mask covers the image to inpaint and must have "
        f"its size, {width}x{height} (the new area is always repainted)."
    )


def pad_image(rgb: np.ndarray, extension: Extension) -> np.ndarray:
    """uint8 [H, W, 3] -> [H + top + bottom, W + left + right, 3], the new pixels copies of the nearest edge pixel."""
    widths = ((extension.top, extension.bottom), (extension.left, extension.right), (0, 0))
    return np.pad(rgb, widths, mode="edge")


def pad_mask(grey: np.ndarray | None, width: int, height: int, extension: Extension) -> np.ndarray:
    """uint8 [H, W, 3] of the given mask (None: all MASK_KEEP at WIDTHxHEIGHT) -> the padded mask, MASK_REPAINT on
    the new area."""
    original = np.full((height, width, 3), MASK_KEEP, np.uint8) if grey is None else grey
    widths = ((extension.top, extension.bottom), (extension.left, extension.right), (0, 0))
    return np.pad(original, widths, mode="constant", constant_values=MASK_REPAINT)


def parse_extend(text: str, *, where: str = "--extend") -> dict[str, int]:
    """`right=256,top=64` -> {"right": 256, "top": 64}: the CLI's spelling of an extension (checked afterwards)."""
    values: dict[str, int] = {}
    for part in text.split(","):
        side, equals, number = part.strip().partition("=")
        if not equals or not number.strip().lstrip("-").isdigit():
            raise InputError(f"{where} takes SIDE=PIXELS[,SIDE=PIXELS...], e.g. right=256,top=64; got {text!r}.")
        if side.strip() in values:
            raise InputError(f"{where} names {side.strip()} twice; name each side once.")
        values[side.strip()] = int(number)
    return values
