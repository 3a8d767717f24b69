"""Whether an image size fits what the graphs were built for and the memory this machine has, before any work.

The transformer's attention was split for a largest token count at conversion (the manifest's
`attention_max_tokens`); beyond it the score buffers outgrow the budget the graph was made for. On the CPU the
biggest single allocations are the attention score matrices: the transformer's heads x ceil(tokens / blocks) x
tokens, and the VAE decoder's mid-block attention over every latent pixel ((H/8 x W/8)^2 for its single
head). A size whose estimate exceeds the available memory would only swap or be killed after minutes, so it is
refused with the limit and a size that fits.
"""

from __future__ import annotations

from builder.errors import InputError
from builder.pipeline import limits
from builder.repo.manifest import MAX_SEQUENCE_LENGTH, GraphEntry

FLOAT_BYTES = 4
# klein-4B's heads, assumed for graphs whose manifest does not record them (the seed repo's).
DEFAULT_HEADS = 24
# The scores and their softmax can be alive together.
LIVE_COPIES = 2


def image_tokens(width: int, height: int) -> int:
    return (width // limits.SIZE_MULTIPLE) * (height // limits.SIZE_MULTIPLE)


def estimate_bytes(transformer: GraphEntry, width: int, height: int) -> int:
    """The larger of the two attention peaks, in bytes."""
    tokens = image_tokens(width, height) + MAX_SEQUENCE_LENGTH
    heads = transformer.attention_heads or DEFAULT_HEADS
    blocks = max(1, transformer.attention_query_blocks)
    transformer_scores = heads * -(-tokens // blocks) * tokens
    vae_pixels = (width // 8) * (height // 8)
    return LIVE_COPIES * FLOAT_BYTES * max(transformer_scores, vae_pixels * vae_pixels)


def available_bytes() -> int | None:
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


def check_size(transformer: GraphEntry, width: int, height: int, *, available: int | None = None) -> None:
    """InputError naming the limit when WIDTHxHEIGHT is beyond the graph's token limit or this machine's memory."""
    tokens = image_tokens(width, height) + MAX_SEQUENCE_LENGTH
    limit = transformer.attention_max_tokens
    if limit is not None and tokens > limit:
        side = _largest_square(lambda s: image_tokens(s, s) + MAX_SEQUENCE_LENGTH <= limit)
        raise InputError(
            f"--size {width}x{height} needs {tokens} attention tokens, but {transformer.path} was built for at most "
            f"{limit}; try {side}x{side} or smaller."
        )
    available = available_bytes() if available is None else available
    needed = estimate_bytes(transformer, width, height)
    if available is not None and needed > available:
        side = _largest_square(lambda s: estimate_bytes(transformer, s, s) <= available)
        raise InputError(
            f"--size {width}x{height} needs about {needed / 2**30:.1f} GiB for its attention on the CPU, but only "
            f"{available / 2**30:.1f} GiB of memory is available; "
            + (f"try {side}x{side} or smaller." if side else "free some memory first.")
        )


def _largest_square(fits: object) -> int:
    for side in range(limits.SIZE_MAX, limits.SIZE_MIN - 1, -limits.SIZE_MULTIPLE):
        if fits(side):  # type: ignore[operator]
            return side
    return 0
