"""Input images of editing and inpainting: files read and checked, then prepared exactly as diffusers 0.42.1 does.

Reading mirrors `diffusers.utils.load_image(path)`, the way diffusers turns a file into the PIL image its pipelines
take: the EXIF orientation applied (`ImageOps.exif_transpose`), then `convert("RGB")`. The web app's worker reads
every file to the same pixels (web_src/src/shared/decode_image.js; docs/editing.md "How input files are read"
is the contract both follow, tests/browser/test_decoding.py holds them to it over tests/data/input_images/).
A file whose diffusers reading would not be what the user sees, or that the browser cannot read to the same
pixels, is refused with one of REFUSALS on both sides: a format other than PNG, JPEG or WebP, an animated file,
a 16-bit greyscale PNG (Pillow's convert clips it to white), a CMYK JPEG, a damaged file. Every check a file
can fail runs here, before any model is touched, and ends in one InputError line naming the file.

Preparation repeats the PIL calls of the pipelines in their order, so the pixels are bit for bit diffusers':

    edit_image            Flux2KleinPipeline.__call__ for each `image`: above IMAGE_AREA_MAX pixels a LANCZOS resize
                          to about that area, each side floored to 16, then a centre CROP to that size.
    inpaint_image         Flux2KleinInpaintPipeline.__call__ for `image`: the same area resize, then a LANCZOS
                          resize (not a crop) to the floored size, which is a copy when the size is already right.
    inpaint_references    Flux2KleinInpaintPipeline.__call__ for `image_reference` (see its docstring: one
                          reference is resized like an edit image, several are centre-cropped to the first one's
                          size and never resized).
    inpaint_mask          `mask_processor.preprocess`: LANCZOS resize to the image's size, `convert("L")`, /255,
                          then 0 below 0.5 and 1 from 0.5.

The arrays handed on are float32 [n, 3, H, W] in [0, 1]: the VAE encoder graph maps them to [-1, 1] itself.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from builder.errors import InputError
from builder.pipeline import limits

# What a browser's createImageBitmap decodes everywhere (the protocol's ImageInput), and nothing Pillow would hand
# to an external program or a rarely used decoder.
ACCEPTED_FORMATS = ("PNG", "JPEG", "WEBP")

# Why a file is refused, after its name; word for word the worker's (web_src/src/shared/image_file.js REFUSALS).
REFUSALS = {
    "format": "is not a PNG, JPEG or WebP file; save it as PNG.",
    "animated": "is animated; save the frame to use as a PNG.",
    "grey16": "is a 16-bit greyscale PNG, which diffusers reads clipped to white; save it as 8-bit greyscale.",
    "cmyk": "is a CMYK JPEG; save it as RGB.",
    "damaged": "cannot be decoded: the file is damaged or incomplete; save it again.",
}

# File signatures (what the worker sniffs too): the formats read, and the ones named in a refusal.
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
)


def sniff_format(data: bytes) -> str | None:
    """PNG, JPEG or WEBP from the file's first bytes, else None (whatever the name or Pillow's plugins say)."""
    for signature, fmt in _SIGNATURES:
        if data.startswith(signature):
            return fmt
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    return None


def _animated(data: bytes, fmt: str) -> bool:
    """An APNG of more than one frame (acTL before the image data), or a WebP with VP8X's animation flag."""
    if fmt == "PNG":
        at = 8
        while at + 8 <= len(data):
            length = int.from_bytes(data[at : at + 4], "big")
            kind = data[at + 4 : at + 8]
            if kind == b"acTL" and length >= 4 and at + 12 <= len(data):
                return int.from_bytes(data[at + 8 : at + 12], "big") > 1
            if kind in (b"IDAT", b"IEND"):
                return False
            at += 12 + length
        return False
    if fmt == "WEBP":
        return data[12:16] == b"VP8X" and len(data) > 20 and bool(data[20] & 0x02)
    return False


@dataclass(frozen=True)
class InputFile:
    """One decoded input file."""

    name: str  # the file name, for messages and metadata
    path: Path
    sha256: str  # of the file's bytes
    width: int  # decoded, upright (EXIF orientation applied)
    height: int
    image: Image.Image  # RGB, what diffusers.utils.load_image returns


# --------------------------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------------------------


def read_inputs(
    images: Sequence[Path], mask: Path | None, *, outpainting: bool = False
) -> tuple[list[InputFile], InputFile | None]:
    """The input files of one request, checked: `images` (inpainting, which a mask or an extension asks for: the
    image to inpaint first) and the mask."""
    inpainting = mask is not None or outpainting
    references = len(images) - (1 if inpainting else 0)
    if inpainting and not images:
        raise InputError("Inpainting needs the image to inpaint: pass it with --image before any reference images.")
    if references > limits.REFERENCES_MAX:
        raise InputError(f"{references} reference images given; at most {limits.REFERENCES_MAX} are allowed.")
    files = [read_image(Path(path), role=_role(k, inpainting)) for k, path in enumerate(images)]
    return files, (read_mask(Path(mask)) if mask is not None else None)


