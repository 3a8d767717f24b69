// @ts-check
/**
 * @file The store's helper worker (a module Web Worker the inference worker starts; store/store_workers.js speaks
 * to it). It does the store's work that would otherwise hold up the inference worker's thread: the SHA-256 of a
 * download (one running digest per download, fed the chunks the store hands over, so hashing runs beside fetching
 * and writing, several files at once), and reading a stored file into memory while that thread creates a session.
 *
 * Messages in: {type: 'open' | 'update' | 'digest' | 'drop', id, chunks?} for hashes, {type: 'read', id, file};
 * out: {type: 'ready'} once, then {type: 'hashed', id, bytes} per update, {type: 'digest', id, hex},
 * {type: 'read', id, bytes} (its buffer transferred), or {type: 'error', id, message}.
 * @module store/store_worker
 */

import { createSha256 } from './hashing.js';

/** @typedef {import('./hashing.js').Sha256} Sha256 */

/** @type {Map<number, Sha256>} */
const running = new Map();
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
 * @param {{id: number, file: Blob}} message
 */
async function read({ id, file }) {
    const bytes = new Uint8Array(await file.arrayBuffer());
    postMessage({ type: 'read', id, bytes }, [bytes.buffer]);
}

/**
 * @param {{id: number}} message
 * @param {unknown} err
 */
function refuse({ id }, err) {
    running.delete(id);
    postMessage({ type: 'error', id, message: String(err) });
}

onmessage = ({ data }) => {
    // A read runs beside the hashes: it waits on the disk, not on this thread.
    if (data.type === 'read') read(data).catch((err) => refuse(data, err));
    else queue = queue.then(() => hash(data)).catch((err) => refuse(data, err));
};

// The first hasher's wasm is compiled now, so `ready` also says that hashing works in this worker.
createSha256().then(
    () => postMessage({ type: 'ready' }),
    (err) => postMessage({ type: 'error', id: -1, message: String(err) }),
);
