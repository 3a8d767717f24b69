"""web_src/src/pipeline/resample.js against Pillow: LANCZOS resizing of RGB and L images and RGB -> L, byte for byte.

Random images (numpy) are resized by Pillow and by the JS port under node; every byte must be equal, since the
worker's input images must be the ones diffusers' image processors give the VAE.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from builder import REPO_ROOT
from builder.node import find_node
from builder.pipeline.limits import input_image_size

MODULE = (REPO_ROOT / "web_src" / "src" / "pipeline" / "resample.js").as_uri()

# (width, height) -> (out_width, out_height): down- and up-scales, odd sizes, one side unchanged, no change, and
# both pass orders of Pillow 13 (vertical first when the height shrinks by more than twice the width's pixels:
# 100x75 -> 96x64, 70x90 -> 60x40, 333x77 -> 333x40, 64x200 -> 70x64; horizontal first at the boundary 100x80 -> 96x72).
CASES = [
    ((100, 75), (96, 64)),
    ((70, 90), (60, 40)),
    ((64, 200), (70, 64)),
    ((100, 80), (96, 72)),
    ((1000, 750), (992, 736)),
    ((1100, 1000), (1073, 975)),
    ((200, 150), (64, 48)),
    ((97, 61), (211, 130)),
    ((64, 64), (17, 99)),
    ((333, 77), (333, 40)),
    ((50, 130), (20, 130)),
    ((31, 29), (31, 29)),
    ((7, 5), (1, 1)),
]

SCRIPT = """
import { readFileSync, writeFileSync } from 'node:fs';
const { resizeLanczos, rgbToL } = await import(process.argv[2]);
const cases = JSON.parse(readFileSync(process.argv[3] + '/cases.json', 'utf8'));
for (const [i, c] of cases.entries()) {
    const src = new Uint8Array(readFileSync(`${process.argv[3]}/in_${i}.bin`));
    const out = c.op === 'L'
        ? rgbToL(src)
        : resizeLanczos(src, c.width, c.height, c.outWidth, c.outHeight, c.channels);
    writeFileSync(`${process.argv[3]}/out_${i}.bin`, out);
}
"""


def test_lanczos_and_grey_match_pillow_byte_for_byte(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    cases: list[dict[str, Any]] = []
    expected: list[bytes] = []
    for (w, h), (ow, oh) in CASES:
        for channels, mode in ((3, "RGB"), (1, "L")):
            # Smooth areas, edges and noise: a random image plus a gradient, so both lobes of the filter matter.
            noise = rng.integers(0, 256, size=(h, w, channels), dtype=np.uint8)
            pixels = (
                noise
                if rng.random() < 0.5
                else (noise // 4 + (np.arange(w) * 191 // max(w - 1, 1))[None, :, None]).astype(np.uint8)
            )
            image = Image.fromarray(pixels[:, :, 0] if channels == 1 else pixels, mode)
            (tmp_path / f"in_{len(cases)}.bin").write_bytes(pixels.tobytes())
            cases.append(
                {"op": "resize", "width": w, "height": h, "outWidth": ow, "outHeight": oh, "channels": channels}
            )
            expected.append(np.asarray(image.resize((ow, oh), Image.Resampling.LANCZOS)).tobytes())
    grey = rng.integers(0, 256, size=(37, 41, 3), dtype=np.uint8)
    grey[0, :3] = [[255, 255, 255], [0, 0, 0], [128, 128, 128]]
    (tmp_path / f"in_{len(cases)}.bin").write_bytes(grey.tobytes())
    cases.append({"op": "L"})
    expected.append(np.asarray(Image.fromarray(grey, "RGB").convert("L")).tobytes())
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    (tmp_path / "run.mjs").write_text(SCRIPT)

    result = subprocess.run(
        [str(find_node().node), str(tmp_path / "run.mjs"), MODULE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    for i, (case, want) in enumerate(zip(cases, expected, strict=True)):
        got = (tmp_path / f"out_{i}.bin").read_bytes()
        assert len(got) == len(want), case
        differ = int(np.count_nonzero(np.frombuffer(got, np.uint8) != np.frombuffer(want, np.uint8)))
        assert differ == 0, f"{case}: {differ} of {len(want)} bytes differ from Pillow"


@pytest.mark.torch
@pytest.mark.parametrize("size", [(1100, 1000), (4000, 3000), (1025, 1024), (1000, 8000)])
def test_input_image_size_matches_diffusers_resize_target(size: tuple[int, int]) -> None:
    """A large image is resized to Flux2ImageProcessor._resize_to_target_area's size, then floored to 16s."""
    diffusers = pytest.importorskip("diffusers.pipelines.flux2.image_processor")

    resized = diffusers.Flux2ImageProcessor._resize_to_target_area(Image.new("RGB", size), 1024 * 1024).size
    assert input_image_size(*size) == (resized[0] // 16 * 16, resized[1] // 16 * 16)
