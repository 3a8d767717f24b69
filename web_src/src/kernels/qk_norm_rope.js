// @ts-check
/**
 * @file The step between a block's q, k, v projections and its attention: per head, q and k RMS-normalised with
 * their weights (`norm_q`, `norm_k`: x · rsqrt(mean(x²) + eps) · w, float32 statistics, as the graph's
 * SimplifiedLayerNormalization) and rotated by the tokens' RoPE angles (FLUX's interleaved pairs:
 * out[2i] = x[2i]·cos − x[2i+1]·sin, out[2i+1] = x[2i+1]·cos + x[2i]·sin, as com.microsoft.RotaryEmbedding), and v
 * copied, all three from the projections' token-major rows into the [heads, tokens, headDim] layout the attention
 * kernel reads. One dispatch for the three, instead of the graph's reshapes, norms, rotations and transposes.
 *
 * Each lane holds one rotated pair, so a (token, head) takes headDim / 2 lanes (a power of two up to 64); the sums
 * of squares go through workgroup memory. Tokens before `split` take norm weights A (a double block's text tokens:
 * `norm_added_q`, `norm_added_k`), the others B (its image tokens).
 * @module kernels/qk_norm_rope
 */

import { computePipeline, uniformBuffer } from './compile.js';

/** Threads per workgroup. */
const THREADS = 64;

/** @typedef {'f32' | 'f16'} FloatType */

/**
 * @typedef {Object} QkNormRopeBuffers
 * @property {number} tokens
 * @property {GPUBuffer} qkv  Token-major rows of `rowStride` activation values: q at column `q`, k at `k`, v at `v`.
 * @property {number} rowStride
 * @property {{q: number, k: number, v: number}} columns
 * @property {GPUBuffer} norms  float32 [4, headDim]: q and k weights of A, then of B.
 * @property {number} [split]  Tokens [0, split) use the A weights (0 by default: all use B).
 * @property {GPUBuffer} rope  float32 [tokens, headDim / 2, 2]: each pair's cos and sin, token by token.
 * @property {GPUBuffer} q  [heads, tokens, headDim] outputs of the activation type.
 * @property {GPUBuffer} k
 * @property {GPUBuffer} v
 */

/**
 * Whether the kernel handles heads of `headDim` (one lane per pair, the pairs of a head in one workgroup).
 * @param {number} headDim
 * @returns {boolean}
 */
export function qkNormRopeFits(headDim) {
    const pairs = headDim / 2;
    return Number.isInteger(pairs) && pairs >= 1 && pairs <= THREADS && (pairs & (pairs - 1)) === 0;
}

/**
 * The WGSL.
 * @param {{headDim: number, activation: FloatType}} spec
 * @returns {string}
 */
export function qkNormRopeWgsl({ headDim, activation }) {
    const pairs = headDim / 2;
    const T = activation;
    return /* wgsl */ `${activation === 'f16' ? 'enable f16;' : ''}
struct Params {
    tokens: u32, heads: u32, row_stride: u32, split: u32,
    q_col: u32, k_col: u32, v_col: u32, eps: f32,
}
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> qkv: array<${T}>;
@group(0) @binding(2) var<storage, read> norms: array<f32>;
@group(0) @binding(3) var<storage, read> rope: array<vec2<f32>>;
@group(0) @binding(4) var<storage, read_write> q_out: array<vec2<${T}>>;
@group(0) @binding(5) var<storage, read_write> k_out: array<vec2<${T}>>;
@group(0) @binding(6) var<storage, read_write> v_out: array<vec2<${T}>>;

const THREADS = ${THREADS}u;
const PAIRS = ${pairs}u;
const D = ${headDim}u;
var<workgroup> q_sq: array<f32, THREADS>;
var<workgroup> k_sq: array<f32, THREADS>;

fn pair(col: u32, at: u32) -> vec2<f32> {
    return vec2<f32>(f32(qkv[at + col]), f32(qkv[at + col + 1u]));
}

fn rotate(x: vec2<f32>, cs: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(x.x * cs.x - x.y * cs.y, x.y * cs.x + x.x * cs.y);
}

@compute @workgroup_size(THREADS)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let slot = li / PAIRS;
    let p = li % PAIRS;
    let item = (wg.x + wg.y * 65535u) * (THREADS / PAIRS) + slot;
    let live = item < params.tokens * params.heads;
    let token = min(item / params.heads, params.tokens - 1u);
    let head = item % params.heads;
    let at = token * params.row_stride + head * D + 2u * p;
    let q = pair(params.q_col, at);
    let k = pair(params.k_col, at);
    q_sq[li] = dot(q, q);
    k_sq[li] = dot(k, k);
    workgroupBarrier();
    for (var half = PAIRS / 2u; half > 0u; half /= 2u) {
        if (p < half) {
            q_sq[li] += q_sq[li + half];
            k_sq[li] += k_sq[li + half];
        }
        workgroupBarrier();
    }
    let first = slot * PAIRS;
    let q_rstd = inverseSqrt(q_sq[first] / f32(D) + params.eps);
    let k_rstd = inverseSqrt(k_sq[first] / f32(D) + params.eps);
    if (!live) { return; }
    let w = select(2u * D, 0u, token < params.split) + 2u * p;
    let wq = vec2<f32>(norms[w], norms[w + 1u]);
    let wk = vec2<f32>(norms[w + D], norms[w + D + 1u]);
    let cs = rope[token * PAIRS + p];
    let out_at = (head * params.tokens + token) * PAIRS + p;
    q_out[out_at] = vec2<${T}>(rotate(q * q_rstd * wq, cs));
    k_out[out_at] = vec2<${T}>(rotate(k * k_rstd * wk, cs));
    v_out[out_at] = vec2<${T}>(pair(params.v_col, at));
}
`;
}

/**
 * Compile the kernel once for heads of `headDim`; `bind` fixes the buffers of one use.
 * @param {GPUDevice} device
 * @param {{heads: number, headDim: number, eps: number, activation: FloatType}} spec
 * @returns {Promise<{bind: (b: QkNormRopeBuffers) => {dispatch: (pass: GPUComputePassEncoder) => void,
 *   destroy: () => void}}>}
 */
export async function createQkNormRope(device, { heads, headDim, eps, activation }) {
    if (!qkNormRopeFits(headDim))
        throw new RangeError(`q/k norm and RoPE: heads of ${headDim} need a power of two of at most 128.`);
    const label = `qk_norm_rope/${activation}`;
    const pipeline = await computePipeline(device, label, qkNormRopeWgsl({ headDim, activation }));
    return {
        bind(b) {
            const words = new ArrayBuffer(32);
            new Uint32Array(words, 0, 7).set([
                b.tokens,
                heads,
                b.rowStride,
                b.split ?? 0,
                b.columns.q,
                b.columns.k,
                b.columns.v,
            ]);
            new Float32Array(words, 28, 1)[0] = eps;
            const params = uniformBuffer(device, `${label}/params`, words);
            const group = device.createBindGroup({
                label,
                layout: pipeline.getBindGroupLayout(0),
                entries: [params, b.qkv, b.norms, b.rope, b.q, b.k, b.v].map((buffer, binding) => ({
                    binding,
                    resource: { buffer },
                })),
            });
            const workgroups = Math.ceil((b.tokens * heads) / (THREADS / (headDim / 2)));
            const grid = [Math.min(workgroups, 65535), Math.ceil(workgroups / 65535)];
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
