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
 * - `tiled`: float32 accumulate in workgroup-memory tiles, with no optional feature.
 * @module kernels/linear
 */

import { q4Sizes } from './q4_weights.js';
import { PARAM_BYTES, PARAM_FIELDS, checkEpilogue } from './linear_epilogue.js';
import { tiledGrid, tiledWgsl } from './linear_tiled.js';

/**
 * @typedef {import('./linear_epilogue.js').Epilogue} Epilogue
 * @typedef {import('./linear_epilogue.js').FloatType} FloatType
 * @typedef {import('./q4_weights.js').ScaleType} ScaleType
 * @typedef {import('./q4_weights.js').Q4Weight} Q4Weight
 * @typedef {'int8-matrix' | 'f16-matrix' | 'int8-dp4a' | 'tiled'} LinearPath
 */

/**
 * @typedef {Object} LinearDescription
 * @property {number} n  Weight rows (MatMulNBits' N).
 * @property {number} k  Weight columns (K), a multiple of 32.
 * @property {ScaleType} scales
 * @property {FloatType} activation  The type of x, and of the bias and gate.
 * @property {FloatType} [output]  The output's type; the activations' by default.
 * @property {Epilogue} epilogue
 * @property {LinearPath} [path]  Which path to build; the fastest the device has by default.
 */

/**
 * @typedef {Object} LinearBuffers  One use of a linear: its buffers and where its output goes.
 * @property {number} m  Rows of x (tokens).
 * @property {GPUBuffer} x  [m, k] of the activation type.
 * @property {Q4Weight} weight
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
 */

/**
 * @typedef {Object} BoundLinear
 * @property {(pass: GPUComputePassEncoder) => void} dispatch  Record into an open compute pass.
 * @property {(encoder: GPUCommandEncoder, options?: {timestampWrites?: GPUComputePassTimestampWrites}) => void} encode
 *   Record as a compute pass of its own.
 * @property {() => void} destroy  Free the buffers the binding owns.
 */

/**
 * @typedef {Object} Linear
 * @property {LinearPath} path
 * @property {(buffers: LinearBuffers) => BoundLinear} bind
 */

/**
 * @param {GPUDevice} device
 * @param {LinearDescription} description
 * @returns {Promise<Linear>}
 */
export async function createLinear(device, description) {
    const { n, k, scales, activation } = description;
    const output = description.output ?? activation;
    const epilogue = checkEpilogue(description.epilogue);
    const path = description.path ?? 'tiled';
    if ((activation === 'f16' || output === 'f16') && !device.features.has('shader-f16'))
        throw new Error('float16 activations need the shader-f16 feature, which this device lacks.');
    const { packedBytes, scaleBytes, kBlocks } = q4Sizes({ n, k, scales });
    const swiglu = epilogue.kind === 'swiglu';
    const variant = { epilogue, activation, output, scales };
    const module = device.createShaderModule({ label: `linear ${path}`, code: tiledWgsl(variant) });
    const pipeline = await device.createComputePipelineAsync({
        label: `linear ${path} ${epilogue.kind}`,
        layout: 'auto',
        compute: { module, entryPoint: 'main' },
    });
    const elementBytes = (/** @type {FloatType} */ type) => (type === 'f16' ? 2 : 4);

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
        checkBinding({ ...b, columns, rowA, rowB, outStride, outOffset, swiglu, n, k, packedBytes, scaleBytes });
        need(b.x, b.m * k * elementBytes(activation), 'x');
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
            pad: 0,
        };
        const params = device.createBuffer({
            label: 'linear params',
            size: PARAM_BYTES,
            usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
        });
        device.queue.writeBuffer(params, 0, new Uint32Array(PARAM_FIELDS.map((f) => values[f])));
        /** @type {GPUBindGroupEntry[]} */
        const entries = [
            { binding: 0, resource: { buffer: params } },
            { binding: 1, resource: { buffer: b.x } },
            { binding: 2, resource: { buffer: b.weight.packed } },
            { binding: 3, resource: { buffer: b.weight.scales } },
            { binding: 4, resource: { buffer: b.out } },
        ];
        if (epilogue.bias) entries.push({ binding: 5, resource: { buffer: /** @type {GPUBuffer} */ (b.bias) } });
        if (epilogue.kind === 'gate_residual')
            entries.push({ binding: 6, resource: { buffer: /** @type {GPUBuffer} */ (b.gate) } });
        const group = device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries });
        const [gx, gy] = tiledGrid({ m: b.m, n: columns, swiglu });
        /** @param {GPUComputePassEncoder} pass */
        const dispatch = (pass) => {
            pass.setPipeline(pipeline);
            pass.setBindGroup(0, group);
            pass.dispatchWorkgroups(gx, gy);
        };
        /** @type {BoundLinear} */
        const bound = {
            dispatch,
            encode(encoder, options = {}) {
                const { timestampWrites } = options;
                const pass = encoder.beginComputePass(timestampWrites ? { timestampWrites } : {});
                dispatch(pass);
                pass.end();
            },
            destroy() {
                params.destroy();
            },
        };
        return bound;
    }
    return { path, bind };
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
 * The binding's rows and columns lie inside the weight.
 * @param {LinearBuffers & {columns: number, rowA: number, rowB: number, outStride: number, outOffset: number,
 *   swiglu: boolean, n: number, k: number, packedBytes: number, scaleBytes: number}} b
 */
function checkBinding(b) {
    if (!Number.isInteger(b.m) || b.m < 1) throw new Error(`A linear over ${b.m} rows: give at least one row.`);
    const last = Math.max(b.rowA, b.swiglu ? b.rowB : 0) + b.columns;
    if (b.columns < 1 || last > b.n)
        throw new Error(`Output columns ${b.columns} from weight row ${b.rowA} run past the weight's ${b.n} rows.`);
    if (b.outStride < b.columns) throw new Error(`An output stride of ${b.outStride} is narrower than ${b.columns}.`);
    need(b.weight?.packed, b.packedBytes, 'the packed weight');
    need(b.weight?.scales, b.scaleBytes, 'the weight scales');
}
