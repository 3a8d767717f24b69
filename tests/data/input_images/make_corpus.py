"""Writes the input-image decoding corpus of tests/browser/test_decoding.py into this folder (run it from anywhere:
`python tests/data/input_images/make_corpus.py`); the files are kept in the repository, this script remakes them.

Every file is small (64 to 96 pixels a side, smooth content) and exercises one row of the decoding contract of
docs/editing.md: a PNG colour type and bit depth, a palette, transparency, an EXIF or XMP orientation, a JPEG or
WebP flavour, or one reason a file is refused. PNG files are written chunk by chunk here (Pillow cannot write
2-bit grey, 16-bit grey+alpha, Adam7 or a bad checksum); JPEG, WebP, GIF and BMP by Pillow. `cases.json` lists
each file, whether it is read as an image or a mask, and what both sides must do with it: `decode`, or `refuse`
with the reason (builder/pipeline/inputs.py REFUSALS, web_src/src/shared/decode_image.js REFUSALS).
"""

from __future__ import annotations

import io
import json
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
W, H = 64, 80  # not square, so a wrong orientation changes the size


def _chunk(kind: bytes, data: bytes, *, crc: int | None = None) -> bytes:
    value = zlib.crc32(kind + data) if crc is None else crc
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", value & 0xFFFFFFFF)


def png(
    samples: np.ndarray,
    *,
    width: int,
    height: int,
    bits: int,
    colour: int,
    interlace: bool = False,
    before: Sequence[bytes] = (),
    after: Sequence[bytes] = (),
    palette: bytes | None = None,
    trns: bytes | None = None,
    bad_crc: bytes | None = None,
) -> bytes:
    """A PNG of samples [h, w*channels] (filters none..paeth cycled for 8/16 bits; Adam7 when `interlace`)."""
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colour]
    if interlace:
        raw = b""
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
        cube = samples.reshape(height, width, channels)
        for x0, y0, dx, dy in passes:
            sub = cube[y0::dy, x0::dx]
            if sub.size:
                raw += b"".join(_raw_rows(sub.reshape(sub.shape[0], -1), bits, channels))
    else:
        raw = b"".join(_raw_rows(samples, bits, channels))
    header = struct.pack(">IIBBBBB", width, height, bits, colour, 0, 0, 1 if interlace else 0)
    chunks = [_chunk(b"IHDR", header, crc=0 if bad_crc == b"IHDR" else None), *before]
    if palette is not None:
        chunks.append(_chunk(b"PLTE", palette))
    if trns is not None:
        chunks.append(_chunk(b"tRNS", trns))
    chunks.append(_chunk(b"IDAT", zlib.compress(raw, 9)))
    chunks.extend(after)
    chunks.append(_chunk(b"IEND", b""))
    return b"\x89PNG\r\n\x1a\n" + b"".join(chunks)


