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

/**
 * Feed a stored file (or its first bytes) to `hasher`, reading it as a stream (never whole into memory).
 * @param {Blob} blob
 * @param {Sha256} hasher
 * @param {{signal?: AbortSignal}} [options]
 * @returns {Promise<number>} Bytes hashed.
 */
export async function hashBlob(blob, hasher, { signal } = {}) {
    const reader = blob.stream().getReader();
    let bytes = 0;
    try {
        for (;;) {
            signal?.throwIfAborted();
            const { done, value } = await reader.read();
            if (done) break;
            bytes += value.byteLength;
            await hasher.update(value);
        }
    } catch (err) {
        await reader.cancel().catch(() => {});
        throw err;
    }
    return bytes;
}
