// @ts-check
/**
 * @file The int8 linear without matrix units: int8 activations (kernels/linear_int8.js's quantiser) × the 4-bit
 * weights expanded to int8 in workgroup memory, summed four products at a time with dot4I8Packed into int32, scaled
 * once in the epilogue. Its numbers are the int8 subgroup-matrix path's, bit for bit, on any adapter with
 * WGSL's packed_4x8_integer_dot_product (SwiftShader included), so the suite checks the int8 numerics exactly.
 *
 * The tiling is kernels/linear_tiled.js's: 16×16 threads, a 64×64 tile, each thread 4×4 dot products strided by 16,
 * one block (K = 32, 8 words) a step; the workgroup first finds the int8 scale exponent of its 64 weight rows.
 * @module kernels/linear_dp4a
 */

import { q4ReadWgsl } from './q4_weights.js';
import { BINDING, PARAMS_WGSL, epilogueWgsl } from './linear_epilogue.js';
import { EXPAND_WGSL, INT8_BINDING } from './linear_int8.js';
import { TILE_M, TILE_N } from './linear_tiled.js';

/**
 * @typedef {import('./linear_epilogue.js').Epilogue} Epilogue
 * @typedef {import('./linear_epilogue.js').FloatType} FloatType
 * @typedef {import('./q4_weights.js').ScaleType} ScaleType
 */

/**
 * The DP4A kernel's WGSL; it reads the quantised activations at binding 1 and their scales at binding 7.
 * @param {{epilogue: Epilogue, activation: FloatType, output: FloatType, scales: ScaleType}} variant
 * @returns {string}
 */
export function dp4aWgsl({ epilogue, activation, output, scales }) {
    const f16 = activation === 'f16' || output === 'f16';
    const swiglu = epilogue.kind === 'swiglu';
    return /* wgsl */ `${f16 ? 'enable f16;' : ''}
${PARAMS_WGSL}
@group(0) @binding(${INT8_BINDING.x}) var<storage, read> quantised: array<u32>;
@group(0) @binding(${INT8_BINDING.rowScales}) var<storage, read> row_scales: array<f32>;
${q4ReadWgsl({ scales, packedBinding: BINDING.packed, scalesBinding: BINDING.scales })}
${EXPAND_WGSL}
${epilogueWgsl({ epilogue, activation, output })}

const BM = ${TILE_M}u;
const BN = ${TILE_N}u;
const WORDS = 8u;  // one block of 32 int8 values
const STRIDE = WORDS + 1u;
const COLS = ${swiglu ? 'BN / 2u' : 'BN'};

var<workgroup> xs: array<u32, BM * STRIDE>;
var<workgroup> ws: array<u32, BN * STRIDE>;
var<workgroup> exponents: array<i32, BN>;

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
    if (li < BN) {
        let row = tile_row(col0, li);
        exponents[li] = select(0, row_exponent(row.x), row.y == 1u);
    }
    workgroupBarrier();
    // Loading: thread li stages words 2·part, 2·part + 1 of tile row r of x, and expands word \`part\` of weight
    // row r's block into the same two words of W.
    let r = li / 4u;
    let part = li % 4u;
    let xm = m0 + r;
    let wrow = tile_row(col0, r);
    let words = params.k / 4u;
    let shift = -exponents[r];
    var acc: array<array<i32, 4>, 4>;
    for (var block = 0u; block < params.k_blocks; block++) {
        for (var t = 0u; t < 2u; t++) {
            var v = 0u;
            if (xm < params.m) { v = quantised[xm * words + block * WORDS + 2u * part + t]; }
            xs[r * STRIDE + 2u * part + t] = v;
        }
        var expanded = vec2<u32>(0u, 0u);
        if (wrow.y == 1u) {
            expanded = expand_word(q4_word(wrow.x, block, part), ldexp(q4_scale(wrow.x, block), shift));
        }
        ws[r * STRIDE + 2u * part] = expanded.x;
        ws[r * STRIDE + 2u * part + 1u] = expanded.y;
        workgroupBarrier();
        for (var kw = 0u; kw < WORDS; kw++) {
            var a: array<u32, 4>;
            var w: array<u32, 4>;
            for (var i = 0u; i < 4u; i++) { a[i] = xs[(lid.y + 16u * i) * STRIDE + kw]; }
            for (var j = 0u; j < 4u; j++) { w[j] = ws[(lid.x + 16u * j) * STRIDE + kw]; }
            for (var i = 0u; i < 4u; i++) {
                for (var j = 0u; j < 4u; j++) { acc[i][j] += dot4I8Packed(a[i], w[j]); }
            }
        }
        workgroupBarrier();
    }
    var scale: array<f32, 4>;
    for (var j = 0u; j < 4u; j++) { scale[j] = ldexp(1.0, exponents[lid.x + 16u * j]); }
    for (var i = 0u; i < 4u; i++) {
        let m = m0 + lid.y + 16u * i;
        var sx = 0.0;
        if (m < params.m) { sx = row_scales[m]; }
        var y: array<f32, 4>;
        for (var j = 0u; j < 4u; j++) { y[j] = f32(acc[i][j]) * sx * scale[j]; }
        ${
            swiglu
                ? `for (var j = 0u; j < 2u; j++) { finish(m, col0 + lid.x + 16u * j, y[j], y[j + 2u]); }`
                : `for (var j = 0u; j < 4u; j++) { finish(m, col0 + lid.x + 16u * j, y[j], 0.0); }`
        }
    }
}
`;
}
