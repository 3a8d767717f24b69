// @ts-check
/**
 * @file Settings this browser keeps between visits (localStorage): reading and writing one, where storage may be
 * missing or throw (blocked site data); the setting then lasts for this page only.
 * @module page/ui/kept
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
        // Not kept across visits; the setting still applies to this page.
    }
}
