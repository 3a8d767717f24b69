"""`klein-web regress` reads its input files as `reference` and the app do, and refuses bad ones before the browser.

EXIF orientation: a photo stored 96x64 with orientation 6 or 8 is upright 64x96; an edit or inpaint case without a
size must run at the upright size (PIL's exif_transpose is the oracle), for JPEG, PNG and WebP, from the flags and
from a cases file. Hostile inputs: an image or mask whose header declares more pixels than Pillow's bomb limit (an
error in Pillow) or than the 100 MP that only warn, a --reference PNG that does, a cases file nested 100,000 deep
(JSON and TOML): one `could not run:` line each, exit code 2, before the browser is started.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from PIL import Image, ImageOps
from refusals import fake_browser, one_reason
from stub_repo import write_stub_repo

from builder import REPO_ROOT
from builder.check.regress.cases import Case, RegressOptions, cases_from_options, load_cases
from builder.errors import InputError
from builder.pipeline import limits

ORIENTATION = 0x0112
STORED = (96, 64)  # width, height as stored; orientations 5 to 8 turn it to 64x96


def rotated_photo(path: Path, orientation: int) -> Path:
    image = Image.new("RGB", STORED, (200, 40, 40))
    image.paste((40, 40, 200), (0, 0, 48, 32))  # not symmetric, so a turn shows
    exif = Image.Exif()
    exif[ORIENTATION] = orientation
    image.save(path, exif=exif.tobytes())
    return path


def upright_size(path: Path) -> tuple[int, int]:
    """The oracle: diffusers' load_image applies ImageOps.exif_transpose; then the app's used size."""
    with Image.open(path) as image:
        upright = ImageOps.exif_transpose(image)
        return limits.input_image_size(upright.width, upright.height)


def grey_mask(path: Path) -> Path:
    Image.new("L", (40, 40), 255).save(path)
    return path


@pytest.mark.parametrize("suffix", [".jpg", ".png", ".webp"])
@pytest.mark.parametrize("orientation", [3, 6, 8])
@pytest.mark.parametrize("mode", ["edit", "inpaint"])
def test_a_case_without_size_runs_at_the_upright_size(tmp_path: Path, suffix: str, orientation: int, mode: str) -> None:
    photo = rotated_photo(tmp_path / f"photo{suffix}", orientation)
    expected = upright_size(photo)
    assert expected == ((64, 96) if orientation in (6, 8) else (96, 64))  # the file really is turned (or not)
    mask = grey_mask(tmp_path / "mask.png") if mode == "inpaint" else None
    options = RegressOptions(prompt="a fox", images=(photo,), mask=mask, size_given=False, reference_from_cpu=True)
    [from_flags] = cases_from_options(options)
    assert (from_flags.width, from_flags.height) == expected

    cases = tmp_path / "cases.json"
    entry = {"name": "photo", "images": [photo.name], **({"mask": "mask.png"} if mask else {})}
    cases.write_text(json.dumps({"cases": [entry]}))
    defaults = Case(
        name="case", prompt="a fox", seed=1, width=512, height=512, steps=4, psnr_min=40.0, reference_from_cpu=True
    )
    [from_file] = load_cases(cases, defaults=defaults)
    assert (from_file.width, from_file.height) == expected


# ------------------------------------------------------------------------------ hostile inputs, through the CLI


def png_header(path: Path, width: int, height: int) -> Path:
    """A PNG whose header declares width x height grey pixels, with one row of data: Pillow judges the size from
    the header alone, when the file is opened."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(b"\0" * (width + 1)))
        + chunk(b"IEND", b"")
    )
    return path


@pytest.fixture
def setup(tmp_path: Path) -> dict[str, Path]:
    browser, started = fake_browser(tmp_path)
    ok = tmp_path / "ok.png"
    Image.new("RGB", (64, 64), (10, 200, 10)).save(ok)
    return {
        "models": write_stub_repo(tmp_path / "models"),
        "browser": browser,
        "started": started,
        "ok": ok,
        "bomb": png_header(tmp_path / "bomb.png", 20_000, 20_000),  # 400 MP: Pillow's DecompressionBombError
        "warns": png_header(tmp_path / "warns.png", 10_000, 10_000),
    }  # 100 MP: Pillow only warns


