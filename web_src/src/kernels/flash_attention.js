// @ts-check
/**
 * @file Flash attention: out = softmax(q·kᵀ·scale)·v for q, k, v and out laid out [heads, tokens, headDim] (one
 * image, heads outermost), fp16 in and out where the device has shader-f16 (fp32 otherwise), fp32 accumulation,
 * the scores never written to memory. The WGSL is in kernels/flash_attention_wgsl.js.
 *
 * Variants, best first: 'subgroup-matrix' (the f16 → f32 16×16×16 matrix units; needs shader-f16, subgroups and
 * one fixed subgroup size of 16, 32 or 64), 'subgroups' (the tiled kernel, lanes summed with subgroup shuffles),
 * 'plain' (the tiled kernel on workgroup memory alone: every adapter).
 * @module kernels/flash_attention
 */

import { computePipeline, uniformBuffer } from './compile.js';
import { fixedSubgroupSize, hasMatrixConfig, kernelFeatures } from './features.js';
import { LANES_PER_ROW, matrixShader, tiledShader } from './flash_attention_wgsl.js';

/** @typedef {'subgroup-matrix' | MatrixTrial | 'subgroups' | 'plain'} AttentionVariant */
/** @typedef {'subgroup-matrix-pad' | 'subgroup-matrix-multiply' | 'subgroup-matrix-rowmajor' |
 *   'subgroup-matrix-rescale' | 'subgroup-matrix-barriers' | 'subgroup-matrix-all'} MatrixTrial */
/** @typedef {'f16' | 'f32'} Dtype */

/**
 * The matrix shader in alternative forms (flash_attention_wgsl.js's MatrixForm), one suspect of the matrix variant's
 * wrong outputs each, plus all of them together: the lab runs them side by side (docs/kernels.md).
 * @type {Readonly<Record<MatrixTrial, import('./flash_attention_wgsl.js').MatrixForm>>}
 */
export const MATRIX_TRIALS = Object.freeze({
    'subgroup-matrix-pad': { pad: true },
    'subgroup-matrix-multiply': { multiply: true },
    'subgroup-matrix-rowmajor': { rowMajor: true },
    'subgroup-matrix-rescale': { alwaysRescale: true },
    'subgroup-matrix-barriers': { barriers: true },
    'subgroup-matrix-all': { pad: true, multiply: true, rowMajor: true, barriers: true },
});
const TRIALS = /** @type {MatrixTrial[]} */ (Object.keys(MATRIX_TRIALS));

export const ATTENTION_VARIANTS = /** @type {const} */ (['subgroup-matrix', ...TRIALS, 'subgroups', 'plain']);

/**
 * Variants the lab runs but a caller only gets by naming them: their outputs do not yet match numpy on a GPU
 * (subgroup-matrix: errors of 0.16–0.3 at klein's shapes on an H100 and an H200, Chromium 156; docs/kernels.md).
 */
export const UNVERIFIED_VARIANTS = Object.freeze(new Set(['subgroup-matrix', ...TRIALS]));

/** @param {AttentionVariant} variant */
const isMatrix = (variant) => variant.startsWith('subgroup-matrix');

/**
 * @typedef {Object} AttentionSpec
 * @property {number} heads
 * @property {number} tokens
 * @property {number} headDim  A multiple of 16 (klein: 128).
 * @property {Dtype} dtype  Of q, k, v and out.
 * @property {AttentionVariant} [variant]  Default: the best verified one the device runs.
 * @property {number} [scale]  Softmax scale; default 1/sqrt(headDim).
 * @property {AttentionOutput} [output]  Where the output goes: [heads, tokens, headDim] like q by default.
 */

/**
 * @typedef {Object} AttentionOutput  The output token-major instead: row t, head h at
 *   `offset + t · rowStride + h · headDim` (elements), so a transformer block's attention lands where its output
 *   projection reads it, heads side by side, with no transpose (and beside the MLP half of a wider row).
 * @property {number} rowStride  Elements between two tokens' rows (≥ heads · headDim), a multiple of 4.
 * @property {number} [offset]  Where token 0's row starts, in elements, a multiple of 4.
 */

/**
 * @typedef {Object} AttentionBuffers  Storage buffers of heads × tokens × headDim values of the spec's dtype.
 * @property {GPUBuffer} q
 * @property {GPUBuffer} k
 * @property {GPUBuffer} v
 * @property {GPUBuffer} out
 */

/**
 * The variants `device` runs for `dtype`, best first.
 * @param {GPUDevice} device
 * @param {Dtype} dtype
 * @param {GPUAdapterInfo | null} [adapterInfo]
 * @returns {AttentionVariant[]}
 */
export function attentionVariants(device, dtype, adapterInfo = null) {
    const features = kernelFeatures(device, adapterInfo);
    if (dtype === 'f16' && !features.f16) return [];
    /** @type {AttentionVariant[]} */
    const variants = [];
    const size = fixedSubgroupSize(features);
    if (
        dtype === 'f16' &&
        features.subgroups &&
        [16, 32, 64].includes(size) &&
        hasMatrixConfig(features, { component: 'f16', result: 'f32', M: 16, N: 16, K: 16 })
    ) {
        variants.push('subgroup-matrix', ...TRIALS);
    }
    // Lanes 4r..4r+3 must share a subgroup for the shuffles: any subgroup of at least 4 lanes.
    if (features.subgroups && (features.subgroupMinSize === 0 || features.subgroupMinSize >= LANES_PER_ROW)) {
        variants.push('subgroups');
    }
    variants.push('plain');
    return variants;
}

