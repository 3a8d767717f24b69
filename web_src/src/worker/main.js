// @ts-check
/**
 * @file The inference worker's entry point (a module Web Worker). It builds the long-lived objects once
 * (GPU, models, job queue), then answers each request of the page <-> worker protocol (protocol.js)
 * through a dispatch table, with exactly one `result` or `error` per request id.
 *
 * Concurrency: generate, load and clearCache are *exclusive jobs* and run one at a time in arrival order.
 * A generate sent while another runs is queued, not refused, so "Cancel, then Generate" works without
 * the page having to wait for the cancelled job to wind down. probe and cancel answer at once.
 * Cancel aborts the job's AbortController: a running job stops before the next denoising step and
 * releases its sessions (gives the GPU memory back); a queued job is answered `cancelled` immediately.
 *
 * Some failures run the job again another way (worker/recovery.js): an optional GPU feature that fails at its first
 * use (runtime/errors.js GpuFeatureError) runs it on a device without that feature (runtime/gpu.js
 * Gpu.dropFeature), and once it succeeds the browser version is remembered to lack the feature
 * (store/feature_memory.js); a fast-mode run that runs out of memory runs once more in lean memory mode.
 *
 * Tabs share the model store (store/store_lock.js): generate and load hold it shared, clearCache exclusively (refused
 * with code 'busy' while a job of any tab uses it), and a clear in another tab makes this worker forget the store.
 * @module worker/main
 */

import { generate } from '../pipeline/generate.js';
import { decodeRequest } from '../pipeline/input_images.js';
import { loadSessions } from '../pipeline/load_sessions.js';
import { Models } from '../pipeline/models.js';
import { PROTOCOL_VERSION } from '../protocol.js';
import { Gpu, OPTIONAL_FEATURES, probe } from '../runtime/gpu.js';
import { configureOrt, ortThreads } from '../runtime/ort.js';
import { runtimeFiles } from '../runtime/wasm_parts.js';
import { CancelledError, InputError, serializeError } from '../shared/errors.js';
import { opfsSupport } from '../store/backend.js';
import { featureMemory } from '../store/feature_memory.js';
import { configureStoreWorkers } from '../store/store_workers.js';
import { configureTokenizerWorker } from '../pipeline/tokenizer_helper.js';
import { clearingStore, onStoreCleared, whileUsingStore } from '../store/store_lock.js';
import { WeightStore } from '../store/weights.js';
import { recoveryFor } from './recovery.js';

/** @typedef {import('../protocol.js').Request} Request */
/** @typedef {import('../protocol.js').Event} Event */

/**
 * The onnxruntime runtime files as absolute URLs. builder/site/bundle.py injects KLEIN_ORT_WASM (names relative to
 * this script's folder, the `.wasm` in parts: builder/site/runtime_files.py); a plain esbuild bundle has none and ORT
 * finds its .wasm itself.
 * @param {string} scriptUrl
 * @returns {import('../runtime/wasm_parts.js').RuntimeFiles | null}
 */
function ortRuntime(scriptUrl) {
    // KLEIN_ORT_WASM is an esbuild --define (declared in build_defines.d.ts), not a runtime global.
    return typeof KLEIN_ORT_WASM === 'undefined' ? null : runtimeFiles(KLEIN_ORT_WASM, scriptUrl);
}

/**
 * The store's helper worker script as an absolute URL (builder/site/bundle.py injects KLEIN_STORE_WORKER, relative
 * to this script's folder); without one the store does all its work on this thread.
 * @param {string} scriptUrl
 * @returns {string | null}
 */
function storeWorkerUrl(scriptUrl) {
    // KLEIN_STORE_WORKER is an esbuild --define (declared in build_defines.d.ts), not a runtime global.
    return typeof KLEIN_STORE_WORKER === 'undefined' ? null : new URL(KLEIN_STORE_WORKER, scriptUrl).href;
}

/**
 * The tokenizer's helper worker script as an absolute URL (KLEIN_TOKENIZER_WORKER, like KLEIN_STORE_WORKER); without
 * one the tokenizer is built and run on this thread.
 * @param {string} scriptUrl
 * @returns {string | null}
 */
