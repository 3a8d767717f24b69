// @ts-check
/**
 * @file Resumable, verified HTTP download of one model file into the store's backend.
 *
 * Rules it keeps (each one fixes a failure users of browser diffusion apps hit):
 * - bytes land in `<path>.partial`, with the identity of the version they belong to beside them; a retry
 *   resumes with `Range: bytes=N-` only when the server proves it still has that version (If-Range with a
 *   strong ETag or Last-Modified, answered 206); otherwise it starts over from byte 0, so bytes of two
 *   versions are never stitched together;
 * - the bytes are checked as they arrive, beside the writing: against the manifest's block hashes where it lists
 *   them (store/block_check.js, the browser's native SHA-256 per block), else by the file's SHA-256
 *   (store/store_workers.js); on a resume the stored bytes are checked first, so the check always covers the whole
 *   file, and bytes that differ from the manifest's discard the file (after one fresh start, when the copy was
 *   resumed);
 * - a file becomes complete only at a size the manifest or the server stated, and with the manifest's
 *   sha256 when it lists one: a stream that ends early or a 416 never completes a file by itself;
 * - a cut connection is resumed a few times before the error reaches the user, and what arrived is kept;
 * - a resume the host will not serve (the CORS preflight that `Range` + `If-Range` need refused, as the Hub's storage
 *   host has been reported to do, or an error status to the range request) starts that file over without
 *   conditions, and the download says so in one line (`restarted`), so no host has to answer preflights;
 * - a non-2xx response or an HTML page is never written, so an error page cannot become a "model file".
 * This module decides what to ask and what to keep; store/http_answers.js reads the server's answers and
 * store/partial_copy.js writes, reads back and discards the partial copy.
 * @module store/download
 */

import { CancelledError, IntegrityError, ModelFileError, NetworkError } from '../shared/errors.js';
import { formatBytes } from '../shared/format.js';
import { PARTIAL_SUFFIX } from './backend.js';
import { BlockCheck } from './block_check.js';
import { createSha256 } from './hashing.js';
import { answers, bodyStart, checkAnswer, unsatisfiedRangeTotal } from './http_answers.js';
import { UNKNOWN, fromResponse, resumePlan } from './identity.js';
import { discardPartial, hashPartial, streamInto } from './partial_copy.js';

/** @typedef {import('./backend.js').OpfsBackend} OpfsBackend */
/** @typedef {import('./identity.js').FileIdentity} FileIdentity */
/** @typedef {import('./hashing.js').Sha256} Sha256 */
/** @typedef {import('../shared/model_repo.js').Blocks} Blocks */

/** How often a cut download is resumed before the error reaches the user. */
const MAX_RESUMES = 3;
/** Requests for one file in one call, whatever the reason (cuts, restarts): a bound on a misbehaving server. */
const MAX_REQUESTS = 10;

/**
 * Download one file into the store, resuming a partial copy of the same version with an HTTP Range request.
 * @param {OpfsBackend} backend
 * @param {string} url
 * @param {string} path  Repo-relative storage path.
 * @param {{want?: FileIdentity, blocks?: Blocks | null, signal?: AbortSignal,
 *   onProgress?: (loaded: number, total: number | null) => void, openHasher?: () => Promise<Sha256>}} [options]
 *   `want`: the version to download: the manifest's size and sha256, or what the server said about the
 *   file (store/identity.js). `blocks`: the manifest's block hashes of that version, which check the bytes when
 *   given (with `want.sha256`). `openHasher`: where the bytes are hashed otherwise (store/store_workers.js); by
 *   default on this thread.
 * @returns {Promise<Stored>} The stored size and the identity recorded with it; `restarted`: the line saying a
 *   resume failed and the file was downloaded from its start instead (null when none did).
 */
export async function downloadFile(
    backend,
    url,
    path,
    { want = UNKNOWN, blocks = null, signal, onProgress, openHasher = createSha256 } = {},
) {
    const sha256 = want.sha256;
    const check = blocks && sha256 ? async () => new BlockCheck({ blocks, sha256, url }) : openHasher;
    const download = new Download(backend, url, path, { want, signal, onProgress, openHasher: check });
    try {
        return await download.run();
    } finally {
        download.hasher?.drop();
    }
}

/** @typedef {{size: number, identity: FileIdentity, restarted: string | null}} Stored */

/** The bytes requested next: from byte `from`, conditional on `ifRange` (a validator of the partial copy). */
const RESTART = Object.freeze({ from: 0, ifRange: /** @type {string | null} */ (null) });

/**
 * One file's download, request after request until it is stored or refused. Each method is one step of it: ask
 * (request), judge the answer (unsatisfiedRange; http_answers.js bodyStart), write and hash the body, complete it.
 */
