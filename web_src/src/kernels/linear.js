// @ts-check
/**
 * @file The app-facing linear layer over 4-bit MatMulNBits weights: `createLinear(device, description)` picks the
 * fastest path the device has (or the one asked for), creates its pipelines once, and `bind()`s buffers into a
 * dispatch that records into a caller's command encoder or compute pass.
 *
 * Paths, fastest first where the adapter has what they need (kernels/linear_paths.js decides):
 * - `int8-matrix`: activations quantised to int8 per row on the GPU × the weights expanded to int8, on the int8
 *   subgroup matrices (i8→i32, 16×16×32), int32 accumulate;
 * - `f16-matrix`: float16 activations × the weights expanded to float16, on the float16 subgroup matrices, float32
 *   accumulate;
 * - `int8-dp4a`: the int8 path's exact numerics with packed dot products (dot4I8Packed), for adapters without
 *   subgroup matrices;
 * - `tiled`: float32 accumulate in workgroup-memory tiles, with no optional feature;
 * - `simple`: one thread an output value (kernels/linear_simple.js), for linears over one row and small dense ones.
 * Dense float32 weights (an fp32 graph's MatMul B) take the float32 paths only: `tiled` and `simple`.
 * @module kernels/linear
 */

import { q4Sizes } from './q4_weights.js';
import { BINDING, PARAM_FIELDS, checkEpilogue } from './linear_epilogue.js';
import { tiledGrid, tiledWgsl } from './linear_tiled.js';
import { simpleGrid, simpleWgsl } from './linear_simple.js';
import { INT8_BINDING, int8Scratch, quantiseWgsl } from './linear_int8.js';
import { dp4aWgsl } from './linear_dp4a.js';
import { matrixGrid, matrixWgsl } from './linear_matrix.js';
import { computePipeline, uniformBuffer } from './compile.js';
import { linearPaths, matrixSizeControl } from './linear_paths.js';

/**
 * @typedef {import('./linear_epilogue.js').Epilogue} Epilogue
 * @typedef {import('./linear_epilogue.js').FloatType} FloatType
 * @typedef {import('./q4_weights.js').ScaleType} ScaleType
 * @typedef {import('./q4_weights.js').Q4Weight} Q4Weight
 * @typedef {import('./linear_paths.js').LinearPath} LinearPath
 * @typedef {import('./linear_matrix.js').OffsetUnit} OffsetUnit
 * @typedef {import('./linear_tiled.js').WeightFormat} WeightFormat
 * @typedef {{matrix: GPUBuffer}} DenseWeight  A dense float32 weight: MatMul's B, [K, N] row-major.
 */

/**
 * The paths `device` runs with activations of `dtype`, fastest first (the kernel lab's name for linearPaths).
 * @param {GPUDevice} device
 * @param {FloatType} dtype
 * @param {GPUAdapterInfo | null} [adapterInfo]
 * @returns {LinearPath[]}
 */
export function linearVariants(device, dtype, adapterInfo = null) {
    return linearPaths(device, { activation: dtype }, adapterInfo);
}

/**
 * @typedef {Object} LinearDescription
 * @property {number} n  Weight rows (MatMulNBits' N).
 * @property {number} k  Weight columns (K), a multiple of 32.
 * @property {WeightFormat} [weights]  'q4' (MatMulNBits blocks, the default) or 'f32' (dense: `tiled` or `simple`).
 * @property {ScaleType} scales  The 4-bit weights' scale type (ignored for dense weights).
 * @property {FloatType} activation  The type of x, and of the bias and gate.
 * @property {FloatType} [output]  The output's type; the activations' by default.
 * @property {Epilogue} epilogue
 * @property {LinearPath} [path]  Which path to build; the fastest the device has by default (linearPaths()).
 * @property {OffsetUnit} [int8Unit]  int8-matrix: how the device counts 8-bit fragment offsets (probeInt8Unit();
 *   probed here when not given).
 * @property {GPUAdapterInfo | null} [adapterInfo]  GPUAdapter.info, for the matrix paths.
 */

