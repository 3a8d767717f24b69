// @ts-check
/**
 * @file Step previews: after each denoising step, what the image is becoming, without the VAE decoder. The step's
 * prediction of the clean latents, x0 = x - sigma_next * v (the latents after the Euler step minus what the rest of
 * the schedule would still remove; the final latents themselves after the last step), is mapped token by token to
 * RGB by one affine map: each packed token (128 BN-normalised channels = 32 VAE channels x a 2x2 patch) gives the
 * colours of its 2x2 block of VAE-latent pixels, so the preview is 1/8 of the image's size; the page scales it up.
 * Inpainting's kept tokens show the image being inpainted. The preview only reads the latents: the image is the
 * same with it or without it.
 *
 * The map is the repository's own (PREVIEW_MAP_FILE, fitted by `klein-web convert` to its VAE:
 * builder/convert/preview_map.py), else PUBLISHED_FLUX2 below.
 * @module pipeline/preview
 */

import { PREVIEW_MAP_FILE } from '../shared/model_repo.js';
import { LATENT_CHANNELS } from './latents.js';

/** Each token covers a 2x2 block of VAE-latent pixels; 3 colours each. */
const PATCH = 2;
const OUTPUTS = PATCH * PATCH * 3;
const FORMAT = 'klein-web-preview-map';

/**
 * The published latent-to-RGB factors of the FLUX.2 VAE: ComfyUI's `Flux2` latent format
 * (github.com/Comfy-Org/ComfyUI, comfy/latent_formats.py, commit 75399d78ddcc01f46f9b94521b29f1fe8a90ed53). ComfyUI's
 * Flux2 latents are ours: its VAE folds the same BatchNorm normalisation in (`batch_norm_latent`) and its
 * Latent2RGB previewer unpatchifies the 128 channels as diffusers does (channel c*4 + dy*2 + dx is VAE channel c at
 * (dy, dx)) before applying one 32 -> 3 map to every pixel, with an output in [-1, 1]. Here, per VAE channel, those
 * factors halved, and the bias (b + 1) / 2, so the output is in [0, 1] like the decoder's (docs/preview.md).
 */
const PUBLISHED_FLUX2 = Object.freeze({
    factors: [
        [0.0029, 0.00565, 0.00365],
        [0.02475, 0.02215, 0.0418],
        [-0.00495, 0.0048, 0.0322],
        [0.1072, 0.15045, 0.1826],
        [0.0083, -0.00195, -0.0027],
        [0.00785, 0.00515, -0.008],
        [-0.0199, 0.0451, -0.01175],
        [-0.0026, 0.00475, 0.00545],
        [-0.17635, -0.1356, -0.0833],
        [-0.01505, -0.0178, -0.009],
        [-0.00535, 0.0039, 0.00065],
        [0.0373, 0.0045, -0.04705],
        [0.0078, 0.00845, 0.0035],
        [-0.0017, -0.002, -0.0057],
        [0.0016, 0.00905, 0.004],
        [-0.04695, -0.0004, 0.0093],
        [0.0009, 0.00215, 0.0052],
        [0.0142, 0.0028, -0.00635],
        [-0.0012, -0.0011, -0.0015],
        [0.06035, -0.0013, 0.00325],
        [0.0064, 0.00505, 0.0071],
        [0.00685, -0.0036, -0.00035],
        [0.00475, 0.0046, -0.00295],
        [0, -0.00385, -0.00245],
        [-0.02325, -0.0102, -0.0156],
        [0.00475, 0.0006, -0.0033],
        [0.0145, -0.0017, 0.00125],
        [0.011, 0.00845, -0.0024],
        [-0.0166, -0.02285, -0.0234],
        [-0.00425, 0.01945, 0.03045],
        [-0.0038, 0.00015, -0.00215],
        [-0.00555, -0.023, -0.0307],
    ],
    bias: [0.48355, 0.4641, 0.45745],
});

/**
 * @typedef {Object} PreviewMap  token (128 channels) -> the RGB of its 2x2 block, in [0, 1].
 * @property {Float32Array} weights  [128, 12] channel-major: weights[c * 12 + (dy * 2 + dx) * 3 + k].
 * @property {Float32Array} bias     [12]
 * @property {string} source         Which map: 'repository' or 'published FLUX.2'.
 */

/** @typedef {import('../protocol.js').PreviewFrame} PreviewFrame */

/** @returns {PreviewMap} The published FLUX.2 map. */
export function publishedMap() {
    return perChannelMap(PUBLISHED_FLUX2.factors, PUBLISHED_FLUX2.bias, 'published FLUX.2');
}

