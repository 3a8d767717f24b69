// @ts-check
/**
 * @file The PNG container (W3C PNG 3rd ed., 5.2-5.5): the signature, the chunks in order, and their CRC-32. Text
 * chunks are read and written by shared/png_text.js, the image by shared/png_decode.js; each decides what a cut
 * or damaged chunk means to it.
 * @module shared/png_chunks
 */

const PNG_SIGNATURE = Object.freeze([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/**
 * Whether `bytes` start with the PNG signature.
 * @param {Uint8Array} bytes
 */
export function hasPngSignature(bytes) {
    return bytes.length >= 8 && PNG_SIGNATURE.every((b, i) => bytes[i] === b);
}

/** CRC-32 (ISO 3309, polynomial 0xEDB88320) byte table; read-only after this line. */
const CRC_TABLE = (() => {
    const table = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
        let c = n;
        for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
        table[n] = c >>> 0;
    }
    return table;
})();

/**
 * CRC-32 over `bytes`, as a PNG stores it after each chunk (over the chunk's type and data).
 * @param {Uint8Array} bytes
 * @returns {number} unsigned 32-bit
 */
export function crc32(bytes) {
    let c = 0xffffffff;
    for (let i = 0; i < bytes.length; i++) c = CRC_TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
}

/**
 * @typedef {Object} Chunk
 * @property {string} type    Four ASCII letters.
 * @property {number} offset  Byte offset of the chunk's length field.
 * @property {number} length  The length of its data, as the chunk states it.
 * @property {Uint8Array} data  Its data, as far as the file holds it.
 * @property {boolean} cut    The file ends before the chunk's CRC does.
 */

/**
 * The chunks after the signature, in order: up to and with IEND or a cut chunk, or until fewer bytes are left than
 * a chunk's length and type (the byte after the last chunk yielded is `offset + 12 + length`).
 * @param {Uint8Array} png
 * @returns {Generator<Chunk>}
 */
export function* chunks(png) {
    const view = new DataView(png.buffer, png.byteOffset, png.byteLength);
    for (let offset = 8; offset + 8 <= png.length;) {
        const length = view.getUint32(offset);
        const type = String.fromCharCode(...png.subarray(offset + 4, offset + 8));
        const end = offset + 12 + length;
        const cut = end > png.length;
        yield { type, offset, length, data: png.subarray(offset + 8, Math.min(end - 4, png.length)), cut };
        if (cut || type === 'IEND') return;
        offset = end;
    }
}

/**
 * Whether a whole chunk's stored CRC matches its type and data.
 * @param {Uint8Array} png
 * @param {Chunk} chunk  Not cut.
 */
export function crcMatches(png, chunk) {
    const end = chunk.offset + 8 + chunk.length;
    const stored = new DataView(png.buffer, png.byteOffset, png.byteLength).getUint32(end);
    return crc32(png.subarray(chunk.offset + 4, end)) === stored;
}

/**
 * One chunk's bytes: length, type, data and CRC.
 * @param {string} type  Four ASCII letters.
 * @param {Uint8Array} data
 * @returns {Uint8Array}
 */
export function encodeChunk(type, data) {
    const out = new Uint8Array(12 + data.length);
    const view = new DataView(out.buffer);
    view.setUint32(0, data.length);
    for (let i = 0; i < 4; i++) out[4 + i] = type.charCodeAt(i);
    out.set(data, 8);
    view.setUint32(8 + data.length, crc32(out.subarray(4, 8 + data.length)));
    return out;
}
