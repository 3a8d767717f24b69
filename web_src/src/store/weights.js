// @ts-check
/**
 * @file WeightStore: the persistent model-file cache of one model source: which files it holds, their
 * bytes, and `ensure()`, which downloads the missing ones (store/download.js) with overall progress.
 *
 * Rules it keeps (each one fixes a failure users of browser diffusion apps hit):
 * - a file counts as stored only when complete and of the version wanted: each stored file carries the
 *   identity it was downloaded for (store/identity.js), and a changed identity means a fresh download;
 * - the quota is checked before the first byte is fetched (QuotaError with the numbers);
 * - with a manifest (sha256 per file), files already stored are never requested again, not even with HEAD;
 *   without one, a HEAD per file asks the server which version it has (offline, the stored copy is used);
 * - every stored file a load reads is checked against the manifest's size and block hashes as it is read
 *   (store/stored_check.js): a file changed since it was downloaded is reported (StoredFileError), not used;
 * - the browser's "clear site data" under a running page removes the store's folder: the next run opens it again
 *   (reopenIfRemoved) and downloads what is missing.
 * @module store/weights
 */

import { ModelFileError, NetworkError, QuotaError } from '../shared/errors.js';
import { formatBytes } from '../shared/format.js';
import { OpfsBackend, clearAll, keyFor } from './backend.js';
import { createSha256, hashStored } from './hashing.js';
import { serverIdentity } from './http_answers.js';
import { compareIdentity, fromManifest } from './identity.js';
import { fetchManifest, parseManifest } from './manifest.js';
import { ProgressMeter } from './progress_meter.js';
import { sizeProblem } from './stored_check.js';
import { StoreWorkers } from './store_workers.js';

/** Files downloading at once: each in a helper worker of its own (where the cores allow), hashed by another. */
export const DOWNLOADS_AT_ONCE = 4;
/** Where the last good manifest is kept, for offline visits. Dot-named: never a repo path. */
const MANIFEST_COPY = '.manifest.json';

/** @typedef {import('../shared/types.js').DownloadProgress} DownloadProgress */
/** @typedef {import('./identity.js').FileIdentity} FileIdentity */
/** @typedef {{path: string, size: number | null, sha256: string | null, blocks?: Blocks | null}} WantedFile  A
 * manifest entry. */
/** @typedef {{path: string, size: number | null, want: FileIdentity, blocks: Blocks | null, have: number}} MissingFile
 * To download; `have`: bytes of a partial copy already stored; `blocks`: the manifest's block hashes of `want`. */
/** @typedef {import('../shared/model_repo.js').Blocks} Blocks */
/** @typedef {import('./stored_check.js').Expected} Expected */

/**
 * The manifest of `modelBase` as a job reads it (WeightStore.loadManifest: fetched, else the copy an earlier visit
 * kept), without opening its store: nothing is created or written, so the page may ask before any Generate.
 * @param {string} modelBase
 * @param {{signal?: AbortSignal}} [options]
 * @returns {Promise<import('../shared/model_repo.js').Manifest>}
 */
