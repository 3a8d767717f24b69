// @ts-check
/**
 * @file A small least-recently-used map: what the session cache keeps of prompt embeddings and encoded input
 * images (models/model_caches.js). A Map keeps insertion order, so the first key is the least recently used one.
 * @module models/lru
 */

/** @template T */
export class LruCache {
    /** @param {number} capacity  Entries kept at most. */
    constructor(capacity) {
        this.capacity = capacity;
        /** @type {Map<string, T>} */
        this.entries = new Map();
    }

    /**
     * The entry under `key`, now the most recently used; undefined when absent.
     * @param {string} key
     * @returns {T | undefined}
     */
    get(key) {
        const hit = this.entries.get(key);
        if (hit !== undefined) {
            this.entries.delete(key);
            this.entries.set(key, hit);
        }
        return hit;
    }

    /**
     * @param {string} key
     * @param {T} value
     */
    set(key, value) {
        this.entries.delete(key);
        this.entries.set(key, value);
        while (this.entries.size > this.capacity)
            this.entries.delete(/** @type {string} */ (this.entries.keys().next().value));
    }

    clear() {
        this.entries.clear();
    }
}
