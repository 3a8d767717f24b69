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
 * Messages in: {type: 'download', id, key, url, path, want, blocks} (key: the store's, store/backend.js),
 * {type: 'cancel', id};
 * {type: 'open' | 'update' | 'digest' | 'drop', id, chunks?} for hashes; {type: 'read' | 'check', id, key, path,
 * expected} (expected: stored_check.js Expected, or null).
 * Out: {type: 'ready'} once, then {type: 'progress', id, loaded, total} and {type: 'downloaded', id, size, identity},
 * {type: 'hashed', id, bytes} per update, {type: 'digest', id, hex}, {type: 'read', id, bytes} (its buffer
 * transferred), {type: 'checked', id}, or {type: 'error', id, message, error?} (error: shared/errors.js
 * serializeError).
 * @module store/store_worker
 */

import { CancelledError, serializeError } from '../shared/errors.js';
import { OpfsBackend } from './backend.js';
import { downloadFile } from './download.js';
import { createSha256 } from './hashing.js';
import { checkStoredBytes, checkStoredFile } from './stored_check.js';
import { readStored } from './stored_file.js';
import { StoreWorkers, configureStoreWorkers } from './store_workers.js';

/** @typedef {import('./hashing.js').Sha256} Sha256 */
/** @typedef {import('./stored_check.js').Expected} Expected */

/** A download's progress goes out at most this often (the store's meter throttles further). */
const PROGRESS_INTERVAL_MS = 50;

/** @type {Map<number, Sha256>} */
const running = new Map();
/** @type {Map<number, AbortController>} The downloads running here. */
const downloads = new Map();
// This helper's downloads are hashed by one helper of its own (this script), beside the fetching and writing.
configureStoreWorkers(self.location.href, { workers: 1 });
const hashers = new StoreWorkers();
/** Hash messages are handled one after another, in arrival order (opening a hasher awaits its wasm). */
let queue = Promise.resolve();

/**
 * @param {{type: string, id: number, chunks?: Uint8Array[]}} message
 */
async function hash({ type, id, chunks = [] }) {
    if (type === 'open') {
        running.set(id, await createSha256());
        return;
    }
    const hasher = running.get(id);
    if (!hasher) throw new Error(`no running hash ${id}`);
    if (type === 'update') {
        let bytes = 0;
        for (const chunk of chunks) {
            bytes += chunk.byteLength;
            await hasher.update(chunk);
        }
        postMessage({ type: 'hashed', id, bytes });
    } else if (type === 'digest') {
        running.delete(id);
        postMessage({ type: 'digest', id, hex: await hasher.hex() });
    } else if (type === 'drop') {
        running.delete(id);
    }
}

/**
 * @param {{id: number, key: string, path: string, expected: Expected | null}} message
 */
async function read({ id, key, path, expected }) {
    const bytes = await readStored(await OpfsBackend.ofKey(key), path);
    if (expected) await checkStoredBytes(bytes, path, expected);
    postMessage({ type: 'read', id, bytes }, [bytes.buffer]);
}

/**
 * @param {{id: number, key: string, path: string, expected: Expected}} message
 */
async function check({ id, key, path, expected }) {
    const file = await (await OpfsBackend.ofKey(key)).openFile(path);
    try {
        await checkStoredFile(file, path, expected);
    } finally {
        file.close();
    }
    postMessage({ type: 'checked', id });
}

/**
 * @param {{id: number, key: string, url: string, path: string,
 *   want: import('./identity.js').FileIdentity, blocks: import('../shared/model_repo.js').Blocks | null}} message
 */
async function download({ id, key, url, path, want, blocks }) {
    const controller = new AbortController();
    downloads.set(id, controller);
    let lastProgress = 0;
    try {
        const stored = await downloadFile(await OpfsBackend.ofKey(key), url, path, {
            want,
            blocks,
            signal: controller.signal,
            openHasher: () => hashers.hasher(),
            onProgress: (loaded, total) => {
                const now = performance.now();
                if (now - lastProgress < PROGRESS_INTERVAL_MS) return;
                lastProgress = now;
                postMessage({ type: 'progress', id, loaded, total });
            },
        });
        postMessage({
            type: 'downloaded',
            id,
            size: stored.size,
            identity: stored.identity,
            restarted: stored.restarted,
        });
    } finally {
        downloads.delete(id);
    }
}

/**
 * @param {{id: number}} message
 * @param {unknown} err
 */
function refuse({ id }, err) {
    running.delete(id);
    postMessage({ type: 'error', id, message: String(err), error: serializeError(err) });
}

onmessage = ({ data }) => {
    // Downloads and reads run beside the hashes: they wait on the network and the disk, not on this thread.
    if (data.type === 'download') download(data).catch((err) => refuse(data, err));
    else if (data.type === 'cancel') downloads.get(data.id)?.abort(new CancelledError());
    else if (data.type === 'read') read(data).catch((err) => refuse(data, err));
    else if (data.type === 'check') check(data).catch((err) => refuse(data, err));
    else queue = queue.then(() => hash(data)).catch((err) => refuse(data, err));
};

// The first hasher's wasm is compiled now, so `ready` also says that hashing works in this worker.
createSha256().then(
    () => postMessage({ type: 'ready' }),
    (err) => postMessage({ type: 'error', id: -1, message: String(err) }),
);
