// @ts-check
/**
 * @file The decoded image as pixels: float [1, 3, H, W] in [0, 1] -> RGBA bytes, rounded exactly like
 * diffusers' `numpy_to_pil` (`(x * 255).round().astype("uint8")`, float32, half to even), and the checks
 * that refuse to show NaN or a flat (black) square as if it were a result.
 * @module pipeline/image
 */

import { DegenerateOutputError, InputError } from '../shared/errors.js';

const f32 = Math.fround;

/** An image whose values all lie within this range (1/255 = one uint8 step) is reported as flat. */
export const FLAT_IMAGE_RANGE = 1 / 255;

// Port of diffusers.image_processor.VaeImageProcessor.numpy_to_pil @ 0.42.1: (x * 255).round() on float32
/**
 * numpy's `round` (round half to even) of a float32 value.
 * @param {number} v
 * @returns {number}
 */
function roundHalfEven(v) {
    const floor = Math.floor(v);
    const diff = v - floor; // exact for float32 inputs
    if (diff > 0.5) return floor + 1;
    if (diff < 0.5) return floor;
    return floor % 2 === 0 ? floor : floor + 1;
}

/**
 * Converts the VAE output to canvas pixels.
 * @param {Float32Array} image [1, 3, H, W] RGB planes in [0, 1] (the graph already did `(x/2+0.5).clamp(0,1)`).
 * @param {number} width W
 * @param {number} height H
 * @returns {Uint8ClampedArray} [H, W, 4] RGBA, alpha 255 (ImageData layout).
 */
export function toRgba(image, width, height) {
    for (const [name, value] of Object.entries({ width, height })) {
        if (!Number.isInteger(value) || value < 1) {
            throw new InputError(`\`${name}\` must be a positive integer, got ${String(value)}.`, { [name]: value });
        }
    }
    const plane = width * height;
    if (image.length !== 3 * plane) {
        throw new InputError(
            `\`image\` has ${image.length} values but a [1, 3, ${height}, ${width}] image needs ${3 * plane}.`,
            { length: image.length, width, height },
        );
    }
    const rgba = new Uint8ClampedArray(plane * 4);
    // [1, 3, H, W] -> [H, W, 4]
    for (let p = 0; p < plane; p++) {
        for (let ch = 0; ch < 3; ch++) {
            // float32 product then half-to-even, as numpy does on the float32 array; the clamped array
            // saturates anything outside [0, 255] instead of wrapping like astype("uint8").
            rgba[p * 4 + ch] = roundHalfEven(f32(image[ch * plane + p] * 255));
        }
        rgba[p * 4 + 3] = 255;
    }
    return rgba;
}

/**
 * Throws if any value is NaN or infinite (fp16 overflow, a broken kernel, corrupted weights). One pass over values
 * already read back for the next stage (docs/machines.md gives its cost); the error names the component that made
 * them, so the worker can run that stage on graphs with fp32 activations (worker/recovery.js).
 * @param {ArrayLike<number>} data
 * @param {string} what What the data is, for the message ("prompt embeddings", "latents after step 2"...).
 * @param {string} [component]  The model component whose output `data` is ('text_encoder', 'transformer', ...).
 */
export function assertFinite(data, what, component) {
    // x * 0 is 0 for every finite x and NaN for NaN and ±infinity: one tight pass decides, the counting pass below
    // runs only on a hit.
    let poisoned = 0;
    for (let i = 0; i < data.length; i++) poisoned += data[i] * 0;
    if (poisoned === 0) return;
    let nan = 0;
    let inf = 0;
    let first = -1;
    for (let i = 0; i < data.length; i++) {
        const v = data[i];
        if (Number.isNaN(v)) nan++;
        else if (v === Infinity || v === -Infinity) inf++;
        else continue;
        if (first < 0) first = i;
    }
    if (nan + inf > 0) {
        throw new DegenerateOutputError(
            `Found ${nan} NaN and ${inf} infinite value(s) in the ${what} (out of ${data.length}, first at ` +
                `index ${first}). This usually means a numeric overflow in half precision or a faulty GPU kernel. ` +
                "Try another seed, the 'fp32' precision, or clear the model cache if the download may be corrupted.",
            { what, nan, inf, total: data.length, firstIndex: first, nonFinite: true, component },
        );
    }
}

/**
 * Refuses a decoded image that is not finite or is (nearly) one flat colour, e.g. a black square.
 * @param {Float32Array} image [1, 3, H, W] in [0, 1]
 */
export function checkImage(image) {
    assertFinite(image, 'decoded image', 'vae_decoder');
    if (image.length === 0) {
        throw new DegenerateOutputError('The decoded image is empty.', { length: 0 });
    }
    let min = Infinity;
    let max = -Infinity;
    for (let i = 0; i < image.length; i++) {
        const v = image[i];
        if (v < min) min = v;
        if (v > max) max = v;
    }
    if (max - min <= FLAT_IMAGE_RANGE) {
        const level = Math.round(((min + max) / 2) * 255);
        throw new DegenerateOutputError(
            `The decoded image is a single flat colour (every value within ${min.toFixed(4)}..${max.toFixed(4)}, ` +
                `about ${level}/255), not a picture. The denoiser or VAE produced degenerate output, typically a ` +
                "half-precision overflow or a faulty GPU kernel. Try another seed, the 'fp32' precision, or " +
                'clear the model cache and download again.',
            { min, max },
        );
    }
}
