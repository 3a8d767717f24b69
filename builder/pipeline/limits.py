"""Generation limits (steps, image size, seed) and the checks every Python entry point runs on them.

web_src/src/shared/limits.js holds the same numbers for the app; tests/test_twins.py keeps the two equal.
"""

from __future__ import annotations

import math
import re

from builder.errors import InputError

STEPS_MIN = 1
STEPS_MAX = 50  # klein is distilled for 4 steps
SIZE_MIN = 64
SIZE_MAX = 2048  # the main transformer graph's attention split covers up to 2048x2048 (convert/attention.py)
SIZE_MULTIPLE = 16  # one latent token per 16x16 pixels (8x VAE downsampling, then 2x2 patches)
SEED_MAX = 2**32  # seeds are in [0, SEED_MAX): the app seeds its MT19937 (torch's CPU generator) with 32 bits

# Input images (editing and inpainting), as Flux2ImageProcessor.check_image_input and Flux2KleinPipeline take them.
REFERENCES_MAX = 4  # reference images per request (inpainting's source image is not one of them)
IMAGE_SIDE_MIN = 64  # check_image_input's min_side_length
IMAGE_ASPECT_MAX = 8  # check_image_input's max_aspect_ratio (8:1 either way)
IMAGE_AREA_MAX = 1024 * 1024  # larger images are resized (LANCZOS) to about this area before use
IMAGE_FILE_BYTES_MAX = 64 * 2**20  # an input file larger than this is refused before decoding
IMAGE_PIXELS_MAX = 8192 * 8192  # a decoded image larger than this is refused (decompression bombs)
STRENGTH_DEFAULT = 0.8  # inpainting's share of the schedule when none is given (Flux2KleinInpaintPipeline's default)
# Classifier-free guidance of base models (manifest.json `pipeline`): 1 runs none (diffusers guides only above 1);
# beyond 30 images only burn out.
GUIDANCE_MIN = 1
GUIDANCE_MAX = 30


