// @ts-check
/**
 * @file WeightStore: the persistent model-file cache of one model source: which files it holds, their
 * bytes, and `ensure()`, which downloads the missing ones (store/download.js) with overall progress.
 *
 * Rules it keeps (each one fixes a failure users of browser diffusion apps hit):
 * - a file counts as stored only when complete and of the expected size;
 * - the quota is checked before the first byte is fetched (QuotaError with the numbers);
 * - files already complete are never requested again, not even with HEAD.
 * @module store/weights
 */

import { ModelFileError, NetworkError, QuotaError } from '../shared/errors.js';
import { formatBytes } from '../shared/format.js';
import { OpfsBackend, clearAll } from './backend.js';
import { contentLength, downloadFile } from './download.js';
import { fetchManifest, parseManifest } from './manifest.js';

/** Progress events at most this often (the page re-renders on each). */
const PROGRESS_INTERVAL_MS = 100;
/** Where the last good manifest is kept, for offline visits. Dot-named: never a repo path. */
const MANIFEST_COPY = '.manifest.json';

/** @typedef {import('../shared/types.js').DownloadProgress} DownloadProgress */

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
        const storage = navigator.storage;
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
                // Seed layout only: the manifest normally has every size.
                const size = file.size ?? (await contentLength(this.modelBase + file.path, signal));
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
            const size = await downloadFile(this.backend, this.modelBase + file.path, file.path, {
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
}

