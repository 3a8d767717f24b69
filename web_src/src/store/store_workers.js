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
 * interface. A helper is asked through shared/channel.js, typed by StoreHelperApi.
 * @module store/store_workers
 */

import { Channel } from '../shared/channel.js';
import { KleinError } from '../shared/errors.js';
import { downloadFile } from './download.js';
import { createSha256 } from './hashing.js';
import { checkStoredBytes, checkStoredFile } from './stored_check.js';
import { readStored } from './stored_file.js';

/** @typedef {import('./hashing.js').Sha256} Sha256 */
/** @typedef {import('./stored_check.js').Expected} Expected */
/** @typedef {import('./backend.js').OpfsBackend} OpfsBackend */
/** @typedef {import('./identity.js').FileIdentity} FileIdentity */
/** @typedef {import('../shared/model_repo.js').Blocks} Blocks */

/**
 * @typedef {{
 *   ready: {request: {}, result: null},
 *   download: {request: {key: string, url: string, path: string, want: FileIdentity | undefined,
 *     blocks: Blocks | null}, result: {size: number, identity: FileIdentity, restarted: string | null},
 *     event: {type: 'progress', loaded: number, total: number | null}},
 *   cancel: {request: {target: string}, result: null},
 *   read: {request: {key: string, path: string, expected: Expected | null}, result: Uint8Array},
 *   check: {request: {key: string, path: string, expected: Expected}, result: null},
 *   hashOpen: {request: {hash: number}, result: null},
 *   hashUpdate: {request: {hash: number, chunks: Uint8Array[]}, result: number},
 *   hashDigest: {request: {hash: number}, result: string},
 *   hashDrop: {request: {hash: number}, result: null},
 * }} StoreHelperApi  What the store asks of a helper (store/store_worker.js answers): `ready` once hashing works
 *   there; a download into the store (`key`: the store's, store/backend.js), its progress as events, and its cancel
 *   (`target`: the download's request id); a stored file read (its buffer moved back) and checked against the
 *   manifest (`expected`, store/stored_check.js), or only checked; a running SHA-256 (`hash`
 *   names it), fed chunks whose buffers move, each update answered with the bytes it hashed.
 */

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

/** One helper worker, and the channel its work goes through. */
class Helper {
    /**
     * @param {string} url
     */
    constructor(url) {
        this.worker = new Worker(url, { type: 'module', name: 'klein-store' });
        /** @type {Channel<StoreHelperApi>} */
        this.channel = new Channel(this.worker);
        /** Work given to this helper and not finished (counted from when it is chosen, before it is sent). */
        this.busy = 0;
        /** @type {Error | null} */
        this.error = null;
        this.worker.onmessage = ({ data }) => this.channel.receive(data);
        this.worker.onerror = (event) => {
            event.preventDefault();
            this.fail(new Error(event.message || "the store's helper worker did not start"));
        };
        /** @type {Promise<null>} Settles when the helper has hashing ready, or failed to start. */
        this.ready = this.channel.request('ready', {});
        this.ready.catch((err) => this.fail(err));
    }

    /**
     * The helper can do nothing more: what waits for it fails, and later work runs on the calling thread.
     * @param {Error} err
     */
    fail(err) {
        if (this.error) return;
        this.error = err;
        workersFail = true;
        this.channel.failAll(err);
        this.worker.terminate();
    }
}

let nextHash = 0;

/**
 * A SHA-256 running in a helper.
 * @implements {Sha256}
 */
class HelperSha256 {
    /**
     * @param {Helper} helper
     */
    constructor(helper) {
        this.helper = helper;
        this.hash = nextHash++;
        /** Bytes handed to update(). */
        this.bytes = 0;
        /** @type {Uint8Array[]} */
        this.batch = [];
        this.batchBytes = 0;
        /** Bytes sent and not yet hashed. */
        this.inFlight = 0;
        /** @type {Set<Promise<void>>} The updates sent and not yet answered. */
        this.updates = new Set();
        /** @type {Error | null} */
        this.error = null;
        /** The helper no longer works for this hasher. */
        this.ended = false;
        this.ask('hashOpen', { hash: this.hash });
    }

    /**
     * Ask the helper for part of the hash; a refusal fails the hasher.
     * @template {'hashOpen' | 'hashUpdate' | 'hashDigest' | 'hashDrop'} T
     * @param {T} type
     * @param {StoreHelperApi[T]['request']} body
     * @param {Transferable[]} [transfer]
     * @returns {Promise<StoreHelperApi[T]['result']>}
     */
    ask(type, body, transfer = []) {
        const answer = this.helper.channel.request(type, body, { transfer });
        answer.catch((err) => this.fail(err));
        return answer;
    }

    /** @param {Uint8Array} chunk */
    async update(chunk) {
        if (this.error) throw this.error;
        this.batch.push(chunk);
        this.batchBytes += chunk.byteLength;
        this.bytes += chunk.byteLength;
        if (this.batchBytes >= BATCH_BYTES) this.send();
        // The download may run WINDOW_BYTES ahead of the hash, no further.
        while (this.inFlight > WINDOW_BYTES && !this.error) await Promise.race(this.updates);
        if (this.error) throw this.error;
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
        const bytes = this.batchBytes;
        this.inFlight += bytes;
        const update = this.ask('hashUpdate', { hash: this.hash, chunks }, transfer).then(
            () => {
                this.inFlight -= bytes;
            },
            () => {},
        );
        this.updates.add(update);
        update.then(() => this.updates.delete(update));
        this.batch = [];
        this.batchBytes = 0;
    }

    async hex() {
        if (this.error) throw this.error;
        this.send();
        const hex = await this.ask('hashDigest', { hash: this.hash }).catch(() => {
            throw this.error;
        });
        this.end();
        return hex;
    }

    drop() {
        if (this.error || this.ended) return;
        this.end();
        this.helper.channel.request('hashDrop', { hash: this.hash }).catch(() => {});
    }

    /** The helper no longer works for this hasher. */
    end() {
        if (this.ended) return;
        this.ended = true;
        this.helper.busy--;
    }

    /** @param {unknown} err */
    fail(err) {
        this.error ??= new KleinError(
            `Hashing a model file failed in the store's helper worker (${err instanceof Error ? err.message : err}). ` +
                'Press Generate again: the download resumes.',
        );
        this.end();
    }
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
            return await helper.channel.request('read', { key: backend.key, path, expected });
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
            await helper.channel.request('check', { key: backend.key, path, expected });
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
        /** @type {string | null} */
        let id = null;
        const cancel = () => {
            if (id !== null) helper.channel.request('cancel', { target: id }).catch(() => {});
        };
        signal?.addEventListener('abort', cancel, { once: true });
        try {
            signal?.throwIfAborted();
            // The helper finds the store's folder by its key (directory handles do not cross threads everywhere).
            const sent = helper.channel.send(
                'download',
                { key: backend.key, url, path, want, blocks },
                { onEvent: (event) => onProgress?.(event.loaded, event.total) },
            );
            id = sent.id;
            return await sent.result;
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
