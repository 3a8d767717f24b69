// @ts-check
/**
 * @file The only module that imports onnxruntime-web. It uses the `onnxruntime-web/webgpu` build (the
 * native C++ WebGPU execution provider, asyncify); never the default `onnxruntime-web` import, whose
 * JSEP kernels silently return zeros for fp16 graphs on adapters without shader-f16.
 *
 * Everything else talks to five functions: configureOrt, createSession, submit, run, release, plus the
 * tensor helpers float32 / float16 / int64. A session created with `staticDims` on WebGPU captures its kernels
 * (see SessionOptions); `run` hides the difference. A session may take some weights as GPU buffers the app
 * uploaded (SessionOptions.weights): every run feeds them, and releasing the session destroys them.
 *
 * One call into onnxruntime runs at a time (its asyncify build cannot be entered while a call is suspended), so
 * callers may overlap their work freely: while the GPU computes a run whose outputs download (`submit`), another
 * session can be created.
 * @module runtime/ort
 */

import * as ort from 'onnxruntime-web/webgpu';
import { runtimeSource } from './wasm_parts.js';

/** @typedef {import('onnxruntime-web').Tensor} Tensor  A tensor as onnxruntime takes it (float32() / int64()). */

/**
 * @typedef {Object} ExternalDataFile
 * @property {string} path  The bare file name stored in the graph's TensorProto `location`.
 * @property {Uint8Array} data
 */

/**
 * @typedef {Object} SessionOptions
 * @property {'webgpu' | 'wasm'} ep
 * @property {GPUDevice} [device]                 Required for 'webgpu': the shared device (runtime/gpu.js).
 * @property {readonly string[]} [forceCpuNodeNames]  Nodes to keep on the CPU (fp16 ops without shader-f16).
 * @property {Record<string, number>} [staticDims]  Symbolic input dims to pin (ORT freeDimensionOverrides), for
 *   a graph always run at one shape. Pinned, onnxruntime folds the shape arithmetic into constants when it
 *   creates the session (the text encoder: 6,801 nodes, 1,900 after folding), so creating and running it do less.
 * @property {boolean} [profile]  Turn onnxruntime's profiler on: every run records each kernel's GPU time (WebGPU
 *   timestamp queries) until profileEvents() ends it. A profiled session never captures: replays record nothing.
 * @property {GpuWeight[]} [weights]  On WebGPU: graph inputs that are weights in the app's GPU buffers (the graph
 *   rewritten by models/graph_weights.js); the session owns the buffers from here on.
 * @property {boolean} [capture]  With `staticDims`, on WebGPU: the session captures. Its first run records every
 *   kernel and later runs replay the recording without the EP's per-kernel host work (the time it saves:
 *   docs/performance.md). Every run must then have exactly these dims. Worth it for a graph run
 *   many times (the denoising loop), not for one run once per prompt.
 */

/**
 * @typedef {Object} GpuWeight  A weight input held in a GPU buffer of the app's.
 * @property {string} name
 * @property {GPUBuffer} buffer
 * @property {string} dataType  onnxruntime-web's name of its type ('uint8', 'float16', ...).
 * @property {number[]} dims
 */

/**
 * @typedef {Object} Session
 * @property {import('onnxruntime-web').InferenceSession} inner
 * @property {'webgpu' | 'wasm'} ep
 * @property {Record<string, import('onnxruntime-web').Tensor>} weights  Fed to every run (SessionOptions.weights).
 * @property {GPUBuffer[]} weightBuffers  Destroyed with the session.
 * @property {string[]} inputNames  The inputs a caller feeds (the weights excluded).
 * @property {string[]} outputNames
 * @property {Capture | null} capture  Set when the session replays captured kernels.
 * @property {string | null} captureRefused  Why a session asked to capture does not (onnxruntime's message).
 */

/**
 * @typedef {Object} Capture  The GPU buffers a capturing session's inputs live in (captured kernels read
 *   them at fixed addresses, so each run writes new values into the same buffers).
 * @property {GPUDevice} device
 * @property {Map<string, {buffer: GPUBuffer, tensor: import('onnxruntime-web').Tensor, dims: string}>} inputs
 */

/**
 * @typedef {Object} HostTensor  A tensor downloaded to the CPU.
 * @property {string} type
 * @property {number[]} dims
 * @property {import('onnxruntime-web').Tensor.DataType} data
 */

/**
 * The wasm thread count we use: ORT forces 1 thread without cross-origin isolation anyway (no
 * SharedArrayBuffer), and more than 4 threads does not help the few ops that run on the CPU.
 * @returns {number}
 */
export function ortThreads() {
    if (!globalThis.crossOriginIsolated) return 1;
    const cores = typeof navigator !== 'undefined' && navigator.hardwareConcurrency ? navigator.hardwareConcurrency : 1;
    // Leave one core to the page thread (and the GPU process): pthreads spinning on every core made the
    // page stutter during CPU-placed ops on small machines.
    return Math.max(1, Math.min(4, cores - 1));
}

