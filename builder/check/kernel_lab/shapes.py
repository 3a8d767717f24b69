"""klein-4B's sizes (the diffusers config: ../shared/reference/diffusers-flux2-klein.md) and the lab's two shape sets:
`real` (the GPU table) and `small` (the test suite on SwiftShader: the same code paths, tails included)."""

from __future__ import annotations

HIDDEN = 3072
HEADS = 24
HEAD_DIM = 128
MLP_HIDDEN = 9216  # mlp_ratio 3.0
TEXT_TOKENS = 512  # the prompt is padded to 512 tokens, all of them in the joint attention


def image_tokens(side: int) -> int:
    """Latent tokens of a side x side image: 16 x 16 px per token (8x VAE, 2x2 patches)."""
    return (side // 16) ** 2


# The joint attention's length at the two sizes the speed targets name: 1536 at 512², 4608 at 1024².
ATTENTION_TOKENS = {512: image_tokens(512) + TEXT_TOKENS, 1024: image_tokens(1024) + TEXT_TOKENS}

SHAPE_SETS = ("small", "real")
