// @ts-check
/**
 * @file What the int8 linear paths share: the kernel that quantises activations to int8, one scale per row, and the
 * WGSL that expands 4-bit weight rows to int8 with one power-of-two scale per row. The int8 GEMMs
 * (kernels/linear_dp4a.js, kernels/linear_int8_matrix.js) sum exact int32 products of the two and scale once in
 * the epilogue: both compute the same numbers, bit for bit, which the numpy model
 * (builder/check/kernel_lab/linear_model.py) states step by step.
 *
 * Why one scale per row and not per block of 32 (onnxruntime's accuracy_level 4): the int8 matrix units sum whole
 * 16×16×32 products in registers the shader cannot scale element by element, so every scale must factor out of
 * the K sum: s_x per activation row, s_w per weight row. The 4-bit blocks keep their own scales by expanding each
 * value to round((q − 8) · scale_b / s_w); s_w is a power of two, so that division is exact and the expansion is
 * the same on every GPU.
 *
 * Scratch: the quantised activations (m × k bytes, as u32 words of four) and their scales (m float32), in one
 * buffer the caller may share between linears.
 * @module kernels/linear_int8
 */

import { PARAMS_WGSL } from './linear_epilogue.js';

/** Binding numbers of the int8 inputs, beside kernels/linear_epilogue.js's BINDING. */
export const INT8_BINDING = Object.freeze({ x: 1, rowScales: 7, quantised: 8 });

/** Threads per row of the quantiser. */
const QUANTISE_THREADS = 256;

/**
 * Where the quantised activations and their scales lie in a scratch buffer, for `m` rows of `k`.
 * @param {{m: number, k: number, alignment: number}} shape  `alignment`: the device's
 *   minStorageBufferOffsetAlignment.
 * @returns {{quantisedBytes: number, scalesOffset: number, scalesBytes: number, bytes: number}}
 */
export function int8Scratch({ m, k, alignment }) {
    const quantisedBytes = m * k;
    const scalesOffset = Math.ceil(quantisedBytes / alignment) * alignment;
    const scalesBytes = Math.max(16, m * 4);
    return { quantisedBytes, scalesOffset, scalesBytes, bytes: scalesOffset + scalesBytes };
}

/**
 * WGSL of the quantiser: one workgroup per row m writes q_x = clamp(round(x · (127 / max|x|)), ±127) as packed
 * int8 words and s_x = max|x| · (1/127). Dispatch (m) workgroups.
 * @param {{activation: 'f32' | 'f16'}} variant
 * @returns {string}
 */
export function quantiseWgsl({ activation }) {
    return /* wgsl */ `${activation === 'f16' ? 'enable f16;' : ''}
${PARAMS_WGSL}
@group(0) @binding(${INT8_BINDING.x}) var<storage, read> x: array<${activation}>;
@group(0) @binding(${INT8_BINDING.rowScales}) var<storage, read_write> row_scales: array<f32>;
@group(0) @binding(${INT8_BINDING.quantised}) var<storage, read_write> quantised: array<u32>;

const THREADS = ${QUANTISE_THREADS}u;
var<workgroup> partial: array<f32, THREADS>;

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let m = wg.x;
    let base = m * params.k;
    var top = 0.0;
    for (var k = li; k < params.k; k += THREADS) { top = max(top, abs(f32(x[base + k]))); }
    partial[li] = top;
    workgroupBarrier();
    for (var half = THREADS / 2u; half > 0u; half /= 2u) {
        if (li < half) { partial[li] = max(partial[li], partial[li + half]); }
        workgroupBarrier();
    }
    top = partial[0];
    let inverse = select(0.0, 127.0 / top, top > 0.0);
    let words = params.k / 4u;
    for (var w = li; w < words; w += THREADS) {
        let at = base + 4u * w;
        let v = vec4<f32>(f32(x[at]), f32(x[at + 1u]), f32(x[at + 2u]), f32(x[at + 3u]));
        quantised[m * words + w] = pack4xI8(vec4<i32>(clamp(round(v * inverse), vec4(-127.0), vec4(127.0))));
    }
    if (li == 0u) { row_scales[m] = top * (1.0 / 127.0); }
}
`;
}

/**
 * WGSL (after kernels/q4_weights.js's q4ReadWgsl): `row_exponent(row)`, the exponent e of weight row `row`'s int8
 * scale 2^e, the smallest with max_b |scale_b| · 8/127 ≤ 2^e (so |q − 8| · |scale_b| / 2^e ≤ 127), and
 * `expand_word(word, ratio)`, the 8 values of a packed word as two words of int8: round((q − 8) · ratio) with
 * ratio = scale_b · 2^−e.
 */
export const EXPAND_WGSL = /* wgsl */ `
fn row_exponent(row: u32) -> i32 {
    var top = 0.0;
    for (var block = 0u; block < params.k_blocks; block++) { top = max(top, abs(q4_scale(row, block))); }
    let parts = frexp(top * (8.0 / 127.0));
    // target = fract · 2^exp with fract in [0.5, 1): an exact power of two needs one less.
    return select(parts.exp, parts.exp - 1, parts.fract == 0.5);
}

fn expand_word(word: u32, ratio: f32) -> vec2<u32> {
    let low = vec4<f32>(f32(q4_value(word, 0u)), f32(q4_value(word, 1u)), f32(q4_value(word, 2u)),
                        f32(q4_value(word, 3u)));
    let high = vec4<f32>(f32(q4_value(word, 4u)), f32(q4_value(word, 5u)), f32(q4_value(word, 6u)),
                         f32(q4_value(word, 7u)));
    return vec2<u32>(pack4xI8(vec4<i32>(round(low * ratio))), pack4xI8(vec4<i32>(round(high * ratio))));
}
`;
