// @ts-check
/**
 * @file The plainest linear: one thread an output value, its dot product summed in float32 straight from the weight
 * (4-bit blocks, or a dense float32 matrix), no workgroup memory, no unrolled tile. It is what a linear over one row
 * takes (the time embedding and the modulations: each weight is read once whatever the kernel, and a 64×64 tile
 * would leave 63 of its 64 rows idle), and the fp32 graphs' linears, whose dense weights exist for exact tests at
 * small sizes. It compiles in a fraction of the tiled kernel's time on a software adapter (SwiftShader unrolls the
 * tile's loops into thousands of instructions: seconds per pipeline).
 * @module kernels/linear_simple
 */

import { q4ReadWgsl } from './q4_weights.js';
import { BINDING, PARAMS_WGSL, epilogueWgsl } from './linear_epilogue.js';

/** Output columns per workgroup. */
const COLUMNS = 64;

/**
 * @typedef {import('./linear_epilogue.js').Epilogue} Epilogue
 * @typedef {import('./linear_epilogue.js').FloatType} FloatType
 * @typedef {import('./q4_weights.js').ScaleType} ScaleType
 * @typedef {import('./linear_tiled.js').WeightFormat} WeightFormat
 */

/**
 * The kernel's WGSL.
 * @param {{epilogue: Epilogue, activation: FloatType, output: FloatType, scales: ScaleType, weights?: WeightFormat}}
 *   variant
 * @returns {string}
 */
export function simpleWgsl({ epilogue, activation, output, scales, weights = 'q4' }) {
    const f16 = activation === 'f16' || output === 'f16';
    const swiglu = epilogue.kind === 'swiglu';
    const dot =
        weights === 'q4'
            ? /* wgsl */ `fn dot_row(m: u32, row: u32) -> f32 {
    var acc = 0.0;
    for (var block = 0u; block < params.k_blocks; block++) {
        let scale = q4_scale(row, block);
        var part = 0.0;
        for (var i = 0u; i < 4u; i++) {
            let word = q4_word(row, block, i);
            let at = m * params.k + block * 32u + i * 8u;
            for (var t = 0u; t < 8u; t++) { part += f32(x[at + t]) * f32(q4_value(word, t)); }
        }
        acc += part * scale;
    }
    return acc;
}`
            : /* wgsl */ `fn dot_row(m: u32, row: u32) -> f32 {
    var acc = 0.0;
    for (var c = 0u; c < params.k; c++) { acc += f32(x[m * params.k + c]) * w_dense[c * params.w_stride + row]; }
    return acc;
}`;
    return /* wgsl */ `${f16 ? 'enable f16;' : ''}
${PARAMS_WGSL}
@group(0) @binding(1) var<storage, read> x: array<${activation}>;
${
    weights === 'q4'
        ? q4ReadWgsl({ scales, packedBinding: BINDING.packed, scalesBinding: BINDING.scales })
        : `@group(0) @binding(${BINDING.packed}) var<storage, read> w_dense: array<f32>;`
}
${epilogueWgsl({ epilogue, activation, output })}

${dot}

@compute @workgroup_size(${COLUMNS})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let j = wg.x * ${COLUMNS}u + li;
    let m = wg.y;
    if (j >= params.n) { return; }
    let a = dot_row(m, params.row_a + j);
    ${swiglu ? 'finish(m, j, a, dot_row(m, params.row_b + j));' : 'finish(m, j, a, 0.0);'}
}
`;
}

/**
 * Workgroups for `m` output rows and `n` output columns.
 * @param {{m: number, n: number}} shape
 * @returns {[number, number]}
 */
export function simpleGrid({ m, n }) {
    return [Math.ceil(n / COLUMNS), m];
}
