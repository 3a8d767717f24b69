// @ts-check
/**
 * @file The kernels the lab runs, by the name the Python side's cases use (builder/check/kernel_lab/kernels.py).
 *
 * A kernel plugs in with one entry here: `variants(device, dtype, adapterInfo)` lists the variants the device runs
 * (best first, [] when it runs none for that dtype), and `create(device, kase, adapterInfo)` builds one variant
 * for the case's shape and returns `{variant, flops, record(encoder, buffers), destroy()}`: `record` adds one
 * call to a GPUCommandEncoder, `buffers` maps the case's input and output names to GPUBuffers. docs/kernels.md.
 * @module lab/registry
 */

import { attentionVariants, createFlashAttention } from '../kernels/flash_attention.js';
import { createLinear, linearVariants } from '../kernels/linear.js';

/**
 * @typedef {Object} LabCase  One case of cases.json (builder/check/kernel_lab/cases.py).
 * @property {string} id
 * @property {string} kernel
 * @property {Record<string, number>} shape
 * @property {Record<string, unknown>} spec  Extra arguments of the kernel's factory.
 * @property {('f16' | 'f32')[]} dtypes
 * @property {{name: string, dims: number[], type: string, seed: number, scale: number, offset: number}[]} inputs
 * @property {{name: string, dims: number[], type: string}} output
 * @property {number[]} rows  Output rows (last axis) sent back for the check.
 * @property {{passes: number, targetMs: number} | null} timing
 * @property {{graphs: Record<string, string>, feeds: Record<string, number[]>, output: string, runs: number} | null} ort
 */

/**
 * @typedef {Object} LabKernel
 * @property {string} variant
 * @property {number} flops
 * @property {(encoder: GPUCommandEncoder, buffers: any) => void} record
 * @property {() => void} destroy
 */

/**
 * @typedef {Object} LabEntry
 * @property {(device: GPUDevice, dtype: 'f16' | 'f32', adapterInfo: GPUAdapterInfo | null) => string[]} variants
 * @property {(device: GPUDevice, kase: LabCase & {dtype: 'f16' | 'f32', variant: string},
 *   adapterInfo: GPUAdapterInfo | null) => Promise<LabKernel>} create
 */

/** @type {Record<string, LabEntry>} */
export const KERNELS = {
    flash_attention: {
        variants: (device, dtype, adapterInfo) => attentionVariants(device, dtype, adapterInfo),
        create: (device, kase, adapterInfo) =>
            createFlashAttention(
                device,
                {
                    heads: kase.shape.heads,
                    tokens: kase.shape.tokens,
                    headDim: kase.shape.headDim,
                    dtype: kase.dtype,
                    variant: /** @type {any} */ (kase.variant),
                    scale: /** @type {number | undefined} */ (kase.spec.scale),
                },
                { adapterInfo },
            ),
    },
    linear: {
        variants: (device, dtype, adapterInfo) => linearVariants(device, dtype, adapterInfo),
        create: (device, kase, adapterInfo) => labLinear(device, kase, adapterInfo),
    },
};

/**
 * A linear case (builder/check/kernel_lab/linear.py) as a lab kernel: the weights' scales take the run's dtype
 * (fp32 as in the q4 graphs, fp16 as in the q4f16 ones); one binding per set of buffers. For the residual add the
 * output starts as the `residual` input, copied in before each call (part of the time measured).
 * @param {GPUDevice} device
 * @param {LabCase & {dtype: 'f16' | 'f32', variant: string}} kase
 * @param {GPUAdapterInfo | null} adapterInfo
 * @returns {Promise<LabKernel>}
 */
async function labLinear(device, kase, adapterInfo) {
    const { m, n, k, columns, rowA, rowB, outStride, outOffset, rowsPerBatch } = kase.shape;
    const kind = /** @type {import('../kernels/linear_epilogue.js').EpilogueKind} */ (kase.spec.epilogue);
    const linear = await createLinear(device, {
        n,
        k,
        scales: kase.dtype,
        activation: kase.dtype,
        output: kase.output.type === 'act' ? kase.dtype : /** @type {'f32' | 'f16'} */ (kase.output.type),
        epilogue: { kind, bias: Boolean(kase.spec.bias) },
        path: /** @type {import('../kernels/linear.js').LinearPath} */ (kase.variant),
        adapterInfo,
    });
    /** @type {{buffers: Record<string, GPUBuffer>, bound: import('../kernels/linear.js').BoundLinear} | null} */
    let current = null;
    return {
        variant: linear.path,
        flops: 2 * m * k * columns * (kind === 'swiglu' ? 2 : 1),
        record(encoder, /** @type {Record<string, GPUBuffer>} */ buffers) {
            if (current?.buffers !== buffers) {
                current?.bound.destroy();
                const bound = linear.bind({
                    m,
                    x: buffers.x,
                    weight: { packed: buffers.packed, scales: buffers.scales },
                    out: buffers.out,
                    bias: buffers.bias,
                    gate: buffers.gate,
                    columns,
                    rowA,
                    rowB,
                    outStride,
                    outOffset,
                    rowsPerBatch,
                    gateStride: columns,
                });
                current = { buffers, bound };
            }
            if (buffers.residual) encoder.copyBufferToBuffer(buffers.residual, 0, buffers.out, 0, buffers.out.size);
            current.bound.encode(encoder);
        },
        destroy() {
            current?.bound.destroy();
        },
    };
}
