// @ts-check
/**
 * @file Which version of a model file a stored copy is: its identity, and the decisions that follow from it.
 *
 * Sizes alone cannot tell two versions apart: every tiny model and every re-conversion of a checkpoint has
 * the same file sizes. So each stored file carries the identity it was downloaded for: the manifest's
 * sha256 when there is one (checked against the bytes), else the server's validators (ETag, Last-Modified)
 * and size. The same identity, kept beside a partial download, decides whether it may be resumed. Pure
 * functions only: the store modules read and write the identities, this module compares them.
 * @module store/identity
 */

/**
 * @typedef {Object} FileIdentity
 * @property {number | null} size
 * @property {string | null} sha256        Lowercase hex.
 * @property {string | null} etag          As the server sent it (quotes and any `W/` kept).
 * @property {string | null} lastModified  The HTTP-date string as the server sent it.
 */

/** @typedef {'same' | 'changed' | 'unknown'} Verdict */

/** An identity that knows nothing. @type {FileIdentity} */
export const UNKNOWN = Object.freeze({ size: null, sha256: null, etag: null, lastModified: null });

/**
 * A manifest entry's identity.
 * @param {{size: number | null, sha256: string | null}} entry
 * @returns {FileIdentity}
 */
export function fromManifest(entry) {
    return {
        size: entry.size,
        sha256: entry.sha256 ? entry.sha256.toLowerCase() : null,
        etag: null,
        lastModified: null,
    };
}

/**
 * What a server response says about the file it serves (`size`: the whole file's, when known).
 * @param {Headers} headers
 * @param {number | null} size
 * @returns {FileIdentity}
 */
export function fromResponse(headers, size) {
    return { size, sha256: null, etag: headers.get('etag'), lastModified: headers.get('last-modified') };
}

/**
 * Parse an identity read back from the store; null for anything malformed (an unknown identity).
 * @param {string | null} text
 * @returns {FileIdentity | null}
 */
export function parseIdentity(text) {
    if (text === null) return null;
    let value;
    try {
        value = JSON.parse(text);
    } catch {
        return null;
    }
    if (!value || typeof value !== 'object') return null;
    /** @param {unknown} v @returns {string | null} */
    const str = (v) => (typeof v === 'string' && v !== '' ? v : null);
    const size = Number.isSafeInteger(value.size) && value.size >= 0 ? value.size : null;
    return { size, sha256: str(value.sha256), etag: str(value.etag), lastModified: str(value.lastModified) };
}

/**
 * Is `stored` the version `wanted` describes? 'unknown' when nothing can tell (no stored identity, or a
 * manifest hash the stored copy was never checked against).
 *
 * With a manifest hash only the hash counts. Without one, the server's validators count: an ETag (weak or
 * strong: for telling versions apart a weak one is as good) when both sides have one, else Last-Modified.
 * A server that sends neither leaves only the size to compare; nothing better can be known about it.
 * @param {FileIdentity} wanted
 * @param {FileIdentity | null} stored
 * @returns {Verdict}
 */
export function compareIdentity(wanted, stored) {
    if (!stored) return 'unknown';
    if (wanted.size !== null && stored.size !== null && wanted.size !== stored.size) return 'changed';
    if (wanted.sha256 !== null) {
        if (stored.sha256 === null) return 'unknown';
        return stored.sha256 === wanted.sha256 ? 'same' : 'changed';
    }
    if (wanted.etag !== null && stored.etag !== null) return wanted.etag === stored.etag ? 'same' : 'changed';
    if (wanted.lastModified !== null && stored.lastModified !== null) {
        return wanted.lastModified === stored.lastModified ? 'same' : 'changed';
    }
    return wanted.size !== null && stored.size === wanted.size ? 'same' : 'unknown';
}

/**
 * The If-Range value that makes a server prove it still has the version a partial copy began with (RFC 9110
 * section 13.1.5): a strong ETag; a Last-Modified date only when there is no ETag at all (a weak ETag may
 * not be sent, and then the date may not either). Null: nothing can prove it, so do not resume.
 * @param {FileIdentity | null} partial
 * @returns {string | null}
 */
export function ifRangeValidator(partial) {
    if (!partial) return null;
    if (partial.etag !== null) return partial.etag.startsWith('W/') ? null : partial.etag;
    return partial.lastModified;
}

/**
 * Where a download starts: from byte `have` of the partial copy with an If-Range validator, or from 0.
 * It resumes only when the partial copy was begun for the identity still wanted, is not longer than the
 * file, and has a validator the server can check.
 * @param {FileIdentity | null} partial  The identity stored beside the partial copy (null: none).
 * @param {number} have                  Bytes in the partial copy.
 * @param {FileIdentity} wanted
 * @returns {{from: number, ifRange: string | null}}
 */
export function resumePlan(partial, have, wanted) {
    const restart = { from: 0, ifRange: null };
    if (have <= 0 || !partial) return restart;
    if (compareIdentity(wanted, partial) === 'changed') return restart;
    if (partial.size !== null && have > partial.size) return restart;
    const ifRange = ifRangeValidator(partial);
    return ifRange === null ? restart : { from: have, ifRange };
}
