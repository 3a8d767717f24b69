// @ts-check
/**
 * @file The linear layer on the subgroup matrix units (chromium-experimental-subgroup-matrix), in two kinds:
 * - `int8`: int8 activations (kernels/linear_int8.js's quantiser) × the 4-bit weights expanded to int8, on the
 *   i8→i32 16×16×32 configuration: exact int32 sums, the same numbers as kernels/linear_dp4a.js;
 * - `f16`: float16 activations × the weights expanded to float16 (w = f16((q − 8) · scale)), on the f16→f32
 *   16×16×16 configuration.
 *
 * Shape (docs/kernels.md has the measurements behind it): 4 subgroups of 32 lanes in a 2×2 grid, each holding 4×4
 * result fragments of 16×16, so a workgroup computes a 128×128 tile; x and W are staged through workgroup memory in
 * padded rows (stride + 4 words), 64 int8 or 32 f16 values of K a step, and the fragments are loaded from there.
 * Each thread of the workgroup stages one weight row: it reads that row's 4-bit blocks and expands them. The
 * results go through workgroup memory once, fragment by fragment, to the shared epilogue.
 *
 * The 8-bit fragments are loaded from `array<i32>`, four values a word; Chromium 156 counts their offsets and
 * strides in 32-bit words where the proposal reads as bytes, so `unit` says which (kernels/linear.js finds out
 * with a small product at start-up).
 * @module kernels/linear_matrix
 */

import { q4ReadWgsl } from './q4_weights.js';
import { BINDING, PARAMS_WGSL, epilogueWgsl } from './linear_epilogue.js';
import { EXPAND_WGSL, INT8_BINDING } from './linear_int8.js';

/** Lanes per subgroup the layout assumes. */
export const MATRIX_SUBGROUP = 32;
/** Output rows and dot-product columns per workgroup. */
export const MATRIX_TILE = 128;
const THREADS = 4 * MATRIX_SUBGROUP;
const PAD_WORDS = 4;

/**
 * @typedef {import('./linear_epilogue.js').Epilogue} Epilogue
 * @typedef {import('./linear_epilogue.js').FloatType} FloatType
 * @typedef {import('./q4_weights.js').ScaleType} ScaleType
 * @typedef {'words' | 'bytes'} OffsetUnit
 */

/**
 * Workgroup memory the kernel declares, in bytes: a device with less cannot run it.
 * @param {'int8' | 'f16'} kind
 * @returns {number}
 */
export function matrixStorageBytes(kind) {
    // 16 words of K a row (64 int8 or 32 f16 values) and the pad, for x and for W.
    const tiles = 2 * MATRIX_TILE * (16 + PAD_WORDS) * 4;
    const stage = kind === 'f16' ? 4 * 2 * 256 * 4 : 0; // f32 results get a staging area of their own
    return tiles + MATRIX_TILE * 4 + stage;
}

/**
 * @param {{kind: 'int8' | 'f16', epilogue: Epilogue, activation: FloatType, output: FloatType, scales: ScaleType,
 *   unit?: OffsetUnit, sizeControl?: boolean}} variant  `sizeControl`: declare @subgroup_size(32) (the device has
 *   subgroup-size-control); else the adapter's subgroups must all be 32 lanes.
 * @returns {string}
 */
