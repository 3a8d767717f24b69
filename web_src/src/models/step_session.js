// @ts-check
/**
 * @file The transformer on our kernels (step/step_executor.js) in the place of its onnxruntime session: its weights
 * read by the graph's initializer names (models/step_graph.js) and streamed from the store into GPU buffers the
 * way an onnxruntime session's are (runtime/gpu_weights.js, the same buffers: a session of one kind or the other
 * exists, never both), its runs taking and giving the graph's inputs and outputs.
 * @module models/step_session
 */

import { runtimeError } from '../runtime/errors.js';
import { STEP_KERNELS } from '../runtime/gpu.js';
import { uploadWeights } from '../runtime/gpu_weights.js';
import { ErrorCode, GpuFeatureError, KleinError } from '../shared/errors.js';
import { StepExecutor } from '../step/step_executor.js';
import { bytesOf, readSpans, storedWeights } from './graph_upload.js';
import { DataType, readGraph } from './onnx_proto.js';
import { readStepGraph } from './step_graph.js';

/** @typedef {import('./graph_choice.js').Choice} Choice */
/** @typedef {import('../store/weights.js').WeightStore} WeightStore */
/** @typedef {import('./onnx_proto.js').Tensor} Tensor */
/** @typedef {import('../step/step_types.js').StepLinear} StepLinear */
/** @typedef {import('../runtime/ort.js').HostTensor} HostTensor */
/** @typedef {import('../runtime/gpu.js').Gpu} Gpu */
/** @typedef {import('../runtime/ort.js').Session | StepSession} AnySession */

/**
 * @typedef {Object} StepSession  A transformer session on our kernels.
 * @property {'kernels'} kind
 * @property {'webgpu'} ep
 * @property {StepExecutor} executor
 * @property {null} capture
 * @property {null} captureRefused
 * @property {number} streamedBytes  The weight bytes streamed to the GPU.
 */

/**
 * @param {unknown} session
 * @returns {session is StepSession}
 */
export function isStepSession(session) {
    return /** @type {StepSession} */ (session)?.kind === 'kernels';
}

/**
 * Whether the transformer of `choice` runs on our kernels: its structure for the executor, or why not (onnxruntime
 * then runs it). Our kernels need a WebGPU device, a graph the executor reads (models/step_graph.js), and not to
 * have failed in this browser (they are then given up like a GPU feature: runtime/gpu.js STEP_KERNELS).
 * @param {Choice} choice
 * @param {Uint8Array} graphBytes
 * @param {{gpu: Gpu, wanted: boolean, profiling: boolean}} options  `wanted`: false when the request asks for
 *   onnxruntime; `profiling`: the run reports onnxruntime's profile of its kernels (GenerateParams.profile).
 * @returns {{graph: import('./step_graph.js').StepGraph} | {why: string}}
 */
export function stepKernelsFor(choice, graphBytes, { gpu, wanted, profiling }) {
    if (!wanted) return { why: 'asked for' };
    if (profiling) return { why: "a profiled run times onnxruntime's kernels" };
    if (choice.ep !== 'webgpu') return { why: `the graph runs on ${choice.ep}` };
    const off = gpu.off.get(STEP_KERNELS);
    if (off) return { why: `our kernels failed in this browser${off.remembered ? ' (remembered)' : ''}` };
    try {
        return { graph: readStepGraph(graphBytes) };
    } catch (err) {
        return { why: `its graph is not one our kernels run: ${err instanceof Error ? err.message : String(err)}` };
    }
}

/**
 * A failure of our kernels as the error the recovery acts on: running out of memory, a lost device and a
 * cancelled job as any session's failure; anything else gives up our kernels (GpuFeatureError of STEP_KERNELS), so
 * the job runs again with onnxruntime's transformer.
 * @param {unknown} err
 * @param {Gpu} gpu
 * @param {string} what
 * @param {AbortSignal} [signal]
 * @returns {unknown}
 */
