// @ts-check
/**
 * @file Which optional GPU features failed in a browser version on an adapter, kept across visits, so the next
 * visit creates its device without them instead of failing once more (runtime/gpu.js FeatureMemory). One small
 * JSON file in the origin's private file system, beside (not inside) the model stores: clearing the cached model
 * leaves it. Keys carry the browser's version, so a browser update tries each feature again.
 * @module store/feature_memory
 */

/** The file at the top of OPFS: {[browserKey]: {[feature]: reason}}. */
export const FEATURE_MEMORY_FILE = 'klein-gpu-features.json';

/** Keys kept at most (one per browser version and adapter seen): the oldest go first. */
const MAX_KEYS = 16;

/** @returns {Promise<FileSystemDirectoryHandle | null>} */
async function root() {
    if (typeof navigator === 'undefined' || !navigator.storage?.getDirectory) return null;
    return navigator.storage.getDirectory();
}

/** @returns {Promise<Record<string, Record<string, string>>>} Everything remembered; {} when nothing readable is. */
async function readAll() {
    const dir = await root();
    if (!dir) return {};
    try {
        const file = await (await dir.getFileHandle(FEATURE_MEMORY_FILE)).getFile();
        const parsed = JSON.parse(await file.text());
        return parsed && typeof parsed === 'object' && !Array.isArray(parsed) ? parsed : {};
    } catch {
        // Missing or unreadable: nothing is remembered, and every feature is tried.
        return {};
    }
}

/**
 * @param {string} key  runtime/gpu.js browserKey()
 * @returns {Promise<Record<string, string>>} feature -> why it was turned off.
 */
async function recall(key) {
    const entry = (await readAll())[key];
    if (!entry || typeof entry !== 'object') return {};
    return Object.fromEntries(Object.entries(entry).filter(([, reason]) => typeof reason === 'string'));
}

/**
 * Add `off` to what `key` has. The file is written whole through a writable stream, which replaces it only when
 * closed, so a tab closed mid-write leaves the old file; a browser without createWritable (Safari before 26)
 * writes through a sync access handle.
 * @param {string} key
 * @param {Record<string, string>} off
 */
async function remember(key, off) {
    const dir = await root();
    if (!dir) return;
    const all = await readAll();
    const entry = { ...(all[key] ?? {}), ...off };
    delete all[key];
    all[key] = entry;
    const keys = Object.keys(all);
    for (const old of keys.slice(0, Math.max(0, keys.length - MAX_KEYS))) delete all[old];
    const handle = await dir.getFileHandle(FEATURE_MEMORY_FILE, { create: true });
    const text = JSON.stringify(all);
    if (typeof handle.createWritable === 'function') {
        const writable = await handle.createWritable();
        await writable.write(text);
        await writable.close();
        return;
    }
    const access = await handle.createSyncAccessHandle();
    try {
        const bytes = new TextEncoder().encode(text);
        access.truncate(0);
        access.write(bytes, { at: 0 });
        access.flush();
    } finally {
        access.close();
    }
}

/** @type {import('../shared/types.js').FeatureMemory} */
export const featureMemory = Object.freeze({ recall, remember });

/**
 * The precision a model falls back to in this browser after its half-precision graphs overflowed
 * (worker/recovery.js), kept in the same file under the key `model <modelBase>`: {precision, reason}. Later runs
 * that ask for no precision start on it instead of overflowing once more.
 */
export const precisionMemory = Object.freeze({
    /** @param {string} modelBase @returns {Promise<{precision: string, reason: string} | null>} */
    async recall(modelBase) {
        const { precision, reason } = await recall(`model ${modelBase}`);
        return precision ? { precision, reason: reason ?? '' } : null;
    },
    /** @param {string} modelBase @param {string} precision @param {string} reason */
    async remember(modelBase, precision, reason) {
        await remember(`model ${modelBase}`, { precision, reason });
    },
});
