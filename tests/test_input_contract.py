"""The CPU reference's side of the input-image decoding contract (docs/editing.md "How input files are read"),
without a browser: what it reads each corpus file as, and that its refusals are word for word the worker's.
tests/browser/test_decoding.py holds the worker to the same pixels and refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from builder import REPO_ROOT
from builder.errors import InputError
from builder.pipeline import inputs

CORPUS = REPO_ROOT / "tests" / "data" / "input_images"
CASES = json.loads((CORPUS / "cases.json").read_text())


def read(name: str, role: str = "image") -> np.ndarray:
    path = CORPUS / name
    return np.asarray((inputs.read_mask(path) if role == "mask" else inputs.read_image(path)).image)


def test_the_refusals_are_the_workers_word_for_word() -> None:
    source = (REPO_ROOT / "web_src" / "src" / "shared" / "image_file.js").read_text()
    block = source[source.index("export const REFUSALS") : source.index("});", source.index("export const REFUSALS"))]
    js: dict[str, str] = {}
    for key, body in re.findall(r"^\s+(\w+):\s*((?:'[^']*'\s*\+?\s*)+),", block, re.MULTILINE):
        js[key] = "".join(re.findall(r"'([^']*)'", body))
    # `translucent` is the browser's own (no WebGL 2): the CPU reference reads every such pixel
    assert {k: v for k, v in js.items() if k != "translucent"} == inputs.REFUSALS


@pytest.mark.parametrize("case", CASES, ids=[case["file"] for case in CASES])
def test_each_corpus_file_is_read_or_refused_as_listed(case: dict[str, Any]) -> None:
    if "refuse" not in case:
        pixels = read(case["file"], case["role"])
        assert pixels.dtype == np.uint8 and pixels.ndim == 3 and pixels.shape[2] == 3
        return
    with pytest.raises(InputError) as refused:
        read(case["file"], case["role"])
    reason = case["refuse"]
    if reason in inputs.REFUSALS:
        assert str(refused.value).endswith(f") {inputs.REFUSALS[reason]}"), str(refused.value)


def test_what_the_contract_says_of_alpha_depth_palette_and_orientation() -> None:
    # Transparent pixels keep their stored colour: white where the corpus stores white under alpha 0.
    assert (read("png_rgba8.png")[:, :16] == 255).all()
    assert (read("mask_la_transparent_white.png", "mask")[0, 0] == 255).all()
    # 16-bit samples: the high byte, no rounding (make_corpus.py stores each 8-bit value v as v * 257 + 91).
    stored = (read("png_rgb8.png").astype(np.uint32) * 257 + 91) & 0xFFFF
    assert np.array_equal(read("png_rgb16.png"), (stored >> 8).astype(np.uint8))
    # 1/2/4-bit grey scaled to 0..255; palette indices past the palette black.
    assert set(np.unique(read("png_grey2_adam7.png"))) <= {0, 85, 170, 255}
    short = read("png_palette_short.png")
    assert (short[-1, -1] == 0).all() and short[0, 0].any()
    # EXIF orientation 6 turns 64x80 into 80x64 (rotated clockwise); 9 is no orientation; XMP counts only
    # where EXIF has none.
    upright = read("png_rgb8.png")
    assert np.array_equal(read("png_exif6.png"), np.rot90(upright, k=-1))
    assert np.array_equal(read("png_exif9_ignored.png"), upright)
    assert read("jpeg_exif3_xmp6.jpg").shape == upright.shape
    assert read("jpeg_xmp5.jpg").shape == (64, 80, 3)


def test_an_unreadable_file_path_loses_nothing(tmp_path: Path) -> None:
    copy = tmp_path / "cut.png"
    data = (CORPUS / "refuse_truncated.png").read_bytes()
    copy.write_bytes(data)
    with pytest.raises(InputError, match=r"cannot be decoded: the file is damaged or incomplete; save it again"):
        inputs.read_image(copy)
    assert copy.read_bytes() == data
