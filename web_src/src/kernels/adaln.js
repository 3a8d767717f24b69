// @ts-check
/**
 * @file AdaLN: a LayerNorm without affine parameters followed by the AdaLN modulation, in one kernel:
 * out = LN(x) · (1 + scale) + shift, as every transformer block and the final norm of FLUX.2 [klein] compute it
 * (diffusers' `norm(h) * (1 + scale_msa) + shift_msa`; the ONNX graph's LayerNormalization, Add, Mul, Add).
 *
 * One workgroup a row: the mean, then the variance around it (two passes over the row, so no cancellation), in
 * float32 from the float32 residual stream; the output in the activation type. Rows before `split` take their
 * shift and scale from modulation A, the others from B: a double block normalises its text rows (modulated by the
 * text stream's vectors) and its image rows (the image stream's) in one dispatch.
 * @module kernels/adaln
 */

import { computePipeline, uniformBuffer } from './compile.js';

/** Threads per row. */
const THREADS = 128;

/** @typedef {'f32' | 'f16'} FloatType */

/**
 * @typedef {Object} Modulation  Where shift and scale lie in a buffer of float32 modulation vectors (elements).
 * @property {GPUBuffer} buffer
 * @property {number} shift
 * @property {number} scale
 */

/**
 * @typedef {Object} AdaLNBuffers
 * @property {number} rows  Rows normalised.
 * @property {GPUBuffer} x  float32 rows of `width`.
 * @property {number} [xRow]  The first row of x read (0 by default).
 * @property {GPUBuffer} out  Rows of `width` of the activation type.
 * @property {number} [outRow]  Where the first output row goes (0 by default).
 * @property {number} [split]  Rows [0, split) use `a`, the rest `b` (`rows` by default: all use `a`).
 * @property {Modulation} a
 * @property {Modulation} [b]
 */

/**
 * The WGSL.
 * @param {FloatType} activation  The output's type.
 * @returns {string}
 */
export function adalnWgsl(activation) {
    return /* wgsl */ `${activation === 'f16' ? 'enable f16;' : ''}
struct Params {
    rows: u32, width: u32, x_row: u32, out_row: u32,
    split: u32, shift_a: u32, scale_a: u32, shift_b: u32,
    scale_b: u32, eps: f32, pad0: u32, pad1: u32,
}
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<${activation}>;
@group(0) @binding(3) var<storage, read> mod_a: array<f32>;
@group(0) @binding(4) var<storage, read> mod_b: array<f32>;

const THREADS = ${THREADS}u;
var<workgroup> partial: array<f32, THREADS>;

fn row_sum(li: u32, value: f32) -> f32 {
    partial[li] = value;
    workgroupBarrier();
    for (var half = THREADS / 2u; half > 0u; half /= 2u) {
        if (li < half) { partial[li] += partial[li + half]; }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let row = wg.x + wg.y * 65535u;
    if (row >= params.rows) { return; }
    let width = params.width;
    let base = (params.x_row + row) * width;
    var sum = 0.0;
    for (var j = li; j < width; j += THREADS) { sum += x[base + j]; }
    let mean = row_sum(li, sum) / f32(width);
    var squares = 0.0;
    for (var j = li; j < width; j += THREADS) {
        let d = x[base + j] - mean;
        squares += d * d;
    }
    let rstd = inverseSqrt(row_sum(li, squares) / f32(width) + params.eps);
    let at = (params.out_row + row) * width;
    if (row < params.split) {
        for (var j = li; j < width; j += THREADS) {
            let n = (x[base + j] - mean) * rstd;
            out[at + j] = ${activation}(n * (1.0 + mod_a[params.scale_a + j]) + mod_a[params.shift_a + j]);
        }
    } else {
        for (var j = li; j < width; j += THREADS) {
            let n = (x[base + j] - mean) * rstd;
            out[at + j] = ${activation}(n * (1.0 + mod_b[params.scale_b + j]) + mod_b[params.shift_b + j]);
        }
    }
}
`;
}

/**
 * Compile the kernel once for rows of `width`; `bind` fixes the buffers of one use.
 * @param {GPUDevice} device
 * @param {{width: number, eps: number, activation: FloatType}} spec
 * @returns {Promise<{bind: (b: AdaLNBuffers) => {dispatch: (pass: GPUComputePassEncoder) => void,
 *   destroy: () => void}}>}
 */
export async function createAdaLN(device, { width, eps, activation }) {
    const label = `adaln/${activation}`;
    const pipeline = await computePipeline(device, label, adalnWgsl(activation));
    return {
        bind(b) {
            const a = b.a;
            const other = b.b ?? a;
            const split = b.split ?? b.rows;
            const words = new ArrayBuffer(48);
            new Uint32Array(words, 0, 9).set([
                b.rows,
                width,
                b.xRow ?? 0,
                b.outRow ?? 0,
                split,
                a.shift,
                a.scale,
                other.shift,
                other.scale,
            ]);
            new Float32Array(words, 36, 1)[0] = eps;
            const params = uniformBuffer(device, `${label}/params`, words);
            const group = device.createBindGroup({
                label,
                layout: pipeline.getBindGroupLayout(0),
                entries: [params, b.x, b.out, a.buffer, other.buffer].map((buffer, binding) => ({
                    binding,
                    resource: { buffer },
                })),
            });
            // One workgroup a row; past 65535 rows the grid folds into a second dimension.
            const grid = [Math.min(b.rows, 65535), Math.ceil(b.rows / 65535)];
            return {
                dispatch(pass) {
                    pass.setPipeline(pipeline);
                    pass.setBindGroup(0, group);
                    pass.dispatchWorkgroups(grid[0], grid[1]);
                },
                destroy() {
                    params.destroy();
                },
            };
        },
    };
}
