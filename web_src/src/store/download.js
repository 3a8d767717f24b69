// @ts-check
/**
 * @file Resumable HTTP download of one model file into the store's backend.
 *
 * Rules it keeps (each one fixes a failure users of browser diffusion apps hit):
 * - bytes land in `<path>.partial` and a retry resumes with `Range: bytes=N-` (206) instead of starting
 *   over; If-Range with the first response's ETag makes a changed file restart rather than mix;
 * - a cut connection is resumed a few times before the error reaches the user, and what arrived is kept;
 * - a non-2xx response or an HTML page is never written, so an error page cannot become a "model file";
 * - a file becomes complete only at the expected size.
 * @module store/download
 */

import { CancelledError, ModelFileError, NetworkError, QuotaError } from '../shared/errors.js';
import { formatBytes } from '../shared/format.js';
import { PARTIAL_SUFFIX } from './backend.js';

/** @typedef {import('./backend.js').OpfsBackend} OpfsBackend */

/** How often a cut download is resumed before the error reaches the user. */
const MAX_RESUMES = 3;
/** Make written bytes durable this often, so a killed tab loses at most this much. */
const FLUSH_EVERY_BYTES = 16 * 1024 * 1024;
/** The ETag of the response a partial copy began with, kept beside it for If-Range. */
const ETAG_SUFFIX = PARTIAL_SUFFIX + '.etag';

/**
 * Parse `Content-Range: bytes START-END/TOTAL` (TOTAL may be '*').
 * @param {string | null} header
 * @returns {{start: number, total: number | null} | null}
 */
export function parseContentRange(header) {
    const match = /^bytes (\d+)-(\d+)\/(\d+|\*)$/.exec((header ?? '').trim());
    if (!match) return null;
    return { start: Number(match[1]), total: match[3] === '*' ? null : Number(match[3]) };
}

/**
 * Download one file into the store, resuming a partial copy with an HTTP Range request.
 * @param {OpfsBackend} backend
 * @param {string} url
 * @param {string} path  Repo-relative storage path.
 * @param {{expectedSize?: number | null, signal?: AbortSignal, onProgress?: (loaded: number, total: number | null) => void}} [options]
 * @returns {Promise<number>} The stored size.
 */
export async function downloadFile(backend, url, path, { expectedSize = null, signal, onProgress } = {}) {
    let have = await backend.partialSize(path);
    if (expectedSize !== null && have > expectedSize) have = 0;
    let etag = have > 0 ? await backend.readText(path + ETAG_SUFFIX) : null;
    for (let attempt = 0; ; attempt++) {
        signal?.throwIfAborted();
        /** @type {Record<string, string>} */
        const headers = {};
        if (have > 0) {
            headers.Range = `bytes=${have}-`;
            // If-Range: when the file changed on the server since the partial copy began, the server
            // sends the whole new file (200) instead of the rest of a different one.
            if (etag && !etag.startsWith('W/')) headers['If-Range'] = etag;
        }
        let response;
        try {
            response = await fetch(url, { headers, signal, cache: 'no-store' });
        } catch (err) {
            if (signal?.aborted) throw signal.reason;
            if (attempt < MAX_RESUMES) {
                await sleep(signal, 500 * (attempt + 1));
                continue;
            }
            throw new NetworkError(`Downloading ${url} failed (${String(err)}). Check the connection and press Generate again: it resumes.`, { url });
        }
        if (response.status === 416 && have > 0) {
            // Nothing after byte `have`: the partial copy is already whole, or longer than the file.
            await response.body?.cancel();
            if (expectedSize === null || have === expectedSize) return finish(backend, path, have, expectedSize, url);
            have = 0;
            continue;
        }
        if (!response.ok) throw httpError(url, response.status);
        const contentType = response.headers.get('content-type') ?? '';
        if (/text\/html/i.test(contentType) && !path.endsWith('.html')) {
            await response.body?.cancel();
            throw new ModelFileError(
                `${url} answered with an HTML page instead of the model file (a login, error or proxy page). ` +
                    'Check the model URL; nothing was stored.',
                { url },
            );
        }
        let fromZero = true;
        let total = null;
        if (response.status === 206) {
            // Cross-origin hosts may not expose Content-Range (it is not CORS-safelisted); a 206 to a
            // single `bytes=N-` range starts at N by definition (RFC 9110 section 14.4).
            const header = response.headers.get('content-range');
            const length = response.headers.get('content-length');
            const range = header === null ? { start: have, total: length === null ? null : have + Number(length) } : parseContentRange(header);
            if (!range || range.start !== have) {
                // A range we did not ask for: start over rather than stitch mismatched bytes.
                await response.body?.cancel();
                have = 0;
                continue;
            }
            fromZero = false;
            total = range.total;
        } else {
            // 200: the server ignored Range (or If-Range saw a changed file): the body is the whole file.
            have = 0;
            const length = response.headers.get('content-length');
            total = length === null ? null : Number(length);
        }
        if (expectedSize !== null && total !== null && total !== expectedSize) {
            await response.body?.cancel();
            throw new ModelFileError(
                `${url} has ${total} bytes but the model manifest says ${expectedSize}: the manifest is stale or the ` +
                    'server sends a different file. Reload the page; if it persists, the model repository is inconsistent.',
                { url, total, expectedSize },
            );
        }
        const size = expectedSize ?? total;
        if (fromZero) {
            etag = response.headers.get('etag');
            if (etag) await backend.writeText(path + ETAG_SUFFIX, etag);
            else await backend.delete(path + ETAG_SUFFIX);
        }
        const outcome = await streamInto(backend, response, path, { fromZero, size, signal, onProgress });
        if (outcome.complete) return finish(backend, path, outcome.bytes, size, url);
        // The connection broke (or ended early): resume from what is on disk.
        have = outcome.bytes;
        if (attempt >= MAX_RESUMES) {
            throw new NetworkError(
                `Downloading ${url} was interrupted ${attempt + 1} times (${outcome.error ?? 'connection closed early'}). ` +
                    `${formatBytes(have)} are kept; press Generate again to resume.`,
                { url, have },
            );
        }
        await sleep(signal, 250 * (attempt + 1));
    }
}