/**
 * @typedef {Object} LinearBuffers  One use of a linear: its buffers and where its output goes.
 * @property {number} m  Rows of x (tokens).
 * @property {GPUBuffer} x  [m, k] of the activation type.
 * @property {number} [xOffset]  Where x's row 0 starts in `x`, in bytes: a multiple of the device's
 *   minStorageBufferOffsetAlignment (a stream's rows inside a joint buffer).
 * @property {Q4Weight | DenseWeight} weight
 * @property {GPUBuffer} out  The output (for gate_residual: the residual, updated in place).
 * @property {GPUBuffer} [bias]  Indexed by weight row.
 * @property {GPUBuffer} [gate]  gate_residual: the modulation vectors, one per batch item.
 * @property {number} [columns]  Output columns; n − rowA by default (swiglu: n / 2).
 * @property {number} [rowA]  The weight row of output column 0 (0 by default).
 * @property {number} [rowB]  swiglu: the weight row of the b half's column 0 (n / 2 by default).
 * @property {number} [outStride]  Elements between output rows; `columns` by default.
 * @property {number} [outOffset]  Where output row 0 starts, in elements.
 * @property {number} [rowsPerBatch]  Rows of one batch item (the gate's row), m by default.
 * @property {number} [gateStride]  Elements between the gate vectors of two batch items.
 * @property {number} [gateOffset]  Where the gate starts in its buffer, in elements.
 * @property {GPUBuffer} [scratch]  int8 paths: where x is quantised (scratchBytes(m) bytes); a buffer of the
 *   binding's own when not given.
 * @property {boolean} [quantised]  int8 paths: `scratch` already holds this x quantised (an earlier linear of the
 *   same x and scratch ran first): skip the quantiser.
 */

/**
 * @typedef {Object} BoundLinear
 * @property {(pass: GPUComputePassEncoder) => void} dispatch  Record into an open compute pass (the int8 paths:
 *   the quantiser, then the product; a pass orders them).
 * @property {(encoder: GPUCommandEncoder, options?: {timestampWrites?: GPUComputePassTimestampWrites}) => void} encode
 *   Record as a compute pass of its own.
 * @property {() => void} destroy  Free the buffers the binding owns.
 */

/**
 * @typedef {Object} Linear
 * @property {LinearPath} path
 * @property {number} flops  Floating-point operations per row of x with every weight row used: 2·n·k.
 * @property {(m: number) => number} scratchBytes  The int8 scratch for m rows (0 on the float paths).
 * @property {(buffers: LinearBuffers) => BoundLinear} bind
 */

/**
 * @param {GPUDevice} device
 * @param {LinearDescription} description
 * @returns {Promise<Linear>}
 */
