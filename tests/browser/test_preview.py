"""Step previews in real headless Chromium (pipeline/preview.js), on the tiny fp32 model with the map `convert` fitted
to its VAE: one per step, the image byte for byte the same with them and without, and the last one the repository's
map applied to the final latents (the CPU reference's), which looks like the image at 1/8 of its size.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import Reply, WorkerClient  # tests/browser is on sys.path (rootdir-relative import mode)

from builder.pipeline import reference, sampling
from builder.repo import preview_map

pytestmark = pytest.mark.browser

PROMPT = "a lighthouse on a cliff at dusk, oil painting"
SEED = 1234
SIZE = 256
STEPS = 4
# Per colour channel, the last preview's correlation with the image averaged over 8x8 blocks. The tiny model's VAE
# is random and barely linear (docs/preview.md): measured 0.14-0.30 over seeds; a map unrelated to the image gives
# about 0 +- 0.03 on these 32x32 pixels.
CORRELATION_MIN = 0.1


def frames(reply: Reply) -> list[np.ndarray]:
    """The previews of a reply's step events, uint8 [h, w, 3]."""
    shown = []
    for event in reply.of_type("step"):
        preview = event["preview"]
        rgba = np.frombuffer(base64.b64decode(preview["rgba"]), dtype=np.uint8)
        shown.append(rgba.reshape(preview["height"], preview["width"], 4)[:, :, :3].copy())
    return shown


def final_latents(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    """The CPU reference's denoised latents [1, 128, h, w] for PROMPT, SEED, SIZE (read as it unpacks them)."""
    seen: list[np.ndarray] = []
    unpack = sampling.unpack_latents

    def recording(latents: np.ndarray, height: int, width: int) -> np.ndarray:
        seen.append(unpack(latents, height, width))
        return seen[-1]

    monkeypatch.setattr(sampling, "unpack_latents", recording)
    reference.generate(model_dir, prompt=PROMPT, seed=SEED, width=SIZE, height=SIZE, steps=STEPS, log=lambda _m: None)
    assert len(seen) == 1
    return seen[0]


def test_previews_arrive_each_step_leave_the_image_alone_and_show_what_it_becomes(
        page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path],
        monkeypatch: pytest.MonkeyPatch) -> None:
    server = live_server_factory(dist_dir, models=tiny_models["fp32"])
    client = WorkerClient(page, server.url("/"))
    client.open()
    without = client.generate(prompt=PROMPT, seed=SEED, width=SIZE, height=SIZE, steps=STEPS)
    with_previews = client.generate(prompt=PROMPT, seed=SEED, width=SIZE, height=SIZE, steps=STEPS, preview=True)

    # The image is the same, byte for byte.
    assert base64.b64decode(with_previews.ok()["rgba"]) == base64.b64decode(without.ok()["rgba"])
    # One preview per step, at 1/8 of the image's size; none when not asked for.
    steps = with_previews.of_type("step")
    assert [event["step"] for event in steps] == list(range(1, STEPS + 1))
    shown = frames(with_previews)
    assert all(frame.shape == (SIZE // 8, SIZE // 8, 3) for frame in shown)
    assert all("preview" not in event for event in without.of_type("step"))
    made = with_previews.ok()["preview"]
    assert made["map"] == "repository" and made["frames"] == STEPS and made["ms"] >= 0, made
    assert without.ok()["preview"] is None
    print(f"previews: {made['ms'] / STEPS:.2f} ms per step at {SIZE}x{SIZE}; steps {with_previews.ok()['stepMs']}")

    # After the last step the preview is the repository's map on the final latents.
    fitted = preview_map.load(tiny_models["fp32"] / preview_map.PREVIEW_MAP_FILE)
    latents = final_latents(tiny_models["fp32"], monkeypatch)
    expected = np.round(np.clip(fitted.apply(latents)[0], 0, 1) * 255).transpose(1, 2, 0)
    difference = np.abs(shown[-1].astype(np.int16) - expected)
    assert difference.max() <= 1, difference.max()

    # And it looks like the image at that size.
    image = with_previews.rgb().astype(np.float64).transpose(2, 0, 1)[None] / 255
    blocks = preview_map.block_colours(image)[0]
    correlations = [np.corrcoef(shown[-1][:, :, k].ravel(), blocks[k].ravel())[0, 1] for k in range(3)]
    print(f"last preview vs the image in 8x8 blocks: correlation per channel {np.round(correlations, 3)}")
    assert min(correlations) >= CORRELATION_MIN
