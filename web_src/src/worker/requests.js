// @ts-check
/**
 * @file The inference worker's answers: each request of the page <-> worker protocol (protocol.js WorkerApi) runs
 * its handler and gets exactly one `result` or `error` with its id (shared/channel.js serve). It runs on the parts
 * worker/main.js makes (the model, the GPU, the probe, the store's lock), handed in, so node tests it with fakes of
 * them.
 *
 * Concurrency: generate, load and clearCache are *exclusive jobs* and run one at a time in arrival order.
 * A generate sent while another runs is queued, not refused, so "Cancel, then Generate" works without
 * the page having to wait for the cancelled job to wind down. probe, modelInfo, decode and cancel answer at once.
 * Cancel aborts the job's AbortController: a running job stops before the next denoising step and
 * releases its sessions (gives the GPU memory back); a queued job is answered `cancelled` immediately.
 *
 * Some failures run the job again another way (worker/recovery.js): an optional GPU feature that fails at its first
 * use runs it on a device without that feature; a fast-mode run that runs out of memory runs once more in lean mode;
 * half-precision graphs that overflow run it on the fp32-activation graphs.
 *
 * Tabs share the model store (store/store_lock.js): generate and load hold it shared, clearCache exclusively (refused
 * with code 'busy' while a job of any tab uses it), and a clear in another tab makes this worker forget the store.
 * @module worker/requests
 */

import { generate } from '../pipeline/generate.js';
import { decodeRequest } from '../pipeline/input_images.js';
import { loadSessions } from '../pipeline/load_sessions.js';
import { PROTOCOL_VERSION } from '../protocol.js';
import { serve } from '../shared/channel.js';
import { CancelledError } from '../shared/errors.js';
import { runRecovering } from './recovery.js';

/** @typedef {import('../protocol.js').WorkerApi} WorkerApi */
/** @typedef {import('../shared/channel.js').Reply} Reply */
/** @typedef {import('../models/model.js').Model} Model */
/** @typedef {import('../runtime/gpu.js').Gpu} Gpu */

/**
 * @typedef {Object} StoreAccess  The model store as jobs share it with other tabs (store/store_lock.js).
 * @property {<T>(task: () => Promise<T>) => Promise<T>} whileUsing  Run a job that reads or fills the store.
 * @property {<T>(task: () => Promise<T>) => Promise<T>} clearing  Run the clear, refused while any tab uses it.
 * @property {(onCleared: () => void) => void} onCleared  Hear of a clear in another tab.
 * @property {() => Promise<number>} clear  Delete every stored file: the bytes freed.
 */

/**
 * @typedef {Object} WorkerParts  What the requests run on.
 * @property {Model} model
 * @property {Gpu} gpu
 * @property {() => Promise<import('../shared/types.js').Capabilities>} probe  The adapter, its limits and the storage.
 * @property {StoreAccess} store
 * @property {(modelBase: string) => Promise<import('../protocol.js').ModelInfo>} modelInfo  The model's kind and
 *   defaults, from its manifest (store/weights.js readManifest).
 * @property {import('./recovery.js').PrecisionMemory} [precisions]  The precision each model falls back to in this
 *   browser after its half-precision graphs overflowed.
 */

/**
 * Runs exclusive jobs one at a time, each with its own AbortController.
 */
export class JobQueue {
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
 * Answer the page's requests in `scope` from now on.
 * @param {import('../shared/channel.js').Port & {onmessage: ((message: MessageEvent) => void) | null}} scope
 * @param {WorkerParts} parts
 */
export function serveRequests(scope, { model, gpu, probe, store, modelInfo, precisions }) {
    const jobs = new JobQueue();

    /**
     * Run a pipeline function (generate, loadSessions) as an exclusive job, its events sent as the request's.
     * @template T
     * @param {any} params
     * @param {Reply} reply
     * @param {(params: any, options: {model: Model, signal: AbortSignal, onEvent: (event: any) => void}) => Promise<T>} run
     * @returns {Promise<T>}
     */
    const pipelineJob = (params, reply, run) =>
        jobs.run(reply.id, (signal) => {
            const onEvent = (/** @type {any} */ event) => reply.event(event);
            // Shared with other tabs' jobs; a clear in another tab waits for none and is refused meanwhile.
            const job = (/** @type {{precision?: string}} */ overrides) =>
                store.whileUsing(() => run({ ...params, ...overrides }, { model, signal, onEvent }));
            return runRecovering(job, {
                model,
                gpu,
                signal,
                askedMemory: params?.memory,
                askedPrecision: params?.precision || undefined,
                modelBase: params?.modelBase,
                precisions,
                onEvent,
            });
        });

    /** @type {import('../shared/channel.js').Handlers<WorkerApi>} */
    const handlers = {
        probe: async () => ({ ...(await probe()), protocolVersion: PROTOCOL_VERSION }),

        generate: async ({ params }, reply) => {
            const result = await pipelineJob(params, reply, generate);
            reply.transfer(result.rgba.buffer);
            return result;
        },

        // loadSessions releases each session it creates.
        load: ({ params }, reply) => pipelineJob(params, reply, loadSessions),

        modelInfo: async ({ params }) => modelInfo(params?.modelBase),

        decode: async ({ params }, reply) => {
            const result = await decodeRequest(params);
            reply.transfer(result.rgb.buffer);
            return result;
        },

        cancel: async ({ target }) => ({ cancelled: jobs.cancel(String(target)) }),

        clearCache: async (_, reply) => {
            const freedBytes = await jobs.run(reply.id, () =>
                store.clearing(async () => {
                    await model.reset();
                    return store.clear();
                }),
            );
            return { freedBytes };
        },
    };
    serve(scope, handlers);

    // Another tab cleared the store: forget it (after any job of ours), so the next job downloads the model again.
    store.onCleared(() => {
        jobs.run(`store-cleared-${Date.now()}`, () => model.reset()).catch(() => {});
    });
}
