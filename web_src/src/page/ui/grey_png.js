// @ts-check
/**
 * @file A greyscale PNG encoder (colour type 0, 8 bits) for the inpainting mask: canvas.toBlob only writes RGBA,
 * four times the bytes for one channel of information, and a mask read back by other tools should say what it
 * is. Compression is the browser's own zlib (CompressionStream 'deflate' is RFC 1950, what IDAT holds).
 * @module page/ui/grey_png
 */

import { encodeChunk } from '../../shared/png_chunks.js';

const SIGNATURE = [137, 80, 78, 71, 13, 10, 26, 10];

/**
 * @param {Uint8Array} bytes
 * @returns {Promise<Uint8Array>}
 */
async function zlib(bytes) {
    const input = new Blob([/** @type {Uint8Array<ArrayBuffer>} */ (bytes)]).stream();
    const stream = input.pipeThrough(new CompressionStream('deflate'));
    return new Uint8Array(await new Response(stream).arrayBuffer());
}

/**
 * @param {Uint8Array} grey  width*height bytes, row by row.
 * @param {number} width
 * @param {number} height
 * @returns {Promise<Blob>}  image/png
 */
export async function encodeGreyPng(grey, width, height) {
    const header = new Uint8Array(13);
    const view = new DataView(header.buffer);
    view.setUint32(0, width);
    view.setUint32(4, height);
    header[8] = 8; // bit depth
    header[9] = 0; // greyscale
    // Each row starts with its filter type; 0 (none) compresses masks, which are mostly flat runs, well enough.
    const rows = new Uint8Array((width + 1) * height);
    for (let y = 0; y < height; y++) rows.set(grey.subarray(y * width, (y + 1) * width), y * (width + 1) + 1);
    const parts = [
        new Uint8Array(SIGNATURE),
        encodeChunk('IHDR', header),
        encodeChunk('IDAT', await zlib(rows)),
        encodeChunk('IEND', new Uint8Array(0)),
    ];
    return new Blob(/** @type {Uint8Array<ArrayBuffer>[]} */ (parts), { type: 'image/png' });
}
