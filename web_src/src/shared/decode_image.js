// @ts-check
/**
 * @file Input image files -> RGB bytes, exactly as the CPU reference reads them (builder/pipeline/inputs.py:
 * diffusers' `load_image`, i.e. Pillow's `ImageOps.exif_transpose` then `convert('RGB')`). docs/editing.md "How
 * input files are read" is the contract; tests/browser/test_decoding.py compares both sides over
 * tests/data/input_images/.
 *
 * - PNG is decoded here, byte-exact to Pillow: every colour type and bit depth (1/2/4-bit grey scaled to 0..255,
 *   16-bit samples cut to their high byte, palette indices looked up with transparency ignored, alpha dropped
 *   with the stored colour kept), Adam7, header-chunk checksums.
 * - JPEG and WebP are decoded by the browser (libjpeg-turbo and libwebp, as Pillow's), without colour management,
 *   premultiplication or its own orientation, and read back through WebGL so translucent pixels keep their
 *   stored colour (a 2D canvas would premultiply them).
 * - The orientation is Pillow's: the EXIF Orientation of IFD0 (JPEG APP1, PNG eXIf or "Raw profile type exif"
 *   text, WebP EXIF chunk), else XMP's tiff:Orientation, applied as ImageOps.exif_transpose does.
 * Refused, with the CPU reference's very words (REFUSALS): other formats (GIF, BMP, ...), animated PNG/WebP,
 * 16-bit greyscale PNG (Pillow clips it to white), CMYK JPEG, damaged files.
 * @module shared/decode_image
 */

import { LIMITS } from './limits.js';

/** Why a file is refused, after its label; word for word builder/pipeline/inputs.py REFUSALS. */
export const REFUSALS = Object.freeze({
    format: 'is not a PNG, JPEG or WebP file; save it as PNG.',
    animated: 'is animated; save the frame to use as a PNG.',
    grey16: 'is a 16-bit greyscale PNG, which diffusers reads clipped to white; save it as 8-bit greyscale.',
    cmyk: 'is a CMYK JPEG; save it as RGB.',
    damaged: 'cannot be decoded: the file is damaged or incomplete; save it again.',
    translucent:
        'has translucent pixels, which this browser cannot read without changing their colour (it has no WebGL 2); ' +
        'save it without transparency.',
});

/** @typedef {keyof typeof REFUSALS} RefusalReason */

/** A file the contract refuses; `reason` keys REFUSALS (the message is the label's caller's to add). */
export class ImageRefusal extends Error {
    /** @param {RefusalReason} reason @param {string} [detail]  What the decoder said, for logs. */
    constructor(reason, detail) {
        super(REFUSALS[reason]);
        this.name = 'ImageRefusal';
        this.reason = reason;
        this.detail = detail ?? '';
    }
}

/** A file whose header declares more than LIMITS.imagePixelsMax pixels: refused before its pixels are decoded. */
export class ImageTooLarge extends Error {
    /** @param {number} width @param {number} height */
    constructor(width, height) {
        super(`${width}x${height} pixels`);
        this.name = 'ImageTooLarge';
        this.width = width;
        this.height = height;
    }
}

/** @param {number} width @param {number} height */
function checkPixels(width, height) {
    if (width * height > LIMITS.imagePixelsMax) throw new ImageTooLarge(width, height);
}

/**
 * @typedef {Object} Rgb  A decoded, upright image.
 * @property {number} width
 * @property {number} height
 * @property {Uint8Array} rgb  [H*W*3]
 */

/**
 * The format from the file's first bytes, whatever its name or type says.
 * @param {Uint8Array} bytes
 * @returns {'png' | 'jpeg' | 'webp' | null}
 */
export function sniffFormat(bytes) {
    const png = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
    if (bytes.length >= 8 && png.every((b, i) => bytes[i] === b)) return 'png';
    if (bytes.length >= 3 && bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff) return 'jpeg';
    if (bytes.length >= 12 && ascii(bytes, 0, 4) === 'RIFF' && ascii(bytes, 8, 4) === 'WEBP') return 'webp';
    return null;
}

