// @ts-check
/**
 * @file Incremental SHA-256 of model files, fed chunk by chunk as they stream in (WebCrypto's digest() takes
 * only whole buffers, which a multi-GB file never is). hash-wasm: a maintained WebAssembly SHA-256, about
 * twice as fast as a pure-JS one; the build's CSP already allows WebAssembly for onnxruntime-web.
 * This is the hasher that runs on the calling thread; store/store_workers.js runs the same one in helper workers,
 * behind the same interface, so several files hash at once while the store's thread fetches and writes.
 * @module store/hashing
 */

import { createSHA256 } from 'hash-wasm';

/**
 * @typedef {Object} Sha256
 * @property {(chunk: Uint8Array) => Promise<void>} update  Hands `chunk` over: the caller must not read or change
 *   it afterwards (a hashing worker takes its buffer). The promise settles when more may be fed.
 * @property {() => Promise<string>} hex  The digest (lowercase hex); the hasher must not be used after it.
 * @property {() => void} drop  Give the hasher up without a digest (a failed or restarted download).
 * @property {number} bytes  How many bytes it has been fed.
 */

/** @returns {Promise<Sha256>} A hasher on this thread. */
export async function createSha256() {
    const hasher = await createSHA256();
    hasher.init();
    let bytes = 0;
    return {
        async update(chunk) {
            hasher.update(chunk);
            bytes += chunk.byteLength;
        },
        async hex() {
            return hasher.digest('hex');
        },
        drop() {},
        get bytes() {
            return bytes;
        },
    };
}

/** Bytes read from a stored file per hasher update. */
const HASH_READ_BYTES = 4 * 1024 * 1024;

/**
 * Feed the first `bytes` bytes (all of them by default) of the stored file at `path` to `hasher`, a piece at a time
 * (never whole into memory), through openFile (store/backend.js OpfsBackend.openFile); the file is closed again
 * before this returns. Each piece has a buffer of its own: a hasher may take it.
 * @param {{openFile: (path: string) => Promise<import('./stored_file.js').StoredFile>}} backend
 * @param {string} path
 * @param {Sha256} hasher
 * @param {{bytes?: number, signal?: AbortSignal}} [options]
 * @returns {Promise<number>} Bytes hashed.
 */
export async function hashStored(backend, path, hasher, { bytes = Infinity, signal } = {}) {
    const file = await backend.openFile(path);
    try {
        const end = Math.min(bytes, file.size);
        let done = 0;
        while (done < end) {
            signal?.throwIfAborted();
            const piece = await file.read(done, Math.min(HASH_READ_BYTES, end - done));
            if (piece.byteLength === 0) break;
            done += piece.byteLength;
            await hasher.update(piece);
        }
        return done;
    } finally {
        file.close();
    }
}