/**
 * Whether onnxruntime binds GPU buffers to sessions on the app's own device (inputs from GPU buffers, outputs left
 * on the GPU), which graph capture and `submit`'s early return need. onnxruntime-web 1.31 does not: a run fails
 * with "There's no data transfer registered for copying tensors from Device:[DeviceType:1 ... DeviceId:0] to
 * Device:[DeviceType:1 ... DeviceId:1]" (the app's device is onnxruntime's device 1, GPU buffers it wraps are
 * device 0). Without them sessions run uncaptured and a run returns its outputs on the CPU (docs/performance.md).
 */
export const GPU_IO = !(ort.env.versions.web ?? '').startsWith('1.31.');

/** @type {Promise<unknown>} The last call into onnxruntime; the next one starts when it has settled. */
let ortTail = Promise.resolve();

/**
 * Call into onnxruntime once every earlier call has settled.
 * @template T
 * @param {() => Promise<T>} call
 * @returns {Promise<T>}
 */
function serialized(call) {
    const result = ortTail.then(call);
    ortTail = result.catch(() => {});
    return result;
}

/** @type {((line: string) => void) | null} Where the wasm module's prints go while profileEvents() reads them. */
let printSink = null;

/**
 * The wasm module binds console.log as its print function when it starts (at the first session), so reading its
 * prints later needs console.log routed through here from before that: to printSink while one is set, else on.
 */
function routeWasmPrints() {
    if (/** @type {any} */ (console.log).klein) return;
    const log = console.log.bind(console);
    const routed = (/** @type {unknown[]} */ ...args) =>
        printSink ? printSink(args.map(String).join(' ')) : log(...args);
    routed.klein = true;
    console.log = routed;
}

/** @type {import('./wasm_parts.js').RuntimeFiles | null} The runtime's parts, until the first session loads them. */
let pendingRuntime = null;

/**
 * Point ORT at the runtime files the build put next to the worker script, and set the thread count.
 * Call once, before the first session.
 * @param {{runtime: import('./wasm_parts.js').RuntimeFiles | null, threads?: number}} options
 *   `runtime`: the loader module and the `.wasm` (absolute URLs), found when the first session is created
 *   (runtime/wasm_parts.js). null keeps ORT's default (the .wasm next to the bundle, with its embedded
 *   loader), which is what an unprocessed esbuild bundle needs.
 */
export function configureOrt({ runtime, threads = ortThreads() }) {
    routeWasmPrints();
    if (runtime) ort.env.wasm.wasmPaths = { mjs: runtime.mjs };
    pendingRuntime = runtime;
    ort.env.wasm.numThreads = threads;
    // The worker is already off the main thread; ORT's proxy worker would only add a copy.
    ort.env.wasm.proxy = false;
    ort.env.logLevel = 'error';
}

/**
 * Before the first session: where onnxruntime gets its `.wasm` (runtime/wasm_parts.js), which it reads when it starts
 * (at that session). Bytes handed over are dropped from here once it has started.
 * @param {() => Promise<import('onnxruntime-web').InferenceSession>} start
 * @returns {Promise<import('onnxruntime-web').InferenceSession>}
 */
async function withRuntime(start) {
    if (!pendingRuntime) return start();
    const source = await runtimeSource(pendingRuntime);
    if ('wasm' in source) ort.env.wasm.wasmPaths = { mjs: pendingRuntime.mjs, wasm: source.wasm };
    else ort.env.wasm.wasmBinary = source.binary;
    pendingRuntime = null;
    try {
        return await start();
    } finally {
        ort.env.wasm.wasmBinary = undefined;
    }
}

/**
 * Create a session from the graph bytes and its external-data files (all in memory: the weight store
 * reads them from OPFS, so ORT never fetches anything itself).
 * @param {Uint8Array} graphBytes
 * @param {ExternalDataFile[]} externalData
 * @param {SessionOptions} options
 * @returns {Promise<Session>}
 */