class Download {
    /**
     * @param {OpfsBackend} backend
     * @param {string} url
     * @param {string} path
     * @param {{want: FileIdentity, signal?: AbortSignal, onProgress?: (loaded: number, total: number | null) => void,
     *   openHasher: () => Promise<Sha256>}} options
     */
    constructor(backend, url, path, { want, signal, onProgress, openHasher }) {
        this.backend = backend;
        this.url = url;
        this.path = path;
        this.want = want;
        this.signal = signal;
        this.onProgress = onProgress;
        this.openHasher = openHasher;
        /** @type {FileIdentity | null} The version the partial copy's bytes belong to. */
        this.partial = null;
        /** @type {{from: number, ifRange: string | null}} */
        this.plan = RESTART;
        /** @type {Sha256 | null} The running hash of the partial copy's first `hasher.bytes` bytes. */
        this.hasher = null;
        /** The partial copy holds bytes of more than one response (a digest mismatch may come from that). */
        this.resumed = false;
        this.restartedAfterMismatch = false;
        /** Cut connections so far. */
        this.cuts = 0;
        /** @type {string | null} Why a resume failed and the file started over (the first time it did). */
        this.restarted = null;
    }

    /** @returns {Promise<Stored>} */
    async run() {
        this.partial = await this.backend.readIdentity(this.path + PARTIAL_SUFFIX);
        this.plan = resumePlan(this.partial, await this.backend.partialSize(this.path), this.want);
        for (let attempt = 0; ; attempt++) {
            this.signal?.throwIfAborted();
            if (attempt >= MAX_REQUESTS) {
                throw new NetworkError(
                    `Downloading ${this.url} did not succeed in ${attempt} requests; the server keeps answering unexpectedly. Try again later.`,
                    {
                        url: this.url,
                    },
                );
            }
            const response = await this.request();
            let done = null;
            try {
                done = response && (await this.receive(response));
            } catch (err) {
                if (!(err instanceof IntegrityError)) throw err;
                await response?.body?.cancel().catch(() => {}); // unread when the stored bytes were refused
                await this.refuse(err);
            }
            if (done) return done;
        }
    }

    /**
     * Ask for the bytes of the plan: all of them, or the rest of the partial copy's version (Range + If-Range).
     * @returns {Promise<Response | null>} Null: ask again (the plan says how).
     */
    async request() {
        const { plan, url, signal } = this;
        /** @type {Record<string, string>} */
        const headers = {};
        if (plan.from > 0 && plan.ifRange !== null) {
            headers.Range = `bytes=${plan.from}-`;
            // The server sends the rest (206) only while it has the version the partial copy began with;
            // a changed file comes whole (200) and is written from byte 0.
            headers['If-Range'] = plan.ifRange;
        }
        try {
            return await fetch(url, { headers, signal, cache: 'no-store' });
        } catch (err) {
            if (signal?.aborted) throw signal.reason;
            // If-Range makes a cross-origin request need a CORS preflight, which some hosts refuse: that fails
            // like a dropped connection. A host that still answers a plain HEAD is up, so the download starts
            // over without conditions instead of failing the same way on every retry.
            if (plan.from > 0 && (await answers(url, signal))) {
                return this.startOver('the request for the rest failed: the host refused its CORS preflight');
            }
            if (this.cuts++ < MAX_RESUMES) {
                await sleep(signal, 500 * this.cuts);
                return null;
            }
            throw new NetworkError(
                `Downloading ${url} failed (${String(err)}). Check the connection and press Generate again: it resumes.`,
                { url },
            );
        }
    }

    /**
     * Store what one answer brings.
     * @param {Response} response
     * @returns {Promise<Stored | null>} Null: ask again.
     */
    async receive(response) {
        if (response.status === 416 && this.plan.from > 0) return this.unsatisfiedRange(response);
        if (!response.ok && this.plan.from > 0) {
            await response.body?.cancel();
            return this.startOver(`the host answered HTTP ${response.status} to the request for the rest`);
        }
        checkAnswer(response, this.url, this.path);
        const start = bodyStart(response, this.plan.from, this.partial);
        if (start === null) {
            // A range we did not ask for, or of another version than the partial copy: start over.
            await response.body?.cancel();
            this.plan = RESTART;
            return null;
        }
        const { fromZero, total } = start;
        if (this.want.size !== null && total !== null && total !== this.want.size) {
            await response.body?.cancel();
            await discardPartial(this.backend, this.path);
            throw new ModelFileError(
                `${this.url} has ${total} bytes but the model manifest says ${this.want.size}: the manifest is stale or the ` +
                    'server sends a different file. Reload the page; if it persists, the model repository is inconsistent.',
                { url: this.url, total, expectedSize: this.want.size },
            );
        }
        const size = this.want.size ?? total;
        if (fromZero) {
            // The old bytes go before the new identity is recorded: a partial copy never sits beside the
            // identity of another version, even if the tab dies here.
            await discardPartial(this.backend, this.path);
            this.partial = { ...fromResponse(response.headers, size), sha256: this.want.sha256 };
            await this.backend.writeIdentity(this.path + PARTIAL_SUFFIX, this.partial);
            this.replaceHasher(await this.openHasher());
            this.resumed = false;
        } else {
            // Bytes stored by an earlier call (or before a cut this hasher did not see): hash them first.
            this.resumed = true;
            await this.hashStoredPartial(this.plan.from);
        }
        const outcome = await streamInto(this.backend, response, this.path, {
            fromZero,
            size,
            hasher: /** @type {Sha256} */ (this.hasher),
            signal: this.signal,
            onProgress: this.onProgress,
        });
        if (outcome.ended && size !== null && outcome.bytes === size) return this.complete(outcome.bytes);
        return this.afterCut(outcome, size);
    }

