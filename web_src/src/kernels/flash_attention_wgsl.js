// @ts-check
/**
 * @file The WGSL of kernels/flash_attention.js: softmax(q·kᵀ·scale)·v over [heads, tokens, headDim] tensors,
 * one pass over the keys with an online softmax, so the [tokens × tokens] scores never reach memory.
 *
 * Two shader families:
 * - tiledShader: no matrix units. A workgroup takes `rows` query rows; each row is shared by 4 lanes, each lane
 *   holding a quarter of the row's q and output (interleaved by vec4, so neighbouring lanes read neighbouring
 *   words of the key tile). Keys and values go through workgroup memory a block at a time. The 4 partial dot
 *   products of a score are summed with subgroupShuffleXor (`subgroups`) or through workgroup memory (plain).
 * - matrixShader: the subgroup-matrix units (f16 → f32, 16×16×16). Each subgroup owns 16 query rows, keeps their q
 *   as 8 left fragments (loaded once through workgroup memory) and their output as 8 fp32 result fragments; a block
 *   of 32 keys and values is staged once per workgroup, the values transposed, so that every fragment is loaded in
 *   the layouts the linear kernels use (left row-major, right column-major). The scores go through workgroup memory for the row maxima; the running maximum moves only when
 *   a row's maximum grows by more than 2⁸ (the probabilities stay ≤ 256, safe in fp16), so the output fragments,
 *   which cannot be scaled row by row in registers, are rescaled through workgroup memory only then.
 * Both compute in fp32 and use exp2 with log2(e) folded into the scale. Every result fragment starts from one zero
 * fragment made with the scalar constructor `(0.0)` before the loop, the form the linear kernels use (a fragment
 * declared in a loop is not re-zeroed in Chromium 156: docs/kernels.md).
 * @module kernels/flash_attention_wgsl
 */

/** Lanes that share a query row in the tiled shaders. */
export const LANES_PER_ROW = 4;

/**
 * @param {number} count
 * @param {(i: number) => string} line
 * @param {string} [joiner]
 * @returns {string}
 */
function unrolled(count, line, joiner = '\n') {
    return Array.from({ length: count }, (_, i) => line(i)).join(joiner);
}

/**
 * @param {{dtype: 'f16' | 'f32', headDim: number, rows: number, keys: number, reduce: 'subgroups' | 'workgroup'}} options
 *   `rows` query rows per workgroup, `keys` per block.
 * @returns {string}
 */
