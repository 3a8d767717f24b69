// @ts-check
/**
 * @file What the model server's answers mean for a download (store/download.js): the range a 206 holds and the
 * size a 416 states, whether a 200 or 206 body is the bytes asked for, which answers are refused (an error status,
 * an HTML page), and the HEAD requests that ask the server about a file or whether it is up.
 * @module store/http_answers
 */

import { ModelFileError, NetworkError } from '../shared/errors.js';
import { compareIdentity, fromResponse } from './identity.js';

/** @typedef {import('./identity.js').FileIdentity} FileIdentity */

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
 * The file size a 416 states (`Content-Range: bytes *\/TOTAL`), or null.
 * @param {string | null} header
 * @returns {number | null}
 */
export function unsatisfiedRangeTotal(header) {
    const match = /^bytes \*\/(\d+)$/.exec((header ?? '').trim());
    return match ? Number(match[1]) : null;
}

/**
 * Where a 200 or 206 answer's body begins, and the file's total size if the answer states it; null when the
 * answer is not the bytes asked for.
 * @param {Response} response
 * @param {number} from  The byte the request asked the body to start at (0: no Range).
 * @param {FileIdentity | null} partial  The version the partial copy's bytes belong to.
 * @returns {{fromZero: boolean, total: number | null} | null}
 */
export function bodyStart(response, from, partial) {
    const length = response.headers.get('content-length');
    if (response.status !== 206) {
        // 200: the server ignored Range, or If-Range saw another version: the body is the whole file.
        return { fromZero: true, total: length === null ? null : Number(length) };
    }
    // Cross-origin hosts may not expose Content-Range (it is not CORS-safelisted); a 206 to a
    // single `bytes=N-` range starts at N by definition (RFC 9110 section 14.4).
    const header = response.headers.get('content-range');
    const range =
        header === null
            ? { start: from, total: length === null ? null : from + Number(length) }
            : parseContentRange(header);
    if (
        from === 0 ||
        !range ||
        range.start !== from ||
        compareIdentity(fromResponse(response.headers, range.total), partial) === 'changed'
    ) {
        return null;
    }
    return { fromZero: false, total: range.total ?? partial?.size ?? null };
}

/**
 * Refuse an answer that is not a model file: an error status, or an HTML page (a login, error or proxy page).
 * @param {Response} response
 * @param {string} url
 * @param {string} path
 */
export function checkAnswer(response, url, path) {
    if (!response.ok) {
        response.body?.cancel().catch(() => {});
        throw httpError(url, response.status);
    }
    const contentType = response.headers.get('content-type') ?? '';
    if (/text\/html/i.test(contentType) && !path.endsWith('.html')) {
        response.body?.cancel().catch(() => {});
        throw new ModelFileError(
            `${url} answered with an HTML page instead of the model file (a login, error or proxy page). ` +
                'Check the model URL; nothing was stored.',
            { url },
        );
    }
}

/**
 * @param {string} url
 * @param {number} status
 * @returns {Error}
 */
function httpError(url, status) {
    if (status === 404) {
        return new ModelFileError(
            `${url} does not exist on the model server (HTTP 404). Check the model URL and its manifest.`,
            {
                url,
                status,
            },
        );
    }
    return new NetworkError(
        `The model server answered HTTP ${status} for ${url}. Press Generate again later; downloads resume.`,
        {
            url,
            status,
        },
    );
}

/**
 * What the server says about a file in a HEAD answer: its size and validators (store/identity.js).
 * @param {string} url
 * @param {AbortSignal | undefined} signal
 * @returns {Promise<FileIdentity>}
 */
export async function serverIdentity(url, signal) {
    let response;
    try {
        response = await fetch(url, { method: 'HEAD', signal, cache: 'no-store' });
    } catch (err) {
        if (signal?.aborted) throw signal.reason;
        throw new NetworkError(
            `Could not reach ${url} (${String(err)}). Check the connection and press Generate again.`,
            { url },
        );
    }
    if (!response.ok) throw httpError(url, response.status);
    const length = response.headers.get('content-length');
    return fromResponse(response.headers, length === null ? null : Number(length));
}

/**
 * Whether the server answers a HEAD for `url` at all (any HTTP status): it is reachable.
 * @param {string} url
 * @param {AbortSignal | undefined} signal
 * @returns {Promise<boolean>}
 */
export async function answers(url, signal) {
    try {
        await fetch(url, { method: 'HEAD', signal, cache: 'no-store' });
        return true;
    } catch (err) {
        if (signal?.aborted) throw signal.reason;
        return false;
    }
}
