// @ts-check
/**
 * @file The linear layer for every adapter: a shared-memory tiled y = x·Wᵀ over 4-bit weights, float32 accumulate,
 * with no optional GPU feature (shader-f16 only when the activations are float16). It is the path SwiftShader runs,
 * and what adapters without subgroup matrices run when the int8 path (kernels/linear_int8.js) is not chosen.
 *
 * A workgroup of 16×16 threads computes a 64×64 tile of dot products (each thread 4×4, strided by 16 so its reads
 * of workgroup memory do not collide), one quantisation block (K = 32) at a time: the block of x and the block of
 * W, expanded to float32 as w = (q − 8) · scale, are staged in workgroup memory. For swiglu the 64 columns are 32
 * output columns' a rows then their b rows, so each thread holds both halves of the values it finishes.
 *
 * The same kernel reads dense float32 weights (`weights: 'f32'`: an fp32 graph's MatMul B, [K, N] row-major, so
 * weight row n is column n of B, `w_stride` = N apart): the fp32 graphs' linears, and the small time and
 * modulation linears of graphs that keep them in float32.
 * @module kernels/linear_tiled
 */

import { Q4_BLOCK, q4ReadWgsl } from './q4_weights.js';
import { BINDING, PARAMS_WGSL, epilogueWgsl } from './linear_epilogue.js';

/** Output rows per workgroup. */
export const TILE_M = 64;
/** Dot-product columns per workgroup (output columns, or for swiglu twice the output columns). */
export const TILE_N = 64;

/**
 * @typedef {import('./linear_epilogue.js').Epilogue} Epilogue
 * @typedef {import('./linear_epilogue.js').FloatType} FloatType
 * @typedef {import('./q4_weights.js').ScaleType} ScaleType
 * @typedef {'q4' | 'f32'} WeightFormat  4-bit MatMulNBits blocks, or a dense float32 matrix [K, N].
 */

// Staging tile column r's weights for k = block · 32 + part · 8 + t, t = 0..7: from a 4-bit block, or dense.
const STAGE_Q4 = /* wgsl */ `var word = 0u;
        var scale = 0.0;
        if (wrow.y == 1u) {
            word = q4_word(wrow.x, block, part);
            scale = q4_scale(wrow.x, block);
        }
        for (var t = 0u; t < 8u; t++) {
            ws[r * STRIDE + part * 8u + t] = f32(q4_value(word, t)) * scale;
        }`;
const STAGE_DENSE = /* wgsl */ `for (var t = 0u; t < 8u; t++) {
            var w = 0.0;
            if (wrow.y == 1u) { w = w_dense[(block * BK + part * 8u + t) * params.w_stride + wrow.x]; }
            ws[r * STRIDE + part * 8u + t] = w;
        }`;

/**
 * The tiled kernel's WGSL.
 * @param {{epilogue: Epilogue, activation: FloatType, output: FloatType, scales: ScaleType, weights?: WeightFormat}}
 *   variant
 * @returns {string}
 */
export function tiledWgsl({ epilogue, activation, output, scales, weights = 'q4' }) {
    const f16 = activation === 'f16' || output === 'f16';
    const swiglu = epilogue.kind === 'swiglu';
    return /* wgsl */ `${f16 ? 'enable f16;' : ''}
${PARAMS_WGSL}
@group(0) @binding(1) var<storage, read> x: array<${activation}>;
${
    weights === 'q4'
        ? q4ReadWgsl({ scales, packedBinding: BINDING.packed, scalesBinding: BINDING.scales })
        : `@group(0) @binding(${BINDING.packed}) var<storage, read> w_dense: array<f32>;`
}
${epilogueWgsl({ epilogue, activation, output })}

const BM = ${TILE_M}u;
const BN = ${TILE_N}u;
const BK = ${Q4_BLOCK}u;
const STRIDE = BK + 1u;  // padded rows: the 16 threads reading 16 different rows hit 16 different banks
// Output columns per workgroup: for swiglu, columns 0..31 of the tile are the a rows, 32..63 the b rows.
const COLS = ${swiglu ? 'BN / 2u' : 'BN'};

var<workgroup> xs: array<f32, BM * STRIDE>;
var<workgroup> ws: array<f32, BN * STRIDE>;

// The weight row of tile column c when the workgroup's first output column is col0, and whether it exists.
fn tile_row(col0: u32, c: u32) -> vec2<u32> {
    let j = col0 + (c % COLS);
    let first = select(params.row_b, params.row_a, c < COLS);
    return vec2<u32>(first + j, u32(j < params.n));
}

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let m0 = wg.y * BM;
    let col0 = wg.x * COLS;
    // Loading: thread li stages 8 values of tile row li / 4 (x) and word li % 4 of tile column li / 4 (W).
    let r = li / 4u;
    let part = li % 4u;
    let xm = m0 + r;
    let wrow = tile_row(col0, r);
    var acc: array<array<f32, 4>, 4>;
    for (var block = 0u; block < params.k_blocks; block++) {
        let xk = block * BK + part * 8u;
        for (var t = 0u; t < 8u; t++) {
            var v = 0.0;
            if (xm < params.m) { v = f32(x[xm * params.k + xk + t]); }
            xs[r * STRIDE + part * 8u + t] = v;
        }
${weights === 'q4' ? STAGE_Q4 : STAGE_DENSE}
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            var a: array<f32, 4>;
            var w: array<f32, 4>;
            for (var i = 0u; i < 4u; i++) { a[i] = xs[(lid.y + 16u * i) * STRIDE + kk]; }
            for (var j = 0u; j < 4u; j++) { w[j] = ws[(lid.x + 16u * j) * STRIDE + kk]; }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) { acc[i][j] += a[i] * w[j]; }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let m = m0 + lid.y + 16u * i;
        ${
            swiglu
                ? `for (var j = 0u; j < 2u; j++) { finish(m, col0 + lid.x + 16u * j, acc[i][j], acc[i][j + 2u]); }`
                : `for (var j = 0u; j < 4u; j++) { finish(m, col0 + lid.x + 16u * j, acc[i][j], 0.0); }`
        }
    }
}
`;
}

/**
 * Workgroups for `m` output rows and `n` output columns.
 * @param {{m: number, n: number, swiglu: boolean}} shape
 * @returns {[number, number]}
 */
export function tiledGrid({ m, n, swiglu }) {
    return [Math.ceil(n / (swiglu ? TILE_N / 2 : TILE_N)), Math.ceil(m / TILE_M)];
}