export function tiledShader({ dtype, headDim, rows, keys, reduce }) {
    const lanes = LANES_PER_ROW;
    const vecsPerRow = headDim / 4;
    const vecsPerLane = vecsPerRow / lanes;
    if (!Number.isInteger(vecsPerLane)) throw new RangeError(`headDim ${headDim} must be a multiple of 16`);
    const threads = rows * lanes;
    const sumLanes =
        reduce === 'subgroups'
            ? `        for (var c = 0u; c < BC; c++) {
            s[c] += subgroupShuffleXor(s[c], 1u);
            s[c] += subgroupShuffleXor(s[c], 2u);
        }`
            : `        for (var c = 0u; c < BC; c++) { partial[(row_local * BC + c) * LANES + lane] = s[c]; }
        workgroupBarrier();
        for (var c = 0u; c < BC; c++) {
            let at = (row_local * BC + c) * LANES;
            s[c] = (partial[at] + partial[at + 1u]) + (partial[at + 2u] + partial[at + 3u]);
        }`;
    return `${dtype === 'f16' ? 'enable f16;' : ''}
${reduce === 'subgroups' ? 'enable subgroups;\ndiagnostic(off, subgroup_uniformity);' : ''}
alias T = ${dtype};
const D_VECS: u32 = ${vecsPerRow}u;
const LANES: u32 = ${lanes}u;
const LANE_VECS: u32 = ${vecsPerLane}u;
const BR: u32 = ${rows}u;
const BC: u32 = ${keys}u;
const THREADS: u32 = ${threads}u;
const MASKED: f32 = -1.0e30;

struct Params { tokens: u32, heads: u32, scale_log2: f32, pad: u32, out_row: u32, out_head: u32, out_offset: u32, pad2: u32 }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<T>>;
@group(0) @binding(2) var<storage, read> k: array<vec4<T>>;
@group(0) @binding(3) var<storage, read> v: array<vec4<T>>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<T>>;

var<workgroup> tile: array<vec4<f32>, ${keys * vecsPerRow}>;
${reduce === 'workgroup' ? `var<workgroup> partial: array<f32, ${rows * keys * lanes}>;` : ''}

@compute @workgroup_size(${threads})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let tokens = params.tokens;
    let head_base = wg.y * tokens * D_VECS;
    let row_local = li / LANES;
    let lane = li % LANES;
    let row = wg.x * BR + row_local;
    let q_at = head_base + min(row, tokens - 1u) * D_VECS + lane;
    var qr: array<vec4<f32>, LANE_VECS>;
    var o: array<vec4<f32>, LANE_VECS>;
    for (var j = 0u; j < LANE_VECS; j++) {
        qr[j] = vec4<f32>(q[q_at + j * LANES]) * params.scale_log2;
        o[j] = vec4<f32>(0.0);
    }
    var m = MASKED;
    var l = 0.0;
    var s: array<f32, BC>;
    for (var kb = 0u; kb < tokens; kb += BC) {
        workgroupBarrier();
        for (var i = li; i < BC * D_VECS; i += THREADS) {
            let key = kb + i / D_VECS;
            var x = vec4<f32>(0.0);
            if (key < tokens) { x = vec4<f32>(k[head_base + key * D_VECS + i % D_VECS]); }
            tile[i] = x;
        }
        workgroupBarrier();
        for (var c = 0u; c < BC; c++) {
            var acc = 0.0;
            for (var j = 0u; j < LANE_VECS; j++) { acc += dot(qr[j], tile[c * D_VECS + j * LANES + lane]); }
            s[c] = acc;
        }
${sumLanes}
        var block_max = MASKED;
        for (var c = 0u; c < BC; c++) {
            if (kb + c >= tokens) { s[c] = MASKED; }
            block_max = max(block_max, s[c]);
        }
        let m_new = max(m, block_max);
        let alpha = exp2(m - m_new);
        var sum = 0.0;
        for (var c = 0u; c < BC; c++) {
            s[c] = exp2(s[c] - m_new);
            sum += s[c];
        }
        l = l * alpha + sum;
        m = m_new;
        for (var j = 0u; j < LANE_VECS; j++) { o[j] *= alpha; }
        workgroupBarrier();
        for (var i = li; i < BC * D_VECS; i += THREADS) {
            let key = kb + i / D_VECS;
            var x = vec4<f32>(0.0);
            if (key < tokens) { x = vec4<f32>(v[head_base + key * D_VECS + i % D_VECS]); }
            tile[i] = x;
        }
        workgroupBarrier();
        for (var c = 0u; c < BC; c++) {
            let p = s[c];
            for (var j = 0u; j < LANE_VECS; j++) { o[j] += p * tile[c * D_VECS + j * LANES + lane]; }
        }
    }
    if (row < tokens) {
        let inv = 1.0 / l;
        let out_at = params.out_offset + row * params.out_row + wg.y * params.out_head;
        for (var j = 0u; j < LANE_VECS; j++) {
            out[out_at + j * LANES + lane] = vec4<T>(o[j] * inv);
        }
    }
}
`;
}

/** Keys per block of the matrix shader: two 16-wide score fragments. */
export const MATRIX_KEYS = 32;
/** A row's running maximum (log2 units) moves only when a block's maximum exceeds it by more than this. */
const LAZY_RESCALE_LOG2 = 8;

