// @ts-check
/**
 * @file Outpainting: inpainting on a larger canvas, the image to inpaint extended on any side. One rule for the
 * worker (pipeline/encode_images.js) and the page's size hint; builder/pipeline/outpaint.py is its Python twin
 * (tests/test_twins.py holds the two equal on the same cases):
 * - the padded image is the decoded image with LEFT, RIGHT, TOP and BOTTOM columns and rows added, each new pixel
 *   a copy of the nearest pixel of the image's edge (numpy.pad's mode 'edge');
 * - the padded mask is white (255, repaint) on every new pixel; on the original area it is the given mask, which
 *   must then have the image's decoded size, or black (0, keep) when none is given.
 * The padded image and mask then go through inpainting's preparation unchanged (docs/editing.md "Outpainting").
 * @module shared/outpaint
 */

import { InputError } from './errors.js';
import { LIMITS, inputImageSize } from './limits.js';

/** @typedef {'left' | 'right' | 'top' | 'bottom'} Side */
/** The sides, in the order the PNG key and messages name them. */
export const SIDES = Object.freeze(/** @type {Side[]} */ (['left', 'right', 'top', 'bottom']));
/** Pixels added on one side at most. */
export const EXTEND_MAX = LIMITS.sizeMax;
/** The mask's value on the new area. */
export const MASK_REPAINT = 255;
/** The mask's value on the original area when no mask is given. */
export const MASK_KEEP = 0;

/**
 * @typedef {Object} Extension  Pixels added on each side of the image to inpaint.
 * @property {number} left
 * @property {number} right
 * @property {number} top
 * @property {number} bottom
 */

/**
 * Why `values` (an object of SIDES to pixels, missing sides 0) is no extension, or null.
 * @param {any} values
 * @returns {string | null}
 */
export function extensionProblem(values) {
    if (!values || typeof values !== 'object' || Array.isArray(values)) {
        return `The extension must name sides (left, right, top, bottom) and pixels, got ${JSON.stringify(values)}.`;
    }
    for (const [side, value] of Object.entries(values)) {
        if (!(/** @type {readonly string[]} */ (SIDES).includes(side)))
            return `The extension has no side '${side}'; use left, right, top and bottom.`;
        if (!Number.isInteger(value)) {
            return `The extension's ${side} must be a whole number of pixels, got ${JSON.stringify(value)}.`;
        }
        if (value < 0 || value > EXTEND_MAX) {
            return `The extension's ${side} must be from 0 to ${EXTEND_MAX} pixels, got ${value}.`;
        }
    }
    return null;
}

/**
 * @param {any} values
 * @returns {Extension}
 */
export function checkExtension(values) {
    const problem = extensionProblem(values);
    if (problem) throw new InputError(problem, { extend: values });
    const [left, right, top, bottom] = SIDES.map((side) => values[side] ?? 0);
    return { left, right, top, bottom };
}

/**
 * @param {Extension | null | undefined} extension
 * @returns {boolean}  Whether it adds any pixel.
 */
export const isExtended = (extension) => !!extension && SIDES.some((side) => extension[side] > 0);

/**
 * The PNG key `outpaint` and how messages name an extension: `left=0 right=128 top=0 bottom=64`.
 * @param {Extension} extension
 * @returns {string}
 */
export const extensionText = (extension) => SIDES.map((side) => `${side}=${extension[side]}`).join(' ');

/**
 * @param {Extension} extension
 * @param {number} width
 * @param {number} height
 * @returns {{width: number, height: number}}
 */
export const paddedSize = (extension, width, height) => ({
    width: width + extension.left + extension.right,
    height: height + extension.top + extension.bottom,
});

/**
 * Why the image `name` (decoded WIDTHxHEIGHT) cannot be extended by `extension`, or null: the padded image must be
 * an input image the app takes and its used size an output size it makes.
 * @param {Extension} extension
 * @param {number} width
 * @param {number} height
 * @param {string} name
 * @returns {string | null}
 */
