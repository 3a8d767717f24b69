// @ts-check
/**
 * @file Input image files -> RGB bytes, exactly as the CPU reference reads them (builder/pipeline/inputs.py:
 * diffusers' `load_image`, i.e. Pillow's `ImageOps.exif_transpose` then `convert('RGB')`). docs/editing.md "How
 * input files are read" is the contract; tests/browser/test_decoding.py compares both sides over
 * tests/data/input_images/.
 *
 * - PNG is decoded by shared/png_decode.js, byte-exact to Pillow.
 * - JPEG and WebP are decoded by the browser (libjpeg-turbo and libwebp, as Pillow's), without colour management,
 *   premultiplication or its own orientation, and read back through WebGL so translucent pixels keep their
 *   stored colour (a 2D canvas would premultiply them).
 * - The orientation is Pillow's: the EXIF Orientation of IFD0 (JPEG APP1, PNG eXIf or "Raw profile type exif"
 *   text, WebP EXIF chunk), else XMP's tiff:Orientation, applied as ImageOps.exif_transpose does.
 * Refused, with the CPU reference's very words (shared/image_file.js REFUSALS): other formats (GIF, BMP, ...), animated PNG/WebP,
 * 16-bit greyscale PNG (Pillow clips it to white), CMYK JPEG, damaged files.
 * @module shared/decode_image
 */

import { ImageRefusal, ascii, checkPixels, u32be, u32le } from './image_file.js';
import { decodePngPixels, parsePng } from './png_decode.js';

/** @typedef {import('./image_file.js').Rgb} Rgb */

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