export function matrixWgsl({ kind, epilogue, activation, output, scales, unit = 'words', sizeControl = false }) {
    const int8 = kind === 'int8';
    const swiglu = epilogue.kind === 'swiglu';
    const enables = [
        'enable subgroups;',
        'enable chromium_experimental_subgroup_matrix;',
        sizeControl ? 'enable subgroup_size_control;' : '',
        int8 && activation !== 'f16' && output !== 'f16' ? '' : 'enable f16;',
    ];
    // One K step of the fragments: 32 int8 values (8 words) or 16 f16 values; two steps per staged tile.
    const step = int8 ? 8 : 16;
    const scale = int8 ? (unit === 'words' ? 1 : 4) : 1;
    const element = int8 ? 'i32' : 'f16';
    const left = int8 ? 'subgroup_matrix_left<i8, 32, 16>' : 'subgroup_matrix_left<f16, 16, 16>';
    const right = int8 ? 'subgroup_matrix_right<i8, 16, 32>' : 'subgroup_matrix_right<f16, 16, 16>';
    const result = int8 ? 'subgroup_matrix_result<i32, 16, 16>' : 'subgroup_matrix_result<f32, 16, 16>';
    const zero = int8 ? `${result}(0)` : `${result}(0.0)`;
    const fragments = [0, 1, 2, 3].flatMap((i) => [0, 1, 2, 3].map((j) => [i, j]));
    const multiply = [0, 1]
        .map(
            (kk) => `
        {
            ${[0, 1, 2, 3]
                .map(
                    (i) =>
                        `let a${i} = subgroupMatrixLoad<${left}, row_major>(&xs, ((sm * 64u + ${16 * i}u) * STRIDE + ${kk * step}u) * UNIT, STRIDE * UNIT);`,
                )
                .join('\n            ')}
            ${[0, 1, 2, 3]
                .map(
                    (j) =>
                        `let b${j} = subgroupMatrixLoad<${right}, col_major>(&ws, ((sn * 64u + ${16 * j}u) * STRIDE + ${kk * step}u) * UNIT, STRIDE * UNIT);`,
                )
                .join('\n            ')}
            ${fragments.map(([i, j]) => `c${i}${j} = subgroupMatrixMultiplyAccumulate(a${i}, b${j}, c${i}${j});`).join('\n            ')}
        }`,
        )
        .join('');
    // The epilogue, one fragment (swiglu: its a and b fragments) at a time: stored to the subgroup's staging area,
    // then each lane finishes 8 values.
    const pairs = swiglu
        ? [0, 1, 2, 3].flatMap((i) => [0, 1].map((j) => [i, j, j + 2]))
        : fragments.map(([i, j]) => [i, j, -1]);
    const finishing = pairs
        .map(
            ([i, j, b]) => `
    subgroupMatrixStore<row_major>(&stage, sg * 512u, c${i}${j}, 16u);
    ${b >= 0 ? `subgroupMatrixStore<row_major>(&stage, sg * 512u + 256u, c${i}${b}, 16u);` : ''}
    workgroupBarrier();
    finish_fragment(m0 + sm * 64u + ${16 * i}u, sn * 64u + ${16 * j}u, ${b >= 0 ? `sn * 64u + ${16 * b}u` : '0u'}, sg, lane);
    workgroupBarrier();`,
        )
        .join('');
    return /* wgsl */ `diagnostic(off, chromium.subgroup_matrix_uniformity);
${enables.filter(Boolean).join('\n')}
${PARAMS_WGSL}
${
    int8
        ? `@group(0) @binding(${INT8_BINDING.x}) var<storage, read> quantised: array<vec4<u32>>;
@group(0) @binding(${INT8_BINDING.rowScales}) var<storage, read> row_scales: array<f32>;`
        : `@group(0) @binding(1) var<storage, read> x: array<vec4<${activation}>>;`
}
${q4ReadWgsl({ scales, packedBinding: BINDING.packed, scalesBinding: BINDING.scales })}
${int8 ? EXPAND_WGSL : ''}
${epilogueWgsl({ epilogue, activation, output })}

const TILE = ${MATRIX_TILE}u;
const WORDS = 16u;  // words of K per staged row: 64 int8 or 32 f16 values
const STRIDE = ${int8 ? 'WORDS' : '2u * WORDS'} + ${int8 ? PAD_WORDS : 2 * PAD_WORDS}u;  // in ${element} elements
const UNIT = ${scale}u;  // fragment offsets and strides: ${int8 ? `int8 ${unit}` : 'f16 elements'}
const COLS = ${swiglu ? 'TILE / 2u' : 'TILE'};
const VECS = ${int8 ? 4 : 8}u;  // vec4s of x per staged row: 64 int8 or 32 f16 values

var<workgroup> xs: array<${element}, TILE * STRIDE>;
var<workgroup> ws: array<${element}, TILE * STRIDE>;
var<workgroup> exponents: array<i32, TILE>;
${int8 ? 'alias Stage = i32;' : 'alias Stage = f32;\nvar<workgroup> stage_f32: array<f32, 4u * 512u>;'}

// Output column and weight row of tile column c; for swiglu each subgroup column's 64 are 32 a rows then their
// 32 b rows.
fn tile_column(col0: u32, c: u32) -> vec3<u32> {
    ${
        swiglu
            ? `let j = col0 + (c / 64u) * 32u + (c % 32u);
    let row = select(params.row_b, params.row_a, (c % 64u) < 32u) + j;`
            : `let j = col0 + c;
    let row = params.row_a + j;`
    }
    return vec3<u32>(j, row, u32(j < params.n));
}

fn dot_value(m: u32, c: u32, v: Stage) -> f32 {
    ${
        int8
            ? `var sx = 0.0;
    if (m < params.m) { sx = row_scales[m]; }
    return f32(v) * sx * ldexp(1.0, exponents[c]);`
            : 'return v;'
    }
}

${int8 ? '' : '// f32 results need a staging area of their own: xs holds f16.'}
fn finish_fragment(row0: u32, ca: u32, cb: u32, sg: u32, lane: u32) {
    for (var e = lane * 8u; e < lane * 8u + 8u; e++) {
        let m = row0 + e / 16u;
        let c = ca + e % 16u;
        let column = tile_column(0u, c);
        let a = dot_value(m, c, ${int8 ? 'xs' : 'stage_f32'}[sg * 512u + e]);
        ${
            swiglu
                ? `let b = dot_value(m, cb + e % 16u, ${int8 ? 'xs' : 'stage_f32'}[sg * 512u + 256u + e]);`
                : 'let b = 0.0;'
        }
        finish(m, tile_col0 + column.x, a, b);
    }
}

var<private> tile_col0: u32;

@compute @workgroup_size(${THREADS})${sizeControl ? ` @subgroup_size(${MATRIX_SUBGROUP})` : ''}
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let m0 = wg.y * TILE;
    tile_col0 = wg.x * COLS;
    let sg = li / ${MATRIX_SUBGROUP}u;
    let lane = li % ${MATRIX_SUBGROUP}u;
    let sm = sg / 2u;
    let sn = sg % 2u;
    // Thread li stages weight row \`mine\` (tile column li) for the whole K loop.
    let mine = tile_column(tile_col0, li);
    ${
        int8
            ? `exponents[li] = select(0, row_exponent(mine.y), mine.z == 1u);
    let shift = -exponents[li];`
            : ''
    }
    ${fragments.map(([i, j]) => `var c${i}${j} = ${zero};`).join('\n    ')}
    let x_vecs = params.k / ${int8 ? 16 : 4}u;  // vec4s per row of x
    for (var k0 = 0u; k0 < params.k; k0 += ${int8 ? 64 : 32}u) {
        // x: TILE rows × VECS vec4s, VECS per thread, consecutive threads on consecutive vec4s.
        for (var t = 0u; t < VECS; t++) {
            let f = t * ${THREADS}u + li;
            let r = f / VECS;
            let q = f % VECS;
            var v = ${int8 ? 'vec4<u32>(0u)' : `vec4<${activation}>(0.0)`};
            if (m0 + r < params.m) { v = ${int8 ? 'quantised' : 'x'}[(m0 + r) * x_vecs + k0 / 4u / ${int8 ? 4 : 1}u + q]; }
            ${
                int8
                    ? `for (var e = 0u; e < 4u; e++) { xs[r * STRIDE + q * 4u + e] = bitcast<i32>(v[e]); }`
                    : `for (var e = 0u; e < 4u; e++) { xs[r * STRIDE + q * 4u + e] = f16(v[e]); }`
            }
        }
        // W: this thread's row, ${int8 ? 'two blocks expanded to int8' : 'one block expanded to f16'}.
        ${
            int8
                ? `for (var b = 0u; b < 2u; b++) {
            let block = k0 / 32u + b;
            var ratio = 0.0;
            if (mine.z == 1u) { ratio = ldexp(q4_scale(mine.y, block), shift); }
            for (var part = 0u; part < 4u; part++) {
                var word = 0u;
                if (mine.z == 1u) { word = q4_word(mine.y, block, part); }
                let expanded = expand_word(word, ratio);
                ws[li * STRIDE + b * 8u + part * 2u] = bitcast<i32>(expanded.x);
                ws[li * STRIDE + b * 8u + part * 2u + 1u] = bitcast<i32>(expanded.y);
            }
        }`
                : `{
            let block = k0 / 32u;
            var s = 0.0;
            if (mine.z == 1u) { s = q4_scale(mine.y, block); }
            for (var part = 0u; part < 4u; part++) {
                var word = 0u;
                if (mine.z == 1u) { word = q4_word(mine.y, block, part); }
                for (var t = 0u; t < 8u; t++) { ws[li * STRIDE + part * 8u + t] = f16(f32(q4_value(word, t)) * s); }
            }
        }`
        }
        workgroupBarrier();
        ${multiply}
        workgroupBarrier();
    }
    ${int8 ? '// xs is free now: it stages the results.\n    ' : ''}${finishing.replaceAll('&stage', int8 ? '&xs' : '&stage_f32')}
}
`;
}

/**
 * Workgroups for `m` output rows and `n` output columns.
 * @param {{m: number, n: number, swiglu: boolean}} shape
 * @returns {[number, number]}
 */
export function matrixGrid({ m, n, swiglu }) {
    return [Math.ceil(n / (swiglu ? MATRIX_TILE / 2 : MATRIX_TILE)), Math.ceil(m / MATRIX_TILE)];
}
