// @ts-check
/**
 * @file Incremental SHA-256 of model files, fed chunk by chunk as they stream in (WebCrypto's digest() takes
 * only whole buffers, which a multi-GB file never is). hash-wasm: a maintained WebAssembly SHA-256, about
 * twice as fast as a pure-JS one; the build's CSP already allows WebAssembly for onnxruntime-web.
 * Hashing runs where the store runs, in the worker, so it never blocks the page.
 * @module store/hashing
 */

import { createSHA256 } from 'hash-wasm';

/**
 * @typedef {Object} Sha256
 * @property {(chunk: Uint8Array) => void} update
 * @property {() => string} hex  The digest (lowercase hex); the hasher must not be used after it.
 * @property {number} bytes      How many bytes it has seen.
 */

/** @returns {Promise<Sha256>} */
export async function createSha256() {
    const hasher = await createSHA256();
    hasher.init();
    let bytes = 0;
    return {
        update(chunk) {
            hasher.update(chunk);
            bytes += chunk.byteLength;
        },
        hex() {
            return hasher.digest('hex');
        },
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
            hasher.update(value);
            bytes += value.byteLength;
        }
    } catch (err) {
        await reader.cancel().catch(() => {});
        throw err;
    }
    return bytes;
}