function tokenizerWorkerUrl(scriptUrl) {
    return typeof KLEIN_TOKENIZER_WORKER === 'undefined' ? null : new URL(KLEIN_TOKENIZER_WORKER, scriptUrl).href;
}

/**
 * The optional GPU feature the worker's URL asks to break (`?gpu-fault=subgroups`): its shaders then fail to
 * compile, as in a browser that implements it wrongly, so tests and GPU runs can exercise the fallback.
 * @param {string} scriptUrl
 * @returns {string | null}
 */
function injectedFault(scriptUrl) {
    const fault = new URL(scriptUrl).searchParams.get('gpu-fault');
    if (fault === null) return null;
    if (!OPTIONAL_FEATURES.includes(fault)) {
        console.warn(`gpu-fault=${fault} ignored: it must be one of ${OPTIONAL_FEATURES.join(', ')}.`);
        return null;
    }
    return fault;
}

/**
 * What the probe adds to the GPU's answer for the page's capability decision (shared/browser_needs.js): whether
 * WebGPU exists here at all, the OPFS methods the store can use, and the device's memory.
 * @param {DedicatedWorkerGlobalScope} scope
 * @returns {{gpuApi: boolean, opfs: import('../shared/types.js').OpfsSupport, deviceMemory: number | null}}
 */
function storeAndMemory(scope) {
    const nav = /** @type {WorkerNavigator & {deviceMemory?: number}} */ (scope.navigator);
    return { gpuApi: Boolean(nav.gpu), opfs: opfsSupport(scope), deviceMemory: nav.deviceMemory ?? null };
}

/**
 * Runs exclusive jobs one at a time, each with its own AbortController.
 */
class JobQueue {
    constructor() {
        /** @type {Promise<unknown>} */
        this.tail = Promise.resolve();
        /** @type {Map<string, {controller: AbortController, started: boolean}>} */
        this.jobs = new Map();
    }

    /**
     * @template T
     * @param {string} id
     * @param {(signal: AbortSignal) => Promise<T>} task
     * @returns {Promise<T>}
     */
    run(id, task) {
        const controller = new AbortController();
        const job = { controller, started: false };
        this.jobs.set(id, job);
        const chained = this.tail.then(() => {
            job.started = true;
            controller.signal.throwIfAborted();
            return task(controller.signal);
        });
        // A job cancelled while still queued is answered now, not when the jobs before it finish.
        const cancelledWhileQueued = new Promise((_, reject) => {
            controller.signal.addEventListener('abort', () => job.started || reject(controller.signal.reason), {
                once: true,
            });
        });
        const result = /** @type {Promise<T>} */ (Promise.race([chained, cancelledWhileQueued])).finally(() =>
            this.jobs.delete(id),
        );
        this.tail = chained.catch(() => {});
        return result;
    }

    /**
     * @param {string} id
     * @returns {boolean} Whether a job with that id was running or queued.
     */
    cancel(id) {
        const job = this.jobs.get(id);
        if (!job) return false;
        job.controller.abort(new CancelledError());
        return true;
    }
}

/**
 * Wire the protocol to the pipeline in a worker scope.
 * @param {DedicatedWorkerGlobalScope} scope
 */
