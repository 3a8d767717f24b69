// @ts-check
/**
 * @file What a graph asks of the GPU, written once for the page and the worker: which variant family the adapter's
 * features run fastest (the page says so before anything runs, shared/browser_needs.js; the worker chooses the graphs
 * by it, models/graph_choice.js), and how many bytes an attention score buffer takes (the page's largest image side,
 * the worker's size classes and its refusal of sizes no graph can hold). Pure.
 * @module shared/graph_needs
 */

/**
 * @typedef {Object} GpuFeatures  The device features that decide which variant runs fastest.
 * @property {boolean} shaderF16
 * @property {boolean} [subgroups]
 * @property {boolean} [subgroupMatrix]  chromium-experimental-subgroup-matrix
 * @property {{vendor: string} | null} [adapter]
 */

/**
 * Whether onnxruntime's 4-bit layers run as int8 dot products (DP4A): given subgroups, except on Apple GPUs.
 * @param {GpuFeatures} gpu
 * @returns {boolean}
 */
function dp4a({ subgroups = false, adapter }) {
    return subgroups && !/apple/i.test(adapter?.vendor ?? '');
}

/**
 * Variant preference for the text encoder and the transformer, fastest first, by the kernels onnxruntime runs
 * each variant's 4-bit layers on (measured per feature set: docs/machines.md):
 * - shader-f16 with matrix units (subgroup-matrix): q4f16's fp16 matrix-unit kernels;
 * - shader-f16 and DP4A without matrix units: q4, whose layers run as int8 dot products, beat q4f16's plain fp16
 *   kernels;
 * - shader-f16 alone: q4f16;
 * - no shader-f16: q4 (q4f16 and fp16 would need their fp16 nodes on the CPU).
 * @param {GpuFeatures} gpu
 * @returns {readonly string[]}
 */
export function variantOrder(gpu) {
    if (!gpu.shaderF16) return Object.freeze(['q4', 'fp32', 'q4f16', 'fp16']);
    if (dp4a(gpu) && !gpu.subgroupMatrix) return Object.freeze(['q4', 'q4f16', 'fp32', 'fp16']);
    return Object.freeze(['q4f16', 'q4', 'fp32', 'fp16']);
}

/**
 * The graph family the features give (variantOrder's first choice) and, in words, the kernels its 4-bit layers
 * run on.
 * @param {GpuFeatures} gpu
 * @returns {{family: 'q4f16' | 'q4', kernels: string}}
 */
export function graphFamily(gpu) {
    const family = /** @type {'q4f16' | 'q4'} */ (variantOrder(gpu)[0]);
    if (!gpu.shaderF16) {
        return {
            family,
            kernels: dp4a(gpu) ? 'int8 dot products (DP4A) with fp32 activations' : 'plain fp32 kernels',
        };
    }
    if (family === 'q4') return { family, kernels: 'int8 dot products (DP4A), faster here than plain fp16 kernels' };
    return { family, kernels: gpu.subgroupMatrix ? 'fp16 matrix-unit kernels' : 'plain fp16 kernels' };
}

/**
 * The largest score buffer of an attention of `heads` heads over `tokens` tokens, its queries split into `blocks`
 * blocks (builder/convert/attention.py): heads x ceil(tokens / blocks) x tokens values.
 * @param {number} heads
 * @param {number} tokens
 * @param {number} blocks
 * @param {number} bytesPerValue  4 for fp32 scores, 2 for fp16.
 * @returns {number}
 */
export function attentionScoreBytes(heads, tokens, blocks, bytesPerValue) {
    return heads * Math.ceil(tokens / blocks) * tokens * bytesPerValue;
}

/**
 * The tokens of the VAE's mid-block attention (one head) for a width x height image: its 8x-downsampled grid.
 * @param {number} width
 * @param {number} height
 * @returns {number}
 */
export function vaeAttentionTokens(width, height) {
    return (width / 8) * (height / 8);
}