export async function createSession(
    graphBytes,
    externalData,
    { ep, device, forceCpuNodeNames, staticDims, profile = false, capture = false, weights = [] },
) {
    /** @type {import('onnxruntime-web').InferenceSession.SessionOptions} */
    const options = {
        externalData: externalData.map((file) => ({ path: file.path, data: file.data })),
        graphOptimizationLevel: 'all',
        // 3 = errors only: the expected "some nodes were not assigned to WebGPU" warnings (shape ops,
        // forced CPU nodes) would otherwise reach the console as errors.
        logSeverityLevel: 3,
    };
    if (ep === 'webgpu') {
        if (!device) throw new TypeError('createSession: `device` is required for the webgpu EP.');
        // Object form: the only one that carries `device` and `forceCpuNodeNames`.
        /** @type {import('onnxruntime-web').InferenceSession.WebGpuExecutionProviderOption & {device: GPUDevice}} */
        const webgpu = { name: 'webgpu', device };
        if (forceCpuNodeNames && forceCpuNodeNames.length > 0) webgpu.forceCpuNodeNames = forceCpuNodeNames;
        options.executionProviders = [webgpu];
    } else if (ep === 'wasm') {
        options.executionProviders = ['wasm'];
    } else {
        throw new TypeError(`createSession: ep must be 'webgpu' or 'wasm', got ${JSON.stringify(ep)}.`);
    }
    if (staticDims) options.freeDimensionOverrides = { ...staticDims };
    if (profile) options.enableProfiling = true;
    if (weights.length > 0 && (ep !== 'webgpu' || !GPU_IO)) {
        for (const { buffer } of weights) buffer.destroy();
        throw new TypeError('createSession: weights in GPU buffers need the webgpu EP with GPU I/O.');
    }
    /** @type {Record<string, import('onnxruntime-web').Tensor>} */
    const weightTensors = {};
    for (const { name, buffer, dataType, dims } of weights) {
        const type = /** @type {import('onnxruntime-web').Tensor.GpuBufferDataTypes} */ (dataType);
        weightTensors[name] = ort.Tensor.fromGpuBuffer(buffer, { dataType: type, dims });
    }
    const names = (/** @type {import('onnxruntime-web').InferenceSession} */ inner) => ({
        inputNames: inner.inputNames.filter((name) => !(name in weightTensors)),
        outputNames: [...inner.outputNames],
        weights: weightTensors,
        weightBuffers: weights.map((w) => w.buffer),
    });
    // Outputs stay on the GPU until run() downloads them, so a run returns once its work is queued (submit).
    if (ep === 'webgpu' && GPU_IO) options.preferredOutputLocation = 'gpu-buffer';
    const create = (/** @type {import('onnxruntime-web').InferenceSession.SessionOptions} */ with_) =>
        serialized(() => withRuntime(() => ort.InferenceSession.create(graphBytes, with_)));
    // The session owns the weights' buffers from here: a failed creation destroys them.
    try {
        if (capture && !profile && ep === 'webgpu' && device && staticDims && !GPU_IO) {
            const inner = await create(options);
            const refused = `onnxruntime-web ${ort.env.versions.web} binds no GPU buffers on the app's device`;
            return { inner, ep, ...names(inner), capture: null, captureRefused: refused };
        }
        if (capture && !profile && ep === 'webgpu' && device && staticDims) {
            try {
                const inner = await create({ ...options, enableGraphCapture: true });
                return { inner, ep, ...names(inner), capture: { device, inputs: new Map() }, captureRefused: null };
            } catch (err) {
                // onnxruntime refuses to capture a graph with nodes on the CPU that need copies (a graph whose
                // dims it cannot pin, e.g.): run it uncaptured, slower but the same result.
                const message = err instanceof Error ? err.message : String(err);
                if (!/graph capture/i.test(message)) throw err;
                const inner = await create(options);
                return { inner, ep, ...names(inner), capture: null, captureRefused: message };
            }
        }
        const inner = await create(options);
        return { inner, ep, ...names(inner), capture: null, captureRefused: null };
    } catch (err) {
        for (const { buffer } of weights) buffer.destroy();
        throw err;
    }
}

/**
 * The GPU-resident feeds of a capturing session: each CPU tensor's values are written into the buffer its
 * input got on the first run.
 * @param {Capture} capture
 * @param {Record<string, import('onnxruntime-web').Tensor>} feeds
 * @returns {Record<string, import('onnxruntime-web').Tensor>}
 */
function captureFeeds(capture, feeds) {
    /** @type {Record<string, import('onnxruntime-web').Tensor>} */
    const onDevice = {};
    for (const [name, tensor] of Object.entries(feeds)) {
        const data = /** @type {ArrayBufferView} */ (tensor.data);
        const dims = tensor.dims.join('x');
        let input = capture.inputs.get(name);
        if (!input) {
            const buffer = capture.device.createBuffer({
                size: Math.ceil(data.byteLength / 16) * 16,
                usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
            });
            // Every graph input is one of the types a GPU buffer can hold (float32 and int64 here).
            const dataType = /** @type {import('onnxruntime-web').Tensor.GpuBufferDataTypes} */ (tensor.type);
            input = { buffer, tensor: ort.Tensor.fromGpuBuffer(buffer, { dataType, dims: tensor.dims }), dims };
            capture.inputs.set(name, input);
        } else if (input.dims !== dims) {
            throw new TypeError(
                `A captured session was run with ${name} of dims ${dims}; it captured ${input.dims}. Create a new session for new dims.`,
            );
        }
        capture.device.queue.writeBuffer(input.buffer, 0, data.buffer, data.byteOffset, data.byteLength);
        onDevice[name] = input.tensor;
    }
    return onDevice;
}

