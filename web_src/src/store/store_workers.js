// @ts-check
/**
 * @file StoreWorkers: the store's helper workers (store/store_worker.js), which keep slow store work off the inference
 * worker's thread, and spread it over the cores.
 * - Downloading: each download (store/download.js: fetch, write, resume, verify) runs in a helper of its own, up to
 *   the cores, so no file's fetching and writing waits on another's, and the inference worker's thread stays free
 *   (to create a session while the rest of the model arrives). A download's bytes are hashed beside it, in a hashing
 *   helper the download's helper starts (SHA-256 over one file is sequential: the parallelism is across files).
 * - Hashing: the chunks go to the hashing helper after they are written (their buffers move, no copy), in batches,
 *   and the download may run at most WINDOW_BYTES ahead of its hash.
 * - Reading: a stored file is read into memory by a helper, checked against the manifest (store/stored_check.js)
 *   and its buffer moved back, so the next session's files are read while onnxruntime creates the current one (the
 *   inference worker's thread is busy then).
 * - Checking: a stored file streamed to the GPU is read and checked by a helper beside the upload.
 *
 * Where no helper runs (no worker URL configured: node, a plain esbuild bundle; a helper that fails to start), the
 * same work runs on the calling thread (store/download.js, store/hashing.js, store/stored_file.js), behind the same
 * interface.
 * @module store/store_workers
 */

import { KleinError, deserializeError } from '../shared/errors.js';
import { downloadFile } from './download.js';
import { createSha256 } from './hashing.js';
import { checkStoredBytes, checkStoredFile } from './stored_check.js';
import { readStored } from './stored_file.js';

/** @typedef {import('./hashing.js').Sha256} Sha256 */
/** @typedef {import('./stored_check.js').Expected} Expected */
/** @typedef {import('./backend.js').OpfsBackend} OpfsBackend */
/** @typedef {import('./identity.js').FileIdentity} FileIdentity */
/** @typedef {import('../shared/model_repo.js').Blocks} Blocks */

/** Chunks go to a worker in batches of about this many bytes, one message each. */
const BATCH_BYTES = 4 * 1024 * 1024;
/** How far a download may run ahead of its hashing worker before update() waits: the memory it holds. */
const WINDOW_BYTES = 64 * 1024 * 1024;
/** Helpers at most (as many as downloads run at once: store/weights.js). */
export const MAX_WORKERS = 4;

/** @type {string | null} The helper's script (worker/main.js sets it from the build). */
let workerUrl = null;
/** @type {number | null} Helpers per pool; null: from the cores. */
let workersPerPool = null;
/** A helper failed here once: later work runs on the calling thread. */
let workersFail = false;

/**
 * Where the helper's script is (null: the work runs on the calling thread), and how many helpers a pool starts at
 * most (by default one fewer than the cores, at most MAX_WORKERS).
 * @param {string | null} url
 * @param {{workers?: number}} [options]
 */
export function configureStoreWorkers(url, { workers } = {}) {
    workerUrl = url;
    workersPerPool = workers ?? null;
    workersFail = false;
}

/** @returns {number} Workers for a pool: one core is left to the thread that fetches and writes. */
function defaultSize() {
    const cores = typeof navigator !== 'undefined' && navigator.hardwareConcurrency ? navigator.hardwareConcurrency : 2;
    return Math.max(1, Math.min(MAX_WORKERS, cores - 1));
}

/**
 * Whether `chunk` is the whole of a plain ArrayBuffer, which can then move to the worker without a copy.
 * @param {Uint8Array} chunk
 * @returns {boolean}
 */
function ownsBuffer(chunk) {
    const buffer = chunk.buffer;
    return buffer instanceof ArrayBuffer && chunk.byteOffset === 0 && chunk.byteLength === buffer.byteLength;
}

/**
 * @typedef {Object} Job  Work a helper does for this thread, answered by messages with its id.
 * @property {(answer: any) => void} receive
 * @property {(err: Error) => void} fail
 */

/** One helper worker and the jobs it has. */
class Helper {
    /**
     * @param {string} url
     */
    constructor(url) {
        this.worker = new Worker(url, { type: 'module', name: 'klein-store' });
        /** @type {Map<number, Job>} */
        this.jobs = new Map();
        /** Work given to this helper and not finished (counted from when it is chosen, before it is sent). */
        this.busy = 0;
        /** @type {Error | null} */
        this.error = null;
        /** @type {(value: void) => void} */
        let started = () => {};
        /** @type {(err: Error) => void} */
        let refused = () => {};
        /** @type {Promise<void>} Settles when the helper has hashing ready, or failed to start. */
        this.ready = new Promise((resolve, reject) => {
            started = resolve;
            refused = reject;
        });
        this.ready.catch(() => {});
        this.worker.onmessage = ({ data }) => {
            if (data.type === 'ready') started();
            else if (data.type === 'error' && data.id === -1) this.fail(new Error(data.message), refused);
            else this.jobs.get(data.id)?.receive(data);
        };
        this.worker.onerror = (event) => {
            event.preventDefault();
            this.fail(new Error(event.message || "the store's helper worker did not start"), refused);
        };
    }

