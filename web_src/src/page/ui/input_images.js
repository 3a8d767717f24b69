// @ts-check
/**
 * @file Input images of Edit and Inpaint as the page holds them: the file as the user gave it (sent as is, so
 * the worker hashes the very bytes the user has), its decoded size and the size the pipeline uses it at. Every
 * image is checked here before it is shown, with the limits the worker checks again (shared/limits.js).
 * @module page/ui/input_images
 */

import { decodeImageFile } from '../../shared/decode_image.js';
import { ImageRefusal, ImageTooLarge } from '../../shared/image_file.js';
import { InputError } from '../../shared/errors.js';
import { formatBytes } from '../../shared/format.js';
import { LIMITS, imageDimensionsProblem, inputImageSize } from '../../shared/limits.js';

/**
 * @typedef {Object} InputImage
 * @property {Blob} blob      The file as given (a File from a picker, drop or paste; a Blob restored from history).
 * @property {string} name
 * @property {number} width   Decoded size.
 * @property {number} height
 * @property {{width: number, height: number, tokens: number}} used  inputImageSize(width, height).
 */

/**
 * A name for an image without one: pasted screenshots often arrive as "image.png", or nameless.
 * @param {Blob} blob
 * @param {string} fallback
 * @returns {string}
 */
export function blobName(blob, fallback) {
    return blob instanceof File && blob.name ? blob.name : fallback;
}

/**
 * The bytes of a file the user added. A File is read from disk when it is used, so one moved, deleted or changed
 * since it was added cannot be read (the browser says only "NotReadableError"): say which and what to do.
 * @param {Blob} blob
 * @param {string} label  e.g. 'Reference 2 (cat.png)'
 * @returns {Promise<ArrayBuffer>}
 */
export async function readBlob(blob, label) {
    try {
        return await blob.arrayBuffer();
    } catch (err) {
        throw new InputError(
            `${label} can no longer be read: the file was moved, deleted or changed on disk after it was added ` +
                `(${err instanceof Error ? err.name : String(err)}). Remove it and add it again.`,
        );
    }
}

/**
 * Decodes and checks one file exactly as the worker will (shared/decode_image.js: the same pixels, the same
 * refusals), within the file-size cap and the dimension rules. Throws InputError naming `label`
 * (e.g. 'Reference 2 (cat.png)').
 * @param {Blob} blob
 * @param {string} name
 * @param {string} label
 * @param {string} name
 * @param {string} label
 * @returns {Promise<InputImage>}
 */
export async function checkImage(blob, name, label) {
    return (await decodeChecked(blob, name, label)).image;
}

/**
 * checkImage, with the decoded pixels (what the worker will see).
 * @param {Blob} blob
 * @param {string} name
 * @param {string} label
 * @param {{mask?: boolean}} [options]  A mask: any size (it is resized to the image), within the pixel limit.
 * @returns {Promise<{image: InputImage, pixels: import('../../shared/image_file.js').Rgb}>}
 */
export async function decodeChecked(blob, name, label, { mask = false } = {}) {
    if (blob.size > LIMITS.imageFileBytesMax) {
        throw new InputError(
            `${label} is ${formatBytes(blob.size)}, more than the ${formatBytes(LIMITS.imageFileBytesMax)} an input ` +
                'image file may be.',
        );
    }
    const bytes = await readBlob(blob, label);
    let pixels;
    try {
        pixels = await decodeImageFile(bytes);
    } catch (err) {
        if (err instanceof ImageTooLarge)
            throw new InputError(imageDimensionsProblem(err.width, err.height, label) ?? label);
        if (err instanceof ImageRefusal) throw new InputError(`${label} ${err.message}`);
        throw err;
    }
    const { width, height } = pixels;
    const problem =
        mask && width * height <= LIMITS.imagePixelsMax ? null : imageDimensionsProblem(width, height, label);
    if (problem) throw new InputError(problem);
    return { image: { blob, name, width, height, used: inputImageSize(width, height) }, pixels };
}

/**
 * "1100x1000 -> 1072x976, 4,087 tokens"; the arrow only when the image is resized or cropped.
 * @param {InputImage} image
 * @returns {string}
 */
export function describeCost(image) {
    const { width, height, used } = image;
    const resized = used.width !== width || used.height !== height;
    const size = resized ? `${width}x${height} -> ${used.width}x${used.height}` : `${width}x${height}`;
    return `${size}, ${used.tokens.toLocaleString('en-US')} tokens`;
}

/**
 * The files an event carries (drop or paste): File entries only, images or not (a non-image is refused by
 * checkImage with a message rather than silently ignored).
 * @param {DataTransfer | null} transfer
 * @returns {File[]}
 */
export function transferFiles(transfer) {
    if (!transfer) return [];
    if (transfer.files.length > 0) return [...transfer.files];
    // Some sources (an image copied in the browser) fill only `items`.
    return [...transfer.items]
        .filter((item) => item.kind === 'file')
        .map((item) => item.getAsFile())
        .filter((file) => file !== null);
}