def _role(index: int, inpainting: bool) -> str:
    if inpainting:
        return "The image to inpaint" if index == 0 else f"Reference image {index}"
    return f"Reference image {index + 1}"


def read_image(path: Path, *, role: str = "Input image") -> InputFile:
    """An input image: a readable PNG, JPEG or WebP file of a size diffusers accepts (check_image_input).

    The size checks apply to inpainting's images too, which Flux2KleinInpaintPipeline does not check: an image
    it would take with odd results (a side under 64 pixels, 9:1) is refused, never used differently.
    """
    name = f"{role} ({path})"
    loaded = _decode(path, name)
    limits.check_image_dimensions(loaded.width, loaded.height, name=name)
    return loaded


def read_mask(path: Path) -> InputFile:
    """An inpainting mask: any size (it is resized to the image), white repaints, black keeps, and grey only."""
    name = f"The mask ({path})"
    loaded = _decode(path, name, grey_check=True)
    if loaded.width < 1 or loaded.height < 1:
        raise InputError(f"{name} is empty ({loaded.width}x{loaded.height}).")
    return loaded


def _decode(path: Path, name: str, *, grey_check: bool = False) -> InputFile:
    data = _read_bytes(path, name)
    fmt = sniff_format(data)
    if fmt is None:
        raise InputError(f"{name} {REFUSALS['format']}")
    if _animated(data, fmt):
        raise InputError(f"{name} {REFUSALS['animated']}")
    try:
        # A header claiming more pixels than Pillow's bomb limit must fail here, not be decoded: its warning becomes
        # an error for this call only, and our own (lower) limit is checked from the header before load().
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            warnings.filterwarnings("ignore", "Palette images with Transparency", UserWarning)
            opened = Image.open(io.BytesIO(data), formats=[fmt])
            width, height = opened.size
            if width * height > limits.IMAGE_PIXELS_MAX:
                limits.check_image_dimensions(width, height, name=name)  # the megapixel message
            if opened.mode in ("I;16", "I;16B", "I"):
                raise InputError(f"{name} {REFUSALS['grey16']}")
            if opened.mode == "CMYK":
                raise InputError(f"{name} {REFUSALS['cmyk']}")
            opened.load()  # decode now: a truncated or corrupt file fails here, not halfway through the pipeline
            upright = ImageOps.exif_transpose(opened)
            rgb = upright.convert("RGB")
    except InputError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise InputError(
            f"{name} declares more than the {limits.IMAGE_PIXELS_MAX // 2**20} megapixels an input "
            "image may have; scale it down first."
        ) from None
    except Exception as exc:  # Pillow raises UnidentifiedImageError, OSError, SyntaxError, ValueError, ... on bad data
        raise InputError(f"{name} {REFUSALS['damaged']}") from exc
    # Greyscale files (L, LA, 1, 16-bit LA) are grey after convert("RGB"); an RGB or palette mask must be too: a
    # coloured one would be reduced to luma by diffusers' convert("L") and repaint what the user did not mean.
    if grey_check:
        pixels = np.asarray(rgb)
        if not (np.array_equal(pixels[..., 0], pixels[..., 1]) and np.array_equal(pixels[..., 1], pixels[..., 2])):
            raise InputError(f"{name} has coloured pixels; a mask must be greyscale (white repaints, black keeps).")
    return InputFile(
        name=path.name,
        path=path,
        sha256=hashlib.sha256(data).hexdigest(),
        width=rgb.width,
        height=rgb.height,
        image=rgb,
    )


def _read_bytes(path: Path, name: str) -> bytes:
    if not path.exists():
        raise InputError(f"{name} does not exist.")
    if not path.is_file():
        raise InputError(f"{name} is not a file.")
    try:
        size = os.stat(path).st_size
        if size > limits.IMAGE_FILE_BYTES_MAX:
            raise InputError(
                f"{name} is {size / 2**20:.1f} MiB, more than the {limits.IMAGE_FILE_BYTES_MAX // 2**20} "
                "MiB an input image may have."
            )
        with open(path, "rb") as handle:
            data = handle.read(limits.IMAGE_FILE_BYTES_MAX + 1)
    except OSError as exc:
        raise InputError(f"{name} cannot be read ({exc.strerror or exc}).") from None
    if len(data) > limits.IMAGE_FILE_BYTES_MAX:  # it grew after the stat
        raise InputError(f"{name} is more than the {limits.IMAGE_FILE_BYTES_MAX // 2**20} MiB an input image may have.")
    if not data:
        raise InputError(f"{name} is empty.")
    return data