export function startWorker(scope) {
    const threads = ortThreads();
    configureOrt({ runtime: ortRuntime(scope.location.href), threads });
    configureStoreWorkers(storeWorkerUrl(scope.location.href));
    configureTokenizerWorker(tokenizerWorkerUrl(scope.location.href));
    const gpu = new Gpu({ memory: featureMemory, fault: injectedFault(scope.location.href) });
    const models = new Models({ gpu });
    const jobs = new JobQueue();

    /**
     * @param {Event} event
     * @param {Transferable[]} [transfer]
     */
    const post = (event, transfer = []) => scope.postMessage(event, transfer);

    /**
     * Run a pipeline function (generate, loadSessions) as an exclusive job, its events tagged with the request id.
     * @template T
     * @param {{id: string, params: any}} request
     * @param {(params: any, options: {models: Models, signal: AbortSignal, onEvent: (event: any) => void}) => Promise<T>} run
     * @returns {Promise<T>}
     */
    const pipelineJob = (request, run) =>
        jobs.run(request.id, async (signal) => {
            const onEvent = (/** @type {any} */ event) => post(/** @type {Event} */ ({ ...event, id: request.id }));
            /** @type {string[]} Features given up during this job. */
            const dropped = [];
            let leanTried = false;
            for (;;) {
                try {
                    // Shared with other tabs' jobs; a clear in another tab waits for none and is refused meanwhile.
                    const result = await whileUsingStore(() => run(request.params, { models, signal, onEvent }));
                    await gpu.remember(dropped);
                    return result;
                } catch (err) {
                    const recovery = recoveryFor(err, {
                        aborted: signal.aborted,
                        memoryMode: models.memory.mode,
                        askedMemory: request.params?.memory,
                        leanTried,
                    });
                    if (recovery?.kind === 'drop-feature') {
                        // Each retry gives up one more feature the device has, so this ends.
                        await models.releaseAll();
                        gpu.dropFeature(recovery.feature, recovery.reason);
                        dropped.push(recovery.feature);
                        onEvent({
                            type: 'stage',
                            stage: 'load',
                            detail: `again without ${recovery.feature}, which failed in this browser`,
                        });
                        continue;
                    }
                    if (recovery?.kind === 'lean') {
                        // This worker runs lean from now on: the machine could not hold the fast mode's sessions.
                        leanTried = true;
                        await models.releaseAll();
                        models.leanAfterFailure = recovery.reason;
                        onEvent({
                            type: 'stage',
                            stage: 'load',
                            detail: `again in lean memory mode: ${recovery.reason}`,
                        });
                        continue;
                    }
                    // Cancelled or failed mid-run: give the GPU memory back; the next run reloads from the store.
                    if (signal.aborted || dropped.length > 0) await models.releaseAll();
                    // Failing without the features as well, they were not the cause: the next job has them again.
                    if (!signal.aborted) gpu.restore(dropped);
                    throw signal.aborted ? signal.reason : err;
                }
            }
        });

    /** @type {Readonly<Record<string, (request: any) => Promise<{result: any, transfer?: Transferable[]}>>>} */
    const handlers = Object.freeze({
        probe: async () => ({
            result: { ...(await probe({ threads })), ...storeAndMemory(scope), protocolVersion: PROTOCOL_VERSION },
        }),

        generate: async (/** @type {{id: string, params: any}} */ request) => {
            const result = await pipelineJob(request, generate);
            return { result, transfer: [result.rgba.buffer] };
        },

        // loadSessions releases each session it creates.
        load: async (/** @type {{id: string, params: any}} */ request) => ({
            result: await pipelineJob(request, loadSessions),
        }),

        decode: async (/** @type {{params: any}} */ request) => {
            const result = await decodeRequest(request.params);
            return { result, transfer: [result.rgb.buffer] };
        },

        cancel: async (/** @type {{target: string}} */ request) => ({
            result: { cancelled: jobs.cancel(String(request.target)) },
        }),

        clearCache: async (/** @type {{id: string}} */ request) => {
            const freedBytes = await jobs.run(request.id, () =>
                clearingStore(async () => {
                    await models.reset();
                    return WeightStore.clear();
                }),
            );
            return { result: { freedBytes } };
        },
    });

    // Another tab cleared the store: forget it (after any job of ours), so the next job downloads the model again.
    onStoreCleared(() => {
        jobs.run(`store-cleared-${Date.now()}`, () => models.reset()).catch(() => {});
    });

    scope.onmessage = async (/** @type {MessageEvent} */ message) => {
        const request = message.data;
        const id = String(request?.id ?? '');
        try {
            const handler = Object.hasOwn(handlers, request?.type) ? handlers[request.type] : undefined;
            if (!handler) {
                throw new InputError(
                    `Unknown request type ${JSON.stringify(request?.type)}; expected one of ${Object.keys(handlers).join(', ')} (protocol ${PROTOCOL_VERSION}).`,
                );
            }
            const { result, transfer } = await handler(request);
            post({ type: 'result', id, result }, transfer);
        } catch (err) {
            post({ type: 'error', id, error: serializeError(err) });
        }
    };
}

startWorker(/** @type {DedicatedWorkerGlobalScope} */ (/** @type {unknown} */ (self)));