def _raw_rows(samples: np.ndarray, bits: int, channels: int) -> list[bytes]:
    """Filtered rows: filter 0 for packed (<8-bit) samples, the five filters in turn otherwise."""
    bpp = max(1, channels * bits // 8)
    rows: list[bytes] = []
    prior = b""
    for y, row in enumerate(samples):
        if bits < 8:
            per = 8 // bits
            padded = np.zeros(-(-len(row) // per) * per, dtype=np.uint8)
            padded[: len(row)] = row
            packed = np.zeros(len(padded) // per, dtype=np.uint8)
            for k in range(per):
                packed |= (padded[k::per].astype(np.uint8) << (8 - bits * (k + 1))).astype(np.uint8)
            rows.append(b"\x00" + packed.tobytes())
            continue
        raw = row.astype(">u2").tobytes() if bits == 16 else row.astype(np.uint8).tobytes()
        rows.append(_filter(raw, prior or bytes(len(raw)), y % 5, bpp))
        prior = raw
    return rows


def _filter(raw: bytes, up: bytes, kind: int, bpp: int) -> bytes:
    out = bytearray(len(raw))
    for i, value in enumerate(raw):
        a = raw[i - bpp] if i >= bpp else 0
        b = up[i]
        c = up[i - bpp] if i >= bpp else 0
        if kind == 0:
            predictor = 0
        elif kind == 1:
            predictor = a
        elif kind == 2:
            predictor = b
        elif kind == 3:
            predictor = (a + b) // 2
        else:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            predictor = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
        out[i] = (value - predictor) & 0xFF
    return bytes([kind]) + bytes(out)


def exif(orientation: int, *, big_endian: bool = False, long: bool = False) -> bytes:
    """A TIFF header with IFD0 holding only Orientation (SHORT, or LONG when `long`)."""
    if long:
        return b"II*\x00" + struct.pack("<IH", 8, 1) + struct.pack("<HHII", 0x0112, 4, 1, orientation) + b"\0\0\0\0"
    if big_endian:
        return b"MM\x00*" + struct.pack(">IH", 8, 1) + struct.pack(">HHIHH", 0x0112, 3, 1, orientation, 0) + b"\0\0\0\0"
    return b"II*\x00" + struct.pack("<IH", 8, 1) + struct.pack("<HHIHH", 0x0112, 3, 1, orientation, 0) + b"\0\0\0\0"


def gradient(channels: int, *, width: int = W, height: int = H, peak: int = 255) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width]
    planes = [
        (x * peak // (width - 1)),
        (y * peak // (height - 1)),
        ((x + y) * peak // (width + height - 2)),
        ((width - 1 - x) * peak // (width - 1)),
    ]
    return np.stack(planes[:channels], axis=-1).astype(np.uint16 if peak > 255 else np.uint8)


def alpha_plane(width: int = W, height: int = H) -> np.ndarray:
    """0 on the left quarter (fully transparent), then rising to 255."""
    x = np.mgrid[0:height, 0:width][1]
    plane: np.ndarray = np.clip((x - width // 4) * 255 // (width - width // 4 - 1), 0, 255).astype(np.uint8)
    return plane


def _exif_bytes(orientation: int) -> bytes:
    data = Image.Exif()
    data[0x0112] = orientation
    return data.tobytes()


def _xmp(orientation: int) -> bytes:
    return (
        b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF><rdf:Description tiff:Orientation="'
        + str(orientation).encode()
        + b'"/></rdf:RDF></x:xmpmeta>'
    )


def pillow(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **options)
    return buffer.getvalue()


def photo(width: int = W, height: int = H) -> np.ndarray:
    """Smooth RGB content with a corner mark (orientation errors move it)."""
    rgb = gradient(3, width=width, height=height)
    rgb[:12, :12] = (250, 20, 20)
    return rgb


def build() -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    rgb = photo()
    grey = gradient(1)[..., 0]
    a = alpha_plane()
    # PNG, every colour type and bit depth Pillow reads
    files["png_rgb8.png"] = png(rgb.reshape(H, -1), width=W, height=H, bits=8, colour=2)
    files["png_rgb8_adam7.png"] = png(rgb.reshape(H, -1), width=W, height=H, bits=8, colour=2, interlace=True)
    files["png_rgb16.png"] = png(
        (rgb.astype(np.uint16) * 257 + 91).reshape(H, -1), width=W, height=H, bits=16, colour=2
    )
    files["png_rgb8_trns.png"] = png(
        rgb.reshape(H, -1), width=W, height=H, bits=8, colour=2, trns=struct.pack(">HHH", 250, 20, 20)
    )
    rgba = np.concatenate([rgb, a[..., None]], axis=-1)
    rgba[:, : W // 4, :3] = 255  # transparent pixels white: kept by convert('RGB')
    files["png_rgba8.png"] = png(rgba.reshape(H, -1), width=W, height=H, bits=8, colour=6)
    files["png_rgba16_adam7.png"] = png(
        (rgba.astype(np.uint16) * 257 + 200).reshape(H, -1), width=W, height=H, bits=16, colour=6, interlace=True
    )
    files["png_grey8.png"] = png(grey.reshape(H, -1), width=W, height=H, bits=8, colour=0)
    files["png_grey8_trns.png"] = png(grey.reshape(H, -1), width=W, height=H, bits=8, colour=0, trns=b"\x00\x80")
    files["png_grey4.png"] = png((grey >> 4).reshape(H, -1), width=W, height=H, bits=4, colour=0)
    files["png_grey2_adam7.png"] = png((grey >> 6).reshape(H, -1), width=W, height=H, bits=2, colour=0, interlace=True)
    files["png_grey1.png"] = png((grey >> 7).reshape(H, -1), width=W, height=H, bits=1, colour=0)
    la = np.stack([grey, a], axis=-1)
    la[:, : W // 4, 0] = 255
    files["png_la8.png"] = png(la.reshape(H, -1), width=W, height=H, bits=8, colour=4)
    files["png_la16.png"] = png((la.astype(np.uint16) * 257 + 128).reshape(H, -1), width=W, height=H, bits=16, colour=4)
    palette = bytes(
        np.array([[(i * 37) % 256, (i * 91) % 256, (255 - i * 13) % 256] for i in range(256)], np.uint8).tobytes()
    )
    files["png_palette8.png"] = png((grey).reshape(H, -1), width=W, height=H, bits=8, colour=3, palette=palette)
    files["png_palette4_trns.png"] = png(
        (grey >> 4).reshape(H, -1),
        width=W,
        height=H,
        bits=4,
        colour=3,
        palette=palette[: 16 * 3],
        trns=bytes([0, 64] + [255] * 14),
    )
    files["png_palette2_adam7.png"] = png(
        (grey >> 6).reshape(H, -1), width=W, height=H, bits=2, colour=3, palette=palette[:12], interlace=True
    )
    files["png_palette1.png"] = png(
        (grey >> 7).reshape(H, -1), width=W, height=H, bits=1, colour=3, palette=palette[:6]
    )
    files["png_exif6.png"] = png(
        rgb.reshape(H, -1), width=W, height=H, bits=8, colour=2, before=[_chunk(b"eXIf", exif(6))]
    )
    files["png_exif3_after_idat.png"] = png(
        rgb.reshape(H, -1), width=W, height=H, bits=8, colour=2, after=[_chunk(b"eXIf", exif(3, big_endian=True))]
    )
    xmp = b'<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:Description tiff:Orientation="8"/></x:xmpmeta>'
    files["png_xmp8.png"] = png(
        rgb.reshape(H, -1),
        width=W,
        height=H,
        bits=8,
        colour=2,
        before=[_chunk(b"iTXt", b"XML:com.adobe.xmp\x00\x00\x00\x00\x00" + xmp)],
    )
    raw_profile = ("\nexif\n" + f"{len(exif(5)):8d}\n" + exif(5).hex() + "\n").encode()
    files["png_raw_profile5.png"] = png(
        rgb.reshape(H, -1),
        width=W,
        height=H,
        bits=8,
        colour=2,
        before=[_chunk(b"zTXt", b"Raw profile type exif\x00\x00" + zlib.compress(raw_profile))],
    )
    for value in (2, 4, 7):
        files[f"png_exif{value}.png"] = png(
            rgb.reshape(H, -1), width=W, height=H, bits=8, colour=2, before=[_chunk(b"eXIf", exif(value))]
        )
    files["png_exif8_long.png"] = png(
        rgb.reshape(H, -1), width=W, height=H, bits=8, colour=2, before=[_chunk(b"eXIf", exif(8, long=True))]
    )
    files["png_exif9_ignored.png"] = png(
        rgb.reshape(H, -1), width=W, height=H, bits=8, colour=2, before=[_chunk(b"eXIf", exif(9))]
    )
    # indices past a short palette (Pillow reads them as black)
    files["png_palette_short.png"] = png(
        (grey >> 4).reshape(H, -1), width=W, height=H, bits=4, colour=3, palette=palette[: 5 * 3]
    )
    files["png_trailing_bytes.png"] = files["png_rgb8.png"] + b"not part of the image"
    # JPEG
    image = Image.fromarray(rgb)
    files["jpeg_420.jpg"] = pillow(image, "JPEG", quality=85)
    files["jpeg_444_progressive.jpg"] = pillow(image, "JPEG", quality=90, subsampling=0, progressive=True)
    files["jpeg_grey.jpg"] = pillow(Image.fromarray(grey), "JPEG", quality=85)
    exif6 = Image.Exif()
    exif6[0x0112] = 6
    files["jpeg_exif6.jpg"] = pillow(image, "JPEG", quality=85, exif=exif6.tobytes())
    files["jpeg_exif3_xmp6.jpg"] = pillow(image, "JPEG", quality=85, exif=_exif_bytes(3), xmp=_xmp(6))
    files["jpeg_xmp5.jpg"] = pillow(image, "JPEG", quality=85, xmp=_xmp(5))
    # WebP
    files["webp_lossy.webp"] = pillow(image, "WEBP", quality=80)
    files["webp_lossless_alpha.webp"] = pillow(Image.fromarray(rgba, "RGBA"), "WEBP", lossless=True, exact=True)
    files["webp_lossy_alpha.webp"] = pillow(Image.fromarray(rgba, "RGBA"), "WEBP", quality=80, exact=True)
    exif8 = Image.Exif()
    exif8[0x0112] = 8
    files["webp_exif8.webp"] = pillow(image, "WEBP", lossless=True, exif=exif8.tobytes())
    files["webp_lossy_exif6.webp"] = pillow(image, "WEBP", quality=80, exif=_exif_bytes(6))
    files["webp_xmp7.webp"] = pillow(image, "WEBP", lossless=True, xmp=_xmp(7))
    # masks: read as masks (grey or not, any size)
    mask_grey = np.zeros((48, 40), np.uint8)
    mask_grey[10:30, 8:32] = 255
    mask_grey[30:40, 8:32] = 140
    files["mask_grey8.png"] = png(mask_grey, width=40, height=48, bits=8, colour=0)
    mask_la = np.stack([mask_grey, np.where(mask_grey > 0, 255, 0).astype(np.uint8)], axis=-1)
    mask_la[..., 0][mask_grey == 0] = 255  # transparent pixels white: white (repaint) for diffusers
    files["mask_la_transparent_white.png"] = png(mask_la.reshape(48, -1), width=40, height=48, bits=8, colour=4)
    mask_rgba = np.concatenate([np.repeat(mask_grey[..., None], 3, axis=-1), mask_la[..., 1:]], axis=-1)
    mask_rgba[mask_grey == 0, :3] = 255
    files["mask_rgba_transparent_white.png"] = png(mask_rgba.reshape(48, -1), width=40, height=48, bits=8, colour=6)
    files["mask_la16.png"] = png(
        (mask_la.astype(np.uint16) * 257).reshape(48, -1), width=40, height=48, bits=16, colour=4
    )
    files["mask_palette_grey.png"] = png(
        (mask_grey >> 7).reshape(48, -1),
        width=40,
        height=48,
        bits=1,
        colour=3,
        palette=b"\x00\x00\x00\xff\xff\xff",
        trns=b"\x00",
    )
    files["mask_jpeg_exif6.jpg"] = pillow(Image.fromarray(mask_grey), "JPEG", quality=95, exif=exif6.tobytes())
    # refused
    files["refuse_grey16.png"] = png(
        (grey.astype(np.uint16) * 257).reshape(H, -1), width=W, height=H, bits=16, colour=0
    )
    files["refuse_mask_grey16.png"] = png((mask_grey.astype(np.uint16) * 257), width=40, height=48, bits=16, colour=0)
    files["refuse_truncated.png"] = files["png_rgb8.png"][: len(files["png_rgb8.png"]) // 2]
    files["refuse_bad_header_crc.png"] = png(rgb.reshape(H, -1), width=W, height=H, bits=8, colour=2, bad_crc=b"IHDR")
    files["refuse_truncated.jpg"] = files["jpeg_420.jpg"][: len(files["jpeg_420.jpg"]) // 2]
    files["refuse_cmyk.jpg"] = pillow(Image.fromarray(rgb).convert("CMYK"), "JPEG", quality=85)
    files["refuse.gif"] = pillow(Image.fromarray(gradient(3, width=16, height=16)).convert("P"), "GIF")
    files["refuse.bmp"] = pillow(Image.fromarray(gradient(3, width=16, height=16)), "BMP")
    files["refuse_not_an_image.png"] = b"this is text, not an image\n"
    frame = struct.pack(">IIIIIHHBB", 0, W, H, 0, 0, 1, 10, 0, 0)
    files["refuse_animated.png"] = png(
        rgb.reshape(H, -1),
        width=W,
        height=H,
        bits=8,
        colour=2,
        before=[_chunk(b"acTL", struct.pack(">II", 2, 0)), _chunk(b"fcTL", frame)],
    )
    frames = [Image.fromarray(rgb), Image.fromarray(rgb[::-1].copy())]
    files["refuse_animated.webp"] = pillow(frames[0], "WEBP", save_all=True, append_images=frames[1:], lossless=True)
    files["refuse_small.png"] = png(
        gradient(3, width=48, height=80).reshape(80, -1), width=48, height=80, bits=8, colour=2
    )
    files["refuse_mask_coloured.png"] = png(
        gradient(3, width=40, height=48).reshape(48, -1), width=40, height=48, bits=8, colour=2
    )
    return files


# What each file is read as and what both sides must do: reason keys of REFUSALS (or the dimension check).
EXPECTED = {
    "refuse_grey16.png": "grey16",
    "refuse_mask_grey16.png": "grey16",
    "refuse_truncated.png": "damaged",
    "refuse_bad_header_crc.png": "damaged",
    "refuse_truncated.jpg": "damaged",
    "refuse_cmyk.jpg": "cmyk",
    "refuse.gif": "format",
    "refuse.bmp": "format",
    "refuse_not_an_image.png": "format",
    "refuse_animated.png": "animated",
    "refuse_animated.webp": "animated",
    "refuse_small.png": "dimensions",
    "refuse_mask_coloured.png": "coloured",
}


def main() -> None:
    cases = []
    for name, data in build().items():
        (HERE / name).write_bytes(data)
        role = "mask" if name.startswith(("mask_", "refuse_mask_")) else "image"
        expected = EXPECTED.get(name)
        cases.append({"file": name, "role": role, **({"refuse": expected} if expected else {"decode": True})})
    (HERE / "cases.json").write_text(json.dumps(cases, indent=1) + "\n")
    print(f"{len(cases)} files in {HERE}")


if __name__ == "__main__":
    main()
