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
};
