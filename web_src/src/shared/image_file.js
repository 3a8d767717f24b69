// @ts-check
/**
 * @file What the input-image decoders share: the decoded image's type, the refusals (word for word
 * builder/pipeline/inputs.py REFUSALS, checked by tests/test_input_contract.py), the pixel-count check made
 * before any pixel is decoded, and the byte readers the container parsers use.
 * @module shared/image_file
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
export function checkPixels(width, height) {
    if (width * height > LIMITS.imagePixelsMax) throw new ImageTooLarge(width, height);
}

/**
 * @typedef {Object} Rgb  A decoded, upright image.
 * @property {number} width
 * @property {number} height
 * @property {Uint8Array} rgb  [H*W*3]
 */

/**
 * @param {Uint8Array} bytes
 * @param {number} at
 * @param {number} length
 */
export function ascii(bytes, at, length) {
    return String.fromCharCode(...bytes.subarray(at, at + length));
}

/** @param {Uint8Array} b @param {number} at */
export const u32be = (b, at) => ((b[at] << 24) >>> 0) + (b[at + 1] << 16) + (b[at + 2] << 8) + b[at + 3];
/** @param {Uint8Array} b @param {number} at */
export const u32le = (b, at) => b[at] + (b[at + 1] << 8) + (b[at + 2] << 16) + ((b[at + 3] << 24) >>> 0);
