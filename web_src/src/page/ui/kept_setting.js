// @ts-check
/**
 * @file A setting kept in this browser's localStorage across visits. Storage can be missing or throw (blocked
 * site data): the setting then lasts for this page only, and nothing fails.
 * @module page/ui/kept_setting
 */

/**
 * @param {Storage | null} storage
 * @param {string} key
 * @returns {string | null} The kept value, or null when there is none or storage refuses.
 */
export function readKept(storage, key) {
    try {
        return storage?.getItem(key) ?? null;
    } catch {
        return null;
    }
}

/**
 * @param {Storage | null} storage
 * @param {string} key
 * @param {string} value
 */
export function keep(storage, key, value) {
    try {
        storage?.setItem(key, value);
    } catch {
        // Not kept across visits; the field still applies to this page.
    }
}