/**
 * Append a response body to `<path>.partial`.
 * @param {OpfsBackend} backend
 * @param {Response} response
 * @param {string} path
 * @param {{fromZero: boolean, size: number | null, signal?: AbortSignal, onProgress?: (loaded: number, total: number | null) => void}} options
 * @returns {Promise<{complete: boolean, bytes: number, error?: string}>}
 */
async function streamInto(backend, response, path, { fromZero, size, signal, onProgress }) {
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
            if (sinceFlush >= FLUSH_EVERY_BYTES) {
                writer.flush();
                sinceFlush = 0;
            }
            if (size !== null && writer.offset > size) {
                throw new ModelFileError(`${response.url} sent more than the expected ${size} bytes; nothing was kept.`);
            }
            onProgress?.(writer.offset, size);
        }
    } catch (err) {
        writer.close();
        if (signal?.aborted) throw signal.reason;
        if (err instanceof ModelFileError) {
            await backend.delete(path + PARTIAL_SUFFIX);
            throw err;
        }
        if (err instanceof QuotaError) throw err;
        // A cut connection: fetch's body stream errors with a TypeError. The bytes so far are kept.
        return { complete: false, bytes: writer.offset, error: String(err) };
    }
    writer.close();
    return { complete: size === null || writer.offset === size, bytes: writer.offset };
}

/**
 * Verify the final size and mark the file complete.
 * @param {OpfsBackend} backend
 * @param {string} path
 * @param {number} bytes
 * @param {number | null} expectedSize
 * @param {string} url
 * @returns {Promise<number>}
 */
async function finish(backend, path, bytes, expectedSize, url) {
    if (expectedSize !== null && bytes !== expectedSize) {
        await backend.delete(path + PARTIAL_SUFFIX);
        throw new ModelFileError(`${url}: downloaded ${bytes} bytes, expected ${expectedSize}. The copy was discarded; try again.`, {
            url,
        });
    }
    await backend.commit(path);
    await backend.delete(path + ETAG_SUFFIX);
    return bytes;
}
/**
 * A file's size from the server's HEAD answer (null when it sends no Content-Length).
 * @param {string} url
 * @param {AbortSignal | undefined} signal
 * @returns {Promise<number | null>}
 */
export async function contentLength(url, signal) {
    let response;
    try {
        response = await fetch(url, { method: 'HEAD', signal, cache: 'no-store' });
    } catch (err) {
        if (signal?.aborted) throw signal.reason;
        throw new NetworkError(`Could not reach ${url} (${String(err)}). Check the connection and press Generate again.`, { url });
    }
    if (!response.ok) throw httpError(url, response.status);
    const length = response.headers.get('content-length');
    return length === null ? null : Number(length);
}


/**
 * @param {AbortSignal | undefined} signal
 * @param {number} ms
 * @returns {Promise<void>}
 */
function sleep(signal, ms) {
    return new Promise((resolve, reject) => {
        const timer = setTimeout(resolve, ms);
        signal?.addEventListener('abort', () => {
            clearTimeout(timer);
            reject(signal.reason ?? new CancelledError());
        }, { once: true });
    });
}

/**
 * @param {string} url
 * @param {number} status
 * @returns {Error}
 */
function httpError(url, status) {
    if (status === 404) {
        return new ModelFileError(`${url} does not exist on the model server (HTTP 404). Check the model URL and its manifest.`, {
            url,
            status,
        });
    }
    return new NetworkError(`The model server answered HTTP ${status} for ${url}. Press Generate again later; downloads resume.`, {
        url,
        status,
    });
}
