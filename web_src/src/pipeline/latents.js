// @ts-check
/**
 * @file Latent bookkeeping of `Flux2KleinPipeline`: position ids of image and text tokens, packing the
 * [1, C, H, W] noise into [1, H*W, C] tokens and back, and the float32 Euler update. Batch size is 1
 * (the transformer graph is exported with batch 1). All results are bit-exact with diffusers.
 * @module pipeline/latents
 */

import { InputError } from '../shared/errors.js';

/** transformer.config.in_channels: 32 VAE latent channels x 2x2 patch. */
export const LATENT_CHANNELS = 128;
/** vae_scale_factor * 2: one latent token per 16x16 pixels. */
export const PATCH = 16;
/** `_prepare_image_ids`' scale: conditioning image k's tokens sit at time coordinate 10 * (k + 1). */
export const IMAGE_ID_SCALE = 10;

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

// Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline._prepare_image_ids @ 0.42.1
/**
 * `img_ids` of the conditioning images (references, and inpainting's image to inpaint first): image k's tokens
 * get rows (10 * (k + 1), y, x, 0), raster order, image after image.
 * @param {{height: number, width: number}[]} grids  Latent grid of each image, H/16 x W/16.
 * @returns {BigInt64Array} [sum of h*w, 4] int64
 */
export function prepareImageIds(grids) {
    const total = grids.reduce((sum, { height, width }) => sum + height * width, 0);
    const ids = new BigInt64Array(total * 4);
    let row = 0;
    for (const [k, { height, width }] of grids.entries()) {
        checkDims({ height, width });
        const t = BigInt(IMAGE_ID_SCALE * (k + 1));
        for (let y = 0; y < height; y++) {
            for (let x = 0; x < width; x++) {
                ids[row * 4] = t;
                ids[row * 4 + 1] = BigInt(y);
                ids[row * 4 + 2] = BigInt(x);
                row++;
            }
        }
    }
    return ids;
}

// Port of diffusers.schedulers.scheduling_flow_match_euler_discrete.FlowMatchEulerDiscreteScheduler.scale_noise @ 0.42.1
/**
 * The clean latents noised to `sigma`: `sigma * noise + (1.0 - sigma) * sample`, float32 with a rounding after
 * every op, as torch computes it on float32 tensors.
 * @param {Float32Array} sample  Image latents (packed or not: the op is elementwise).
 * @param {number} sigma  A float32 sigma of the schedule.
 * @param {Float32Array} noise  Same layout as `sample`.
 * @returns {Float32Array}  A new array.
 */
export function scaleNoise(sample, sigma, noise) {
    checkLength('noise', noise, sample.length);
    const s = f32(sigma);
    const keep = f32(1.0 - s);
    const out = new Float32Array(sample.length);
    for (let i = 0; i < out.length; i++) out[i] = f32(f32(s * noise[i]) + f32(keep * sample[i]));
    return out;
}

// Port of diffusers.pipelines.flux2.pipeline_flux2_klein_inpaint.Flux2KleinInpaintPipeline.__call__ (mask blend) @ 0.42.1
/**
 * After each step, what the mask keeps goes back to the (re-noised) image: `latents = (1 - m) * proper + m * latents`
 * per token, in place, float32 rounding after every op.
 * @param {Float32Array} latents  [1, seq, C] packed tokens, updated in place.
 * @param {Float32Array} proper  [1, seq, C] the image latents at this step's noise level.
 * @param {Float32Array} mask  [seq] token weights (1 repaints).
 * @param {number} channels  C
 * @returns {Float32Array} `latents`
 */
export function blendMask(latents, proper, mask, channels) {
    checkLength('proper', proper, latents.length);
    checkLength('latents', latents, mask.length * channels);
    for (let p = 0; p < mask.length; p++) {
        const m = mask[p];
        const keep = f32(1 - m);
        for (let c = p * channels; c < (p + 1) * channels; c++)
            latents[c] = f32(f32(keep * proper[c]) + f32(m * latents[c]));
    }
    return latents;
}

// Port of torch.nn.functional.interpolate(mode='bilinear', align_corners=False) on CPU @ 2.x (upsample_bilinear2d)
/**
 * A [H, W] float32 plane resized bilinearly to [outH, outW] (no antialiasing), as Flux2KleinInpaintPipeline
 * .prepare_mask_latents brings the mask to one value per latent token: source coordinate
 * `scale * (dst + 0.5) - 0.5` clamped at 0, float32 weights. Bit-exact for the pipeline's use, a 0/1 mask shrunk
 * 16x (weights of 1/2, every result a multiple of 1/4); on arbitrary values torch's compiled kernel may differ in
 * the last bit (it may fuse multiply-adds).
 * @param {Float32Array} plane
 * @param {number} height
 * @param {number} width
 * @param {number} outHeight
 * @param {number} outWidth
 * @returns {Float32Array} [outH * outW]
 */
export function interpolateBilinear(plane, height, width, outHeight, outWidth) {
    checkDims({ height, width, outHeight, outWidth });
    checkLength('plane', plane, height * width);
    /** @param {number} inSize @param {number} outSize */
    const axis = (inSize, outSize) => {
        const scale = f32(inSize / outSize);
        const i0 = new Int32Array(outSize);
        const i1 = new Int32Array(outSize);
        const l0 = new Float32Array(outSize);
        const l1 = new Float32Array(outSize);
        for (let d = 0; d < outSize; d++) {
            const src = Math.max(f32(f32(scale * f32(d + 0.5)) - 0.5), 0);
            i0[d] = Math.trunc(src);
            i1[d] = i0[d] + (i0[d] < inSize - 1 ? 1 : 0);
            l1[d] = f32(src - i0[d]);
            l0[d] = f32(1 - l1[d]);
        }
        return { i0, i1, l0, l1 };
    };
    const ys = axis(height, outHeight);
    const xs = axis(width, outWidth);
    const out = new Float32Array(outHeight * outWidth);
    for (let y = 0; y < outHeight; y++) {
        const r0 = ys.i0[y] * width;
        const r1 = ys.i1[y] * width;
        for (let x = 0; x < outWidth; x++) {
            const top = f32(f32(xs.l0[x] * plane[r0 + xs.i0[x]]) + f32(xs.l1[x] * plane[r0 + xs.i1[x]]));
            const bottom = f32(f32(xs.l0[x] * plane[r1 + xs.i0[x]]) + f32(xs.l1[x] * plane[r1 + xs.i1[x]]));
            out[y * outWidth + x] = f32(f32(ys.l0[y] * top) + f32(ys.l1[y] * bottom));
        }
    }
    return out;
}
