// @ts-check
/**
 * @file `WorkerClient`: the page's only door to the inference worker, and the only page module that
 * touches `Worker`. Its requests go through a channel (shared/channel.js, typed by protocol.js WorkerApi): the
 * worker answers each with exactly one `result` or `error`, and the events in between go to the caller's
 * `onEvent`. Errors come back as real error classes (deserializeError), so the UI can switch on `code`.
 * @module page/worker_client
 */

import { Channel } from '../shared/channel.js';
import { ErrorCode, KleinError } from '../shared/errors.js';

/** @typedef {import('../protocol.js').JobEvent} WorkerEvent */
/** @typedef {import('../protocol.js').WorkerApi} WorkerApi */
/** @typedef {import('../protocol.js').GenerateParams} GenerateParams */
/** @typedef {import('../protocol.js').GenerateResult} GenerateResult */
/** @typedef {import('../shared/types.js').Capabilities} Capabilities */

export class WorkerClient {
    /** @type {string | URL} */
    #url;
    /** @type {Worker | null} */
    #worker = null;
    /** @type {Channel<WorkerApi> | null} The requests to #worker. */
    #channel = null;
    /** @type {string | null} id of the generate request in flight (cancel targets it) */
    #generateId = null;

    /** @param {string | URL} workerUrl  The module worker bundle (`<meta name="klein-worker">`). */
    constructor(workerUrl) {
        this.#url = workerUrl;
    }

    /** @returns {Promise<Capabilities>} Adapter, limits and storage, probed in the worker before any download. */
    probe() {
        return this.#open().request('probe', {});
    }

    /**
     * What kind of model `modelBase` holds (its manifest's `pipeline`), answered without any download.
     * @param {string} modelBase
     * @returns {Promise<import('../protocol.js').ModelInfo>}
     */
    modelInfo(modelBase) {
        return this.#open().request('modelInfo', { params: { modelBase } });
    }

    /**
     * Runs one generation. Rejects with CancelledError after `cancel()`.
     * @param {GenerateParams} params
     * @param {{onEvent?: (event: WorkerEvent) => void}} [options]
     * @returns {Promise<GenerateResult>}
     */
    async generate(params, { onEvent } = {}) {
        if (this.#generateId !== null) {
            throw new KleinError('A generation is already running: cancel it or wait for it to finish.', {
                code: ErrorCode.ALREADY_RUNNING,
            });
        }
        const { id, result } = this.#open().send('generate', { params }, { onEvent });
        this.#generateId = id;
        try {
            return await result;
        } finally {
            this.#generateId = null;
        }
    }

    /**
     * Asks the worker to stop the running generation at its next step boundary.
     * @returns {Promise<{cancelled: boolean}>}
     */
    cancel() {
        if (this.#generateId === null) return Promise.resolve({ cancelled: false });
        return this.#open().request('cancel', { target: this.#generateId });
    }

    /** @returns {Promise<{freedBytes: number}>} Deletes the downloaded model files from this browser. */
    clearCache() {
        return this.#open().request('clearCache', {});
    }

    /**
     * Throws the worker away and starts a fresh one on the next request: after a lost GPU device this
     * guarantees a clean runtime whatever state the old worker was left in. Weights stay in storage.
     */
    restart() {
        this.#end(new KleinError('The inference worker was restarted.', { code: ErrorCode.WORKER_RESTARTED }));
    }

    /** @returns {Channel<WorkerApi>} The channel to the worker, started on the first request after none or an end. */
    #open() {
        if (this.#channel) return this.#channel;
        const worker = new Worker(this.#url, { type: 'module', name: 'klein-inference' });
        /** @type {Channel<WorkerApi>} */
        const channel = new Channel(worker);
        worker.addEventListener('message', (event) => channel.receive(event.data));
        worker.addEventListener('error', (event) => {
            // An uncaught error or a failed module load: the worker cannot be trusted to answer any
            // pending id, so fail them all and start a new worker on the next request.
            event.preventDefault();
            const where = event.filename ? ` (${event.filename}:${event.lineno})` : '';
            this.#crash(`${event.message || 'the worker script failed to load or threw'}${where}`);
        });
        worker.addEventListener('messageerror', () => this.#crash('a message from the worker could not be read'));
        this.#worker = worker;
        this.#channel = channel;
        return channel;
    }

    /** @param {string} reason */
    #crash(reason) {
        this.#end(
            new KleinError(
                `The inference worker stopped: ${reason}. Try again; if it keeps happening, reload the page.`,
                {
                    code: ErrorCode.WORKER_CRASHED,
                },
            ),
        );
    }

    /**
     * End the worker: every request waiting fails with `error`, and the next request starts a new worker.
     * @param {Error} error
     */
    #end(error) {
        this.#worker?.terminate();
        this.#worker = null;
        const channel = this.#channel;
        this.#channel = null;
        this.#generateId = null;
        channel?.failAll(error);
    }
}
