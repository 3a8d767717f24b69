"""Step previews in real headless Chromium (pipeline/preview.js), on the tiny fp32 model with the map `convert` fitted
to its VAE: one per step, the image byte for byte the same with them and without, and the last one the repository's
map applied to the final latents, the CPU reference's (tests/test_preview_map.py shows that this map's picture
looks like the image).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import Reply, WorkerClient  # tests/browser is on sys.path (rootdir-relative import mode)
from test_preview_map import reference_run  # tests/ is on sys.path too

from builder.convert import preview_map
from builder.repo.manifest import PREVIEW_MAP_FILE

pytestmark = pytest.mark.browser

PROMPT = "a lighthouse on a cliff at dusk, oil painting"
SEED = 1234
# Not square, so a preview with its rows and columns swapped shows.
WIDTH, HEIGHT = 96, 64
STEPS = 4  # reference_run's


def frames(reply: Reply) -> list[np.ndarray]:
    """The previews of a reply's step events, uint8 [h, w, 3]."""
    shown = []
    for event in reply.of_type("step"):
        preview = event["preview"]
        rgba = np.frombuffer(base64.b64decode(preview["rgba"]), dtype=np.uint8)
        shown.append(rgba.reshape(preview["height"], preview["width"], 4)[:, :, :3].copy())
    return shown


def test_previews_arrive_each_step_leave_the_image_alone_and_show_the_final_latents(
    page: Any, dist_dir: Path, live_server_factory: Any, tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = live_server_factory(dist_dir, models=tiny_models["fp32"])
    client = WorkerClient(page, server.url("/"))
    client.open()
    # Seconds on an idle machine; minutes on SwiftShader sharing two cores with other work.
    without = client.generate(prompt=PROMPT, seed=SEED, width=WIDTH, height=HEIGHT, steps=STEPS, timeout_s=900)
    with_previews = client.generate(
        prompt=PROMPT, seed=SEED, width=WIDTH, height=HEIGHT, steps=STEPS, preview=True, timeout_s=900
    )

    # The image is the same, byte for byte.
    assert base64.b64decode(with_previews.ok()["rgba"]) == base64.b64decode(without.ok()["rgba"])
    # One preview per step, at 1/8 of the image's size; none when not asked for.
    assert [event["step"] for event in with_previews.of_type("step")] == list(range(1, STEPS + 1))
    shown = frames(with_previews)
    assert [frame.shape for frame in shown] == [(HEIGHT // 8, WIDTH // 8, 3)] * STEPS
    assert all("preview" not in event for event in without.of_type("step"))
    made = with_previews.ok()["preview"]
    assert made["map"] == "repository" and made["frames"] == STEPS and made["ms"] >= 0, made
    assert without.ok()["preview"] is None
    print(f"previews: {made['ms'] / STEPS:.2f} ms per step at {WIDTH}x{HEIGHT}; steps {with_previews.ok()['stepMs']}")

    # After the last step the preview is the repository's map on the final latents, to the rounding of a byte.
    fitted = preview_map.load(tiny_models["fp32"] / PREVIEW_MAP_FILE)
    latents, _image = reference_run(
        tiny_models["fp32"], prompt=PROMPT, seed=SEED, width=WIDTH, height=HEIGHT, monkeypatch=monkeypatch
    )
    expected = np.round(np.clip(fitted.apply(latents)[0], 0, 1) * 255).transpose(1, 2, 0)
    difference = np.abs(shown[-1].astype(np.int16) - expected)
    assert difference.max() <= 1, difference.max()
    # The earlier ones show the predictions on the way there, not the last picture.
    assert not np.array_equal(shown[0], shown[-1])
