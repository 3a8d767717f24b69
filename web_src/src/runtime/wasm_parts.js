// @ts-check
/**
 * @file Where onnxruntime-web's `.wasm` comes from (its build writes it in parts: shared/runtime_parts.js).
 * Where the service worker serves the app, it has joined and checked the parts once, when it stored the app, and
 * serves the whole `.wasm` at a URL of its own: onnxruntime fetches that (`wasmPaths.wasm`), so the browser compiles
 * it while it streams and keeps the compiled code for the next start, exactly as it would a plain `.wasm` file.
 * Elsewhere (the first visit, before the service worker controls the page; browsers without one) the worker fetches
 * the parts itself, joins and checks them, and hands the bytes over (`env.wasm.wasmBinary`). runtime/ort.js applies
 * the answer. docs/performance.md has what each way costs at start-up.
 * @module runtime/wasm_parts
 */

import { ErrorCode, KleinError } from '../shared/errors.js';
import { JOINED_HEADER, joinParts } from '../shared/runtime_parts.js';

/**
 * @typedef {Object} RuntimeFiles  The runtime with absolute URLs (shared/runtime_parts.js RuntimeNames, resolved).
 * @property {string} mjs  onnxruntime-web's loader module.
 * @property {string} whole  The service worker's joined copy of the `.wasm`.
 * @property {string[]} parts  The `.wasm`'s parts on the host, in order.
 * @property {number} bytes
 * @property {string} sha256
 */

/**
 * @typedef {{wasm: string} | {binary: Uint8Array}} RuntimeSource  Where onnxruntime gets its `.wasm`: a URL it
 *   fetches (and the browser's compiled-code cache keeps), or the bytes.
 */

/**
 * The build's description of the runtime with its names resolved against the worker script's URL.
 * @param {{mjs: string} & import('../shared/runtime_parts.js').RuntimeNames} names  Relative to the worker's folder.
 * @param {string} scriptUrl
 * @returns {RuntimeFiles}
 */
export function runtimeFiles(names, scriptUrl) {
    return {
        mjs: new URL(names.mjs, scriptUrl).href,
        whole: new URL(names.whole, scriptUrl).href,
        parts: names.parts.map((part) => new URL(part, scriptUrl).href),
        bytes: names.bytes,
        sha256: names.sha256,
    };
}

/**
 * The service worker's joined `.wasm` when it serves one of this build's, else the parts joined here.
 * @param {RuntimeFiles} files
 * @param {typeof fetch} [fetchImpl]
 * @returns {Promise<RuntimeSource>}
 */
export async function runtimeSource(files, fetchImpl = fetch) {
    try {
        const response = await fetchImpl(files.whole);
        // Only the service worker answers this URL with the header; a host answers 404, or its index page.
        const joined = response.ok && response.headers.get(JOINED_HEADER) === files.sha256;
        await response.body?.cancel();
        if (joined) return { wasm: files.whole };
    } catch {
        // no answer at all (offline without a service worker): the parts' own fetches say what failed
    }
    return { binary: await runtimeBinary(files, fetchImpl) };
}

/**
 * The whole `.wasm`, joined from its parts and checked.
 * @param {RuntimeFiles} files
 * @param {typeof fetch} [fetchImpl]
 * @returns {Promise<Uint8Array>}
 */
export async function runtimeBinary(files, fetchImpl = fetch) {
    const parts = await Promise.all(files.parts.map((url) => fetchPart(url, fetchImpl)));
    return joinParts(parts, files);
}

/**
 * @param {string} url
 * @param {typeof fetch} fetchImpl
 * @returns {Promise<Uint8Array>}
 */
async function fetchPart(url, fetchImpl) {
    const name = new URL(url).pathname.split('/').pop();
    let response;
    try {
        response = await fetchImpl(url);
    } catch (err) {
        throw new KleinError(
            `The app's runtime file ${name} could not be downloaded: check the connection and reload.`,
            {
                code: ErrorCode.NETWORK,
                cause: err,
            },
        );
    }
    if (!response.ok) {
        throw new KleinError(
            `The app's runtime file ${name} answered HTTP ${response.status}: the site is missing files of its build. ` +
                'Deploy the whole dist/ folder again, then reload.',
            { code: ErrorCode.NETWORK, detail: { url, status: response.status } },
        );
    }
    return new Uint8Array(await response.arrayBuffer());
}
