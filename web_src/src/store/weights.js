// @ts-check
/**
 * @file WeightStore: the persistent, resumable model-file cache of one model source.
 *
 * Rules it keeps (each one fixes a failure users of browser diffusion apps hit):
 * - a file counts as stored only when complete and of the expected size; until then it lives under
 *   `<path>.partial` and a retry resumes it with `Range: bytes=N-` (206) instead of starting over;
 * - a non-2xx response or an HTML page is never written, so an error page cannot become a "model file";
 * - the quota is checked before the first byte is fetched (QuotaError with the numbers);
 * - files already complete are never requested again, not even with HEAD.
 * @module store/weights
 */

import { CancelledError, ModelFileError, NetworkError, QuotaError } from '../shared/errors.js';
import { formatBytes } from '../shared/format.js';
import { OpfsBackend, clearAll } from './backend.js';
import { fetchManifest, parseManifest } from './manifest.js';

/** How often a cut download is resumed before the error reaches the user. */
const MAX_RESUMES = 3;
/** Make written bytes durable this often, so a killed tab loses at most this much. */
const FLUSH_EVERY_BYTES = 16 * 1024 * 1024;
/** Progress events at most this often (the page re-renders on each). */
const PROGRESS_INTERVAL_MS = 100;
/** Where the last good manifest is kept, for offline visits. Dot-named: never a repo path. */
const MANIFEST_COPY = '.manifest.json';
const ETAG_SUFFIX = '.partial.etag';

/**
 * @typedef {import('../shared/types.js').DownloadProgress} DownloadProgress
 */

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

export class WeightStore {
    /**
     * @param {OpfsBackend} backend
     * @param {string} modelBase
     */
    constructor(backend, modelBase) {
        this.backend = backend;
        this.modelBase = modelBase;
        /** persist() is asked for once per store, before its first download. */
        this.persistRequested = false;
    }

    /**
     * The store of one model source (keyed by its base URL).
     * @param {string} modelBase
     * @returns {Promise<WeightStore>}
     */
    static async open(modelBase) {
        return new WeightStore(await OpfsBackend.open(modelBase), modelBase);
    }

    /**
     * Remove every stored model of every source ("clear cached model").
     * @returns {Promise<number>} Bytes freed.
     */
    static async clear() {
        return clearAll();
    }

    /**
     * The model's manifest: fetched fresh (so a changed repo is noticed), kept in the store, and read
     * from the store when the network is down (an offline second visit still works).
     * @param {{signal?: AbortSignal}} [options]
     * @returns {Promise<import('../shared/model_repo.js').Manifest>}
     */
    async loadManifest({ signal } = {}) {
        try {
            const manifest = await fetchManifest(this.modelBase, { signal });
            if (!manifest.seedLayout) await this.backend.writeText(MANIFEST_COPY, JSON.stringify(manifest.raw));
            return manifest;
        } catch (err) {
            if (!(err instanceof NetworkError)) throw err;
            const copy = await this.backend.readText(MANIFEST_COPY);
            if (copy === null) throw err;
            return parseManifest(JSON.parse(copy), this.modelBase);
        }
    }

    /**
     * True when `path` is stored completely (with `size` bytes when the size is known).
     * @param {string} path
     * @param {number | null} size
     * @returns {Promise<boolean>}
     */
    async has(path, size) {
        const stored = await this.backend.size(path);
        return stored !== null && (size === null || stored === size);
    }

    /**
     * A stored file's bytes (the form onnxruntime-web uses without another copy).
     * @param {string} path
     * @returns {Promise<Uint8Array>}
     */
    async read(path) {
        try {
            return new Uint8Array(await (await this.backend.read(path)).arrayBuffer());
        } catch (err) {
            if (err instanceof DOMException && err.name === 'NotFoundError') {
                throw new ModelFileError(`${path} is not in the local model cache. Press Generate again to download it.`, { path });
            }
            throw err;
        }
    }

    /**
     * @param {string} path
     * @returns {Promise<string>}
     */
    async readText(path) {
        return new TextDecoder().decode(await this.read(path));
    }

    /**
     * Usage and quota of this origin's storage.
     * @returns {Promise<{usage: number, quota: number}>}
     */
    async estimate() {
        const estimate = await navigator.storage.estimate();
        return { usage: estimate.usage ?? 0, quota: estimate.quota ?? 0 };
    }

    /**
     * Ask that the cache is not evicted under storage pressure. `persist()` exists only on the page
     * (StorageManager.persist is [Exposed=Window]); in a worker this reports the current state.
     * @returns {Promise<boolean>}
     */
    async persist() {
        const storage = /** @type {any} */ (navigator.storage);
        if (await storage.persisted?.()) return true;
        return typeof storage.persist === 'function' ? Boolean(await storage.persist()) : false;
    }