/**
 * @typedef {Object} MatrixForm  Alternative forms of the matrix shader's operations, each a suspect for its wrong
 *   outputs on Chromium 156 (docs/kernels.md): the lab runs each as a variant of its own.
 * @property {boolean} [pad]  One row stride of slack after every workgroup array that fragments are loaded from or
 *   stored to, in case the bounds check of a fragment counts stride × rows rather than the last element.
 * @property {boolean} [multiply]  Start each score fragment with subgroupMatrixMultiply (no zero accumulator).
 * @property {boolean} [rowMajor]  No column-major loads: keys staged transposed ([headDim][keys]) and values as they
 *   are ([keys][headDim]), both loaded row-major as right operands.
 * @property {boolean} [alwaysRescale]  Move the running maximum whenever a block's maximum exceeds it and rescale
 *   the output fragments on every block after the first (the rescale round trip everywhere).
 * @property {boolean} [barriers]  An explicit workgroupBarrier after the probabilities are written and before each
 *   fragment store into workgroup memory.
 */

/**
 * @param {{headDim: number, subgroups: number, subgroupSize: number, form?: MatrixForm}} options  `subgroups` per
 *   workgroup (16 query rows each); `subgroupSize` the adapter's fixed subgroup size (16, 32 or 64).
 * @returns {string}
 */