export async function createLinear(device, description) {
    const { n, k, scales, activation, adapterInfo = null, weights = 'q4' } = description;
    const output = description.output ?? activation;
    const epilogue = checkEpilogue(description.epilogue);
    const dense = weights === 'f32';
    const offered = linearPaths(device, { activation, output }, adapterInfo).filter(
        (p) => !dense || p === 'tiled' || p === 'simple',
    );
    const path = description.path ?? offered[0];
    if (!offered.includes(path))
        throw new Error(`The linear path ${path} (${activation} → ${output}) needs features this device lacks.`);
    const { packedBytes, scaleBytes, kBlocks } = dense ? denseSizes({ n, k }) : q4Sizes({ n, k, scales });
    const swiglu = epilogue.kind === 'swiglu';
    const int8 = path === 'int8-matrix' || path === 'int8-dp4a';
    const variant = { epilogue, activation, output, scales };
    const label = `linear/${path}/${epilogue.kind}`;
    const sizeControl = matrixSizeControl(device, adapterInfo) === true;
    let code;
    if (path === 'tiled') code = tiledWgsl({ ...variant, weights });
    else if (path === 'simple') code = simpleWgsl({ ...variant, weights });
    else if (path === 'int8-dp4a') code = dp4aWgsl(variant);
    else if (path === 'f16-matrix') code = matrixWgsl({ kind: 'f16', ...variant, sizeControl });
    else {
        const unit = description.int8Unit ?? (await probeInt8Unit(device, { adapterInfo }));
        if (!unit) throw new Error('The int8 matrix units give wrong products on this device; use another path.');
        code = matrixWgsl({ kind: 'int8', ...variant, unit, sizeControl });
    }
    const [pipeline, quantiser] = await Promise.all([
        computePipeline(device, label, code),
        int8 ? computePipeline(device, `linear/quantise/${activation}`, quantiseWgsl({ activation })) : null,
    ]);
    const grid = path.endsWith('matrix') ? matrixGrid : path === 'simple' ? simpleGrid : tiledGrid;
    const elementBytes = (/** @type {FloatType} */ type) => (type === 'f16' ? 2 : 4);
    const alignment = device.limits.minStorageBufferOffsetAlignment;
    const scratchBytes = (/** @type {number} */ m) => (int8 ? int8Scratch({ m, k, alignment }).bytes : 0);

    /** @param {LinearBuffers} b */
    function bind(b) {
        const rowA = b.rowA ?? 0;
        const columns = b.columns ?? (swiglu ? n / 2 : n - rowA);
        const rowB = b.rowB ?? (swiglu ? n / 2 : 0);
        const outStride = b.outStride ?? columns;
        const outOffset = b.outOffset ?? 0;
        const rowsPerBatch = b.rowsPerBatch ?? b.m;
        const gateStride = b.gateStride ?? 0;
        const gateOffset = b.gateOffset ?? 0;
        checkBinding({ ...b, columns, rowA, rowB, outStride, swiglu, n, packedBytes, scaleBytes, dense });
        const xOffset = b.xOffset ?? 0;
        if (xOffset % alignment)
            throw new Error(`x starts ${xOffset} bytes into its buffer: not a multiple of ${alignment} bytes.`);
        need(b.x, xOffset + b.m * k * elementBytes(activation), 'x');
        need(b.out, ((b.m - 1) * outStride + outOffset + columns) * elementBytes(output), 'the output');
        if (epilogue.bias) need(b.bias, n * elementBytes(activation), 'the bias');
        if (epilogue.kind === 'gate_residual') {
            const items = Math.ceil(b.m / rowsPerBatch);
            need(b.gate, ((items - 1) * gateStride + gateOffset + columns) * elementBytes(activation), 'the gate');
        }
        /** @type {Record<string, number>} */
        const values = {
            m: b.m,
            n: columns,
            k,
            k_blocks: kBlocks,
            row_a: rowA,
            row_b: rowB,
            out_stride: outStride,
            out_offset: outOffset,
            rows_per_batch: rowsPerBatch,
            gate_stride: gateStride,
            gate_offset: gateOffset,
            w_stride: n,
        };
        /** @type {GPUBuffer[]} */
        const owned = [];
        const params = uniformBuffer(
            device,
            `${label}/params`,
            new Uint32Array(PARAM_FIELDS.map((f) => values[f])).buffer,
        );
        owned.push(params);
        /** @type {(binding: number, buffer: GPUBuffer, offset?: number, size?: number) => GPUBindGroupEntry} */
        const entry = (binding, buffer, offset = 0, size = undefined) => ({
            binding,
            resource: size === undefined ? { buffer, offset } : { buffer, offset, size },
        });
        /** @type {GPUBindGroupEntry[]} */
        const entries = [entry(BINDING.params, params), entry(BINDING.out, b.out)];
        if ('matrix' in b.weight) entries.push(entry(BINDING.packed, b.weight.matrix));
        else entries.push(entry(BINDING.packed, b.weight.packed), entry(BINDING.scales, b.weight.scales));
        if (epilogue.bias) entries.push(entry(BINDING.bias, /** @type {GPUBuffer} */ (b.bias)));
        if (epilogue.kind === 'gate_residual') entries.push(entry(BINDING.gate, /** @type {GPUBuffer} */ (b.gate)));
        /** @type {GPUBindGroup | null} */
        let quantiseGroup = null;
        if (int8) {
            const layout = int8Scratch({ m: b.m, k, alignment });
            let scratch = b.scratch;
            if (!scratch) {
                scratch = device.createBuffer({
                    label: `${label}/scratch`,
                    size: layout.bytes,
                    usage: GPUBufferUsage.STORAGE,
                });
                owned.push(scratch);
            }
            need(scratch, layout.bytes, 'the int8 scratch');
            const quantised = entry(INT8_BINDING.x, scratch, 0, layout.quantisedBytes);
            const rowScales = entry(INT8_BINDING.rowScales, scratch, layout.scalesOffset, layout.scalesBytes);
            entries.push(quantised, rowScales);
            if (!b.quantised)
                quantiseGroup = device.createBindGroup({
                    label: `${label}/quantise`,
                    layout: /** @type {GPUComputePipeline} */ (quantiser).getBindGroupLayout(0),
                    entries: [
                        entry(BINDING.params, params),
                        entry(INT8_BINDING.x, b.x, xOffset),
                        rowScales,
                        { ...quantised, binding: INT8_BINDING.quantised },
                    ],
                });
        } else entries.push(entry(1, b.x, xOffset));
        const group = device.createBindGroup({ label, layout: pipeline.getBindGroupLayout(0), entries });
        const [gx, gy] = grid({ m: b.m, n: columns, swiglu });
        /** @param {GPUComputePassEncoder} pass */
        const dispatch = (pass) => {
            if (quantiseGroup) {
                pass.setPipeline(/** @type {GPUComputePipeline} */ (quantiser));
                pass.setBindGroup(0, quantiseGroup);
                pass.dispatchWorkgroups(b.m);
            }
            pass.setPipeline(pipeline);
            pass.setBindGroup(0, group);
            pass.dispatchWorkgroups(gx, gy);
        };
        /** @type {BoundLinear} */
        const bound = {
            dispatch,
            encode(encoder, options = {}) {
                const { timestampWrites } = options;
                const pass = encoder.beginComputePass(timestampWrites ? { label, timestampWrites } : { label });
                dispatch(pass);
                pass.end();
            },
            destroy() {
                for (const buffer of owned) buffer.destroy();
            },
        };
        return bound;
    }
    return { path, flops: 2 * n * k, scratchBytes, bind };
}