def nearest_side(value: int) -> int:
    """The allowed width or height closest below `value` (or SIZE_MIN / SIZE_MAX outside the range)."""
    return min(SIZE_MAX, max(SIZE_MIN, value // SIZE_MULTIPLE * SIZE_MULTIPLE))


def side_allowed(value: int) -> bool:
    return SIZE_MIN <= value <= SIZE_MAX and value % SIZE_MULTIPLE == 0


def check_side(value: object, *, name: str) -> int:
    """`value` as a width or height (`name` says which, e.g. "`width`"), or InputError with a size to try."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{name} must be an integer, got {value!r}; try 512.")
    if not side_allowed(value):
        raise InputError(
            f"{name} must be a multiple of {SIZE_MULTIPLE} from {SIZE_MIN} to {SIZE_MAX} (the VAE works on "
            f"{SIZE_MULTIPLE}-pixel patches), got {value}; try {nearest_side(value)}."
        )
    return value


def check_steps(value: object, *, name: str = "`steps`") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{name} must be an integer, got {value!r}; klein is distilled for 4.")
    if not STEPS_MIN <= value <= STEPS_MAX:
        raise InputError(f"{name} {value} is outside {STEPS_MIN}..{STEPS_MAX}; klein is distilled for 4.")
    return value


def check_seed(value: object, *, name: str = "`seed`") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{name} must be an integer, got {value!r}; pick a seed like 42.")
    if not 0 <= value < SEED_MAX:
        raise InputError(f"{name} {value} is outside [0, 2^32); pick a seed like 42.")
    return value


def parse_size(text: str, *, where: str = "--size") -> tuple[int, int]:
    """`512x768` -> (512, 768) as (width, height), each within the limits; `where` names the flag or field."""
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", str(text))
    if not match:
        raise InputError(f"{where} must look like 512x512 (WIDTHxHEIGHT), got {text!r}.")
    width, height = int(match.group(1)), int(match.group(2))
    if not (side_allowed(width) and side_allowed(height)):
        raise InputError(
            f"{where} {text}: width and height must be multiples of {SIZE_MULTIPLE} from {SIZE_MIN} to {SIZE_MAX} "
            f"(the VAE works on {SIZE_MULTIPLE}-pixel patches); try {nearest_side(width)}x{nearest_side(height)}."
        )
    return width, height


def check_prompt(value: object, *, name: str = "the prompt") -> str:
    """A prompt must be text that UTF-8 can carry: bytes a shell passed undecoded arrive as lone surrogates. It must
    hold no NUL character either: the saved PNG keeps the prompt as text, which cannot (found here, before the
    image is computed, not when it is saved). web_src/src/pipeline/check_inputs.js `checkInputs` is its twin."""
    if not isinstance(value, str):
        raise InputError(f"{name} must be text, got {type(value).__name__}.")
    if "\x00" in value:
        raise InputError(
            f"{name} contains a NUL character (\\0, character {value.index(chr(0))}): a saved image keeps its prompt "
            "as text, which cannot hold one; remove it."
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        raise InputError(
            f"{name} is not valid UTF-8 text: character {exc.start} is {bad!r} (undecodable bytes or a lone "
            "surrogate). Pass the prompt as UTF-8 text."
        ) from None
    return value


def input_image_size(width: int, height: int) -> tuple[int, int]:
    """The (width, height) an input image of WIDTHxHEIGHT pixels is used at: scaled down to IMAGE_AREA_MAX when
    larger (Flux2ImageProcessor._resize_to_target_area: int() of the float64 products), then each side floored to
    SIZE_MULTIPLE. web_src/src/shared/limits.js `inputImageSize` is its twin."""
    if width * height > IMAGE_AREA_MAX:
        scale = math.sqrt(IMAGE_AREA_MAX / (width * height))
        width, height = int(width * scale), int(height * scale)
    return width // SIZE_MULTIPLE * SIZE_MULTIPLE, height // SIZE_MULTIPLE * SIZE_MULTIPLE


def input_image_tokens(width: int, height: int) -> int:
    """Transformer tokens an input image of WIDTHxHEIGHT pixels adds to every step (one per 16x16 pixels)."""
    used_width, used_height = input_image_size(width, height)
    return (used_width // SIZE_MULTIPLE) * (used_height // SIZE_MULTIPLE)


def check_image_dimensions(width: int, height: int, *, name: str) -> None:
    """InputError unless an input image of WIDTHxHEIGHT is one diffusers accepts (check_image_input) and we can hold."""
    if width * height > IMAGE_PIXELS_MAX:
        raise InputError(
            f"{name} is {width}x{height} pixels, more than the {IMAGE_PIXELS_MAX // 2**20} megapixels "
            "an input image may have; scale it down first."
        )
    if width < IMAGE_SIDE_MIN or height < IMAGE_SIDE_MIN:
        raise InputError(f"{name} is {width}x{height}: both sides must be at least {IMAGE_SIDE_MIN} pixels.")
    if max(width / height, height / width) > IMAGE_ASPECT_MAX:
        raise InputError(f"{name} is {width}x{height}, an aspect ratio beyond {IMAGE_ASPECT_MAX}:1; crop it first.")


def check_strength(value: object, *, name: str = "`strength`") -> float:
    """Inpainting strength: how much of the noise schedule is run, in [0, 1] (Flux2KleinInpaintPipeline's check)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{name} must be a number from 0 to 1, got {value!r}; try 0.8.")
    if not 0 <= value <= 1:
        raise InputError(f"{name} {value} is outside 0..1; try 0.8.")
    return float(value)


def check_guidance(value: object, *, name: str = "`guidance_scale`") -> float:
    """A classifier-free guidance scale for a base model, in [GUIDANCE_MIN, GUIDANCE_MAX]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{name} must be a number from {GUIDANCE_MIN} to {GUIDANCE_MAX}, got {value!r}; try 4.")
    if not GUIDANCE_MIN <= value <= GUIDANCE_MAX:
        raise InputError(f"{name} {value} is outside {GUIDANCE_MIN}..{GUIDANCE_MAX} (1 is no guidance); try 4.")
    return float(value)
