"""Whether an image size fits what the graphs were built for and the memory this machine has, before any work.

The transformer's attention was split for a largest token count at conversion (the manifest's
`attention_max_tokens`); beyond it the score buffers outgrow the budget the graph was made for. On the CPU the
biggest single allocations are the attention score matrices: the transformer's heads x ceil(tokens / blocks) x
tokens, and the VAE decoder's mid-block attention over every latent pixel ((H/8 x W/8)^2 for its single
head). Editing adds the reference images' tokens to every transformer step and runs the VAE encoder, whose
mid-block attention over each input image (H/8 x W/8 pixels) is split into query blocks like the transformer's.
A size whose estimate exceeds the available memory would only swap or be killed after minutes, so it is refused
with the limit and a size that fits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


def estimate_bytes(
    transformer: GraphEntry,
    width: int,
    height: int,
    *,
    reference_tokens: int = 0,
    encoder_runs: Sequence[tuple[int, int, int]] = (),
    encoder_blocks: int = 1,
) -> int:
    """The largest of the attention peaks, in bytes.

    `reference_tokens`: tokens the input images add to every step; `encoder_runs`: (batch, width, height) of
    each VAE encoder run, whose graph splits its attention into `encoder_blocks` query blocks.
    """
    tokens = image_tokens(width, height) + reference_tokens + MAX_SEQUENCE_LENGTH
    heads = transformer.attention_heads or DEFAULT_HEADS
    blocks = max(1, transformer.attention_query_blocks)
    transformer_scores = heads * -(-tokens // blocks) * tokens
    vae_pixels = (width // 8) * (height // 8)
    encoder_scores = 0
    for batch, run_width, run_height in encoder_runs:
        pixels = (run_width // 8) * (run_height // 8)
        encoder_scores = max(encoder_scores, batch * -(-pixels // max(1, encoder_blocks)) * pixels)
    return LIVE_COPIES * FLOAT_BYTES * max(transformer_scores, vae_pixels * vae_pixels, encoder_scores)


def available_bytes() -> int | None:
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)


def check_size(
    transformer: GraphEntry,
    width: int,
    height: int,
    *,
    reference_tokens: int = 0,
    encoder_runs: Sequence[tuple[int, int, int]] = (),
    encoder_blocks: int = 1,
    available: int | None = None,
) -> None:
    """InputError naming the limit when WIDTHxHEIGHT (with `reference_tokens` of input images, see estimate_bytes)
    is beyond the graph's token limit or this machine's memory."""
    tokens = image_tokens(width, height) + reference_tokens + MAX_SEQUENCE_LENGTH
    what = f"--size {width}x{height}" + (f" with {reference_tokens} reference-image tokens" if reference_tokens else "")
    limit = transformer.attention_max_tokens
    if limit is not None and tokens > limit:
        side = _largest_square(lambda s: image_tokens(s, s) + reference_tokens + MAX_SEQUENCE_LENGTH <= limit)
        raise InputError(
            f"{what} needs {tokens} attention tokens, but {transformer.path} was built for at most {limit}; "
            + _advice(side, reference_tokens)
        )
    available = available_bytes() if available is None else available

    def estimate(w: int, h: int) -> int:
        return estimate_bytes(
            transformer,
            w,
            h,
            reference_tokens=reference_tokens,
            encoder_runs=encoder_runs,
            encoder_blocks=encoder_blocks,
        )

    needed = estimate(width, height)
    if available is not None and needed > available:
        side = _largest_square(lambda s: estimate(s, s) <= available)
        raise InputError(
            f"{what} needs about {needed / 2**30:.1f} GiB for its attention on the CPU, but only "
            f"{available / 2**30:.1f} GiB of memory is available; "
            + (_advice(side, reference_tokens) if side or reference_tokens else "free some memory first.")
        )


def _advice(side: int, reference_tokens: int) -> str:
    if side:
        return f"try {side}x{side} or smaller" + (", or smaller reference images." if reference_tokens else ".")
    return "use fewer or smaller reference images."


def _largest_square(fits: Callable[[int], bool]) -> int:
    for side in range(limits.SIZE_MAX, limits.SIZE_MIN - 1, -limits.SIZE_MULTIPLE):
        if fits(side):
            return side
    return 0