    /**
     * Make every file in `files` complete in the store: sizes of missing files are learned first (HEAD,
     * only for files without a manifest size), the quota is checked, then the missing ones download one
     * after the other with throttled overall progress.
     * @param {{path: string, size: number | null}[]} files
     * @param {{signal?: AbortSignal, onProgress?: (progress: DownloadProgress) => void}} [options]
     * @returns {Promise<{downloadedBytes: number, files: number}>}
     */
    async ensure(files, { signal, onProgress } = {}) {
        /** @type {{path: string, size: number | null, have: number}[]} */
        const missing = [];
        let storedBytes = 0;
        for (const file of files) {
            const stored = await this.backend.size(file.path);
            if (stored !== null && (file.size === null || stored === file.size)) {
                storedBytes += stored;
            } else {
                const size = file.size ?? (await this.headSize(file.path, signal));
                missing.push({ path: file.path, size, have: await this.backend.partialSize(file.path) });
            }
        }
        if (missing.length === 0) return { downloadedBytes: 0, files: 0 };

        await this.checkQuota(missing);
        if (!this.persistRequested) {
            this.persistRequested = true;
            await this.persist();
        }
        const total = storedBytes + missing.reduce((sum, f) => sum + (f.size ?? 0), 0);
        const started = performance.now();
        let doneBytes = storedBytes;
        let downloaded = 0;
        let lastEmit = 0;
        for (const file of missing) {
            const resumedFrom = file.have;
            /** @param {number} fileLoaded @param {number | null} fileTotal @param {boolean} force */
            const report = (fileLoaded, fileTotal, force) => {
                const now = performance.now();
                if (!onProgress || (!force && now - lastEmit < PROGRESS_INTERVAL_MS)) return;
                lastEmit = now;
                const sessionBytes = downloaded + Math.max(0, fileLoaded - resumedFrom);
                const bytesPerSecond = sessionBytes / Math.max(1e-3, (now - started) / 1000);
                const loaded = doneBytes + fileLoaded;
                onProgress({
                    file: file.path,
                    fileLoaded,
                    fileTotal: fileTotal ?? file.size ?? 0,
                    loaded,
                    total: Math.max(total, loaded),
                    bytesPerSecond,
                    etaSeconds: bytesPerSecond > 0 ? Math.max(0, total - loaded) / bytesPerSecond : null,
                });
            };
            report(resumedFrom, file.size, true);
            const size = await this.download(this.modelBase + file.path, file.path, {
                expectedSize: file.size,
                signal,
                onProgress: (loaded, fileTotal) => report(loaded, fileTotal, false),
            });
            downloaded += size - resumedFrom;
            report(size, size, true);
            doneBytes += size;
        }
        return { downloadedBytes: downloaded, files: missing.length };
    }

    /**
     * A missing file's size from the server (seed layout only: the manifest normally has it).
     * @param {string} path
     * @param {AbortSignal | undefined} signal
     * @returns {Promise<number | null>}
     */
    async headSize(path, signal) {
        const url = this.modelBase + path;
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
     * Refuse to start when the bytes still needed do not fit in the remaining quota.
     * @param {{path: string, size: number | null, have: number}[]} missing
     */
    async checkQuota(missing) {
        const needed = missing.reduce((sum, f) => sum + Math.max(0, (f.size ?? 0) - f.have), 0);
        const { usage, quota } = await this.estimate();
        if (quota > 0 && needed > quota - usage) {
            throw new QuotaError(
                `The model needs ${formatBytes(needed)} more browser storage but only ${formatBytes(Math.max(0, quota - usage))} ` +
                    `is left (quota ${formatBytes(quota)}, used ${formatBytes(usage)}). Free disk space, leave private/incognito ` +
                    'mode (it has a small in-memory quota), or clear this site\'s other data, then try again.',
                { needed, usage, quota },
            );
        }
    }

    /**
     * Download one file into the store, resuming a partial copy with an HTTP Range request.
     * @param {string} url
     * @param {string} path  Repo-relative storage path.
     * @param {{expectedSize?: number | null, signal?: AbortSignal, onProgress?: (loaded: number, total: number | null) => void}} [options]
     * @returns {Promise<number>} The stored size.
     */
    async download(url, path, { expectedSize = null, signal, onProgress } = {}) {
        let have = await this.backend.partialSize(path);
        if (expectedSize !== null && have > expectedSize) have = 0;
        let etag = have > 0 ? await this.backend.readText(path + ETAG_SUFFIX) : null;
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
                if (expectedSize === null || have === expectedSize) return this.finish(path, have, expectedSize, url);
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
                if (etag) await this.backend.writeText(path + ETAG_SUFFIX, etag);
                else await this.backend.delete(path + ETAG_SUFFIX);
            }
            const outcome = await this.streamInto(response, path, { fromZero, size, signal, onProgress });
            if (outcome.complete) return this.finish(path, outcome.bytes, size, url);
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
     * @param {Response} response
     * @param {string} path
     * @param {{fromZero: boolean, size: number | null, signal?: AbortSignal, onProgress?: (loaded: number, total: number | null) => void}} options
     * @returns {Promise<{complete: boolean, bytes: number, error?: string}>}
     */
    async streamInto(response, path, { fromZero, size, signal, onProgress }) {
        if (!response.body) throw new NetworkError(`${response.url} returned no body.`, { url: response.url });
        const writer = await this.backend.openPartial(path, { fromZero });
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
                await this.backend.delete(path + '.partial');
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
     * @param {string} path
     * @param {number} bytes
     * @param {number | null} expectedSize
     * @param {string} url
     * @returns {Promise<number>}
     */
    async finish(path, bytes, expectedSize, url) {
        if (expectedSize !== null && bytes !== expectedSize) {
            await this.backend.delete(path + '.partial');
            throw new ModelFileError(`${url}: downloaded ${bytes} bytes, expected ${expectedSize}. The copy was discarded; try again.`, {
                url,
            });
        }
        await this.backend.commit(path);
        await this.backend.delete(path + ETAG_SUFFIX);
        return bytes;
    }
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