export function paddedProblem(extension, width, height, name) {
    const padded = paddedSize(extension, width, height);
    const { imagePixelsMax, imageAspectMax, sizeMin, sizeMax, sizeMultiple } = LIMITS;
    let reason = null;
    if (padded.width * padded.height > imagePixelsMax) {
        reason = `more than the ${imagePixelsMax / 2 ** 20} megapixels an input image may have`;
    } else if (Math.max(padded.width / padded.height, padded.height / padded.width) > imageAspectMax) {
        reason = `an aspect ratio beyond ${imageAspectMax}:1`;
    } else {
        const used = inputImageSize(padded.width, padded.height);
        const allowed = (/** @type {number} */ side) => side >= sizeMin && side <= sizeMax && side % sizeMultiple === 0;
        if (!allowed(used.width) || !allowed(used.height)) {
            reason = `used at ${used.width}x${used.height}, beyond the ${sizeMax} pixels an output side may have`;
        }
    }
    if (reason === null) return null;
    return (
        `Extending ${name} (${width}x${height}) by ${extensionText(extension)} makes it ${padded.width}x` +
        `${padded.height}, ${reason}; extend it less.`
    );
}

/**
 * With an extension a given mask covers the original area, so it must have the image's decoded size.
 * @param {number} width
 * @param {number} height
 * @param {number} maskWidth
 * @param {number} maskHeight
 * @param {string} name
 * @returns {string | null}
 */
export function maskSizeProblem(width, height, maskWidth, maskHeight, name) {
    if (maskWidth === width && maskHeight === height) return null;
    return (
        `${name} is ${maskWidth}x${maskHeight}; with an extension the mask covers the image to inpaint and must have ` +
        `its size, ${width}x${height} (the new area is always repainted).`
    );
}

/**
 * RGB bytes padded by `extension`: each new pixel a copy of the nearest edge pixel, or `constant`.
 * @param {Uint8Array} rgb  [H*W*3]
 * @param {number} width
 * @param {number} height
 * @param {Extension} extension
 * @param {number | null} constant  null: copy the nearest edge pixel; else every new byte is `constant`.
 * @returns {Uint8Array}
 */
function pad(rgb, width, height, extension, constant) {
    const out = paddedSize(extension, width, height);
    const padded = new Uint8Array(out.width * out.height * 3);
    for (let y = 0; y < out.height; y++) {
        const sy = Math.min(height - 1, Math.max(0, y - extension.top));
        const rowInside = y - extension.top === sy;
        for (let x = 0; x < out.width; x++) {
            const sx = Math.min(width - 1, Math.max(0, x - extension.left));
            const at = (y * out.width + x) * 3;
            if (constant !== null && !(rowInside && x - extension.left === sx)) {
                padded.fill(constant, at, at + 3);
            } else {
                const from = (sy * width + sx) * 3;
                padded[at] = rgb[from];
                padded[at + 1] = rgb[from + 1];
                padded[at + 2] = rgb[from + 2];
            }
        }
    }
    return padded;
}

/**
 * The padded image: the new pixels copies of the nearest edge pixel (numpy.pad mode 'edge').
 * @param {{width: number, height: number, rgb: Uint8Array}} image
 * @param {Extension} extension
 * @returns {{width: number, height: number, rgb: Uint8Array}}
 */
export function padImage({ width, height, rgb }, extension) {
    return { ...paddedSize(extension, width, height), rgb: pad(rgb, width, height, extension, null) };
}

/**
 * The padded mask, RGB: the given mask's bytes (null: all MASK_KEEP) at WIDTHxHEIGHT, MASK_REPAINT on the new area.
 * @param {Uint8Array | null} rgb  The mask, [H*W*3], at the image's decoded size.
 * @param {number} width
 * @param {number} height
 * @param {Extension} extension
 * @returns {{width: number, height: number, rgb: Uint8Array}}
 */
export function padMask(rgb, width, height, extension) {
    const original = rgb ?? new Uint8Array(width * height * 3).fill(MASK_KEEP);
    return { ...paddedSize(extension, width, height), rgb: pad(original, width, height, extension, MASK_REPAINT) };
}