/**
 * @param {Uint8Array} bytes
 * @param {number} at
 * @param {number} length
 */
function ascii(bytes, at, length) {
    return String.fromCharCode(...bytes.subarray(at, at + length));
}

/** @param {Uint8Array} b @param {number} at */
const u32be = (b, at) => ((b[at] << 24) >>> 0) + (b[at + 1] << 16) + (b[at + 2] << 8) + b[at + 3];
/** @param {Uint8Array} b @param {number} at */
const u32le = (b, at) => b[at] + (b[at + 1] << 8) + (b[at + 2] << 16) + ((b[at + 3] << 24) >>> 0);

/**
 * Decode one input file to upright RGB bytes, or throw ImageRefusal (or ImageTooLarge, before decoding pixels).
 * @param {ArrayBuffer} buffer
 * @returns {Promise<Rgb>}
 */
export async function decodeImageFile(buffer) {
    const bytes = new Uint8Array(buffer);
    const format = sniffFormat(bytes);
    if (format === null) throw new ImageRefusal('format');
    if (format === 'png') {
        const png = parsePng(bytes);
        checkPixels(png.width, png.height);
        const image = await decodePngPixels(png);
        return orient(image, orientation(png.exif, png.xmp));
    }
    const meta = format === 'jpeg' ? parseJpeg(bytes) : parseWebp(bytes);
    const image = await decodeWithBrowser(withoutOrientation(buffer, meta.blocks), meta.alpha);
    return orient(image, orientation(meta.exif, meta.xmp));
}

// --------------------------------------------------------------------------------------------------------------
// Orientation: Pillow's Image.getexif + ImageOps.exif_transpose
// --------------------------------------------------------------------------------------------------------------

/**
 * The orientation Pillow applies: IFD0's Orientation tag (a single BYTE, SHORT or LONG), else XMP's
 * `tiff:Orientation` (the first match of Pillow's pattern), else 1. Unreadable EXIF (not a TIFF header) is a
 * damaged file, as exif_transpose raises on it.
 * @param {Uint8Array | null} exif  The EXIF block (with or without the "Exif\0\0" prefix).
 * @param {string | null} xmp
 * @returns {number}
 */
