// @ts-check
/**
 * @file PNG files -> RGB bytes, byte-exact to Pillow's PngImagePlugin + convert('RGB'): every colour type and bit
 * depth (1/2/4-bit grey scaled to 0..255, 16-bit samples cut to their high byte, palette indices looked up with
 * transparency ignored, alpha dropped with the stored colour kept), Adam7, header-chunk checksums, and the
 * metadata that can carry an orientation (applied by shared/decode_image.js).
 * @module shared/png_decode
 */

import { concat } from './bytes.js';
import { ImageRefusal, ascii, u32be } from './image_file.js';
import { chunks, crcMatches } from './png_chunks.js';

/** @typedef {import('./image_file.js').Rgb} Rgb */

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

/**
 * The chunks Pillow reads: the header ones checksummed (PngStream.crc: a bad one is a broken file), the image
 * data, and the metadata that can carry an orientation (wherever it is in the file: Pillow reads the chunks
 * after the image data into the same info).
 * @param {Uint8Array} bytes
 * @returns {Png}
 */
export function parsePng(bytes) {
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
    let seenData = false;
    let header = false;
    for (const chunk of chunks(bytes)) {
        const { type: kind, length, data: body, cut } = chunk;
        if (cut && kind !== 'IDAT') {
            // Pillow stops at a cut chunk after the image data, and cannot open a file cut before it.
            if (seenData) break;
            throw new ImageRefusal('damaged', `the ${kind} chunk runs past the end of the file`);
        }
        if (!header && kind !== 'IHDR') throw new ImageRefusal('damaged', 'no IHDR chunk first');
        if (!seenData && kind !== 'IDAT' && !crcMatches(bytes, chunk)) {
            throw new ImageRefusal('damaged', `bad checksum in the ${kind} chunk`);
        }
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
        } else if (kind === 'eXIf') {
            png.exif = body.slice();
        } else if (kind === 'tEXt' || kind === 'zTXt' || kind === 'iTXt') {
            textChunk(png, kind, body);
        }
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
    const pieces = [];
    try {
        for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            pieces.push(value);
        }
    } catch {
        // keep what was inflated
    }
    return concat(pieces);
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
export async function decodePngPixels(png) {
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
