"""Outpainting in the worker, in real headless Chromium (WebGPU on SwiftShader), against the CPU reference.

The worker pads the image and the mask by shared/outpaint.js, the CPU reference by builder/pipeline/outpaint.py
(tests/test_twins.py holds the two rules equal, tests/test_reference_outpaint.py holds the reference to diffusers).
As in tests/browser/test_editing.py the images agree within its PSNR_MIN, and the worker must be much closer to
the reference than a run with another extension of the same output size is (OTHER_MARGIN): padding the wrong side
or masking the wrong area lands near the latter.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import start_server  # tests/ is on sys.path (rootdir-relative conftest import)
from helpers import Reply, WorkerClient, new_page
from test_editing import OTHER_MARGIN, PROMPT, PSNR_MIN, STEPS, picture, png

from builder.pipeline import imaging, reference

pytestmark = pytest.mark.browser

SEND_JS = """([params, files]) => {
    const bytes = (text) => Uint8Array.from(atob(text), (c) => c.charCodeAt(0)).buffer;
    const full = { ...params, images: files.images.map(([name, data]) => ({ name, bytes: bytes(data) })) };
    if (files.mask) full.mask = { name: files.mask[0], bytes: bytes(files.mask[1]) };
    return window.kleinTest.send('generate', { params: full });
}"""


@pytest.fixture(scope="module")
def client(
    context: Any, dist_dir: Path, tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerClient]:
    server = start_server(dist_dir, tmp_path_factory.mktemp("outpaint-server"), models=tiny_models["fp32"])
    page = new_page(context)
    try:
        worker = WorkerClient(page, server.url("/"))
        worker.open()
        yield worker
    finally:
        page.close()
        server.stop()


@pytest.fixture(scope="module")
def cpu_reference(tiny_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """cpu_reference(seed, image, extend, mask=None) -> uint8 [H, W, 3] from the fp32 repo, strength 0.8."""
    folder = tmp_path_factory.mktemp("outpaint-inputs")

    def stored(data: bytes) -> Path:
        path = folder / f"{hashlib.sha256(data).hexdigest()[:16]}.png"
        path.write_bytes(data)
        return path

    def make(*, seed: int, image: bytes, extend: dict[str, int], mask: bytes | None = None) -> np.ndarray:
        result = reference.generate(
            tiny_models["fp32"],
            prompt=PROMPT,
            seed=seed,
            steps=STEPS,
            log=lambda _msg: None,
            images=[stored(image)],
            mask=None if mask is None else stored(mask),
            extend=extend,
        )
        pixels: np.ndarray = result.image
        return pixels

    return make


def generate(
    client: WorkerClient, *, seed: int, width: int, height: int, image: bytes, extend: Any, mask: bytes | None = None
) -> Reply:
    params = {
        "prompt": PROMPT,
        "seed": seed,
        "width": width,
        "height": height,
        "steps": STEPS,
        "modelBase": client.model_base,
        "extend": extend,
    }
    files: dict[str, Any] = {"images": [["room.png", base64.b64encode(image).decode()]]}
    if mask is not None:
        files["mask"] = ["mask.png", base64.b64encode(mask).decode()]
    return client.wait(str(client.page.evaluate(SEND_JS, [params, files])), timeout_s=900)


def test_outpainting_matches_the_cpu_reference(client: WorkerClient, cpu_reference: Any) -> None:
    """100x75 extended right by 28 and bottom by 5: 128x80, used as is; then the same with a mask over the original
    area (its right half repainted too), which the worker pads white as the reference does."""
    room = png(picture(100, 75, seed=4))
    extend = {"right": 28, "bottom": 5}
    reply = generate(client, seed=7, width=128, height=80, image=room, extend=extend)
    inputs = reply.ok()["inputs"]
    assert inputs["mode"] == "inpaint" and inputs["mask"] is None and inputs["strength"] == 0.8
    assert inputs["extension"] == {"left": 0, "right": 28, "top": 0, "bottom": 5}
    assert [(i["usedWidth"], i["usedHeight"]) for i in inputs["images"]] == [(128, 80)]
    expected = cpu_reference(seed=7, image=room, extend=extend)
    psnr = imaging.psnr(reply.rgb(), expected)
    other = imaging.psnr(expected, cpu_reference(seed=7, image=room, extend={"left": 28, "top": 5}))
    print(f"outpainting: {psnr:.1f} dB vs the CPU reference (extended left and top instead: {other:.1f} dB)")
    assert psnr >= PSNR_MIN and psnr >= other + OTHER_MARGIN

    mask_pixels = np.zeros((75, 100, 3), dtype=np.uint8)
    mask_pixels[:, 50:] = 255
    mask = png(mask_pixels)
    masked = generate(client, seed=7, width=128, height=80, image=room, extend=extend, mask=mask)
    assert masked.ok()["inputs"]["mask"]["name"] == "mask.png"
    expected = cpu_reference(seed=7, image=room, extend=extend, mask=mask)
    psnr = imaging.psnr(masked.rgb(), expected)
    unmasked = imaging.psnr(expected, reply.rgb())
    print(f"outpainting with a mask: {psnr:.1f} dB vs the CPU reference (without the mask: {unmasked:.1f} dB)")
    assert psnr >= PSNR_MIN and psnr >= unmasked + OTHER_MARGIN


def test_bad_extensions_are_refused_in_one_line(client: WorkerClient) -> None:
    room = png(picture(100, 75, seed=4))
    for extend, words in (
        ({"right": -16}, "The extension's right must be from 0 to 2048 pixels, got -16."),
        ({"top": 801}, "makes it 100x876, an aspect ratio beyond 8:1; extend it less."),
    ):
        reply = generate(client, seed=0, width=96, height=64, image=room, extend=extend)
        assert reply.type == "error" and reply.error is not None and reply.error["code"] == "input", reply.error
        assert words in reply.error["message"] and "\n" not in reply.error["message"], reply.error["message"]
        assert not reply.of_type("progress")
    # A mask given with an extension must be the image's size (the painter's is).
    small_mask = png(np.zeros((10, 10, 3), np.uint8))
    reply = generate(
        client, seed=0, width=128, height=80, image=room, extend={"right": 28, "bottom": 5}, mask=small_mask
    )
    assert reply.error is not None and "must have its size, 100x75" in reply.error["message"], reply.error
