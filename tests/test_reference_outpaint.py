"""`klein-web reference` outpainting against diffusers' Flux2KleinInpaintPipeline (float32) on the make-tiny model.

Outpainting is inpainting of the padded image under the padded mask; the oracle is given both as the rule of
docs/editing.md "Outpainting" defines them, built here with NumPy and Pillow directly (`numpy.pad(mode="edge")` for
the image, a white canvas with the original area black, or the given mask, for the mask), not by
builder.pipeline.outpaint. Bad extensions are refused in one line through the CLI before any model is looked at.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from test_reference_editing import PROMPT, SEED, STEPS, assert_close, load, oracle, run_cli, save_image

from builder.pipeline import imaging, reference

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("outpaint")
    mask = Image.new("L", (100, 80), 0)  # the source's size, as a mask given with an extension must have
    mask.paste(255, (60, 10, 90, 50))
    mask.save(root / "mask.png")
    Image.new("L", (50, 40), 255).save(root / "small-mask.png")
    return {
        "source": save_image(root / "source.png", 100, 80, seed=3),
        "small": save_image(root / "small.png", 200, 150, seed=1),
        "wide": save_image(root / "wide.png", 600, 80, seed=4),
        "mask": root / "mask.png",
        "small-mask": root / "small-mask.png",
    }


@pytest.fixture(scope="module")
def inpaint_pipe(tiny_models: dict[str, Path]) -> Any:
    return diffusers.Flux2KleinInpaintPipeline.from_pretrained(str(tiny_models["diffusers"]), dtype=torch.float32)


def padded_inputs(source: Path, sides: dict[str, int], mask: Path | None = None) -> tuple[Any, Any]:
    """The padded image and mask, as PIL images for the pipeline, from the rule's words."""
    left, right, top, bottom = (sides.get(side, 0) for side in ("left", "right", "top", "bottom"))
    image = np.asarray(load(source))
    padded = np.pad(image, ((top, bottom), (left, right), (0, 0)), mode="edge")
    height, width = image.shape[:2]
    canvas = Image.new("L", (width + left + right, height + top + bottom), 255)
    canvas.paste(Image.new("L", (width, height), 0) if mask is None else load(mask).convert("L"), (left, top))
    return Image.fromarray(padded), canvas


def test_outpainting_without_a_mask(
    tiny_models: dict[str, Path], files: dict[str, Path], inpaint_pipe: Any, tmp_path: Path
) -> None:
    """Right and top: 136x100, used at 128x96 (the padded image is resized to 16s, and its mask with it)."""
    sides = {"right": 36, "top": 20}
    out = tmp_path / "outpaint.png"
    result = reference.generate_png(
        tiny_models["fp32"],
        prompt=PROMPT,
        seed=SEED,
        width=None,
        height=None,
        steps=STEPS,
        out=out,
        log=lambda _m: None,
        images=[files["source"]],
        extend=sides,
    )
    image, mask = padded_inputs(files["source"], sides)
    expected = oracle(inpaint_pipe, image=image, mask_image=mask, strength=0.8)
    assert_close(result.image, expected, "outpaint right+top")
    assert (result.width, result.height) == (128, 96) and result.mode == "inpaint" and result.mask is None
    pixels, text = imaging.read_png(out)
    assert np.array_equal(pixels, result.image)
    assert text["outpaint"] == "left=0 right=36 top=20 bottom=0" and text["strength"] == "0.8"
    assert "mask" not in text
    assert text["images"] == f"{result.images[0].sha256} 128x96 source.png"
    # The new area is repainted: the output there is not the padded input's (the kept area is close to it).
    assert not np.array_equal(result.image[:16], np.asarray(image.resize((128, 96)))[:16])


def test_outpainting_with_a_mask_and_a_reference(
    tiny_models: dict[str, Path], files: dict[str, Path], inpaint_pipe: Any
) -> None:
    """Left and bottom, a painted mask over the original area, a reference, strength 0.6 (3 of 4 steps)."""
    sides = {"left": 28, "bottom": 16}
    result = reference.generate(
        tiny_models["fp32"],
        prompt=PROMPT,
        seed=SEED,
        steps=STEPS,
        log=lambda _m: None,
        images=[files["source"], files["small"]],
        mask=files["mask"],
        strength=0.6,
        extend=sides,
    )
    image, mask = padded_inputs(files["source"], sides, files["mask"])
    expected = oracle(inpaint_pipe, image=image, mask_image=mask, image_reference=load(files["small"]), strength=0.6)
    assert_close(result.image, expected, "outpaint left+bottom, mask, reference")
    assert (result.width, result.height) == (128, 96) and result.steps_run == 3
    assert result.mask is not None and result.mask.name == "mask.png"
    assert result.extension is not None and result.extension.text() == "left=28 right=0 top=0 bottom=16"


BAD_EXTENSIONS: dict[str, tuple[list[str], str]] = {
    "negative": (["--extend", "right=-16"], "The extension's right must be from 0 to 2048 pixels, got -16."),
    "too-many-pixels": (["--extend", "left=4096"], "must be from 0 to 2048 pixels, got 4096"),
    "unknown-side": (["--extend", "middle=16"], "has no side 'middle'"),
    "not-a-number": (["--extend", "right=1.5"], "--extend takes SIDE=PIXELS"),
    "aspect": (["--extend", "right=2000"], "makes it 2100x80, an aspect ratio beyond 8:1; extend it less."),
    "mask-size": (["--extend", "right=16", "--mask", "small-mask"], "must have its size, 100x80"),
    "strength-needs-inpainting": (["--strength", "0.5"], "--strength only applies to inpainting"),
}


@pytest.mark.parametrize("name", sorted(BAD_EXTENSIONS))
def test_bad_extensions_give_one_line_and_no_file(files: dict[str, Path], tmp_path: Path, name: str) -> None:
    args, expected = BAD_EXTENSIONS[name]
    args = [str(files[arg]) if arg in files else arg for arg in args]
    out = tmp_path / "out.png"
    result = run_cli("no-model-needed", "--prompt", "a fox", "--image", str(files["source"]), *args, "--out", str(out))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1, result.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: ") and expected in lines[0], result.stderr
    assert not out.exists()
