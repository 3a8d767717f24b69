// @ts-check
/**
 * @file The overall progress of the downloads of one WeightStore.ensure() (store/weights.js): bytes of every file
 * the run needs, the rate and the time left, reported at most every PROGRESS_INTERVAL_MS.
 * @module store/progress_meter
 */

/** @typedef {import('../shared/types.js').DownloadProgress} DownloadProgress */
/** @typedef {{path: string, size: number | null, have: number}} MissingFile  A file ensure() downloads. */

/** Progress events at most this often (the page re-renders on each). */
const PROGRESS_INTERVAL_MS = 100;

/** Overall progress of the downloads of one ensure(), reported at most every PROGRESS_INTERVAL_MS. */
export class ProgressMeter {
    /**
     * @param {number} storedBytes  Bytes of the wanted files already stored.
     * @param {MissingFile[]} missing
     * @param {((progress: DownloadProgress) => void) | undefined} onProgress
     */
    constructor(storedBytes, missing, onProgress) {
        this.onProgress = onProgress;
        this.total = storedBytes + missing.reduce((sum, f) => sum + (f.size ?? 0), 0);
        /** Bytes of the files complete in the store. */
        this.doneBytes = storedBytes;
        /** Bytes fetched by this call into files now complete. */
        this.downloaded = 0;
        this.started = performance.now();
        this.lastEmit = 0;
        /** @type {Map<string, {file: MissingFile, loaded: number, total: number}>} In the order they started. */
        this.running = new Map();
        /** @type {{file: MissingFile, loaded: number, total: number} | null} */
        this.last = null;
    }

    /** @param {MissingFile} file */
    start(file) {
        this.running.set(file.path, { file, loaded: file.have, total: file.size ?? 0 });
        this.emit(true);
    }

    /**
     * @param {MissingFile} file
     * @param {number} loaded
     * @param {number | null} total
     */
    update(file, loaded, total) {
        this.running.set(file.path, { file, loaded, total: total ?? file.size ?? 0 });
        this.emit(false);
    }

    /**
     * @param {MissingFile} file
     * @param {number} size
     */
    finish(file, size) {
        this.running.delete(file.path);
        this.last = { file, loaded: size, total: size };
        this.downloaded += size - file.have;
        this.doneBytes += size;
        this.emit(true);
    }

    /** @param {boolean} force */
    emit(force) {
        const now = performance.now();
        if (!this.onProgress || (!force && now - this.lastEmit < PROGRESS_INTERVAL_MS)) return;
        this.lastEmit = now;
        const running = [...this.running.values()];
        const loaded = this.doneBytes + running.reduce((sum, r) => sum + r.loaded, 0);
        const fetched = this.downloaded + running.reduce((sum, r) => sum + Math.max(0, r.loaded - r.file.have), 0);
        const bytesPerSecond = fetched / Math.max(1e-3, (now - this.started) / 1000);
        // The file shown is the one downloading longest, so the line does not hop between files.
        const shown = running[0] ?? this.last;
        this.onProgress({
            file: shown?.file.path ?? '',
            fileLoaded: shown?.loaded ?? 0,
            fileTotal: shown?.total ?? 0,
            loaded,
            total: Math.max(this.total, loaded),
            bytesPerSecond,
            etaSeconds: bytesPerSecond > 0 ? Math.max(0, this.total - loaded) / bytesPerSecond : null,
        });
    }
}