/**
 * A map that gives every VAE-latent pixel the same colours from its 32 VAE channels (the form published maps
 * have), laid out as a packed one: token channel c*4 + dy*2 + dx only feeds pixel (dy, dx) of the token's block.
 * @param {ArrayLike<ArrayLike<number>>} factors  [32][3]
 * @param {ArrayLike<number>} bias  [3]
 * @param {string} source
 * @returns {PreviewMap}
 */
export function perChannelMap(factors, bias, source) {
    const weights = new Float32Array(LATENT_CHANNELS * OUTPUTS);
    const biases = new Float32Array(OUTPUTS);
    for (let pixel = 0; pixel < PATCH * PATCH; pixel++) {
        for (let k = 0; k < 3; k++) {
            biases[pixel * 3 + k] = bias[k];
            for (let c = 0; c < factors.length; c++)
                weights[(c * PATCH * PATCH + pixel) * OUTPUTS + pixel * 3 + k] = factors[c][k];
        }
    }
    return { weights, bias: biases, source };
}

/**
 * A preview map file (builder/convert/preview_map.py writes it), its shapes and numbers checked.
 * @param {any} json
 * @returns {PreviewMap}
 */
export function parsePreviewMap(json) {
    const rows = json?.weights;
    const bias = json?.bias;
    const isRow = (/** @type {any} */ row, /** @type {number} */ length) =>
        Array.isArray(row) && row.length === length && row.every((v) => typeof v === 'number' && Number.isFinite(v));
    if (
        json?.format !== FORMAT ||
        !Array.isArray(rows) ||
        rows.length !== OUTPUTS ||
        !rows.every((row) => isRow(row, LATENT_CHANNELS)) ||
        !isRow(bias, OUTPUTS)
    ) {
        throw new Error(
            `it is not a ${FORMAT} of ${OUTPUTS} x ${LATENT_CHANNELS} finite weights and ${OUTPUTS} biases`,
        );
    }
    const weights = new Float32Array(LATENT_CHANNELS * OUTPUTS);
    for (let o = 0; o < OUTPUTS; o++) {
        for (let c = 0; c < LATENT_CHANNELS; c++) weights[c * OUTPUTS + o] = rows[o][c];
    }
    return { weights, bias: Float32Array.from(bias), source: 'repository' };
}

/**
 * The map of the prepared model: the repository's own when its manifest lists one (downloaded into the store like
 * the graphs), else the published FLUX.2 map. A map that cannot be had or read falls back too, with a note: the
 * preview never stops an image.
 * @param {import('../models/model_source.js').ModelSource} source  After Model.prepare(): its store and manifest
 *   are the model's.
 * @param {AbortSignal} signal
 * @returns {Promise<{map: PreviewMap, note: string | null}>}
 */
export async function loadPreviewMap(source, signal) {
    const entry = source.manifest?.files[PREVIEW_MAP_FILE];
    const store = source.store;
    if (!entry || !store) return { map: publishedMap(), note: null };
    try {
        const map = await source.derive(`preview-map:${entry.size}:${entry.sha256}`, async () => {
            await store.ensure([{ path: PREVIEW_MAP_FILE, ...entry }], { signal });
            return parsePreviewMap(JSON.parse(await store.readText(PREVIEW_MAP_FILE)));
        });
        return { map, note: null };
    } catch (err) {
        signal.throwIfAborted();
        const why = err instanceof Error ? err.message : String(err);
        return {
            map: publishedMap(),
            note: `The step previews use the published FLUX.2 colours: the repository's ${PREVIEW_MAP_FILE} could not be used (${why.slice(0, 160)}).`,
        };
    }
}

/** Makes one preview per denoising step of a run, and times them. */
export class StepPreview {
    /**
     * @param {PreviewMap} map
     * @param {{latentHeight: number, latentWidth: number,
     *   inpainting: {imageLatents: Float32Array, mask: Float32Array} | null}} run
     *   `inpainting`: the kept tokens (mask 0) show `imageLatents`.
     */
    constructor(map, { latentHeight, latentWidth, inpainting }) {
        this.map = map;
        this.latentHeight = latentHeight;
        this.latentWidth = latentWidth;
        this.inpainting = inpainting;
        /** Inpainting's clean-latent prediction, blended with the kept image, [H*W, C]. */
        this.x0 = inpainting ? new Float32Array(latentHeight * latentWidth * LATENT_CHANNELS) : null;
        /** Milliseconds spent making previews (they run inside the denoising steps). */
        this.ms = 0;
        this.frames = 0;
    }