    /**
     * @param {Error} err
     * @param {(err: Error) => void} refused
     */
    fail(err, refused) {
        this.error = err;
        workersFail = true;
        refused(err);
        for (const job of this.jobs.values()) job.fail(err);
        this.jobs.clear();
        this.worker.terminate();
    }

    /**
     * @param {any} message
     * @param {Transferable[]} [transfer]
     */
    post(message, transfer = []) {
        this.worker.postMessage(message, transfer);
    }
}

let nextId = 0;

/**
 * A SHA-256 running in a helper.
 * @implements {Sha256}
 * @implements {Job}
 */
class HelperSha256 {
    /**
     * @param {Helper} helper
     */
    constructor(helper) {
        this.helper = helper;
        this.id = nextId++;
        this.bytes = 0;
        /** @type {Uint8Array[]} */
        this.batch = [];
        this.batchBytes = 0;
        /** Bytes sent and not yet hashed. */
        this.inFlight = 0;
        /** @type {{resolve: (value: any) => void, reject: (err: Error) => void} | null} */
        this.waiter = null;
        /** @type {Error | null} */
        this.error = null;
        helper.jobs.set(this.id, this);
        helper.post({ type: 'open', id: this.id });
    }

    /** @param {Uint8Array} chunk */
    async update(chunk) {
        if (this.error) throw this.error;
        this.batch.push(chunk);
        this.batchBytes += chunk.byteLength;
        this.bytes += chunk.byteLength;
        if (this.batchBytes >= BATCH_BYTES) this.send();
        if (this.inFlight > WINDOW_BYTES) await this.wait();
    }

    send() {
        if (this.batch.length === 0) return;
        /** @type {Transferable[]} */
        const transfer = [];
        const chunks = this.batch.map((chunk) => {
            if (!ownsBuffer(chunk) || transfer.includes(chunk.buffer)) return chunk.slice();
            transfer.push(chunk.buffer);
            return chunk;
        });
        this.helper.post({ type: 'update', id: this.id, chunks }, transfer);
        this.inFlight += this.batchBytes;
        this.batch = [];
        this.batchBytes = 0;
    }

    /** @returns {Promise<any>} Settles with the helper's next answer that wakes this hasher. */
    wait() {
        return new Promise((resolve, reject) => {
            this.waiter = { resolve, reject };
        });
    }

    async hex() {
        if (this.error) throw this.error;
        this.send();
        this.helper.post({ type: 'digest', id: this.id });
        for (;;) {
            const answer = await this.wait();
            if (answer.type === 'digest') {
                this.end();
                return /** @type {string} */ (answer.hex);
            }
        }
    }

    drop() {
        if (this.error || !this.helper.jobs.has(this.id)) return;
        this.end();
        this.helper.post({ type: 'drop', id: this.id });
    }

    /** The helper no longer works for this hasher. */
    end() {
        if (this.helper.jobs.delete(this.id)) this.helper.busy--;
    }

    /** @param {{type: string, bytes?: number, hex?: string, message?: string}} answer */
    receive(answer) {
        if (answer.type === 'error') {
            this.fail(
                new KleinError(
                    `Hashing a model file failed in the store's helper worker (${answer.message}). Press Generate again: the download resumes.`,
                ),
            );
            return;
        }
        if (answer.type === 'hashed') this.inFlight -= answer.bytes ?? 0;
        // update() waits for room in the window, hex() for the digest.
        if (this.waiter && (answer.type === 'digest' || this.inFlight <= WINDOW_BYTES)) {
            const { resolve } = this.waiter;
            this.waiter = null;
            resolve(answer);
        }
    }

    /** @param {Error} err */
    fail(err) {
        this.error = err;
        this.end();
        this.waiter?.reject(err);
        this.waiter = null;
    }
}

/**
 * Send `message` to `helper` as job `id` and settle with its last answer; an 'error' answer rejects with the error
 * it carries. `onProgress` sees the 'progress' answers before it.
 * @param {Helper} helper
 * @param {number} id
 * @param {Record<string, any>} message
 * @param {(answer: any) => void} [onProgress]
 * @returns {Promise<any>}
 */
function ask(helper, id, message, onProgress = () => {}) {
    return new Promise((resolve, reject) => {
        helper.jobs.set(id, {
            receive(answer) {
                if (answer.type === 'progress') return onProgress(answer);
                helper.jobs.delete(id);
                if (answer.type !== 'error') resolve(answer);
                else reject(answer.error ? deserializeError(answer.error) : new Error(answer.message));
            },
            fail: reject,
        });
        helper.post({ ...message, id });
    });
}

