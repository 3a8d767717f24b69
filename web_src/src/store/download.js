// @ts-check
/**
 * @file Resumable, verified HTTP download of one model file into the store's backend.
 *
 * Rules it keeps (each one fixes a failure users of browser diffusion apps hit):
 * - bytes land in `<path>.partial`, with the identity of the version they belong to beside them; a retry
 *   resumes with `Range: bytes=N-` only when the server proves it still has that version (If-Range with a
 *   strong ETag or Last-Modified, answered 206); otherwise it starts over from byte 0, so bytes of two
 *   versions are never stitched together;
 * - the bytes are hashed (SHA-256) as they arrive; on a resume the stored bytes are hashed first, so the
 *   digest always covers the whole file, and a digest that differs from the manifest's discards the file;
 * - a file becomes complete only at a size the manifest or the server stated, and with the manifest's
 *   sha256 when it lists one: a stream that ends early or a 416 never completes a file by itself;
 * - a cut connection is resumed a few times before the error reaches the user, and what arrived is kept;
 * - a non-2xx response or an HTML page is never written, so an error page cannot become a "model file".
 * @module store/download
 */

import { CancelledError, IntegrityError, ModelFileError, NetworkError, QuotaError } from '../shared/errors.js';
import { formatBytes } from '../shared/format.js';
import { IDENTITY_SUFFIX, PARTIAL_SUFFIX } from './backend.js';
import { createSha256, hashBlob } from './hashing.js';
import { UNKNOWN, compareIdentity, fromResponse, resumePlan } from './identity.js';

/** @typedef {import('./backend.js').OpfsBackend} OpfsBackend */
/** @typedef {import('./identity.js').FileIdentity} FileIdentity */
/** @typedef {import('./hashing.js').Sha256} Sha256 */

/** How often a cut download is resumed before the error reaches the user. */
const MAX_RESUMES = 3;
/** Requests for one file in one call, whatever the reason (cuts, restarts): a bound on a misbehaving server. */
const MAX_REQUESTS = 10;
/** Make written bytes durable this often, so a killed tab loses at most this much. */
const FLUSH_EVERY_BYTES = 16 * 1024 * 1024;
/** What earlier versions of the app kept beside a partial copy (its first ETag); removed with the partial copy. */
const OLD_ETAG_SUFFIX = PARTIAL_SUFFIX + '.etag';

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
 * The file size a 416 states (`Content-Range: bytes *\/TOTAL`), or null.
 * @param {string | null} header
 * @returns {number | null}
 */
export function unsatisfiedRangeTotal(header) {
    const match = /^bytes \*\/(\d+)$/.exec((header ?? '').trim());
    return match ? Number(match[1]) : null;
}

/**
 * Remove a partial copy and everything recorded beside it.
 * @param {OpfsBackend} backend
 * @param {string} path
 */
async function discardPartial(backend, path) {
    await backend.delete(path + PARTIAL_SUFFIX + IDENTITY_SUFFIX);
    await backend.delete(path + OLD_ETAG_SUFFIX);
    await backend.delete(path + PARTIAL_SUFFIX);
}

/**
 * A hasher that has seen the first `bytes` bytes of the partial copy, read back from the store.
 * @param {OpfsBackend} backend
 * @param {string} path
 * @param {number} bytes
 * @param {AbortSignal | undefined} signal
 * @returns {Promise<Sha256>}
 */
async function hashStoredPartial(backend, path, bytes, signal) {
    const hasher = await createSha256();
    await hashBlob((await backend.read(path + PARTIAL_SUFFIX)).slice(0, bytes), hasher, { signal });
    return hasher;
}

/**
 * Download one file into the store, resuming a partial copy of the same version with an HTTP Range request.
 * @param {OpfsBackend} backend
 * @param {string} url
 * @param {string} path  Repo-relative storage path.
 * @param {{want?: FileIdentity, signal?: AbortSignal, onProgress?: (loaded: number, total: number | null) => void}} [options]
 *   `want`: the version to download: the manifest's size and sha256, or what the server said about the
 *   file (store/identity.js).
 * @returns {Promise<{size: number, identity: FileIdentity}>} The stored size and the identity recorded with it.
 */