export function matrixShader({ headDim, subgroups, subgroupSize, form = {} }) {
    const frags = headDim / 16;
    if (!Number.isInteger(frags)) throw new RangeError(`headDim ${headDim} must be a multiple of 16`);
    const lanesPerRow = subgroupSize / 16;
    if (![1, 2, 4].includes(lanesPerRow)) throw new RangeError(`subgroup size ${subgroupSize} is not 16, 32 or 64`);
    const keys = MATRIX_KEYS;
    const colsPerLane = keys / lanesPerRow;
    const threads = subgroups * subgroupSize;
    const region = 16 * keys; // one subgroup's scores / probabilities: 16 rows × 32 keys
    const left = 'subgroup_matrix_left<f16, 16, 16>';
    const right = 'subgroup_matrix_right<f16, 16, 16>';
    const result = 'subgroup_matrix_result<f32, 16, 16>';
    const acrossLanes = (/** @type {string} */ op, /** @type {string} */ name) =>
        unrolled(
            Math.log2(lanesPerRow),
            (i) => `        ${name} = ${op}(${name}, subgroupShuffleXor(${name}, ${1 << i}u));`,
        );
    // kᵀ as the right operand: keys [keys][headDim] read column-major, or (rowMajor) [headDim][keys] read row-major.
    const kT = (/** @type {number} */ half, /** @type {number} */ kk) =>
        form.rowMajor
            ? `subgroupMatrixLoad<${right}, row_major>(&ks, ${kk * 16 * keys + half * 16}u, KEYS)`
            : `subgroupMatrixLoad<${right}, col_major>(&ks, ${half * 16 * headDim + kk * 16}u, D)`;
    // v as the right operand: values [headDim][keys] read column-major, or (rowMajor) [keys][headDim] row-major.
    const vB = (/** @type {number} */ f, /** @type {number} */ half) =>
        form.rowMajor
            ? `subgroupMatrixLoad<${right}, row_major>(&vs, ${half * 16 * headDim + f * 16}u, D)`
            : `subgroupMatrixLoad<${right}, col_major>(&vs, ${f * 16 * keys + half * 16}u, KEYS)`;
    const firstScore = (/** @type {number} */ half) =>
        form.multiply
            ? `subgroupMatrixMultiply<f32>(q0, ${kT(half, 0)})`
            : `subgroupMatrixMultiplyAccumulate(q0, ${kT(half, 0)}, zero)`;
    const scores = (/** @type {number} */ half) =>
        `        var s${half} = ${firstScore(half)};\n` +
        unrolled(
            frags - 1,
            (i) => `        s${half} = subgroupMatrixMultiplyAccumulate(q${i + 1}, ${kT(half, i + 1)}, s${half});`,
        );
    // Output fragments f and f+1 through the subgroup's 16×32 fp32 region: `body` runs on each lane's part of it.
    const throughRegion = (/** @type {string} */ body, /** @type {boolean} */ reload) =>
        unrolled(
            frags / 2,
            (pair) => `${barrier}        subgroupMatrixStore<row_major>(&ss, region, o${2 * pair}, KEYS);
        subgroupMatrixStore<row_major>(&ss, region + 16u, o${2 * pair + 1}, KEYS);
        workgroupBarrier();
        for (var c = 0u; c < COLS; c++) { let d = ${pair * 32}u + part * COLS + c; ${body} }
        workgroupBarrier();${
            reload
                ? `
        o${2 * pair} = subgroupMatrixLoad<${result}, row_major>(&ss, region, KEYS);
        o${2 * pair + 1} = subgroupMatrixLoad<${result}, row_major>(&ss, region + 16u, KEYS);
        workgroupBarrier();`
                : ''
        }`,
        );
    const barrier = form.barriers ? '        workgroupBarrier();\n' : '';
    // Slack after each array: one row stride of its fragments (pad) or none.
    const slack = (/** @type {number} */ stride) => (form.pad ? stride : 0);
    const kStride = form.rowMajor ? keys : headDim;
    const vStride = form.rowMajor ? headDim : keys;
    const threshold = form.alwaysRescale ? '0.0' : `${LAZY_RESCALE_LOG2}.0`;
    const moves = form.alwaysRescale ? 'block_max > m' : `block_max > m + ${threshold}`;
    return `enable f16;
enable subgroups;
enable chromium_experimental_subgroup_matrix;
diagnostic(off, chromium.subgroup_matrix_uniformity);
diagnostic(off, subgroup_uniformity);
const D: u32 = ${headDim}u;
const KEYS: u32 = ${keys}u;
const SG: u32 = ${subgroupSize}u;
const ROWS: u32 = ${subgroups * 16}u;
const THREADS: u32 = ${threads}u;
const LPR: u32 = ${lanesPerRow}u;
const COLS: u32 = ${colsPerLane}u;
const MASKED: f32 = -1.0e30;

struct Params { tokens: u32, heads: u32, scale_log2: f32, pad: u32, out_row: u32, out_head: u32, out_offset: u32, pad2: u32 }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> k: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read> v: array<vec4<f16>>;
@group(0) @binding(4) var<storage, read_write> out: array<f16>;

var<workgroup> ks: array<f16, ${keys * headDim + Math.max(slack(kStride), slack(headDim))}>;
var<workgroup> vs: array<f16, ${keys * headDim + slack(vStride)}>;
var<workgroup> ss: array<f32, ${subgroups * region + slack(keys)}>;
var<workgroup> ps: array<f16, ${subgroups * region + slack(keys)}>;
var<workgroup> rescale: u32;

@compute @workgroup_size(${threads})
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let tokens = params.tokens;
    let head_base = wg.y * tokens * D;
    let sg = li / SG;
    let lane = li % SG;
    let row0 = wg.x * ROWS + sg * 16u;
    let r = lane / LPR;
    let part = lane % LPR;
    let region = sg * ${region}u;
    let mine = region + r * KEYS + part * COLS;
${unrolled(frags, (i) => `    var q${i}: ${left};`)}
    // q reaches the fragments through workgroup memory, 32 rows (two subgroups' worth) at a time: rows past the
    // end read as zeros there.
    for (var round = 0u; round < ${Math.ceil(subgroups / 2)}u; round++) {
        workgroupBarrier();
        for (var i = li; i < KEYS * D / 4u; i += THREADS) {
            let at = wg.x * ROWS + round * KEYS + i / (D / 4u);
            var x = vec4<f16>(0.0h);
            if (at < tokens) { x = q[head_base / 4u + at * (D / 4u) + i % (D / 4u)]; }
            let e = i * 4u;
            ks[e] = x.x; ks[e + 1u] = x.y; ks[e + 2u] = x.z; ks[e + 3u] = x.w;
        }
        workgroupBarrier();
        if (sg / 2u == round) {
${unrolled(frags, (i) => `            q${i} = subgroupMatrixLoad<${left}, row_major>(&ks, (sg % 2u) * 16u * D + ${i * 16}u, D);`)}
        }
    }
    let zero = ${result}(0.0);
${unrolled(frags, (i) => `    var o${i} = zero;`)}
    var m = MASKED;
    var l = 0.0;
    for (var kb = 0u; kb < tokens; kb += KEYS) {
        workgroupBarrier();
        if (li == 0u) { rescale = 0u; }
        for (var i = li; i < KEYS * D / 4u; i += THREADS) {
            let key = kb + i / (D / 4u);
            var kx = vec4<f16>(0.0h);
            var vx = vec4<f16>(0.0h);
            if (key < tokens) {
                kx = k[head_base / 4u + key * (D / 4u) + i % (D / 4u)];
                vx = v[head_base / 4u + key * (D / 4u) + i % (D / 4u)];
            }
            let e = i * 4u;
            let t = (i % (D / 4u)) * 4u * KEYS + i / (D / 4u);
${
    form.rowMajor
        ? `            ks[t] = kx.x; ks[t + KEYS] = kx.y; ks[t + 2u * KEYS] = kx.z; ks[t + 3u * KEYS] = kx.w;
            vs[e] = vx.x; vs[e + 1u] = vx.y; vs[e + 2u] = vx.z; vs[e + 3u] = vx.w;`
        : `            ks[e] = kx.x; ks[e + 1u] = kx.y; ks[e + 2u] = kx.z; ks[e + 3u] = kx.w;
            vs[t] = vx.x; vs[t + KEYS] = vx.y; vs[t + 2u * KEYS] = vx.z; vs[t + 3u * KEYS] = vx.w;`
}
        }
        workgroupBarrier();
${scores(0)}
${scores(1)}
${barrier}        subgroupMatrixStore<row_major>(&ss, region, s0, KEYS);
        subgroupMatrixStore<row_major>(&ss, region + 16u, s1, KEYS);
        workgroupBarrier();
        var block_max = MASKED;
        for (var c = 0u; c < COLS; c++) {
            var x = ss[mine + c] * params.scale_log2;
            if (kb + part * COLS + c >= tokens) { x = MASKED; }
            ss[mine + c] = x;
            block_max = max(block_max, x);
        }
${acrossLanes('max', 'block_max')}
        var m_new = m;
        var alpha = 1.0;
        if (${moves}) {
            m_new = block_max;
            alpha = exp2(m - m_new);
            if (kb > 0u) { rescale = 1u; }
        }${form.alwaysRescale ? '\n        if (kb > 0u) { rescale = 1u; }' : ''}
        var sum = 0.0;
        for (var c = 0u; c < COLS; c++) {
            let p = exp2(ss[mine + c] - m_new);
            ps[mine + c] = f16(p);
            sum += p;
        }
${acrossLanes('add', 'sum')}
${barrier}        l = l * alpha + sum;
        m = m_new;
        if (workgroupUniformLoad(&rescale) != 0u) {
${throughRegion('ss[region + r * KEYS + part * COLS + c] *= alpha; _ = d;', true)}
        }
        let p0 = subgroupMatrixLoad<${left}, row_major>(&ps, region, KEYS);
        let p1 = subgroupMatrixLoad<${left}, row_major>(&ps, region + 16u, KEYS);
${unrolled(
    frags,
    (f) => `        o${f} = subgroupMatrixMultiplyAccumulate(p0, ${vB(f, 0)}, o${f});
        o${f} = subgroupMatrixMultiplyAccumulate(p1, ${vB(f, 1)}, o${f});`,
)}
    }
    let inv = 1.0 / l;
    let row = row0 + r;
    workgroupBarrier();
${throughRegion('if (row < tokens) { out[params.out_offset + row * params.out_row + wg.y * params.out_head + d] = f16(ss[region + r * KEYS + part * COLS + c] * inv); }', false)}
}

fn add(a: f32, b: f32) -> f32 { return a + b; }
`;
}
