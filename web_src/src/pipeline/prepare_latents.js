// @ts-check
/**
 * @file Stages 5 and 6 of generate(), Prepare latents and Prepare timesteps: the noise and position ids the
 * denoising loop starts from, then the schedule, with inpainting's part-way start. Their twins are
 * builder/pipeline/reference_stages.py prepare_latents and prepare_timesteps.
 * @module pipeline/prepare_latents
 */

import { inpaintStart } from '../shared/inpaint.js';
import { LATENT_CHANNELS, PATCH, packLatents, prepareLatentIds, prepareTextIds, scaleNoise } from './latents.js';
import { torchRandn } from './rng.js';
import { retrieveTimesteps } from './schedule.js';

/** @typedef {import('./schedule.js').Schedule} Schedule */
/** @typedef {import('./encode_images.js').InputPlan} InputPlan */
/** @typedef {import('./encode_images.js').Conditioning} Conditioning */

/**
 * @typedef {Object} Latents  Stage 5's output: the packed noise and the position ids of both token sets.
 * @property {Float32Array} latents  [1, H*W, C] packed tokens, updated in place by the denoising loop.
 * @property {BigInt64Array} imgIds   [H*W, 4] rows (0, y, x, 0).
 * @property {BigInt64Array} txtIds   [L, 4] rows (0, 0, 0, l).
 * @property {number} latentHeight
 * @property {number} latentWidth
 * @property {Float32Array} noise    [1, H*W, C] the packed noise itself (inpainting re-noises the image with it).
 */

/**
 * Stage 5: noise drawn in the packed 128-channel space exactly as torch.randn on the CPU draws it, and the
 * position ids of the image and text tokens.
 * @param {number} seed
 * @param {{width: number, height: number, textSeqLen: number}} size
 * @returns {Latents}
 */
export function prepareLatents(seed, { width, height, textSeqLen }) {
    const latentHeight = height / PATCH;
    const latentWidth = width / PATCH;
    const noise = torchRandn(seed, [1, LATENT_CHANNELS, latentHeight, latentWidth]);
    const packed = packLatents(noise, LATENT_CHANNELS, latentHeight, latentWidth); // [1, C, H, W] -> [1, H*W, C]
    return {
        latents: packed.slice(),
        noise: packed,
        imgIds: prepareLatentIds(latentHeight, latentWidth), // [H*W, 4] rows (0, y, x, 0)
        txtIds: prepareTextIds(textSeqLen), // [L, 4] rows (0, 0, 0, l)
        latentHeight,
        latentWidth,
    };
}
/**
 * @typedef {Object} Inpainting  What inpainting adds to the denoising loop.
 * @property {number} start  The first step that runs (shared/inpaint.js inpaintStart).
 * @property {Float32Array} imageLatents  [1, H*W, C] the image to inpaint, packed.
 * @property {Float32Array} mask  [H*W] token weights (1 repaints).
 */

/**
 * Stage 6: the schedule, with mu from the noise tokens alone; inpainting starts part-way, from the image noised
 * to that step's sigma (written into `prepared.latents`).
 * @param {number} steps
 * @param {Latents} prepared
 * @param {InputPlan} plan
 * @param {Conditioning | null} conditioning
 * @param {{tokens: Float32Array} | null} mask  Stage 4's mask on the latent grid.
 * @returns {{schedule: Schedule, inpainting: Inpainting | null}}
 */
export function prepareTimesteps(steps, prepared, plan, conditioning, mask) {
    const schedule = retrieveTimesteps(steps, prepared.latentHeight * prepared.latentWidth);
    if (plan.mode !== 'inpaint' || !conditioning?.inpaintLatents || !mask) return { schedule, inpainting: null };
    const start = inpaintStart(steps, /** @type {number} */ (plan.strength));
    prepared.latents = scaleNoise(conditioning.inpaintLatents, schedule.sigmas[start], prepared.noise);
    return { schedule, inpainting: { start, imageLatents: conditioning.inpaintLatents, mask: mask.tokens } };
}