/** Helper workers of one store, started when first needed; close() ends them. */
export class StoreWorkers {
    /**
     * @param {{url?: string | null, size?: number}} [options]  `url`: the helper's script (default: the configured
     *   one); `size`: helpers at most.
     */
    constructor({ url = workerUrl, size = workersPerPool ?? defaultSize() } = {}) {
        this.url = typeof Worker === 'undefined' ? null : url;
        this.size = size;
        /** @type {Helper[]} */
        this.helpers = [];
    }

    /**
     * The least busy helper, a new one when every running one has work and there is room; null where no helper runs.
     * The helper counts as busy from here on: the caller's work must end with `helper.busy--`.
     * @returns {Promise<Helper | null>}
     */
    async helper() {
        if (this.url === null || workersFail) return null;
        this.helpers = this.helpers.filter((h) => h.error === null);
        let helper = this.helpers.reduce(
            (best, h) => (best === null || h.busy < best.busy ? h : best),
            /** @type {Helper | null} */ (null),
        );
        if ((helper === null || helper.busy > 0) && this.helpers.length < this.size) {
            try {
                helper = new Helper(this.url);
                this.helpers.push(helper);
            } catch {
                workersFail = true;
                return null;
            }
        }
        const chosen = /** @type {Helper} */ (helper);
        // Counted before the wait, so calls made meanwhile (four downloads starting at once) choose other helpers.
        chosen.busy++;
        try {
            await chosen.ready;
        } catch {
            chosen.busy--;
            return null;
        }
        return chosen;
    }

    /**
     * A hasher for one download, in a helper (or on this thread where none runs).
     * @returns {Promise<Sha256>}
     */
    async hasher() {
        const helper = await this.helper();
        return helper ? new HelperSha256(helper) : createSha256();
    }

    /**
     * A stored file's bytes, read by a helper (or on this thread where none runs): store/stored_file.js readStored,
     * then checked against `expected` (store/stored_check.js; a StoredFileError when they are not that file).
     * @param {OpfsBackend} backend
     * @param {string} path
     * @param {Expected | null} [expected]
     * @returns {Promise<Uint8Array>}
     */
    async read(backend, path, expected = null) {
        const helper = await this.helper();
        if (!helper) {
            const bytes = await readStored(backend, path);
            if (expected) await checkStoredBytes(bytes, path, expected);
            return bytes;
        }
        try {
            return (await ask(helper, nextId++, { type: 'read', key: backend.key, path, expected })).bytes;
        } finally {
            helper.busy--;
        }
    }

    /**
     * Check a stored file against `expected` (store/stored_check.js checkStoredFile), in a helper (or on this thread
     * where none runs): a StoredFileError when it is not that file.
     * @param {OpfsBackend} backend
     * @param {string} path
     * @param {Expected} expected
     * @returns {Promise<void>}
     */
    async check(backend, path, expected) {
        const helper = await this.helper();
        if (!helper) {
            const file = await backend.openFile(path);
            try {
                return await checkStoredFile(file, path, expected);
            } finally {
                file.close();
            }
        }
        try {
            await ask(helper, nextId++, { type: 'check', key: backend.key, path, expected });
        } finally {
            helper.busy--;
        }
    }

    /**
     * Download one file into the store (store/download.js downloadFile, same options and result), in a helper of its
     * own where one runs: there it fetches, writes and completes the file, hashed by a helper of that helper's.
     * Aborting `signal` stops the helper's download, and this settles once it has stopped.
     * @param {OpfsBackend} backend
     * @param {string} url
     * @param {string} path
     * @param {{want?: FileIdentity, blocks?: Blocks | null, signal?: AbortSignal,
     *   onProgress?: (loaded: number, total: number | null) => void}} [options]
     * @returns {Promise<{size: number, identity: FileIdentity, restarted: string | null}>}
     */
    async download(backend, url, path, { want, blocks = null, signal, onProgress } = {}) {
        const helper = await this.helper();
        if (!helper) {
            const openHasher = () => this.hasher();
            return downloadFile(backend, url, path, { want, blocks, signal, onProgress, openHasher });
        }
        const id = nextId++;
        const cancel = () => helper.post({ type: 'cancel', id });
        signal?.addEventListener('abort', cancel, { once: true });
        try {
            signal?.throwIfAborted();
            // The helper finds the store's folder by its key (directory handles do not cross threads everywhere).
            const message = { type: 'download', key: backend.key, url, path, want, blocks };
            const done = await ask(helper, id, message, (answer) => onProgress?.(answer.loaded, answer.total));
            return { size: done.size, identity: done.identity, restarted: done.restarted ?? null };
        } catch (err) {
            if (signal?.aborted) throw signal.reason;
            if (err instanceof KleinError) throw err;
            throw new KleinError(
                `Downloading ${url} failed in the store's helper worker (${err instanceof Error ? err.message : err}). ` +
                    'Press Generate again: the download resumes.',
            );
        } finally {
            signal?.removeEventListener('abort', cancel);
            helper.busy--;
        }
    }

    /** End the helpers (their running work is given up). */
    close() {
        for (const { worker } of this.helpers) worker.terminate();
        this.helpers = [];
    }
}