/**
 * Run a session: resolves once onnxruntime has queued its work, with the outputs' download under way. Until
 * `outputs` settles the GPU still computes, and the caller may create or run other sessions meanwhile.
 * @param {Session} session
 * @param {Record<string, import('onnxruntime-web').Tensor>} feeds
 * @returns {Promise<{outputs: Promise<Record<string, HostTensor>>}>}
 */
export async function submit(session, feeds) {
    const outputs = await serialized(() =>
        session.inner.run({
            ...(session.capture ? captureFeeds(session.capture, feeds) : feeds),
            ...session.weights,
        }),
    );
    return { outputs: download(session, outputs) };
}

/**
 * Run a session and download every output to the CPU.
 * @param {Session} session
 * @param {Record<string, import('onnxruntime-web').Tensor>} feeds
 * @returns {Promise<Record<string, HostTensor>>}
 */
export async function run(session, feeds) {
    return (await submit(session, feeds)).outputs;
}

/**
 * Every output of a run on the CPU. The downloads start at once (each queues a copy behind the run's work).
 * @param {Session} session
 * @param {import('onnxruntime-web').InferenceSession.OnnxValueMapType} outputs
 * @returns {Promise<Record<string, HostTensor>>}
 */
async function download(session, outputs) {
    // getData() downloads GPU-located outputs (in JS, on the device); CPU outputs are returned as they are.
    const tensors = Object.entries(outputs);
    const data = await Promise.all(tensors.map(([, tensor]) => tensor.getData(false)));
    /** @type {Record<string, HostTensor>} */
    const host = {};
    tensors.forEach(([name, tensor], i) => {
        host[name] = { type: tensor.type, dims: [...tensor.dims], data: data[i] };
    });
    // A captured session's output buffers belong to its recording: never release them. Releasing the others
    // calls into onnxruntime, so it waits its turn.
    if (!session.capture) await serialized(async () => tensors.forEach(([, tensor]) => tensor.dispose()));
    return host;
}

/**
 * End a profiled session's profiling and return its events (Chrome trace events: `cat` 'Session', 'Node' with
 * the CPU-side time of each kernel, 'Api' with each WebGPU program's GPU time). onnxruntime-web has no API that
 * returns them: its wasm module prints the trace to console.log, one event per line, which this reads while it
 * prints (and keeps off the console).
 * @param {Session} session
 * @returns {Promise<ProfileEvent[]>}
 */
export async function profileEvents(session) {
    /** @type {string[]} */
    const lines = [];
    await serialized(async () => {
        printSink = (line) => lines.push(line);
        try {
            await session.inner.endProfiling();
        } finally {
            printSink = null;
        }
    });
    /** @type {ProfileEvent[]} */
    const events = [];
    for (const line of lines) {
        const text = line
            .trim()
            .replace(/^\[/, '')
            .replace(/[,\]]+$/, '')
            .trim();
        if (!text.startsWith('{')) continue;
        try {
            events.push(JSON.parse(text));
        } catch {
            // not an event line
        }
    }
    return events;
}

/** @typedef {import('../shared/types.js').ProfileEvent} ProfileEvent */

/**
 * Free the session's GPU buffers (the wasm heap itself never shrinks).
 * @param {Session} session
 * @returns {Promise<void>}
 */
export async function release(session) {
    try {
        await serialized(() => session.inner.release());
    } finally {
        for (const input of session.capture?.inputs.values() ?? []) input.buffer.destroy();
        session.capture?.inputs.clear();
        for (const buffer of session.weightBuffers) buffer.destroy();
        session.weightBuffers.length = 0;
    }
}

/**
 * @param {Float32Array} data
 * @param {readonly number[]} dims
 * @returns {import('onnxruntime-web').Tensor}
 */
export function float32(data, dims) {
    return new ort.Tensor('float32', data, dims);
}

/**
 * @param {Uint16Array} bits  IEEE half-precision values as their bits.
 * @param {readonly number[]} dims
 * @returns {import('onnxruntime-web').Tensor}
 */
export function float16(bits, dims) {
    return new ort.Tensor('float16', bits, dims);
}

/**
 * @param {Uint8Array} data
 * @param {readonly number[]} dims
 * @returns {import('onnxruntime-web').Tensor}
 */
export function uint8(data, dims) {
    return new ort.Tensor('uint8', data, dims);
}

/**
 * @param {BigInt64Array} data
 * @param {readonly number[]} dims
 * @returns {import('onnxruntime-web').Tensor}
 */
export function int64(data, dims) {
    return new ort.Tensor('int64', data, dims);
}