def run_regress(setup: dict[str, Path], *args: str) -> str:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "builder",
            "regress",
            "--models",
            str(setup["models"]),
            "--browser",
            str(setup["browser"]),
            "--report",
            str(setup["models"].parent / "report"),
            *args,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    reason = one_reason(result)
    assert "DecompressionBomb" not in result.stderr, result.stderr
    assert not setup["started"].exists()
    return reason


@pytest.mark.parametrize("which", ["bomb", "warns"])
@pytest.mark.parametrize("role", ["edit image", "image to inpaint", "mask", "reference png"])
def test_an_image_beyond_the_pixel_limits_is_one_line(setup: dict[str, Path], which: str, role: str) -> None:
    image = str(setup[which])
    args = {
        "edit image": ["--image", image, "--reference-from-cpu"],
        "image to inpaint": ["--image", image, "--mask", str(setup["ok"]), "--reference-from-cpu"],
        "mask": ["--image", str(setup["ok"]), "--mask", image, "--reference-from-cpu"],
        "reference png": ["--size", "64x64", "--reference", image],
    }[role]
    reason = run_regress(setup, "--prompt", "a fox", *args)
    print(f"{role} {which}: {reason}")
    assert image in reason and "pixels" in reason


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_a_cases_file_nested_100000_deep_is_one_line(setup: dict[str, Path], tmp_path: Path, suffix: str) -> None:
    cases = tmp_path / f"cases{suffix}"
    depth = 100_000
    cases.write_text("[" * depth + "]" * depth if suffix == ".json" else "cases = " + "[" * depth + "]" * depth)
    reason = run_regress(setup, "--cases", str(cases), "--reference-from-cpu")
    print(reason)
    assert str(cases) in reason and "nests" in reason


# ------------------------------------------------------------------------------ outpainting cases


def test_an_outpainting_case_runs_at_the_padded_size_and_carries_its_extension(tmp_path: Path) -> None:
    """A stored 96x64 photo turned by orientation 6 is 64x96 upright; extended right by 40 and top by 8 it is
    104x104, used at 96x96. From the flags (without a mask) and from a cases file; the case's parameters (the
    report) carry the extension and the strength."""
    photo = rotated_photo(tmp_path / "photo.jpg", 6)
    options = RegressOptions(
        prompt="a fox", images=(photo,), extend={"right": 40, "top": 8}, size_given=False, reference_from_cpu=True
    )
    [from_flags] = cases_from_options(options)
    assert (from_flags.width, from_flags.height, from_flags.mode) == (96, 96, "inpaint")
    parameters = from_flags.parameters()
    assert parameters["extend"] == {"right": 40, "top": 8} and parameters["strength"] == limits.STRENGTH_DEFAULT
    assert "mask" not in parameters

    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({"cases": [{"name": "wider", "images": [photo.name], "extend": {"left": 136}}]}))
    defaults = Case(
        name="case", prompt="a fox", seed=1, width=512, height=512, steps=4, psnr_min=40.0, reference_from_cpu=True
    )
    [from_file] = load_cases(cases, defaults=defaults)
    assert (from_file.width, from_file.height) == (192, 96)  # 200x96 resized to 16s


@pytest.mark.parametrize(
    ("extend", "words"),
    [
        ({"left": -8}, "The extension's left must be from 0 to 2048 pixels, got -8."),
        ({"right": 900}, "an aspect ratio beyond 8:1; extend it less."),
        ({"around": 8}, "has no side 'around'"),
    ],
)
def test_a_bad_extension_is_refused_naming_the_case(tmp_path: Path, extend: dict[str, int], words: str) -> None:
    photo = rotated_photo(tmp_path / "photo.png", 1)
    cases = tmp_path / "cases.json"
    cases.write_text(json.dumps({"cases": [{"name": "bad", "images": [photo.name], "extend": extend}]}))
    defaults = Case(
        name="case", prompt="a fox", seed=1, width=512, height=512, steps=4, psnr_min=40.0, reference_from_cpu=True
    )
    with pytest.raises(InputError, match="bad") as refused:
        load_cases(cases, defaults=defaults)
    assert words in str(refused.value) and "\n" not in str(refused.value)
