// @ts-check
/**
 * @file The partial copy of a file being downloaded, `<path>.partial` in the store's backend: a response body
 * appended to it (hashed as it is written, made durable every few MiB), its bytes read back for hashing on a
 * resume, and the partial copy discarded with everything recorded beside it.
 * @module store/partial_copy
 */

import { KleinError, ModelFileError, NetworkError } from '../shared/errors.js';
import { IDENTITY_SUFFIX, PARTIAL_SUFFIX } from './backend.js';
import { hashStored } from './hashing.js';

/** @typedef {import('./backend.js').OpfsBackend} OpfsBackend */
/** @typedef {import('./hashing.js').Sha256} Sha256 */

/** Make written bytes durable this often, so a killed tab loses at most this much. */
const FLUSH_EVERY_BYTES = 16 * 1024 * 1024;
/** What earlier versions of the app kept beside a partial copy (its first ETag); removed with the partial copy. */
const OLD_ETAG_SUFFIX = PARTIAL_SUFFIX + '.etag';

/**
 * Append a response body to `<path>.partial`.
 * @param {OpfsBackend} backend
 * @param {Response} response
 * @param {string} path
 * @param {{fromZero: boolean, size: number | null, hasher: Sha256, signal?: AbortSignal, onProgress?: (loaded: number, total: number | null) => void}} options
 *   `hasher` sees every byte written, in order.
 * @returns {Promise<{ended: boolean, bytes: number, error?: string}>} `ended`: the body ended without an error
 *   (which says nothing about whether it was whole).
 */
export async function streamInto(backend, response, path, { fromZero, size, hasher, signal, onProgress }) {
    if (!response.body) throw new NetworkError(`${response.url} returned no body.`, { url: response.url });
    const writer = await backend.openPartial(path, { fromZero });
    const reader = response.body.getReader();
    let sinceFlush = 0;
    try {
        for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            writer.write(value);
            sinceFlush += value.byteLength;
            // Written first: the hasher takes the chunk's buffer.
            await hasher.update(value);
            if (sinceFlush >= FLUSH_EVERY_BYTES) {
                writer.flush();
                sinceFlush = 0;
            }
            if (size !== null && writer.offset > size) {
                throw new ModelFileError(
                    `${response.url} sent more than the expected ${size} bytes; nothing was kept.`,
                );
            }
            onProgress?.(writer.offset, size);
        }
    } catch (err) {
        writer.close();
        // The rest of the body is not wanted (a cut connection has none).
        await reader.cancel().catch(() => {});
        if (signal?.aborted) throw signal.reason;
        if (err instanceof ModelFileError) {
            await discardPartial(backend, path);
            throw err;
        }
        // Out of quota, bytes that are not the manifest's (store/block_check.js), or the hashing failed: not a cut
        // connection.
        if (err instanceof KleinError) throw err;
        // A cut connection: fetch's body stream errors with a TypeError. The bytes so far are kept.
        return { ended: false, bytes: writer.offset, error: String(err) };
    }
    writer.close();
    return { ended: true, bytes: writer.offset };
}

/**
 * Feed the partial copy's first `bytes` bytes, read back from the store, to `hasher`.
 * @param {OpfsBackend} backend
 * @param {string} path
 * @param {number} bytes
 * @param {Sha256} hasher
 * @param {AbortSignal | undefined} signal
 */
export async function hashPartial(backend, path, bytes, hasher, signal) {
    // Closed before the download opens the partial copy to write it (a read-only handle would refuse the writer).
    await hashStored(backend, path + PARTIAL_SUFFIX, hasher, { bytes, signal });
}

/**
 * Remove a partial copy and everything recorded beside it.
 * @param {OpfsBackend} backend
 * @param {string} path
 */
export async function discardPartial(backend, path) {
    await backend.delete(path + PARTIAL_SUFFIX + IDENTITY_SUFFIX);
    await backend.delete(path + OLD_ETAG_SUFFIX);
    await backend.delete(path + PARTIAL_SUFFIX);
}