export function stepKernelsError(err, gpu, what, signal) {
    // The app's own errors (a model file the store lacks, a cancelled read) are not our kernels' doing.
    if (signal?.aborted || err instanceof KleinError) return err;
    const mapped = runtimeError(err, gpu, what);
    if (mapped.code === ErrorCode.OUT_OF_MEMORY || mapped.code === ErrorCode.DEVICE_LOST) return mapped;
    const cause = err instanceof Error ? err.message : String(err);
    return new GpuFeatureError(`${what} failed on our kernels (${cause}).`, {
        feature: STEP_KERNELS,
        cause: cause.slice(0, 300),
    });
}

/**
 * Dispatches per step: our executor's exact count at the pinned size; for onnxruntime, the graph's nodes that are
 * not constants (an upper bound: onnxruntime folds shape arithmetic and fuses some nodes; a profiled run counts its
 * kernels exactly, GenerateResult.kernels).
 * @param {AnySession} session
 * @param {Uint8Array} graphBytes
 * @param {{dims: Record<string, number>} | undefined} pin
 * @returns {{dispatches: number | null, graphNodes?: number}}
 */
export function dispatchCount(session, graphBytes, pin) {
    if (isStepSession(session))
        return { dispatches: pin ? session.executor.dispatches(pin.dims.img_seq, pin.dims.txt_seq) : null };
    const nodes = readGraph(graphBytes).nodes.filter((node) => node.op !== 'Constant').length;
    return { dispatches: null, graphNodes: nodes };
}

/**
 * Stream the step's weights to the GPU and compile its kernels (and lay out the size `tokens` when given).
 * @param {WeightStore} store
 * @param {Choice} choice
 * @param {import('./step_graph.js').StepGraph} graph
 * @param {GPUDevice} device
 * @param {{signal?: AbortSignal, adapterInfo?: GPUAdapterInfo | null,
 *   tokens?: {image: number, text: number}}} [options]
 * @returns {Promise<StepSession>}
 */
export async function createStepSession(store, choice, graph, device, { signal, adapterInfo = null, tokens } = {}) {
    const files = storedWeights(store, choice);
    /** @type {Tensor[]} */
    const tensors = [];
    for (const ref of graph.linears.values())
        tensors.push(.../** @type {Tensor[]} */ ([ref.packed, ref.scales, ref.matrix].filter(Boolean)));
    /** @type {Map<string, GPUBuffer>} */
    let buffers = new Map();
    /** @type {StepExecutor | null} */
    let executor = null;
    try {
        const external = tensors.flatMap((t) => (t.external ? [t.external] : []));
        const sources = await files.located(external);
        buffers = await uploadWeights(device, sources, files.readInto, { signal, verified: files.verified });
        for (const tensor of tensors) if (tensor.raw) buffers.set(tensor.name, upload(device, tensor.name, tensor.raw));
        const norms = await normWeights(graph, files);
        await files.verified(); // the files the norms' weights were read from, where those were not checked yet
        /** @type {Map<string, StepLinear>} */
        const linears = new Map();
        for (const [path, ref] of graph.linears) {
            const buffer = (/** @type {Tensor | undefined} */ t) =>
                /** @type {GPUBuffer} */ (buffers.get(t?.name ?? ''));
            linears.set(path, {
                format: ref.format,
                n: ref.n,
                k: ref.k,
                scales: ref.scales?.dataType === DataType.FLOAT16 ? 'f16' : 'f32',
                buffers:
                    ref.format === 'q4'
                        ? { packed: buffer(ref.packed), scales: buffer(ref.scales) }
                        : { matrix: buffer(ref.matrix) },
            });
        }
        executor = await StepExecutor.create(device, graph.config, { linears, norms }, { adapterInfo });
        buffers = new Map();
        if (tokens) await executor.prepare(tokens.image, tokens.text);
        return {
            kind: 'kernels',
            ep: 'webgpu',
            executor,
            capture: null,
            captureRefused: null,
            streamedBytes: bytesOf(sources),
        };
    } catch (err) {
        // Until the executor owns them, the buffers are ours to free.
        if (executor) executor.destroy();
        for (const buffer of buffers.values()) buffer.destroy();
        throw err;
    } finally {
        files.close();
    }
}

