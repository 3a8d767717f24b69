// @ts-check
/**
 * @file `WorkerClient`: the page's only door to the inference worker, and the only page module that
 * touches `Worker`. Each request gets an id and a pending entry; the worker answers every id with
 * exactly one `result` or `error` (see protocol.js), and the events in between go to the caller's
 * `onEvent`. Errors come back as real error classes (deserializeError), so the UI can switch on `code`.
 * @module page/worker_client
 */

import { ErrorCode, KleinError, deserializeError } from '../shared/errors.js';

/** @typedef {import('../protocol.js').Event} WorkerEvent */
/** @typedef {import('../protocol.js').GenerateParams} GenerateParams */
/** @typedef {import('../protocol.js').GenerateResult} GenerateResult */
/** @typedef {import('../shared/types.js').Capabilities} Capabilities */

/**
 * @typedef {Object} Pending
 * @property {(value: any) => void} resolve
 * @property {(reason: Error) => void} reject
 * @property {((event: WorkerEvent) => void) | undefined} onEvent
 */

/**
 * A request without its id (the client assigns ids).
 * @typedef {{type: 'probe'} | {type: 'generate', params: GenerateParams} | {type: 'cancel', target: string}
 *   | {type: 'clearCache'} | {type: 'modelInfo', params: {modelBase: string}}} RequestBody
 */

export class WorkerClient {
    /** @type {string | URL} */
    #url;
    /** @type {Worker | null} */
    #worker = null;
    #nextId = 1;
    /** @type {Map<string, Pending>} */
    #pending = new Map();
    /** @type {string | null} id of the generate request in flight (cancel targets it) */
    #generateId = null;

    /** @param {string | URL} workerUrl  The module worker bundle (`<meta name="klein-worker">`). */
    constructor(workerUrl) {
        this.#url = workerUrl;
    }

    /** @returns {Promise<Capabilities>} Adapter, limits and storage, probed in the worker before any download. */
    probe() {
        return this.#request({ type: 'probe' });
    }

    /**
     * What kind of model `modelBase` holds (its manifest's `pipeline`), answered without any download.
     * @param {string} modelBase
     * @returns {Promise<import('../protocol.js').ModelInfo>}
     */
    modelInfo(modelBase) {
        return this.#request({ type: 'modelInfo', params: { modelBase } });
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
        const { id, promise } = this.#post({ type: 'generate', params }, onEvent);
        this.#generateId = id;
        try {
            return await promise;
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
        return this.#request({ type: 'cancel', target: this.#generateId });
    }

    /** @returns {Promise<{freedBytes: number}>} Deletes the downloaded model files from this browser. */
    clearCache() {
        return this.#request({ type: 'clearCache' });
    }

    /**
     * Throws the worker away and starts a fresh one on the next request: after a lost GPU device this
     * guarantees a clean runtime whatever state the old worker was left in. Weights stay in storage.
     */
    restart() {
        this.#worker?.terminate();
        this.#worker = null;
        this.#failAll(new KleinError('The inference worker was restarted.', { code: ErrorCode.WORKER_RESTARTED }));
    }

    /**
     * @param {RequestBody} body
     * @param {(event: WorkerEvent) => void} [onEvent]
     * @returns {Promise<any>}
     */
    #request(body, onEvent) {
        return this.#post(body, onEvent).promise;
    }

    /**
     * @param {RequestBody} body
     * @param {(event: WorkerEvent) => void} [onEvent]
     * @returns {{id: string, promise: Promise<any>}}
     */
    #post(body, onEvent) {
        const id = `req-${this.#nextId++}`;
        const worker = this.#worker ?? this.#spawn();
        const promise = new Promise((resolve, reject) => {
            this.#pending.set(id, { resolve, reject, onEvent });
        });
        worker.postMessage({ ...body, id });
        return { id, promise };
    }

    /** @returns {Worker} */
    #spawn() {
        const worker = new Worker(this.#url, { type: 'module', name: 'klein-inference' });
        worker.addEventListener('message', (event) => this.#onMessage(event.data));
        worker.addEventListener('error', (event) => {
            // An uncaught error or a failed module load: the worker cannot be trusted to answer any
            // pending id, so fail them all and start a new worker on the next request.
            event.preventDefault();
            const where = event.filename ? ` (${event.filename}:${event.lineno})` : '';
            this.#crash(`${event.message || 'the worker script failed to load or threw'}${where}`);
        });
        worker.addEventListener('messageerror', () => this.#crash('a message from the worker could not be read'));
        this.#worker = worker;
        return worker;
    }

    /** @param {WorkerEvent} event */
    #onMessage(event) {
        const pending = this.#pending.get(event.id);
        if (!pending) return; // A late event of a request that already ended (e.g. progress after cancel).
        if (event.type === 'result') {
            this.#pending.delete(event.id);
            pending.resolve(event.result);
        } else if (event.type === 'error') {
            this.#pending.delete(event.id);
            pending.reject(deserializeError(event.error));
        } else {
            pending.onEvent?.(event);
        }
    }

    /** @param {string} reason */
    #crash(reason) {
        this.#worker?.terminate();
        this.#worker = null;
        this.#failAll(
            new KleinError(
                `The inference worker stopped: ${reason}. Try again; if it keeps happening, reload the page.`,
                {
                    code: ErrorCode.WORKER_CRASHED,
                },
            ),
        );
    }

    /** @param {Error} error */
    #failAll(error) {
        const pending = [...this.#pending.values()];
        this.#pending.clear();
        this.#generateId = null;
        for (const entry of pending) entry.reject(error);
    }
}