/**
 * The workgroup layout of a variant within the device's limits.
 * @param {GPUDevice} device
 * @param {AttentionVariant} variant
 * @param {number} subgroupSize
 * @returns {{rows: number, keys: number, subgroups: number}}
 */
function layout(device, variant, subgroupSize) {
    const storage = device.limits.maxComputeWorkgroupStorageSize;
    const invocations = device.limits.maxComputeInvocationsPerWorkgroup;
    if (isMatrix(variant)) {
        // 16 KiB of keys and values, then 3 KiB of scores and probabilities per subgroup; 1 KiB for the flag and
        // the padded forms' slack.
        const fits = (/** @type {number} */ n) => 17408 + n * 3072 <= storage && n * subgroupSize <= invocations;
        const subgroups = [8, 4, 2, 1].find(fits) ?? 1;
        return { rows: subgroups * 16, keys: 32, subgroups };
    }
    // The key tile is keys × headDim fp32 (16 KiB at 32 × 128); plain adds the lanes' partial sums.
    return variant === 'subgroups' ? { rows: 32, keys: 32, subgroups: 0 } : { rows: 16, keys: 16, subgroups: 0 };
}

/**
 * Create the kernel's pipeline once; `record` then adds one dispatch to a command encoder per call (as a compute
 * pass of its own), `dispatch` to an open compute pass.
 * @param {GPUDevice} device
 * @param {AttentionSpec} spec
 * @param {{adapterInfo?: GPUAdapterInfo | null}} [options]
 * @returns {Promise<{variant: AttentionVariant, dtype: Dtype, flops: number,
 *   dispatch: (pass: GPUComputePassEncoder, buffers: AttentionBuffers) => void,
 *   record: (encoder: GPUCommandEncoder, buffers: AttentionBuffers) => void, destroy: () => void}>}
 */
export async function createFlashAttention(device, spec, { adapterInfo = null } = {}) {
    const { heads, tokens, headDim, dtype } = spec;
    const offered = attentionVariants(device, dtype, adapterInfo);
    const variant = spec.variant ?? offered.find((v) => !UNVERIFIED_VARIANTS.has(v)) ?? 'plain';
    if (!offered.includes(variant)) {
        throw new RangeError(`flash attention: variant ${variant} (${dtype}) needs features this device lacks.`);
    }
    const subgroupSize = fixedSubgroupSize(kernelFeatures(device, adapterInfo));
    const { rows, keys, subgroups } = layout(device, variant, subgroupSize);
    const code = isMatrix(variant)
        ? matrixShader({ headDim, subgroups, subgroupSize, form: MATRIX_TRIALS[/** @type {MatrixTrial} */ (variant)] })
        : tiledShader({ dtype, headDim, rows, keys, reduce: variant === 'subgroups' ? 'subgroups' : 'workgroup' });
    const label = `flash_attention/${variant}/${dtype}`;
    const pipeline = await computePipeline(device, label, code);
    const scale = spec.scale ?? 1 / Math.sqrt(headDim);
    // Where output row t of head h starts, in the shader's units (vec4s for the tiled shaders, elements for the
    // matrix one): offset + t · row + h · head.
    const unit = variant === 'subgroup-matrix' ? 1 : 4;
    const { output } = spec;
    if (output && (output.rowStride % 4 || (output.offset ?? 0) % 4 || output.rowStride < heads * headDim))
        throw new RangeError(
            `flash attention: an output row stride of ${output.rowStride} (offset ${output.offset}) must be a multiple of 4 and hold ${heads}×${headDim}.`,
        );
    const [row, head, offset] = output
        ? [output.rowStride, headDim, output.offset ?? 0]
        : [headDim, tokens * headDim, 0];
    const words = new ArrayBuffer(32);
    new Uint32Array(words, 0, 2).set([tokens, heads]);
    new Float32Array(words, 8, 1)[0] = scale * Math.LOG2E;
    new Uint32Array(words, 16, 3).set([row / unit, head / unit, offset / unit]);
    const params = uniformBuffer(device, `${label}/params`, words);
    /** @type {{buffers: AttentionBuffers, group: GPUBindGroup} | null} */
    let bound = null;
    const groupFor = (/** @type {AttentionBuffers} */ buffers) => {
        const same =
            bound &&
            bound.buffers.q === buffers.q &&
            bound.buffers.k === buffers.k &&
            bound.buffers.v === buffers.v &&
            bound.buffers.out === buffers.out;
        if (!same) {
            const group = device.createBindGroup({
                label,
                layout: pipeline.getBindGroupLayout(0),
                entries: [params, buffers.q, buffers.k, buffers.v, buffers.out].map((buffer, binding) => ({
                    binding,
                    resource: { buffer },
                })),
            });
            bound = { buffers, group };
        }
        return /** @type {{group: GPUBindGroup}} */ (bound).group;
    };
    /** @type {(pass: GPUComputePassEncoder, buffers: AttentionBuffers) => void} */
    const dispatch = (pass, buffers) => {
        pass.setPipeline(pipeline);
        pass.setBindGroup(0, groupFor(buffers));
        pass.dispatchWorkgroups(Math.ceil(tokens / rows), heads);
    };
    return {
        variant,
        dtype,
        // Two matrix products of heads × tokens × tokens × headDim multiply-adds each.
        flops: 4 * heads * tokens * tokens * headDim,
        dispatch,
        record(encoder, buffers) {
            const pass = encoder.beginComputePass({ label });
            dispatch(pass, buffers);
            pass.end();
        },
        destroy() {
            params.destroy();
        },
    };
}
