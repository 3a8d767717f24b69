// @ts-check
/**
 * @file Latent bookkeeping of `Flux2KleinPipeline`: position ids of image and text tokens, packing the
 * [1, C, H, W] noise into [1, H*W, C] tokens and back, and the float32 Euler update. Batch size is 1
 * (the transformer graph is exported with batch 1). All results are bit-exact with diffusers.
 * @module pipeline/latents
 */

import { InputError } from '../shared/errors.js';

const f32 = Math.fround;

/**
 * @param {Record<string, unknown>} dims
 */
function checkDims(dims) {
    for (const [name, value] of Object.entries(dims)) {
        if (!Number.isInteger(value) || /** @type {number} */ (value) < 1) {
            throw new InputError(`\`${name}\` must be a positive integer, got ${String(value)}.`, { [name]: value });
        }
    }
}

/**
 * @param {string} name
 * @param {ArrayLike<number>} data
 * @param {number} expected
 */
function checkLength(name, data, expected) {
    if (data.length !== expected) {
        throw new InputError(`\`${name}\` has ${data.length} values but the shape needs ${expected}.`, {
            [name]: data.length,
            expected,
        });
    }
}

// Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline._prepare_latent_ids @ 0.42.1
/**
 * `img_ids`: one (t, h, w, l) = (0, y, x, 0) row per image token, raster order (token p = y*w + x).
 * @param {number} h Latent grid height, H/16.
 * @param {number} w Latent grid width, W/16.
 * @returns {BigInt64Array} [h*w, 4] int64
 */
export function prepareLatentIds(h, w) {
    checkDims({ h, w });
    const ids = new BigInt64Array(h * w * 4); // [h*w, 4], zero-filled: t = 0 and l = 0
    for (let y = 0; y < h; y++) {
        for (let x = 0; x < w; x++) {
            const row = (y * w + x) * 4;
            ids[row + 1] = BigInt(y);
            ids[row + 2] = BigInt(x);
        }
    }
    return ids;
}

// Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline._prepare_text_ids @ 0.42.1
/**
 * `txt_ids`: one (t, h, w, l) = (0, 0, 0, l) row per text token.
 * @param {number} length Text sequence length (512).
 * @returns {BigInt64Array} [length, 4] int64
 */
export function prepareTextIds(length) {
    checkDims({ length });
    const ids = new BigInt64Array(length * 4); // [L, 4], zero-filled except l
    for (let l = 0; l < length; l++) ids[l * 4 + 3] = BigInt(l);
    return ids;
}

// Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline._pack_latents @ 0.42.1
/**
 * `latents.reshape(1, C, H*W).permute(0, 2, 1)`: channel-last tokens in raster order.
 * @param {Float32Array} latents [1, C, H, W]
 * @param {number} c Channels (128).
 * @param {number} h Latent grid height.
 * @param {number} w Latent grid width.
 * @returns {Float32Array} [1, H*W, C]
 */
export function packLatents(latents, c, h, w) {
    checkDims({ c, h, w });
    checkLength('latents', latents, c * h * w);
    // [1, C, H, W] -> [1, C, H*W] -> [1, H*W, C]: tokens[p, ch] = latents[ch, p]
    return transpose(latents, c, h * w);
}

// Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline._unpack_latents_with_ids @ 0.42.1
/**
 * Inverse of `packLatents`. diffusers scatters token rows to `h_id * w + w_id` of a [H*W, C] buffer; with
 * the raster-order ids of `prepareLatentIds` that is token p -> row p, so no ids are needed here.
 * @param {Float32Array} tokens [1, H*W, C]
 * @param {number} c Channels (128).
 * @param {number} h Latent grid height.
 * @param {number} w Latent grid width.
 * @returns {Float32Array} [1, C, H, W]
 */
export function unpackLatents(tokens, c, h, w) {
    checkDims({ c, h, w });
    checkLength('tokens', tokens, c * h * w);
    // [1, H*W, C] -> [H, W, C] -> permute(2, 0, 1) -> [1, C, H, W]: latents[ch, p] = tokens[p, ch]
    return transpose(tokens, h * w, c);
}

/**
 * A row-major [rows, cols] matrix transposed into a new [cols, rows] one (packing and unpacking are
 * both this, in opposite directions).
 * @param {Float32Array} src
 * @param {number} rows
 * @param {number} cols
 * @returns {Float32Array}
 */
function transpose(src, rows, cols) {
    const out = new Float32Array(rows * cols);
    for (let r = 0; r < rows; r++) {
        const base = r * cols;
        for (let col = 0; col < cols; col++) out[col * rows + r] = src[base + col];
    }
    return out;
}

// Port of diffusers.schedulers.scheduling_flow_match_euler_discrete.FlowMatchEulerDiscreteScheduler.step @ 0.42.1
/**
 * One flow-matching Euler step, in place: `x = x + (sigmaNext - sigma) * v`, float32 with two separate
 * roundings and no FMA, exactly like torch's `sample + dt * model_output` on float32 tensors.
 * @param {Float32Array} latents [1, H*W, C] packed tokens, updated in place.
 * @param {Float32Array} noisePred [1, H*W, C] velocity from the transformer.
 * @param {number} sigma scheduler.sigmas[i] (a float32 value).
 * @param {number} sigmaNext scheduler.sigmas[i + 1].
 * @returns {Float32Array} `latents`
 */
export function eulerStep(latents, noisePred, sigma, sigmaNext) {
    checkLength('noisePred', noisePred, latents.length);
    if (!Number.isFinite(sigma) || !Number.isFinite(sigmaNext)) {
        throw new InputError(`\`sigma\` and \`sigmaNext\` must be finite numbers, got ${sigma} and ${sigmaNext}.`);
    }
    const dt = f32(f32(sigmaNext) - f32(sigma));
    for (let i = 0; i < latents.length; i++) latents[i] = f32(latents[i] + f32(dt * noisePred[i]));
    return latents;
}