/**
 * The q/k RMSNorm weights as float32 (stored in float16 by compact conversions).
 * @param {import('./step_graph.js').StepGraph} graph
 * @param {import('./graph_upload.js').StoredWeights} files
 * @returns {Promise<Map<string, Float32Array>>}
 */
async function normWeights(graph, files) {
    const spans = await files.located([...graph.norms.values()].flatMap((t) => (t.external ? [t.external] : [])));
    const read = await readSpans(spans, files.read);
    /** @type {Map<string, Float32Array>} */
    const out = new Map();
    for (const [path, tensor] of graph.norms) {
        const bytes = tensor.raw ?? /** @type {Uint8Array} */ (read.get(tensor.name));
        out.set(path, tensor.dataType === DataType.FLOAT16 ? halfToFloat(bytes) : floats(bytes));
    }
    return out;
}

/**
 * @param {Uint8Array} bytes  Little-endian float32 values.
 * @returns {Float32Array}
 */
function floats(bytes) {
    return new Float32Array(bytes.slice().buffer);
}

/**
 * @param {Uint8Array} bytes  Little-endian IEEE half-precision values.
 * @returns {Float32Array}
 */
function halfToFloat(bytes) {
    const halves = new Uint16Array(bytes.slice().buffer);
    return Float32Array.from(halves, (h) => {
        const sign = h & 0x8000 ? -1 : 1;
        const exponent = (h >> 10) & 0x1f;
        const fraction = h & 0x3ff;
        if (exponent === 0) return sign * fraction * 2 ** -24;
        if (exponent === 31) return fraction ? NaN : sign * Infinity;
        return sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
    });
}

/**
 * A weight stored in the graph file, in a GPU buffer of its own.
 * @param {GPUDevice} device
 * @param {string} label
 * @param {Uint8Array} bytes
 * @returns {GPUBuffer}
 */
function upload(device, label, bytes) {
    const buffer = device.createBuffer({
        label,
        size: Math.max(16, Math.ceil(bytes.byteLength / 16) * 16),
        usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST,
    });
    const padded = new Uint8Array(Math.ceil(bytes.byteLength / 4) * 4);
    padded.set(bytes);
    device.queue.writeBuffer(buffer, 0, padded);
    return buffer;
}

/**
 * Run one step on our kernels: the graph's inputs by name, `noise_pred` back.
 * @param {StepSession} session
 * @param {Record<string, {data: Float32Array | BigInt64Array, dims: number[]}>} inputs
 * @returns {Promise<{outputs: Promise<Record<string, HostTensor>>}>}
 */
export async function submitStep(session, inputs) {
    const hidden = /** @type {Float32Array} */ (inputs.hidden_states.data);
    const { executor } = session;
    const { outputs } = await executor.submit({
        hidden,
        context: /** @type {Float32Array} */ (inputs.encoder_hidden_states.data),
        timestep: /** @type {Float32Array} */ (inputs.timestep.data)[0],
        imgIds: /** @type {BigInt64Array} */ (inputs.img_ids.data),
        txtIds: /** @type {BigInt64Array} */ (inputs.txt_ids.data),
    });
    const dims = [1, hidden.length / executor.config.inChannels, executor.config.outChannels];
    return { outputs: outputs.then((data) => ({ noise_pred: { type: 'float32', dims, data } })) };
}

/**
 * How far our kernels' prediction is from onnxruntime's.
 * @param {Float32Array} got
 * @param {Float32Array} want
 * @returns {import('../shared/types.js').StepCheck}
 */
export function compareSteps(got, want) {
    if (got.length !== want.length) throw new Error(`noise_pred of ${got.length} values against ${want.length}.`);
    let maxAbs = 0;
    let squares = 0;
    let scale = 0;
    for (let i = 0; i < got.length; i++) {
        const diff = Math.abs(got[i] - want[i]);
        // NaN anywhere makes the comparison NaN, never a pass.
        maxAbs = diff > maxAbs || Number.isNaN(diff) ? diff : maxAbs;
        squares += diff * diff;
        scale += want[i] * want[i];
    }
    return { maxAbs, rms: Math.sqrt(squares / got.length), scale: Math.sqrt(scale / got.length), values: got.length };
}
