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

import { createAdaLN } from '../kernels/adaln.js';
import { attentionVariants, createFlashAttention } from '../kernels/flash_attention.js';
import { createLinear, linearVariants } from '../kernels/linear.js';
import { createQkNormRope } from '../kernels/qk_norm_rope.js';

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
    adaln: {
        variants: (device, dtype) => (dtype === 'f16' && !device.features.has('shader-f16') ? [] : ['plain']),
        create: (device, kase) => labAdaLN(device, kase),
    },
    qk_norm_rope: {
        variants: (device, dtype) => (dtype === 'f16' && !device.features.has('shader-f16') ? [] : ['plain']),
        create: (device, kase) => labQkNormRope(device, kase),
    },
};

/**
 * An AdaLN case (builder/check/kernel_lab/adaln.py): `mods` holds shift and scale of A, then of B.
 * @param {GPUDevice} device
 * @param {LabCase & {dtype: 'f16' | 'f32', variant: string}} kase
 * @returns {Promise<LabKernel>}
 */
async function labAdaLN(device, kase) {
    const { rows, width, split } = kase.shape;
    const adaln = await createAdaLN(device, { width, eps: 1e-6, activation: kase.dtype });
    /** @type {{buffers: Record<string, GPUBuffer>, bound: {dispatch: (pass: GPUComputePassEncoder) => void, destroy: () => void}} | null} */
    let current = null;
    return {
        variant: 'plain',
        flops: 8 * rows * width,
        record(encoder, /** @type {Record<string, GPUBuffer>} */ buffers) {
            if (current?.buffers !== buffers) {
                current?.bound.destroy();
                const mods = buffers.mods;
                const bound = adaln.bind({
                    rows,
                    x: buffers.x,
                    out: buffers.out,
                    split,
                    a: { buffer: mods, shift: 0, scale: width },
                    b: { buffer: mods, shift: 2 * width, scale: 3 * width },
                });
                current = { buffers, bound };
            }
            const pass = encoder.beginComputePass({ label: 'adaln' });
            current.bound.dispatch(pass);
            pass.end();
        },
        destroy() {
            current?.bound.destroy();
        },
    };
}

/**
 * A q/k norm + RoPE case (builder/check/kernel_lab/qk_norm_rope.py): the output is q, k and v one after the other;
 * the kernel writes q into it and k and v into buffers of their own, copied after q.
 * @param {GPUDevice} device
 * @param {LabCase & {dtype: 'f16' | 'f32', variant: string}} kase
 * @returns {Promise<LabKernel>}
 */
async function labQkNormRope(device, kase) {
    const { tokens, heads, headDim, split } = kase.shape;
    const kernel = await createQkNormRope(device, { heads, headDim, eps: 1e-6, activation: kase.dtype });
    const bytes = heads * tokens * headDim * (kase.dtype === 'f16' ? 2 : 4);
    const [k, v] = [0, 1].map(() =>
        device.createBuffer({
            size: Math.ceil(bytes / 16) * 16,
            usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC,
        }),
    );
    const inner = heads * headDim;
    /** @type {{buffers: Record<string, GPUBuffer>, bound: {dispatch: (pass: GPUComputePassEncoder) => void, destroy: () => void}} | null} */
    let current = null;
    return {
        variant: 'plain',
        flops: 12 * tokens * inner,
        record(encoder, /** @type {Record<string, GPUBuffer>} */ buffers) {
            if (current?.buffers !== buffers) {
                current?.bound.destroy();
                const bound = kernel.bind({
                    tokens,
                    qkv: buffers.qkv,
                    rowStride: 3 * inner,
                    columns: { q: 0, k: inner, v: 2 * inner },
                    norms: buffers.norms,
                    split,
                    rope: buffers.rope,
                    q: buffers.out,
                    k,
                    v,
                });
                current = { buffers, bound };
            }
            const pass = encoder.beginComputePass({ label: 'qk_norm_rope' });
            current.bound.dispatch(pass);
            pass.end();
            encoder.copyBufferToBuffer(k, 0, buffers.out, bytes, bytes);
            encoder.copyBufferToBuffer(v, 0, buffers.out, 2 * bytes, bytes);
        },
        destroy() {
            current?.bound.destroy();
            k.destroy();
            v.destroy();
        },
    };
}

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
