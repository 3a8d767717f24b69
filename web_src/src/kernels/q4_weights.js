// @ts-check
/**
 * @file The 4-bit weight layout the linear kernels read: com.microsoft.MatMulNBits as `klein-web convert` writes it
 * (onnxruntime's MatMulNBitsQuantizer, symmetric, block 32), straight from the GPU buffers the app streams it into
 * (runtime/gpu_weights.js), and the WGSL that reads one block of it.
 *
 * For y = x·Wᵀ with W of N rows (output features) × K columns (input features):
 * - `packed`: uint8 [N, K/32, 16]: the 32 values of block b of row n are bytes (n·K/32 + b)·16 … +15, two a byte,
 *   low nibble first, so the little-endian u32 word i of a block holds values 8i … 8i+7, value t in bits 4t … 4t+3;
 * - `scales`: float32 (q4 graphs) or float16 (q4f16 graphs) [N, K/32];
 * - no zero points: symmetric blocks use MatMulNBits' default, 8, so w = (q − 8) · scale.
 * @module kernels/q4_weights
 */

/** Values per quantisation block (the converter's Q4_BLOCK_SIZE). */
export const Q4_BLOCK = 32;
/** u32 words per block: 32 values of 4 bits. */
export const BLOCK_WORDS = 4;

/**
 * @typedef {'f32' | 'f16'} ScaleType  The scales' storage type: float32 in q4 graphs, float16 in q4f16 ones.
 */

/**
 * @typedef {Object} Q4Weight  One MatMulNBits weight, as two GPU buffers of runtime/gpu_weights.js.
 * @property {GPUBuffer} packed  The `…_Q4` initializer.
 * @property {GPUBuffer} scales  The `…_scales` initializer.
 */

/**
 * Bytes of each buffer of an N×K weight, and a clear error when a shape cannot be read as blocks.
 * @param {{n: number, k: number, scales: ScaleType}} shape
 * @returns {{packedBytes: number, scaleBytes: number, kBlocks: number}}
 */
export function q4Sizes({ n, k, scales }) {
    if (!Number.isInteger(n) || n < 1 || !Number.isInteger(k) || k < Q4_BLOCK || k % Q4_BLOCK)
        throw new Error(`A 4-bit weight of ${n}×${k}: rows must be a positive whole number, columns a multiple of 32.`);
    const kBlocks = k / Q4_BLOCK;
    return { packedBytes: n * kBlocks * 16, scaleBytes: n * kBlocks * (scales === 'f16' ? 2 : 4), kBlocks };
}

/**
 * WGSL: the two weight bindings and `q4_word(row, block, i)` / `q4_scale(row, block)`, reading block `block` of
 * weight row `row`. float16 scales are read as u32 pairs and unpacked, so q4f16 weights need no shader-f16 here.
 * @param {{scales: ScaleType, packedBinding: number, scalesBinding: number}} options
 * @returns {string}
 */
export function q4ReadWgsl({ scales, packedBinding, scalesBinding }) {
    const scaleRead =
        scales === 'f16'
            ? `let at = row * params.k_blocks + block;
    return unpack2x16float(q4_scales[at >> 1u])[at & 1u];`
            : `return q4_scales[row * params.k_blocks + block];`;
    return /* wgsl */ `
@group(0) @binding(${packedBinding}) var<storage, read> q4_packed: array<u32>;
@group(0) @binding(${scalesBinding}) var<storage, read> q4_scales: array<${scales === 'f16' ? 'u32' : 'f32'}>;

// Word i (0..3) of block \`block\` of weight row \`row\`: values 8i..8i+7, value t in bits 4t..4t+3.
fn q4_word(row: u32, block: u32, i: u32) -> u32 {
    return q4_packed[(row * params.k_blocks + block) * ${BLOCK_WORDS}u + i];
}

fn q4_scale(row: u32, block: u32) -> f32 {
    ${scaleRead}
}

// Value t (0..7) of a word, with the zero point 8 taken off: -8..7.
fn q4_value(word: u32, t: u32) -> i32 {
    return i32((word >> (4u * t)) & 15u) - 8;
}
`;
}
