"""The VAE decoded in tiles in real headless Chromium (pipeline/vae_tiles.js), on the tiny model.

The decoder's mid-block attention sees the whole latent grid, so a tiled image is close to the whole-image decode,
not equal to it; an image that fits one tile is decoded whole, byte for byte as fast mode decodes it.
"""

from __future__ import annotations

import base64
import math
from pathlib import Path
from typing import Any

import pytest
from helpers import Reply, WorkerClient  # tests/browser is on sys.path (rootdir-relative import mode)

from builder.pipeline import imaging

pytestmark = pytest.mark.browser

PROMPT = "a red fox in fresh snow, morning light"
SEED = 11
SIZE = 128
TILE = 96
# The decode is what this test is about, so two steps are enough.
STEPS = 2
# 2 x 2 tiles of 96 px sharing 64 px against the whole image: 28.9 dB measured on SwiftShader (docs/machines.md).
PSNR_MIN = 25.0


def decode_details(reply: Reply) -> tuple[list[str], list[str | None]]:
    """The parts of the VAE decoder's `detail` in the result, and the decode stage's event details."""
    detail = str(reply.ok()["graphs"]["vae_decoder"]["detail"])
    return detail.split(", "), [event.get("detail") for event in reply.of_type("stage") if event["stage"] == "decode"]


def test_lean_mode_in_small_tiles_is_close_to_the_whole_image_and_one_tile_is_the_whole_image(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path]
) -> None:
    server = live_server_factory(dist_dir, models=tiny_models["q4"])
    client = WorkerClient(page, server.url("/"))
    client.open()

    whole = client.generate(prompt=PROMPT, seed=SEED, width=SIZE, height=SIZE, steps=STEPS, memory="fast")
    tiled = [
        client.generate(prompt=PROMPT, seed=SEED, width=SIZE, height=SIZE, steps=STEPS, memory="lean", vae_tile=TILE)
        for _ in range(2)
    ]
    parts, stages = decode_details(whole)
    assert "whole image" in parts and stages == [None], (parts, stages)
    for reply in tiled:
        assert reply.ok()["params"]["vaeTile"] == TILE
        parts, stages = decode_details(reply)
        tiles = f"4 tiles of {TILE}×{TILE}"
        assert parts[-2:] == [tiles, "graph capture"] and stages == [tiles], (parts, stages)
    # Deterministic, the same size, and close to the whole image without being it.
    assert base64.b64decode(tiled[0].ok()["rgba"]) == base64.b64decode(tiled[1].ok()["rgba"])
    assert tiled[0].rgb().shape == whole.rgb().shape == (SIZE, SIZE, 3)
    psnr = imaging.psnr(tiled[0].rgb(), whole.rgb())
    assert PSNR_MIN < psnr < math.inf

    # An image no larger than the tile is one tile: decoded whole, as fast mode decodes it.
    small = [
        client.generate(prompt=PROMPT, seed=SEED, width=64, height=64, steps=STEPS, memory=memory, vae_tile=tile)
        for memory, tile in (("fast", None), ("lean", 64))
    ]
    assert [decode_details(reply)[1] for reply in small] == [[None], [None]]
    assert "whole image" in decode_details(small[1])[0]
    assert base64.b64decode(small[0].ok()["rgba"]) == base64.b64decode(small[1].ok()["rgba"])


def test_a_vae_tile_that_is_not_one_is_refused_before_any_download(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path]
) -> None:
    server = live_server_factory(dist_dir, models=tiny_models["q4"])
    client = WorkerClient(page, server.url("/"))
    client.open()
    for bad in (100, 32, "128"):
        reply = client.generate(prompt=PROMPT, seed=0, width=64, height=64, vae_tile=bad)  # type: ignore[arg-type]
        assert reply.type == "error" and reply.error is not None
        assert reply.error["code"] == "input", reply.error
        assert (
            "`vaeTile` must be 0 (decode the whole image) or a multiple of 16 from 64 to 2048" in reply.error["message"]
        )
        assert reply.of_type("progress") == []