    /**
     * A 416: nothing after byte `from`. The partial copy may be whole, or longer than a changed file; only a
     * stated size (and the manifest's hash) can tell.
     * @param {Response} response
     * @returns {Promise<Stored | null>}
     */
    async unsatisfiedRange(response) {
        await response.body?.cancel();
        const { from } = this.plan;
        const size =
            this.want.size ??
            unsatisfiedRangeTotal(response.headers.get('content-range')) ??
            this.partial?.size ??
            null;
        if (size === from || (size === null && this.want.sha256 !== null)) {
            // These bytes came from earlier responses, possibly from before a cut: a mismatch earns one fresh start.
            this.resumed = true;
            await this.hashStoredPartial(from);
            return this.complete(from);
        }
        this.plan = RESTART;
        return null;
    }

    /**
     * A body that did not bring the whole file: ask for what follows if the server can prove the version (a 416
     * then says the copy is whole), else start over, or give up after a few cuts.
     * @param {{ended: boolean, bytes: number, error?: string}} outcome
     * @param {number | null} size
     * @returns {Promise<null>}
     */
    async afterCut(outcome, size) {
        this.plan = resumePlan(this.partial, outcome.bytes, this.want);
        if (size === null && this.plan.from === 0) {
            await discardPartial(this.backend, this.path);
            throw new ModelFileError(
                `${this.url}: the server states neither the file's length nor a validator (ETag or Last-Modified), so a whole ` +
                    'copy cannot be told from a cut one; nothing was stored. Serve it with Content-Length, or add a ' +
                    'manifest.json with sizes and sha256 (`klein-web fetch` writes one).',
                { url: this.url },
            );
        }
        if (!outcome.ended || size !== null) {
            if (this.cuts++ >= MAX_RESUMES) {
                const kept =
                    this.plan.from > 0
                        ? `${formatBytes(this.plan.from)} are kept; press Generate again to resume.`
                        : 'Press Generate again.';
                throw new NetworkError(
                    `Downloading ${this.url} was interrupted ${this.cuts} times (${outcome.error ?? 'connection closed early'}). ${kept}`,
                    { url: this.url, have: this.plan.from },
                );
            }
            await sleep(this.signal, 250 * this.cuts);
        }
        return null;
    }

    /**
     * The bytes are all there: check the digest and make the file complete.
     * @param {number} bytes
     * @returns {Promise<Stored>}
     */
    async complete(bytes) {
        const hasher = /** @type {Sha256} */ (this.hasher);
        this.hasher = null;
        const digest = await hasher.hex();
        const { want, backend, path, url } = this;
        if (want.sha256 !== null && digest !== want.sha256) {
            throw new IntegrityError(
                `${url} does not match the model's manifest: its SHA-256 is ${digest}, the manifest says ${want.sha256}. ` +
                    'The downloaded copy was deleted.',
                { url, path, sha256: digest, expected: want.sha256 },
            );
        }
        const identity = {
            size: bytes,
            sha256: digest,
            etag: this.partial?.etag ?? null,
            lastModified: this.partial?.lastModified ?? null,
        };
        await backend.commit(path, identity);
        return { size: bytes, identity, restarted: this.restarted };
    }

    /**
     * A resume the host would not serve: the next request asks for the whole file, without conditions (its bytes
     * replace the partial copy's only once they arrive), and the first such failure is kept as the line that says so.
     * @param {string} why
     * @returns {null}  Ask again.
     */
    startOver(why) {
        const line = `${this.url} could not be resumed (${why}), so it is downloaded again from its start.`;
        if (this.restarted === null) console.warn(line);
        this.restarted ??= line;
        this.plan = RESTART;
        return null;
    }

    /**
     * Bytes that are not the manifest's: the partial copy goes, and the download starts over once when the copy was
     * resumed, else `err` is thrown.
     * @param {IntegrityError} err
     */
    async refuse(err) {
        this.replaceHasher(null);
        await discardPartial(this.backend, this.path);
        // Bytes of two responses may disagree even when the server vouched for them (an ETag that survives a copy
        // preserving mtimes): one whole fresh download settles it.
        if (!this.resumed || this.restartedAfterMismatch) throw err;
        this.restartedAfterMismatch = true;
        this.plan = RESTART;
    }

    /**
     * Make the running hash cover exactly the partial copy's first `bytes` bytes, reading them back from the
     * store unless the running hash has seen exactly those.
     * @param {number} bytes
     */
    async hashStoredPartial(bytes) {
        if (this.hasher?.bytes === bytes) return;
        const hasher = await this.openHasher();
        this.replaceHasher(hasher);
        await hashPartial(this.backend, this.path, bytes, hasher, this.signal);
    }

    /** @param {Sha256 | null} hasher */
    replaceHasher(hasher) {
        this.hasher?.drop();
        this.hasher = hasher;
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
