// @ts-check
/**
 * @file Byte arrays put together, and written as hex.
 * @module shared/bytes
 */

/**
 * One array holding `parts` one after another.
 * @param {Uint8Array[]} parts
 * @returns {Uint8Array<ArrayBuffer>}
 */
export function concat(parts) {
    const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
    let at = 0;
    for (const part of parts) {
        out.set(part, at);
        at += part.length;
    }
    return out;
}

/**
 * Bytes as lowercase hex, two digits each (how digests are written: the manifest's sha256, the build's).
 * @param {ArrayBuffer | Uint8Array} bytes
 * @returns {string}
 */
export function hex(bytes) {
    return Array.from(bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes), (b) =>
        b.toString(16).padStart(2, '0'),
    ).join('');
}