export async function downloadFile(backend, url, path, { want = UNKNOWN, signal, onProgress } = {}) {
    const restart = { from: 0, ifRange: /** @type {string | null} */ (null) };
    let partial = await backend.readIdentity(path + PARTIAL_SUFFIX);
    let plan = resumePlan(partial, await backend.partialSize(path), want);
    /** @type {Sha256 | null} The running hash of the partial copy's first `hasher.bytes` bytes. */
    let hasher = null;
    /** The partial copy holds bytes of more than one response (a digest mismatch may come from that). */
    let resumed = false;
    let restartedAfterMismatch = false;
    let cuts = 0;

    /**
     * The bytes are all there: check the digest and make the file complete; null when it must start over.
     * @param {number} bytes
     * @returns {Promise<{size: number, identity: FileIdentity} | null>}
     */
    const complete = async (bytes) => {
        const digest = /** @type {Sha256} */ (hasher).hex();
        hasher = null;
        if (want.sha256 !== null && digest !== want.sha256) {
            await discardPartial(backend, path);
            // Bytes of two responses may disagree even when the server vouched for them (an ETag that survives
            // a copy preserving mtimes): one whole fresh download settles it.
            if (resumed && !restartedAfterMismatch) {
                restartedAfterMismatch = true;
                return null;
            }
            throw new IntegrityError(
                `${url} does not match the model's manifest: its SHA-256 is ${digest}, the manifest says ${want.sha256}. ` +
                    'The downloaded copy was deleted.',
                { url, path, sha256: digest, expected: want.sha256 },
            );
        }
        const identity = {
            size: bytes,
            sha256: digest,
            etag: partial?.etag ?? null,
            lastModified: partial?.lastModified ?? null,
        };
        await backend.commit(path, identity);
        return { size: bytes, identity };
    };

    for (let attempt = 0; ; attempt++) {
        signal?.throwIfAborted();
        if (attempt >= MAX_REQUESTS) {
            throw new NetworkError(
                `Downloading ${url} did not succeed in ${attempt} requests; the server keeps answering unexpectedly. Try again later.`,
                { url },
            );
        }
        /** @type {Record<string, string>} */
        const headers = {};
        if (plan.from > 0 && plan.ifRange !== null) {
            headers.Range = `bytes=${plan.from}-`;
            // The server sends the rest (206) only while it has the version the partial copy began with;
            // a changed file comes whole (200) and is written from byte 0.
            headers['If-Range'] = plan.ifRange;
        }
        let response;
        try {
            response = await fetch(url, { headers, signal, cache: 'no-store' });
        } catch (err) {
            if (signal?.aborted) throw signal.reason;
            // If-Range makes a cross-origin request need a CORS preflight, which some hosts refuse: that fails
            // like a dropped connection. A host that still answers a plain HEAD is up, so the download starts
            // over without conditions instead of failing the same way on every retry.
            if (plan.from > 0 && (await answers(url, signal))) {
                plan = restart;
                continue;
            }
            if (cuts++ < MAX_RESUMES) {
                await sleep(signal, 500 * cuts);
                continue;
            }
            throw new NetworkError(
                `Downloading ${url} failed (${String(err)}). Check the connection and press Generate again: it resumes.`,
                { url },
            );
        }
        if (response.status === 416 && plan.from > 0) {
            // Nothing after byte `from`: the partial copy may be whole, or longer than a changed file. Only a
            // stated size (and the manifest's hash) can tell.
            await response.body?.cancel();
            const size =
                want.size ?? unsatisfiedRangeTotal(response.headers.get('content-range')) ?? partial?.size ?? null;
            if (size === plan.from || (size === null && want.sha256 !== null)) {
                if (!hasher || hasher.bytes !== plan.from)
                    hasher = await hashStoredPartial(backend, path, plan.from, signal);
                // These bytes came from earlier responses, possibly from before a cut: a mismatch earns one fresh start.
                resumed = true;
                const done = await complete(plan.from);
                if (done) return done;
            }
            plan = restart;
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
            const range =
                header === null
                    ? { start: plan.from, total: length === null ? null : plan.from + Number(length) }
                    : parseContentRange(header);
            if (
                plan.from === 0 ||
                !range ||
                range.start !== plan.from ||
                compareIdentity(fromResponse(response.headers, range.total), partial) === 'changed'
            ) {
                // A range we did not ask for, or of another version than the partial copy: start over.
                await response.body?.cancel();
                plan = restart;
                continue;
            }
            fromZero = false;
            total = range.total ?? partial?.size ?? null;
        } else {
            // 200: the server ignored Range, or If-Range saw another version: the body is the whole file.
            const length = response.headers.get('content-length');
            total = length === null ? null : Number(length);
        }
        if (want.size !== null && total !== null && total !== want.size) {
            await response.body?.cancel();
            await discardPartial(backend, path);
            throw new ModelFileError(
                `${url} has ${total} bytes but the model manifest says ${want.size}: the manifest is stale or the ` +
                    'server sends a different file. Reload the page; if it persists, the model repository is inconsistent.',
                { url, total, expectedSize: want.size },
            );
        }
        const size = want.size ?? total;
        if (fromZero) {
            // The old bytes go before the new identity is recorded: a partial copy never sits beside the
            // identity of another version, even if the tab dies here.
            await discardPartial(backend, path);
            partial = { ...fromResponse(response.headers, size), sha256: want.sha256 };
            await backend.writeIdentity(path + PARTIAL_SUFFIX, partial);
            hasher = await createSha256();
            resumed = false;
        } else {
            // Bytes stored by an earlier call (or before a cut this hasher did not see): hash them first.
            if (!hasher || hasher.bytes !== plan.from)
                hasher = await hashStoredPartial(backend, path, plan.from, signal);
            resumed = true;
        }
        const outcome = await streamInto(backend, response, path, { fromZero, size, hasher, signal, onProgress });
        if (outcome.ended && size !== null && outcome.bytes === size) {
            const done = await complete(outcome.bytes);
            if (done) return done;
            plan = restart;
            continue;
        }
        // Cut, or ended before a stated size, or ended without any: what follows is asked for, if the server
        // can prove the version (a 416 then says the copy is whole), else the download starts over.
        plan = resumePlan(partial, outcome.bytes, want);
        if (size === null && plan.from === 0) {
            await discardPartial(backend, path);
            throw new ModelFileError(
                `${url}: the server states neither the file's length nor a validator (ETag or Last-Modified), so a whole ` +
                    'copy cannot be told from a cut one; nothing was stored. Serve it with Content-Length, or add a ' +
                    'manifest.json with sizes and sha256 (`klein-web fetch` writes one).',
                { url },
            );
        }
        if (!outcome.ended || size !== null) {
            if (cuts++ >= MAX_RESUMES) {
                const kept =
                    plan.from > 0
                        ? `${formatBytes(plan.from)} are kept; press Generate again to resume.`
                        : 'Press Generate again.';
                throw new NetworkError(
                    `Downloading ${url} was interrupted ${cuts} times (${outcome.error ?? 'connection closed early'}). ${kept}`,
                    { url, have: plan.from },
                );
            }
            await sleep(signal, 250 * cuts);
        }
    }
}

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
async function streamInto(backend, response, path, { fromZero, size, hasher, signal, onProgress }) {
    if (!response.body) throw new NetworkError(`${response.url} returned no body.`, { url: response.url });
    const writer = await backend.openPartial(path, { fromZero });
    const reader = response.body.getReader();
    let sinceFlush = 0;
    try {
        for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            writer.write(value);
            hasher.update(value);
            sinceFlush += value.byteLength;
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
        if (signal?.aborted) throw signal.reason;
        if (err instanceof ModelFileError) {
            await discardPartial(backend, path);
            throw err;
        }
        if (err instanceof QuotaError) throw err;
        // A cut connection: fetch's body stream errors with a TypeError. The bytes so far are kept.
        return { ended: false, bytes: writer.offset, error: String(err) };
    }
    writer.close();
    return { ended: true, bytes: writer.offset };
}