export async function readManifest(modelBase, { signal } = {}) {
    try {
        return await fetchManifest(modelBase, { signal });
    } catch (err) {
        if (!(err instanceof NetworkError)) throw err;
        const copy = await OpfsBackend.ofKey(await keyFor(modelBase)).then(
            (backend) => backend.readText(MANIFEST_COPY),
            () => null, // no store of this model source yet
        );
        if (copy === null) throw err;
        return parseManifest(JSON.parse(copy), modelBase);
    }
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
        /** Download, hash, read and check files off this thread (store/store_workers.js). */
        this.workers = new StoreWorkers();
        /** @type {Map<string, Expected>} What the manifest says each file of the model in use is (ensure()). */
        this.expected = new Map();
        /** @type {Map<string, Promise<void>>} The checks of files opened to stream, from openFile() to verify(). */
        this.checks = new Map();
    }

    /** End the store's helper workers (a store no longer used). */
    close() {
        this.workers.close();
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
     * Open the store's folder again if it is gone (the browser's "clear site data" under a running page removes it,
     * and every later use of the old folder would fail): the store is then empty, and the next ensure() downloads
     * what the model needs.
     */
    async reopenIfRemoved() {
        if (await this.backend.present()) return;
        this.backend = await OpfsBackend.open(this.modelBase);
        this.checks.clear();
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
     * The version of `file` to have: the manifest's size and sha256; without a sha256, what the server says
     * (HEAD). Null when the server cannot be reached: the caller keeps a stored copy then.
     * @param {WantedFile} file
     * @param {AbortSignal | undefined} signal
     * @returns {Promise<FileIdentity | null>}
     */
    async wanted(file, signal) {
        const manifest = fromManifest(file);
        if (manifest.sha256 !== null) return manifest;
        try {
            const server = await serverIdentity(this.modelBase + file.path, signal);
            return { ...server, size: file.size ?? server.size };
        } catch (err) {
            if (err instanceof NetworkError && !signal?.aborted) return null;
            throw err;
        }
    }

    /**
     * Whether the stored copy of `path` (if any) is the version `want` describes; a copy that is not is
     * removed. A copy without an identity (stored by an earlier version of the app) is unverified: with a
     * manifest sha256 it is hashed once and kept when it matches (reading it back costs seconds, a new
     * download of the same bytes minutes); without one nothing can vouch for it, so it is downloaded again.
     * @param {string} path
     * @param {FileIdentity | null} want  Null: the server is unreachable; any complete copy is kept.
     * @param {AbortSignal | undefined} signal
     * @returns {Promise<number | null>} The stored size when the copy is good, else null.
     */
    async check(path, want, signal) {
        const size = await this.backend.size(path);
        if (size === null) return null;
        const stored = await this.backend.readIdentity(path);
        if (want === null) return size;
        let verdict = compareIdentity(want, stored);
        if (verdict === 'unknown' && want.sha256 !== null && (want.size === null || want.size === size)) {
            const hasher = await createSha256();
            await hashStored(this.backend, path, hasher, { signal });
            const sha256 = await hasher.hex();
            verdict = sha256 === want.sha256 ? 'same' : 'changed';
            if (verdict === 'same')
                await this.backend.writeIdentity(path, { size, sha256, etag: null, lastModified: null });
        }
        if (verdict === 'same') return size;
        await this.backend.discard(path);
        return null;
    }

    /**
     * Which of `paths` are stored complete (whether each is the manifest's version is checked when it is used).
     * @param {string[]} paths
     * @returns {Promise<Set<string>>}
     */
    async completePaths(paths) {
        const sizes = await Promise.all(paths.map((path) => this.backend.size(path)));
        return new Set(paths.filter((_, i) => sizes[i] !== null));
    }

    /**
     * A stored file's bytes (the form onnxruntime-web uses without another copy), read by a helper worker, so this
     * thread may create a session meanwhile.
     * @param {string} path
     * @returns {Promise<Uint8Array>}
     */
    async read(path) {
        try {
            return await this.workers.read(this.backend, path, this.expected.get(path) ?? null);
        } catch (err) {
            throw notStored(err, path);
        }
    }

    /**
     * A stored file as a disk-backed File (the tokenizer's files, posted to its helper worker), checked first.
     * @param {string} path
     * @returns {Promise<File>}
     */
    async file(path) {
        const expected = this.expected.get(path);
        let file;
        try {
            if (expected?.blocks) await this.workers.check(this.backend, path, expected);
            file = await this.backend.read(path);
        } catch (err) {
            throw notStored(err, path);
        }
        const wrongSize = expected && sizeProblem(path, file.size, expected);
        if (wrongSize) throw wrongSize;
        return file;
    }

    /**
     * A stored file open for reading parts of it without holding it in memory (store/stored_file.js). Close it when
     * done: the file cannot be removed while it is open. Its size is checked now, its blocks by a helper worker from
     * now on (verify() waits for that check).
     * @param {string} path
     * @returns {Promise<import('./stored_file.js').StoredFile>}
     */
    async openFile(path) {
        let file;
        try {
            file = await this.backend.openFile(path);
        } catch (err) {
            throw notStored(err, path);
        }
        const expected = this.expected.get(path);
        const wrongSize = expected && sizeProblem(path, file.size, expected);
        if (wrongSize) {
            file.close();
            throw wrongSize;
        }
        if (expected?.blocks) {
            const check = this.workers.check(this.backend, path, expected);
            check.catch(() => {}); // verify() reports it
            this.checks.set(path, check);
        }
        return file;
    }

    /**
     * Wait for the checks of the stored files at `paths` that openFile() started: a StoredFileError when one of them
     * is not the file that was downloaded.
     * @param {string[]} paths
     */
    async verify(paths) {
        const checks = paths.map((path) => this.checks.get(path));
        for (const path of paths) this.checks.delete(path);
        await Promise.all(checks);
    }

    /**
     * Delete a stored file that is no longer the file that was downloaded (StoredFileError): the next ensure()
     * downloads it again.
     * @param {string} path
     */
    async forget(path) {
        this.checks.delete(path);
        await this.backend.discard(path);
    }

    /**
     * The bytes of several stored files, read at once (a session's graph and its external data).
     * @param {string[]} paths
     * @returns {Promise<Uint8Array[]>}
     */
    async readFiles(paths) {
        return Promise.all(paths.map((path) => this.read(path)));
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
     * Make every file in `files` complete in the store, as the version wanted: which stored copies are still
     * good is decided first (store/identity.js; a HEAD per file only for files without a manifest sha256),
     * the quota is checked, then the missing ones download, DOWNLOADS_AT_ONCE at a time and the largest first,
     * each in a helper worker and hashed as it streams in (store/store_workers.js), with throttled overall progress.
     * The first download that fails stops the others (what they stored is kept for a resume) and is thrown
     * once they have stopped, so no file is left half-checked when this returns or throws.
     * @param {WantedFile[]} files
     * @param {{signal?: AbortSignal, onProgress?: (progress: DownloadProgress) => void, downloadsAtOnce?: number}} [options]
     *   `downloadsAtOnce`: DOWNLOADS_AT_ONCE unless a benchmark compares (scripts/hash_bench.py).
     * @returns {Promise<{downloadedBytes: number, files: number, fetched: string[], restarted: string[]}>} `fetched`:
     *   the paths downloaded (their previous bytes, if any were loaded, are stale); `restarted`: a line for each
     *   file whose resume the host would not serve, downloaded again from its start instead (store/download.js).
     */
    async ensure(files, { signal, onProgress, downloadsAtOnce = DOWNLOADS_AT_ONCE } = {}) {
        for (const file of files) this.expected.set(file.path, { size: file.size, blocks: file.blocks ?? null });
        const { missing, storedBytes } = await this.missing(files, signal);
        if (missing.length === 0) return { downloadedBytes: 0, files: 0, fetched: [], restarted: [] };

        await this.checkQuota(missing);
        if (!this.persistRequested) {
            this.persistRequested = true;
            await this.persist();
        }
        const meter = new ProgressMeter(storedBytes, missing, onProgress);
        /** @type {string[]} */
        const restarted = [];
        // The largest first: the file that takes longest to hash starts first.
        const largestFirst = [...missing].sort((a, b) => (b.size ?? 0) - (a.size ?? 0));
        await atMostAtOnce(largestFirst, downloadsAtOnce, signal, async (file, shared) => {
            meter.start(file);
            const stored = await this.workers.download(this.backend, this.modelBase + file.path, file.path, {
                want: file.want,
                blocks: file.blocks,
                signal: shared,
                onProgress: (loaded, fileTotal) => meter.update(file, loaded, fileTotal),
            });
            if (stored.restarted) restarted.push(stored.restarted);
            meter.finish(file, stored.size);
        });
        const fetched = missing.map((f) => f.path);
        return { downloadedBytes: meter.downloaded, files: missing.length, fetched, restarted };
    }

    /**
     * Which of `files` are not stored as the version wanted (each checked at once), and the bytes of those that are.
     * @param {WantedFile[]} files
     * @param {AbortSignal | undefined} signal
     * @returns {Promise<{missing: MissingFile[], storedBytes: number}>}
     */
    async missing(files, signal) {
        const checked = await Promise.all(
            files.map(async (file) => {
                const want = await this.wanted(file, signal);
                return { file, want, stored: await this.check(file.path, want, signal) };
            }),
        );
        /** @type {MissingFile[]} */
        const missing = [];
        let storedBytes = 0;
        for (const { file, want, stored } of checked) {
            if (stored !== null) {
                storedBytes += stored;
                continue;
            }
            if (want === null) {
                throw new NetworkError(
                    `Could not reach the model server for ${this.modelBase + file.path}. Check the connection and press Generate again.`,
                    {
                        url: this.modelBase + file.path,
                    },
                );
            }
            missing.push({
                path: file.path,
                size: want.size,
                want,
                // A manifest lists block hashes only beside a sha256, so `want` is then the manifest's version.
                blocks: file.blocks ?? null,
                have: await this.backend.partialSize(file.path),
            });
        }
        return { missing, storedBytes };
    }

    /**
     * Refuse to start when the bytes still needed do not fit in the remaining quota.
     * @param {MissingFile[]} missing
     */
    async checkQuota(missing) {
        const needed = missing.reduce((sum, f) => sum + Math.max(0, (f.size ?? 0) - f.have), 0);
        const { usage, quota } = await this.estimate();
        if (quota > 0 && needed > quota - usage) {
            throw new QuotaError(
                `The model needs ${formatBytes(needed)} more browser storage but only ${formatBytes(Math.max(0, quota - usage))} ` +
                    `is left (quota ${formatBytes(quota)}, used ${formatBytes(usage)}). Free disk space, leave private/incognito ` +
                    "mode (it has a small in-memory quota), or clear this site's other data, then try again.",
                { needed, usage, quota },
            );
        }
    }
}

/**
 * Run `task` on each item, at most `limit` at once. The first failure stops the others (the signal they are given
 * aborts with it) and is thrown once all of them have settled.
 * @template T
 * @param {T[]} items
 * @param {number} limit
 * @param {AbortSignal | undefined} signal
 * @param {(item: T, signal: AbortSignal) => Promise<void>} task
 */
async function atMostAtOnce(items, limit, signal, task) {
    const controller = new AbortController();
    const stop = () => controller.abort(signal?.reason);
    signal?.addEventListener('abort', stop, { once: true });
    /** @type {unknown[]} The first failure, once there is one. */
    const failures = [];
    let next = 0;
    const lane = async () => {
        while (next < items.length && !controller.signal.aborted) {
            const item = items[next++];
            try {
                await task(item, controller.signal);
            } catch (error) {
                if (failures.length === 0) failures.push(error);
                controller.abort(error);
            }
        }
    };
    try {
        await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
    } finally {
        signal?.removeEventListener('abort', stop);
    }
    if (failures.length > 0) throw failures[0];
    signal?.throwIfAborted();
}

/**
 * A read's failure, as the user sees it: a file missing from the store is downloaded again by the next Generate.
 * @param {unknown} err
 * @param {string} path
 * @returns {unknown}
 */
function notStored(err, path) {
    if (err instanceof DOMException && err.name === 'NotFoundError')
        return new ModelFileError(`${path} is not in the local model cache. Press Generate again to download it.`, {
            path,
        });
    return err;
}