    /**
     * The preview after a step.
     * @param {Float32Array} latents    [H*W, C] after the step's Euler update (and inpainting's blend).
     * @param {Float32Array} velocity   [H*W, C] the step's prediction for the noise tokens.
     * @param {number} sigmaNext        The sigma the latents are at now (0 after the last step).
     * @returns {PreviewFrame}
     */
    frame(latents, velocity, sigmaNext) {
        const started = performance.now();
        const { inpainting, x0, latentHeight, latentWidth } = this;
        let frame;
        if (inpainting && x0) {
            const { imageLatents, mask } = inpainting;
            for (let t = 0; t < mask.length; t++) {
                const repaint = mask[t];
                for (let i = t * LATENT_CHANNELS; i < (t + 1) * LATENT_CHANNELS; i++) {
                    x0[i] = repaint * (latents[i] - sigmaNext * velocity[i]) + (1 - repaint) * imageLatents[i];
                }
            }
            frame = previewRgba(this.map, x0, x0, 0, latentHeight, latentWidth);
        } else {
            frame = previewRgba(this.map, latents, velocity, sigmaNext, latentHeight, latentWidth);
        }
        this.ms += performance.now() - started;
        this.frames += 1;
        return frame;
    }
}

/**
 * Apply a map to packed tokens: the RGBA image at 2x the latent grid.
 * @param {PreviewMap} map
 * @param {Float32Array} tokens  [H*W, C]
 * @param {number} latentHeight
 * @param {number} latentWidth
 * @returns {PreviewFrame}
 */
export function tokensToRgba(map, tokens, latentHeight, latentWidth) {
    return previewRgba(map, tokens, tokens, 0, latentHeight, latentWidth);
}

/**
 * The map applied to each token of x0 = latents - sigmaNext * velocity, without writing x0 anywhere: one pass over
 * the latents, the twelve sums of a token kept in locals (this loop is the preview's cost; docs/preview.md).
 * @param {PreviewMap} map
 * @param {Float32Array} latents  [H*W, C]
 * @param {Float32Array} velocity  [H*W, C]
 * @param {number} sigmaNext
 * @param {number} latentHeight
 * @param {number} latentWidth
 * @returns {PreviewFrame}
 */
function previewRgba({ weights: w, bias: b }, latents, velocity, sigmaNext, latentHeight, latentWidth) {
    const width = latentWidth * PATCH;
    const height = latentHeight * PATCH;
    const rgba = new Uint8ClampedArray(width * height * 4);
    for (let y = 0; y < latentHeight; y++) {
        for (let x = 0; x < latentWidth; x++) {
            const token = y * latentWidth + x;
            let s0 = b[0],
                s1 = b[1],
                s2 = b[2],
                s3 = b[3],
                s4 = b[4],
                s5 = b[5];
            let s6 = b[6],
                s7 = b[7],
                s8 = b[8],
                s9 = b[9],
                s10 = b[10],
                s11 = b[11];
            for (let c = 0, i = token * LATENT_CHANNELS; c < LATENT_CHANNELS; c++, i++) {
                const v = latents[i] - sigmaNext * velocity[i];
                const o = c * OUTPUTS;
                s0 += v * w[o];
                s1 += v * w[o + 1];
                s2 += v * w[o + 2];
                s3 += v * w[o + 3];
                s4 += v * w[o + 4];
                s5 += v * w[o + 5];
                s6 += v * w[o + 6];
                s7 += v * w[o + 7];
                s8 += v * w[o + 8];
                s9 += v * w[o + 9];
                s10 += v * w[o + 10];
                s11 += v * w[o + 11];
            }
            // The token's 2x2 block: (dy, dx) = (0, 0), (0, 1) on this row, (1, 0), (1, 1) on the next.
            // Uint8ClampedArray clamps to [0, 255] and rounds.
            const top = (y * PATCH * width + x * PATCH) * 4;
            const bottom = top + width * 4;
            rgba[top] = s0 * 255;
            rgba[top + 1] = s1 * 255;
            rgba[top + 2] = s2 * 255;
            rgba[top + 3] = 255;
            rgba[top + 4] = s3 * 255;
            rgba[top + 5] = s4 * 255;
            rgba[top + 6] = s5 * 255;
            rgba[top + 7] = 255;
            rgba[bottom] = s6 * 255;
            rgba[bottom + 1] = s7 * 255;
            rgba[bottom + 2] = s8 * 255;
            rgba[bottom + 3] = 255;
            rgba[bottom + 4] = s9 * 255;
            rgba[bottom + 5] = s10 * 255;
            rgba[bottom + 6] = s11 * 255;
            rgba[bottom + 7] = 255;
        }
    }
    return { width, height, rgba };
}
