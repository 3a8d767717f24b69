// @ts-check
/**
 * @file onnxruntime-web's `.wasm` joined from the parts a build writes (builder/site/runtime_files.py: some hosts
 * refuse files over 25 MiB, and the runtime is larger), and checked against the length and SHA-256 the build
 * compiled in, so parts of two builds, a truncated part or parts in the wrong order fail here with a sentence instead
 * of inside onnxruntime. The service worker joins them once when it stores the app (service_worker.js); the worker
 * joins them itself when no service worker serves it (runtime/wasm_parts.js).
 * @module shared/runtime_parts
 */

import { concat, hex } from './bytes.js';
import { ErrorCode, KleinError } from './errors.js';

/**
 * @typedef {Object} RuntimeNames  The runtime as the build describes it (KLEIN_ORT_WASM, KLEIN_RUNTIME), names
 *   relative to the folder of the script they are compiled into.
 * @property {string} whole  The joined `.wasm`'s name: no file on the host, the service worker's copy.
 * @property {string[]} parts  The `.wasm`'s parts, in order.
 * @property {number} bytes  The whole `.wasm`'s length.
 * @property {string} sha256  The whole `.wasm`'s SHA-256, lowercase hex.
 */

/** The response header the service worker's joined copy carries: its SHA-256, which the worker checks. */
export const JOINED_HEADER = 'X-Klein-Runtime-Sha256';

/**
 * The parts joined, or a version-mismatch error when they are not the build's runtime.
 * @param {Uint8Array[]} parts
 * @param {{bytes: number, sha256: string}} expected
 * @returns {Promise<Uint8Array<ArrayBuffer>>}
 */
export async function joinParts(parts, { bytes, sha256 }) {
    const length = parts.reduce((sum, part) => sum + part.byteLength, 0);
    if (length !== bytes) throw notThisBuild(`its parts add up to ${length} bytes, not ${bytes}`);
    const whole = concat(parts);
    const digest = hex(await crypto.subtle.digest('SHA-256', whole));
    if (digest !== sha256) throw notThisBuild(`its SHA-256 is ${digest}, not ${sha256}`);
    return whole;
}

/**
 * @param {string} why
 * @returns {KleinError}
 */
function notThisBuild(why) {
    return new KleinError(
        `The app's onnxruntime files on the server are not this build's (${why}): reload the page; if this ` +
            'persists, deploy the whole dist/ folder again.',
        { code: ErrorCode.VERSION_MISMATCH },
    );
}
