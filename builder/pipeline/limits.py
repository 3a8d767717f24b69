"""Generation limits (steps, image size, seed) and the checks every Python entry point runs on them.

web_src/src/shared/limits.js holds the same numbers for the app; tests/test_limits.py keeps the two equal.
"""

from __future__ import annotations

import re

from builder.errors import InputError

STEPS_MIN = 1
STEPS_MAX = 50  # klein is distilled for 4 steps
SIZE_MIN = 64
SIZE_MAX = 2048  # the main transformer graph's attention split covers up to 2048x2048 (repo/attention.py)
SIZE_MULTIPLE = 16  # one latent token per 16x16 pixels (8x VAE downsampling, then 2x2 patches)
SEED_MAX = 2**32  # seeds are in [0, SEED_MAX): the app seeds its MT19937 (torch's CPU generator) with 32 bits


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
    """A prompt must be text that UTF-8 can carry: bytes a shell passed undecoded arrive as lone surrogates."""
    if not isinstance(value, str):
        raise InputError(f"{name} must be text, got {type(value).__name__}.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = value[exc.start]
        raise InputError(
            f"{name} is not valid UTF-8 text: character {exc.start} is {bad!r} (undecodable bytes or a lone "
            "surrogate). Pass the prompt as UTF-8 text."
        ) from None
    return value