function orientation(exif, xmp) {
    const fromExif = exif === null ? null : exifOrientation(exif);
    if (fromExif !== null) return fromExif;
    if (xmp) {
        const match = /tiff:Orientation(="|>)([0-9])/.exec(xmp);
        if (match) return Number(match[2]);
    }
    return 1;
}

/**
 * @param {Uint8Array} block
 * @returns {number | null}  null: no Orientation tag in IFD0.
 */
function exifOrientation(block) {
    return orientationEntry(block)?.value ?? null;
}

/**
 * IFD0's Orientation entry of an EXIF block: its value and where the entry starts in `block`.
 * @param {Uint8Array} block
 * @returns {{value: number, at: number} | null}
 */
function orientationEntry(block) {
    let data = block;
    let skip = 0;
    if (data.length >= 6 && ascii(data, 0, 6) === 'Exif\0\0') {
        data = data.subarray(6);
        skip = 6;
    }
    if (data.length === 0) return null;
    const head = ascii(data, 0, 4);
    const little = head === 'II*\0';
    if (!little && head !== 'MM\0*') throw new ImageRefusal('damaged', 'EXIF block without a TIFF header');
    const u16 = (/** @type {number} */ at) =>
        little ? data[at] + (data[at + 1] << 8) : (data[at] << 8) + data[at + 1];
    const u32 = (/** @type {number} */ at) => (little ? u32le(data, at) : u32be(data, at));
    const ifd = u32(4);
    if (ifd + 2 > data.length) return null;
    const count = u16(ifd);
    for (let k = 0; k < count; k++) {
        const entry = ifd + 2 + 12 * k;
        if (entry + 12 > data.length) return null;
        if (u16(entry) !== 0x0112) continue;
        const type = u16(entry + 2);
        const at = skip + entry;
        if (u32(entry + 4) !== 1) return { value: 0, at }; // a tuple: Pillow's lookup finds no transpose for it
        if (type === 1) return { value: data[entry + 8], at };
        if (type === 3) return { value: u16(entry + 8), at };
        if (type === 4) return { value: u32(entry + 8), at };
        return { value: 0, at };
    }
    return null;
}

/**
 * A copy of the file in which no EXIF block holds an Orientation tag (its tag number becomes 0xFFFF, a tag no
 * reader knows), so the browser's decoder, which applies it for JPEG whatever createImageBitmap is told, leaves
 * the pixels as stored; `orient` then applies Pillow's orientation.
 * @param {ArrayBuffer} buffer
 * @param {{start: number, end: number}[]} blocks  The EXIF blocks, as offsets into the file.
 * @returns {ArrayBuffer}
 */
function withoutOrientation(buffer, blocks) {
    const copy = buffer.slice(0);
    const bytes = new Uint8Array(copy);
    for (const { start, end } of blocks) {
        const entry = orientationEntry(bytes.subarray(start, end));
        if (entry) bytes[start + entry.at] = bytes[start + entry.at + 1] = 0xff;
    }
    return copy;
}

/**
 * ImageOps.exif_transpose's transposes: 2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 270 (clockwise),
 * 7 transverse, 8 rotate 90; any other value leaves the image as it is.
 * @param {Rgb} image
 * @param {number} value
 * @returns {Rgb}
 */
export function orient(image, value) {
    if (value < 2 || value > 8) return image;
    const { width: w, height: h, rgb } = image;
    const swap = value >= 5;
    const width = swap ? h : w;
    const height = swap ? w : h;
    /** @type {Record<number, (x: number, y: number) => number>} output (x, y) -> source pixel index */
    const sources = {
        2: (x, y) => y * w + (w - 1 - x),
        3: (x, y) => (h - 1 - y) * w + (w - 1 - x),
        4: (x, y) => (h - 1 - y) * w + x,
        5: (x, y) => x * w + y,
        6: (x, y) => (h - 1 - x) * w + y,
        7: (x, y) => (h - 1 - x) * w + (w - 1 - y),
        8: (x, y) => x * w + (w - 1 - y),
    };
    const source = sources[value];
    const out = new Uint8Array(rgb.length);
    for (let y = 0; y < height; y++) {
        for (let x = 0; x < width; x++) {
            const from = source(x, y) * 3;
            const to = (y * width + x) * 3;
            out[to] = rgb[from];
            out[to + 1] = rgb[from + 1];
            out[to + 2] = rgb[from + 2];
        }
    }
    return { width, height, rgb: out };
}

// --------------------------------------------------------------------------------------------------------------
// PNG (Pillow's PngImagePlugin)
// --------------------------------------------------------------------------------------------------------------

/**
 * @typedef {Object} Png
 * @property {number} width
 * @property {number} height
 * @property {number} bits
 * @property {number} colour  0 grey, 2 RGB, 3 palette, 4 grey + alpha, 6 RGBA.
 * @property {boolean} interlaced
 * @property {Uint8Array | null} palette  PLTE's RGB triples.
 * @property {Uint8Array[]} data  The IDAT chunks.
 * @property {Uint8Array | null} exif
 * @property {string | null} xmp
 * @property {Uint8Array[]} rawProfiles  zTXt payloads of "Raw profile type exif" (inflated later).
 * @property {string | null} rawProfileText  tEXt's "Raw profile type exif".
 */

/** Colour type -> allowed bit depths (PngImagePlugin._MODES). */
const PNG_DEPTHS = /** @type {Record<number, number[]>} */ ({
    0: [1, 2, 4, 8, 16],
    2: [8, 16],
    3: [1, 2, 4, 8],
    4: [8, 16],
    6: [8, 16],
});
const PNG_CHANNELS = /** @type {Record<number, number>} */ ({ 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 });

/** @type {Uint32Array | null} */
let crcTable = null;

/** @param {Uint8Array} bytes @param {number} start @param {number} end */
function crc32(bytes, start, end) {
    if (!crcTable) {
        crcTable = new Uint32Array(256);
        for (let n = 0; n < 256; n++) {
            let c = n;
            for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
            crcTable[n] = c >>> 0;
        }
    }
    let c = 0xffffffff;
    for (let i = start; i < end; i++) c = crcTable[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
}

/**
 * The chunks Pillow reads: the header ones checksummed (PngStream.crc: a bad one is a broken file), the image
 * data, and the metadata that can carry an orientation (wherever it is in the file: Pillow reads the chunks
 * after the image data into the same info).
 * @param {Uint8Array} bytes
 * @returns {Png}
 */
function parsePng(bytes) {
    /** @type {Png} */
    const png = {
        width: 0,
        height: 0,
        bits: 0,
        colour: 0,
        interlaced: false,
        palette: null,
        data: [],
        exif: null,
        xmp: null,
        rawProfiles: [],
        rawProfileText: null,
    };
    let at = 8;
    let seenData = false;
    let header = false;
    while (at + 8 <= bytes.length) {
        const length = u32be(bytes, at);
        const kind = ascii(bytes, at + 4, 4);
        const start = at + 8;
        const end = start + length;
        const cut = end + 4 > bytes.length;
        if (cut && kind !== 'IDAT') {
            // Pillow stops at a cut chunk after the image data, and cannot open a file cut before it.
            if (seenData) break;
            throw new ImageRefusal('damaged', `the ${kind} chunk runs past the end of the file`);
        }
        if (!header && kind !== 'IHDR') throw new ImageRefusal('damaged', 'no IHDR chunk first');
        if (!seenData && kind !== 'IDAT' && crc32(bytes, at + 4, end) !== u32be(bytes, end)) {
            throw new ImageRefusal('damaged', `bad checksum in the ${kind} chunk`);
        }
        const body = bytes.subarray(start, Math.min(end, bytes.length));
        if (kind === 'IHDR') {
            if (length < 13) throw new ImageRefusal('damaged', 'short IHDR');
            header = true;
            png.width = u32be(body, 0);
            png.height = u32be(body, 4);
            png.bits = body[8];
            png.colour = body[9];
            png.interlaced = body[12] === 1;
            if (
                !(PNG_DEPTHS[png.colour] ?? []).includes(png.bits) ||
                body[10] !== 0 ||
                body[11] !== 0 ||
                body[12] > 1
            ) {
                throw new ImageRefusal('damaged', `unknown PNG mode (colour type ${png.colour}, ${png.bits} bits)`);
            }
            if (png.width === 0 || png.height === 0) throw new ImageRefusal('damaged', 'an image of no pixels');
        } else if (kind === 'PLTE') {
            if (png.colour === 3) png.palette = body.slice(0, length - (length % 3));
        } else if (kind === 'acTL') {
            if (!seenData && length >= 4 && u32be(body, 0) > 1) throw new ImageRefusal('animated');
        } else if (kind === 'IDAT') {
            seenData = true;
            png.data.push(body); // a cut one is read as far as it goes: the pixels then end early
            if (cut) break;
        } else if (kind === 'eXIf') {
            png.exif = body.slice();
        } else if (kind === 'tEXt' || kind === 'zTXt' || kind === 'iTXt') {
            textChunk(png, kind, body);
        } else if (kind === 'IEND') {
            break;
        }
        at = end + 4;
    }
    if (!header) throw new ImageRefusal('damaged', 'no IHDR chunk');
    if (png.bits === 16 && png.colour === 0) throw new ImageRefusal('grey16');
    if (png.data.length === 0) throw new ImageRefusal('damaged', 'no image data');
    return png;
}

/**
 * The text chunks that can hold an orientation: "Raw profile type exif" (tEXt, zTXt) and "XML:com.adobe.xmp"
 * (iTXt, uncompressed).
 * @param {Png} png
 * @param {string} kind
 * @param {Uint8Array} body
 */
function textChunk(png, kind, body) {
    const zero = body.indexOf(0);
    if (zero < 0) return;
    const key = ascii(body, 0, zero);
    if (key === 'Raw profile type exif') {
        if (kind === 'tEXt') png.rawProfileText = ascii(body, zero + 1, body.length - zero - 1);
        else if (kind === 'zTXt' && body[zero + 1] === 0) png.rawProfiles = [body.slice(zero + 2)];
    } else if (key === 'XML:com.adobe.xmp' && kind === 'iTXt' && body[zero + 1] === 0) {
        // keyword \0 compressed(0) method \0 language \0 translated \0 text
        let at = zero + 3;
        for (let k = 0; k < 2; k++) {
            const next = body.indexOf(0, at);
            if (next < 0) return;
            at = next + 1;
        }
        png.xmp = new TextDecoder().decode(body.subarray(at));
    }
}

/**
 * Inflate a zlib stream; what came out before an error (a stream cut short, junk after it) is kept, the caller
 * checks there is enough.
 * @param {Uint8Array[]} parts
 * @returns {Promise<Uint8Array>}
 */
async function inflate(parts) {
    const stream = new Blob(parts.map((p) => /** @type {Uint8Array<ArrayBuffer>} */ (p)))
        .stream()
        .pipeThrough(new DecompressionStream('deflate'));
    const reader = stream.getReader();
    /** @type {Uint8Array[]} */
    const chunks = [];
    let total = 0;
    try {
        for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            chunks.push(value);
            total += value.length;
        }
    } catch {
        // keep what was inflated
    }
    const out = new Uint8Array(total);
    let at = 0;
    for (const chunk of chunks) {
        out.set(chunk, at);
        at += chunk.length;
    }
    return out;
}

/** The orientation metadata of a PNG that sits in compressed text, inflated into `exif`. */
/** @param {Png} png */
async function pngRawProfile(png) {
    let text = png.rawProfileText;
    if (png.rawProfiles.length > 0) text = new TextDecoder('latin1').decode(await inflate(png.rawProfiles));
    if (png.exif !== null || text === null) return;
    // Image.getexif: bytes.fromhex of the lines after the third
    const hex = text
        .split('\n')
        .slice(3)
        .join('')
        .replace(/[ \t\r\f\v]/g, '');
    if (hex.length % 2 !== 0 || /[^0-9a-fA-F]/.test(hex))
        throw new ImageRefusal('damaged', 'a raw EXIF profile that is not hex');
    png.exif = Uint8Array.from(hex.match(/../g) ?? [], (pair) => parseInt(pair, 16));
}

/**
 * A PNG's pixels as Pillow's convert('RGB') gives them.
 * @param {Png} png
 * @returns {Promise<Rgb>}
 */
async function decodePngPixels(png) {
    await pngRawProfile(png);
    const { width, height, bits, colour, interlaced } = png;
    const channels = PNG_CHANNELS[colour];
    const bitsPerPixel = bits * channels;
    const bpp = Math.max(1, bitsPerPixel >> 3);
    const raw = await inflate(png.data);
    const rgb = new Uint8Array(width * height * 3);
    const passes = interlaced
        ? [
              [0, 0, 8, 8],
              [4, 0, 8, 8],
              [0, 4, 4, 8],
              [2, 0, 4, 4],
              [0, 2, 2, 4],
              [1, 0, 2, 2],
              [0, 1, 1, 2],
          ]
        : [[0, 0, 1, 1]];
    let at = 0;
    for (const [x0, y0, dx, dy] of passes) {
        const pw = Math.ceil((width - x0) / dx);
        const ph = Math.ceil((height - y0) / dy);
        if (pw <= 0 || ph <= 0) continue;
        const stride = Math.ceil((pw * bitsPerPixel) / 8);
        let prior = new Uint8Array(stride);
        for (let r = 0; r < ph; r++) {
            if (at + 1 + stride > raw.length) throw new ImageRefusal('damaged', 'the image data ends early');
            const filter = raw[at];
            const row = raw.slice(at + 1, at + 1 + stride);
            at += 1 + stride;
            unfilter(row, prior, filter, bpp);
            prior = row;
            const y = y0 + r * dy;
            for (let i = 0; i < pw; i++) writePixel(png, row, i, rgb, (y * width + x0 + i * dx) * 3);
        }
    }
    return { width, height, rgb };
}

/**
 * @param {Uint8Array} row  Filtered in, unfiltered out.
 * @param {Uint8Array} prior  The row above, unfiltered.
 * @param {number} filter
 * @param {number} bpp
 */
function unfilter(row, prior, filter, bpp) {
    const n = row.length;
    if (filter === 0) return;
    if (filter === 1) {
        for (let i = bpp; i < n; i++) row[i] = (row[i] + row[i - bpp]) & 0xff;
    } else if (filter === 2) {
        for (let i = 0; i < n; i++) row[i] = (row[i] + prior[i]) & 0xff;
    } else if (filter === 3) {
        for (let i = 0; i < n; i++) row[i] = (row[i] + (((i >= bpp ? row[i - bpp] : 0) + prior[i]) >> 1)) & 0xff;
    } else if (filter === 4) {
        for (let i = 0; i < n; i++) {
            const a = i >= bpp ? row[i - bpp] : 0;
            const b = prior[i];
            const c = i >= bpp ? prior[i - bpp] : 0;
            const p = a + b - c;
            const pa = Math.abs(p - a);
            const pb = Math.abs(p - b);
            const pc = Math.abs(p - c);
            row[i] = (row[i] + (pa <= pb && pa <= pc ? a : pb <= pc ? b : c)) & 0xff;
        }
    } else {
        throw new ImageRefusal('damaged', `unknown PNG filter type ${filter}`);
    }
}

/**
 * Pixel `i` of an unfiltered row as convert('RGB') makes it (see the module docs).
 * @param {Png} png
 * @param {Uint8Array} row
 * @param {number} i
 * @param {Uint8Array} rgb
 * @param {number} to
 */
function writePixel(png, row, i, rgb, to) {
    const { bits, colour } = png;
    if (colour === 0 || colour === 3) {
        let value;
        if (bits === 8) value = row[i];
        else {
            const per = 8 / bits;
            value = (row[Math.floor(i / per)] >> (8 - bits * ((i % per) + 1))) & ((1 << bits) - 1);
        }
        if (colour === 3) {
            const palette = png.palette;
            // PNG requires PLTE; Pillow reads a missing one, or an index past its end, as black
            if (palette && value * 3 + 2 < palette.length) {
                rgb[to] = palette[value * 3];
                rgb[to + 1] = palette[value * 3 + 1];
                rgb[to + 2] = palette[value * 3 + 2];
            } else {
                rgb[to] = rgb[to + 1] = rgb[to + 2] = 0;
            }
            return;
        }
        const grey = bits === 8 ? value : (value * 255) / ((1 << bits) - 1);
        rgb[to] = rgb[to + 1] = rgb[to + 2] = grey;
        return;
    }
    const step = bits === 16 ? 2 : 1; // a 16-bit sample's high byte is what Pillow keeps
    const at = i * PNG_CHANNELS[colour] * step;
    if (colour === 4) {
        rgb[to] = rgb[to + 1] = rgb[to + 2] = row[at];
        return;
    }
    rgb[to] = row[at];
    rgb[to + 1] = row[at + step];
    rgb[to + 2] = row[at + 2 * step];
}

// --------------------------------------------------------------------------------------------------------------
// JPEG and WebP: metadata parsed here, pixels decoded by the browser
// --------------------------------------------------------------------------------------------------------------

/**
 * @typedef {Object} Meta
 * @property {Uint8Array | null} exif
 * @property {string | null} xmp
 * @property {boolean} alpha  The format may hold translucent pixels.
 * @property {{start: number, end: number}[]} blocks  Every EXIF block in the file (offsets), the one read included.
 */

/**
 * JPEG markers up to the scan: the first APP1 Exif block and the last APP1 XMP packet (as Pillow keeps them),
 * and the frame's component count (4: CMYK or YCCK, which Pillow reads as CMYK).
 * @param {Uint8Array} bytes
 * @returns {Meta}
 */
function parseJpeg(bytes) {
    /** @type {Meta} */
    const meta = { exif: null, xmp: null, alpha: false, blocks: [] };
    const xmpHead = 'http://ns.adobe.com/xap/1.0/\0';
    let at = 2;
    while (at + 4 <= bytes.length) {
        if (bytes[at] !== 0xff) throw new ImageRefusal('damaged', 'a JPEG marker was expected');
        const marker = bytes[at + 1];
        if (marker === 0xff) {
            at += 1;
            continue;
        }
        if (marker === 0xd8 || (marker >= 0xd0 && marker <= 0xd7) || marker === 0x01) {
            at += 2;
            continue;
        }
        const length = (bytes[at + 2] << 8) + bytes[at + 3];
        const body = bytes.subarray(at + 4, at + 2 + length);
        if (marker === 0xe1) {
            if (ascii(body, 0, 6) === 'Exif\0\0') {
                meta.blocks.push({ start: at + 4, end: at + 2 + length });
                if (meta.exif === null) meta.exif = body.slice();
            } else if (ascii(body, 0, xmpHead.length) === xmpHead)
                meta.xmp = new TextDecoder('latin1').decode(body.subarray(xmpHead.length));
        } else if (marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc) {
            if (body.length >= 6 && body[5] === 4) throw new ImageRefusal('cmyk');
        } else if (marker === 0xda || marker === 0xd9) {
            break;
        }
        at += 2 + length;
    }
    return meta;
}

/**
 * WebP's RIFF chunks: VP8X's animation and alpha flags, EXIF and "XMP " (Pillow reads them through libwebp's
 * demuxer), and VP8L's alpha bit.
 * @param {Uint8Array} bytes
 * @returns {Meta}
 */
function parseWebp(bytes) {
    /** @type {Meta} */
    const meta = { exif: null, xmp: null, alpha: false, blocks: [] };
    let at = 12;
    while (at + 8 <= bytes.length) {
        const kind = ascii(bytes, at, 4);
        const length = u32le(bytes, at + 4);
        const body = bytes.subarray(at + 8, Math.min(bytes.length, at + 8 + length));
        if (kind === 'VP8X') {
            if (body[0] & 0x02) throw new ImageRefusal('animated');
            meta.alpha = (body[0] & 0x10) !== 0;
        } else if (kind === 'VP8L' && body.length >= 5) {
            meta.alpha = meta.alpha || (body[4] & 0x10) !== 0;
        } else if (kind === 'ALPH') {
            meta.alpha = true;
        } else if (kind === 'EXIF') {
            meta.exif = body.slice();
            meta.blocks.push({ start: at + 8, end: at + 8 + body.length });
        } else if (kind === 'XMP ') {
            meta.xmp = new TextDecoder('latin1').decode(body);
        }
        at += 8 + length + (length & 1);
    }
    return meta;
}

/**
 * The browser's decode: no colour management, no premultiplication, no orientation of its own (applied after,
 * as Pillow does), pixels read back through a WebGL 2 texture so translucent ones keep their stored colour.
 * Without WebGL 2 a 2D canvas reads opaque pixels exactly and a translucent one is refused.
 * @param {ArrayBuffer} buffer
 * @param {boolean} alpha
 * @returns {Promise<Rgb>}
 */
async function decodeWithBrowser(buffer, alpha) {
    /** @type {ImageBitmap} */
    let bitmap;
    try {
        bitmap = await createImageBitmap(new Blob([buffer]), {
            colorSpaceConversion: 'none',
            premultiplyAlpha: 'none',
            imageOrientation: 'none',
        });
    } catch (err) {
        throw new ImageRefusal('damaged', err instanceof Error ? err.message : String(err));
    }
    const { width, height } = bitmap;
    try {
        checkPixels(width, height);
        const rgba = (alpha && readWithWebGl(bitmap)) || readWithCanvas(bitmap, alpha);
        const rgb = new Uint8Array(width * height * 3);
        for (let p = 0, q = 0; p < rgb.length; p += 3, q += 4) {
            rgb[p] = rgba[q];
            rgb[p + 1] = rgba[q + 1];
            rgb[p + 2] = rgba[q + 2];
        }
        return { width, height, rgb };
    } finally {
        bitmap.close();
    }
}

/**
 * @param {ImageBitmap} bitmap
 * @returns {Uint8Array | null}  RGBA as stored, or null without WebGL 2.
 */
function readWithWebGl(bitmap) {
    const { width, height } = bitmap;
    const gl = /** @type {WebGL2RenderingContext | null} */ (new OffscreenCanvas(1, 1).getContext('webgl2'));
    if (!gl) return null;
    const texture = gl.createTexture();
    gl.bindTexture(gl.TEXTURE_2D, texture);
    gl.pixelStorei(gl.UNPACK_PREMULTIPLY_ALPHA_WEBGL, false);
    gl.pixelStorei(gl.UNPACK_COLORSPACE_CONVERSION_WEBGL, gl.NONE);
    gl.pixelStorei(gl.UNPACK_FLIP_Y_WEBGL, false);
    gl.texImage2D(gl.TEXTURE_2D, 0, gl.RGBA8, gl.RGBA, gl.UNSIGNED_BYTE, bitmap);
    const framebuffer = gl.createFramebuffer();
    gl.bindFramebuffer(gl.FRAMEBUFFER, framebuffer);
    gl.framebufferTexture2D(gl.FRAMEBUFFER, gl.COLOR_ATTACHMENT0, gl.TEXTURE_2D, texture, 0);
    const rgba = new Uint8Array(width * height * 4);
    const ok = gl.checkFramebufferStatus(gl.FRAMEBUFFER) === gl.FRAMEBUFFER_COMPLETE;
    if (ok) gl.readPixels(0, 0, width, height, gl.RGBA, gl.UNSIGNED_BYTE, rgba);
    gl.deleteFramebuffer(framebuffer);
    gl.deleteTexture(texture);
    gl.getExtension('WEBGL_lose_context')?.loseContext();
    return ok ? rgba : null;
}

/**
 * @param {ImageBitmap} bitmap
 * @param {boolean} alpha  Refuse translucent pixels (the canvas premultiplies them).
 * @returns {Uint8Array}
 */
function readWithCanvas(bitmap, alpha) {
    const { width, height } = bitmap;
    const canvas = new OffscreenCanvas(width, height);
    const context = /** @type {OffscreenCanvasRenderingContext2D} */ (
        canvas.getContext('2d', { willReadFrequently: true })
    );
    context.drawImage(bitmap, 0, 0);
    const rgba = new Uint8Array(context.getImageData(0, 0, width, height).data.buffer);
    if (alpha) {
        for (let q = 3; q < rgba.length; q += 4) if (rgba[q] !== 255) throw new ImageRefusal('translucent');
    }
    return rgba;
}
