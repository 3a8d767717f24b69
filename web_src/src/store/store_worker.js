// @ts-check
/**
 * @file The store's helper worker (a module Web Worker the inference worker starts; store/store_workers.js speaks
 * to it). It does the store's work that would otherwise hold up the inference worker's thread:
 * - a download (store/download.js: fetch, write, resume, verify, complete), whose bytes it hands to a hashing helper
 *   of its own (this same script, started through store/store_workers.js), so writing never waits for a digest;
 * - the SHA-256 of a download (one running digest per download, fed the chunks the downloading thread hands over);
 * - reading a stored file into memory while the inference worker's thread creates a session, checked against the
 *   manifest first (store/stored_check.js);
 * - checking a stored file that the inference worker streams to the GPU, beside the upload.
 *
 * It answers store/store_workers.js StoreHelperApi through shared/channel.js: `ready` once its first hasher's wasm
 * is compiled (so hashing works here), downloads with their progress as events and their cancels, reads and checks
 * of stored files, and the steps of a running hash, which are done one after another in arrival order.
 * @module store/store_worker
 */

import { serve } from '../shared/channel.js';
import { CancelledError } from '../shared/errors.js';
import { OpfsBackend } from './backend.js';
import { downloadFile } from './download.js';
import { createSha256 } from './hashing.js';
import { checkStoredBytes, checkStoredFile } from './stored_check.js';
import { readStored } from './stored_file.js';
import { StoreWorkers, configureStoreWorkers } from './store_workers.js';

/** @typedef {import('./hashing.js').Sha256} Sha256 */
/** @typedef {import('./store_workers.js').StoreHelperApi} StoreHelperApi */

/** A download's progress goes out at most this often (the store's meter throttles further). */
const PROGRESS_INTERVAL_MS = 50;

/** @type {Map<number, Sha256>} The hashes running here, by the asker's name for them. */
const running = new Map();
/** @type {Map<string, AbortController>} The downloads running here, by request id. */
const downloads = new Map();
// This helper's downloads are hashed by one helper of its own (this script), beside the fetching and writing.
configureStoreWorkers(self.location.href, { workers: 1 });
const hashers = new StoreWorkers();
// The first hasher's wasm is compiled now, so `ready` also says that hashing works in this worker.
const hashing = createSha256();
hashing.catch(() => {}); // answered to `ready`
/** Hash steps run one after another, in arrival order (opening a hasher awaits its wasm). */
let queue = Promise.resolve();

/**
 * @template T
 * @param {() => Promise<T>} step
 * @returns {Promise<T>}
 */
function inOrder(step) {
    const done = queue.then(step);
    queue = done.then(
        () => {},
        () => {},
    );
    return done;
}

/**
 * @param {number} hash
 * @returns {Sha256}
 */
function hasher(hash) {
    const found = running.get(hash);
    if (!found) throw new Error(`no running hash ${hash}`);
    return found;
}

/** @type {import('../shared/channel.js').Handlers<StoreHelperApi>} */
const handlers = {
    ready: async () => {
        await hashing;
        return null;
    },

    // Downloads and reads run beside the hashes: they wait on the network and the disk, not on this thread.
    download: async ({ key, url, path, want, blocks }, reply) => {
        const controller = new AbortController();
        downloads.set(reply.id, controller);
        let lastProgress = 0;
        try {
            return await downloadFile(await OpfsBackend.ofKey(key), url, path, {
                want,
                blocks,
                signal: controller.signal,
                openHasher: () => hashers.hasher(),
                onProgress: (loaded, total) => {
                    const now = performance.now();
                    if (now - lastProgress < PROGRESS_INTERVAL_MS) return;
                    lastProgress = now;
                    reply.event({ type: 'progress', loaded, total });
                },
            });
        } finally {
            downloads.delete(reply.id);
        }
    },

    cancel: async ({ target }) => {
        downloads.get(target)?.abort(new CancelledError());
        return null;
    },

    read: async ({ key, path, expected }, reply) => {
        const bytes = await readStored(await OpfsBackend.ofKey(key), path);
        if (expected) await checkStoredBytes(bytes, path, expected);
        reply.transfer(bytes.buffer);
        return bytes;
    },

    check: async ({ key, path, expected }) => {
        const file = await (await OpfsBackend.ofKey(key)).openFile(path);
        try {
            await checkStoredFile(file, path, expected);
        } finally {
            file.close();
        }
        return null;
    },

    hashOpen: ({ hash }) =>
        inOrder(async () => {
            running.set(hash, await createSha256());
            return null;
        }),

    hashUpdate: ({ hash, chunks }) =>
        inOrder(async () => {
            let bytes = 0;
            try {
                for (const chunk of chunks) {
                    bytes += chunk.byteLength;
                    await hasher(hash).update(chunk);
                }
            } catch (err) {
                running.delete(hash);
                throw err;
            }
            return bytes;
        }),

    hashDigest: ({ hash }) =>
        inOrder(async () => {
            const digest = hasher(hash).hex();
            running.delete(hash);
            return digest;
        }),

    hashDrop: ({ hash }) =>
        inOrder(async () => {
            running.delete(hash);
            return null;
        }),
};

serve(/** @type {any} */ (self), handlers);