/**
 * How this device counts the offsets and strides of 8-bit fragments, found with one small product on the int8
 * matrix path checked against the DP4A path (the same numbers by construction): 'words', 'bytes', or null when
 * neither reading is exact (the int8 matrix path must not be used).
 * @param {GPUDevice} device
 * @param {{adapterInfo?: GPUAdapterInfo | null}} [options]
 * @returns {Promise<OffsetUnit | null>}
 */
export async function probeInt8Unit(device, { adapterInfo = null } = {}) {
    const [m, n, k] = [40, 48, 128];
    const words = new Uint32Array((n * k) / 8);
    const scales = new Float32Array((n * k) / 32);
    const x = new Float32Array(m * k);
    // A fixed pseudo-random pattern (a 32-bit LCG): every nibble value, scales of both signs, rows of both signs.
    let state = 12345;
    const next = () => (state = (Math.imul(state, 1664525) + 1013904223) >>> 0);
    words.forEach((_, i) => (words[i] = next()));
    scales.forEach((_, i) => (scales[i] = ((next() % 2001) - 1000) / 4096));
    x.forEach((_, i) => (x[i] = ((next() % 2001) - 1000) / 256));
    const upload = (/** @type {ArrayBufferView} */ data, /** @type {number} */ usage) => {
        const buffer = device.createBuffer({
            size: Math.ceil(data.byteLength / 16) * 16,
            usage: usage | GPUBufferUsage.COPY_DST,
        });
        device.queue.writeBuffer(buffer, 0, data.buffer, data.byteOffset, data.byteLength);
        return buffer;
    };
    const weight = { packed: upload(words, GPUBufferUsage.STORAGE), scales: upload(scales, GPUBufferUsage.STORAGE) };
    const input = upload(x, GPUBufferUsage.STORAGE);
    const shape = {
        n,
        k,
        scales: /** @type {ScaleType} */ ('f32'),
        activation: /** @type {FloatType} */ ('f32'),
        adapterInfo,
    };
    const run = async (/** @type {LinearPath} */ path, /** @type {OffsetUnit} */ unit) => {
        const linear = await createLinear(device, { ...shape, epilogue: { kind: 'store' }, path, int8Unit: unit });
        const out = device.createBuffer({ size: m * n * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC });
        const read = device.createBuffer({ size: m * n * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
        const bound = linear.bind({ m, x: input, weight, out });
        const encoder = device.createCommandEncoder();
        bound.encode(encoder);
        encoder.copyBufferToBuffer(out, 0, read, 0, m * n * 4);
        device.queue.submit([encoder.finish()]);
        await read.mapAsync(GPUMapMode.READ);
        const values = new Float32Array(read.getMappedRange().slice(0));
        read.destroy();
        out.destroy();
        bound.destroy();
        return values;
    };
    try {
        if (!linearPaths(device, shape, adapterInfo).includes('int8-dp4a')) return null;
        const want = await run('int8-dp4a', 'words');
        for (const unit of /** @type {OffsetUnit[]} */ (['words', 'bytes'])) {
            const got = await run('int8-matrix', unit);
            if (got.every((v, i) => Object.is(v, want[i]))) return unit;
        }
        return null;
    } finally {
        for (const buffer of [weight.packed, weight.scales, input]) buffer.destroy();
    }
}

/**
 * @param {GPUBuffer | undefined} buffer
 * @param {number} bytes
 * @param {string} what
 */
function need(buffer, bytes, what) {
    if (!buffer) throw new Error(`The linear needs ${what}: no buffer was given.`);
    if (buffer.size < bytes) throw new Error(`${what} holds ${buffer.size} bytes; the linear reads ${bytes}.`);
}

/**
 * Bytes of a dense float32 weight of n rows (output features) × k columns, in blocks of 32 along k like the 4-bit
 * ones (the tiled kernel stages one block at a time).
 * @param {{n: number, k: number}} shape
 * @returns {{packedBytes: number, scaleBytes: number, kBlocks: number}}
 */
function denseSizes({ n, k }) {
    if (!Number.isInteger(n) || n < 1 || !Number.isInteger(k) || k < 32 || k % 32)
        throw new Error(`A dense weight of ${n}×${k}: rows must be a positive whole number, columns a multiple of 32.`);
    return { packedBytes: n * k * 4, scaleBytes: 0, kBlocks: k / 32 };
}

/**
 * The binding's rows and columns lie inside the weight.
 * @param {LinearBuffers & {columns: number, rowA: number, rowB: number, outStride: number, swiglu: boolean,
 *   n: number, packedBytes: number, scaleBytes: number, dense: boolean}} b
 */
function checkBinding(b) {
    if (!Number.isInteger(b.m) || b.m < 1) throw new Error(`A linear over ${b.m} rows: give at least one row.`);
    const last = Math.max(b.rowA, b.swiglu ? b.rowB : 0) + b.columns;
    if (b.columns < 1 || last > b.n)
        throw new Error(`Output columns ${b.columns} from weight row ${b.rowA} run past the weight's ${b.n} rows.`);
    if (b.outStride < b.columns) throw new Error(`An output stride of ${b.outStride} is narrower than ${b.columns}.`);
    if (b.dense) {
        need(/** @type {DenseWeight} */ (b.weight)?.matrix, b.packedBytes, 'the dense weight');
        return;
    }
    const q4 = /** @type {Q4Weight} */ (b.weight);
    need(q4?.packed, b.packedBytes, 'the packed weight');
    need(q4?.scales, b.scaleBytes, 'the weight scales');
}