# --------------------------------------------------------------------------------------------------------------------
# Preparation, as the pipelines do it
# --------------------------------------------------------------------------------------------------------------------


# Port of diffusers.pipelines.flux2.image_processor.Flux2ImageProcessor._resize_to_target_area and the
# `image_processor.resize` calls of Flux2KleinInpaintPipeline.__call__ (both the same PIL resize) @ 0.42.1
def _limit_area(image: Image.Image) -> Image.Image:
    width, height = image.size
    if width * height <= limits.IMAGE_AREA_MAX:
        return image
    scale = math.sqrt(limits.IMAGE_AREA_MAX / (width * height))
    return image.resize((int(width * scale), int(height * scale)), Image.Resampling.LANCZOS, reducing_gap=None)


def _floored(image: Image.Image) -> tuple[int, int]:
    return (
        image.width // limits.SIZE_MULTIPLE * limits.SIZE_MULTIPLE,
        image.height // limits.SIZE_MULTIPLE * limits.SIZE_MULTIPLE,
    )


# Port of Flux2ImageProcessor._resize_and_crop @ 0.42.1: a centre crop, no resize; outside the image PIL fills 0
def _centre_crop(image: Image.Image, width: int, height: int) -> Image.Image:
    left = (image.width - width) // 2
    top = (image.height - height) // 2
    return image.crop((left, top, left + width, top + height))


# Port of VaeImageProcessor.pil_to_numpy + numpy_to_pt @ 0.42.1 (normalisation to [-1, 1] is in the encoder graph)
def _to_array(images: Sequence[Image.Image]) -> np.ndarray:
    stacked = np.stack([np.array(image.convert("RGB")).astype(np.float32) / 255.0 for image in images], axis=0)
    return np.ascontiguousarray(stacked.transpose(0, 3, 1, 2), dtype=np.float32)


# Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline.__call__ "3. prepare images" for one
# image @ 0.42.1
def edit_image(image: InputFile) -> np.ndarray:
    """float32 [1, 3, H, W] in [0, 1] at limits.input_image_size: area-limited, then centre-cropped to 16s."""
    resized = _limit_area(image.image)
    return _to_array([_centre_crop(resized, *_floored(resized))])


# Port of Flux2KleinInpaintPipeline.__call__ "3. Preprocess image" (no padding_mask_crop) @ 0.42.1
def inpaint_image(image: InputFile) -> np.ndarray:
    """float32 [1, 3, H, W] in [0, 1] at limits.input_image_size: area-limited, then resized (LANCZOS) to 16s."""
    resized = _limit_area(image.image)
    width, height = _floored(resized)
    return _to_array([resized.resize((width, height), Image.Resampling.LANCZOS, reducing_gap=None)])


# Port of Flux2KleinInpaintPipeline.__call__ "Preprocess image_reference" @ 0.42.1
def inpaint_references(images: Sequence[InputFile]) -> np.ndarray:
    """float32 [n, 3, H, W] in [0, 1]: the references of inpainting, all at one size, encoded as one batch.

    Mirrors the pipeline called with `image_reference=images[0]` for one reference and `image_reference=images`
    for several. One reference is used like an edit image (area-limited, centre-cropped to 16s). A list is
    different, and this keeps diffusers' behaviour: the pipeline's `image_processor.resize` returns a list
    unchanged, so no reference of a list is ever resized; every one is centre-cropped to the FIRST reference's
    size floored to 16 (larger ones lose their borders, smaller ones are padded with black by PIL's crop), and
    a first reference above IMAGE_AREA_MAX pixels is used at its full size.
    """
    if len(images) == 1:
        return edit_image(images[0])
    width, height = _floored(images[0].image)
    return _to_array([_centre_crop(image.image, width, height) for image in images])


def inpaint_reference_size(images: Sequence[InputFile]) -> tuple[int, int]:
    """The (width, height) `inpaint_references` uses for every reference of `images`, without doing the work."""
    if len(images) == 1:
        return limits.input_image_size(images[0].width, images[0].height)
    return _floored(images[0].image)


# Port of Flux2KleinInpaintPipeline.mask_processor.preprocess (do_convert_grayscale, do_binarize, no
# normalisation) @ 0.42.1
def inpaint_mask(mask: InputFile, width: int, height: int) -> np.ndarray:
    """float32 [H, W] of 0 (keep) and 1 (repaint) at the image's used size."""
    resized = mask.image.resize((width, height), Image.Resampling.LANCZOS, reducing_gap=None)
    values = np.array(resized.convert("L")).astype(np.float32) / 255.0
    values[values < 0.5] = 0
    values[values >= 0.5] = 1
    return values