/**
 * What the server says about a file in a HEAD answer: its size and validators (store/identity.js).
 * @param {string} url
 * @param {AbortSignal | undefined} signal
 * @returns {Promise<FileIdentity>}
 */
export async function serverIdentity(url, signal) {
    let response;
    try {
        response = await fetch(url, { method: 'HEAD', signal, cache: 'no-store' });
    } catch (err) {
        if (signal?.aborted) throw signal.reason;
        throw new NetworkError(
            `Could not reach ${url} (${String(err)}). Check the connection and press Generate again.`,
            { url },
        );
    }
    if (!response.ok) throw httpError(url, response.status);
    const length = response.headers.get('content-length');
    return fromResponse(response.headers, length === null ? null : Number(length));
}

/**
 * Whether the server answers a HEAD for `url` at all (any HTTP status): it is reachable.
 * @param {string} url
 * @param {AbortSignal | undefined} signal
 * @returns {Promise<boolean>}
 */
async function answers(url, signal) {
    try {
        await fetch(url, { method: 'HEAD', signal, cache: 'no-store' });
        return true;
    } catch (err) {
        if (signal?.aborted) throw signal.reason;
        return false;
    }
}

/**
 * @param {AbortSignal | undefined} signal
 * @param {number} ms
 * @returns {Promise<void>}
 */
function sleep(signal, ms) {
    return new Promise((resolve, reject) => {
        const timer = setTimeout(resolve, ms);
        signal?.addEventListener(
            'abort',
            () => {
                clearTimeout(timer);
                reject(signal.reason ?? new CancelledError());
            },
            { once: true },
        );
    });
}

/**
 * @param {string} url
 * @param {number} status
 * @returns {Error}
 */
function httpError(url, status) {
    if (status === 404) {
        return new ModelFileError(
            `${url} does not exist on the model server (HTTP 404). Check the model URL and its manifest.`,
            {
                url,
                status,
            },
        );
    }
    return new NetworkError(
        `The model server answered HTTP ${status} for ${url}. Press Generate again later; downloads resume.`,
        {
            url,
            status,
        },
    );
}
