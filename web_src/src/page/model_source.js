// @ts-check
/**
 * @file Which model repository this page uses, decided once at start:
 *   1. `?model=URL` on the page's address (an explicit choice wins);
 *   2. `models/manifest.json` next to the page (`klein-web serve --models DIR` mounted a local repo); when the
 *      server cannot be reached (offline), the answer of the last visit that reached it, kept in localStorage;
 *   3. the build's default (`<meta name="klein-model-base">`, the Hugging Face Hub repo).
 * `?precision=q4|q4f16|fp32` forces the graph variant of the text encoder and transformer (default: the
 * worker picks q4f16 when the GPU has shader-f16 and the repo has it, else q4, else fp32).
 * `?profile=kernels` asks every run for its GPU kernels' times (slower: the profiled sessions do not capture).
 * `?step-kernels=off` runs the transformer's steps on the graph runtime even where our kernels could (`on`, the
 * default: our kernels where the GPU and the graph allow), for comparing the two.
 * @module page/model_source
 */

import { PRECISIONS } from '../protocol.js';
import { InputError } from '../shared/errors.js';
import { FORMAT } from '../shared/model_repo.js';

/** Where the page keeps the local repository it found, for visits without a network. */
export const LOCAL_MODELS_KEY = 'klein-web:local-models';

/**
 * @typedef {Object} ModelSource
 * @property {string} base   Absolute URL ending in '/', passed to the worker as `modelBase`.
 * @property {'url' | 'local' | 'default'} kind
 * @property {string} label  Short text for the page ("Local: models/ on this server").
 * @property {string} [precision]  A forced graph variant from `?precision=`.
 * @property {boolean} [profile]  `?profile=kernels`: each run reports where its GPU time went.
 * @property {false} [stepKernels]  `?step-kernels=off`: the transformer runs on the graph runtime.
 */

/**
 * @param {string} href
 * @returns {string | undefined}
 */
function forcedPrecision(href) {
    const precision = new URL(href).searchParams.get('precision');
    if (precision === null || precision === '') return undefined;
    if (!PRECISIONS.includes(precision)) {
        throw new InputError(
            `?precision=${precision} is not a graph variant; use one of ${PRECISIONS.join(', ')}, or leave it out for the best one this GPU runs.`,
        );
    }
    return precision;
}

/**
 * @param {string} href
 * @returns {boolean}
 */
function profiled(href) {
    const profile = new URL(href).searchParams.get('profile');
    if (profile === null || profile === '') return false;
    if (profile !== 'kernels') {
        throw new InputError(
            `?profile=${profile} is not a profile; use ?profile=kernels (each run's GPU time per kernel), or leave it out.`,
        );
    }
    return true;
}

/**
 * @param {string} href
 * @returns {boolean}  Whether `?step-kernels=` leaves the transformer to our kernels (where they can run it).
 */
function stepKernels(href) {
    const value = new URL(href).searchParams.get('step-kernels');
    if (value === null || value === '' || value === 'on') return true;
    if (value !== 'off') {
        throw new InputError(
            `?step-kernels=${value} is neither on nor off; use ?step-kernels=off to run the transformer without our kernels, or leave it out.`,
        );
    }
    return false;
}

/**
 * `https://huggingface.co/owner/repo/resolve/main/` -> `Hugging Face: owner/repo`; other URLs by host + path.
 * @param {URL} url
 * @param {string} pageOrigin
 * @returns {string}
 */
export function describeBase(url, pageOrigin) {
    const hub = /^\/([^/]+)\/([^/]+)\/resolve\/([^/]+)\/?$/.exec(url.pathname);
    if (/(^|\.)huggingface\.co$|(^|\.)hf\.co$/.test(url.hostname) && hub) {
        const revision = hub[3] === 'main' ? '' : ` @ ${decodeURIComponent(hub[3])}`;
        return `Hugging Face: ${hub[1]}/${hub[2]}${revision}`;
    }
    if (url.origin === pageOrigin) return `This server: ${url.pathname}`;
    return `${url.host}${url.pathname}`;
}

/**
 * @param {string} text
 * @param {string} pageHref
 * @returns {URL}
 */
function parseBase(text, pageHref) {
    let url;
    try {
        url = new URL(text, pageHref);
    } catch {
        throw new InputError(
            `?model=${text} is not a URL. Use the address of a model repository, e.g. ?model=https://huggingface.co/kny/FLUX.2-klein-4B-onnx-web/resolve/main/`,
        );
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:') {
        throw new InputError(`?model=${text}: only http(s) URLs can be downloaded from; got ${url.protocol}`);
    }
    if (!url.pathname.endsWith('/')) url.pathname += '/';
    url.search = '';
    url.hash = '';
    return url;
}

/**
 * @typedef {Object} Page
 * @property {string} href
 * @property {string} defaultBase
 * @property {typeof fetch} fetch
 * @property {Storage | null} [storage]  localStorage (null where the browser refuses it: offline visits then use
 *   the default base).
 */

/**
 * @param {Page} page
 * @returns {Promise<ModelSource>}
 */
export async function resolveModelSource({ href, defaultBase, fetch, storage = null }) {
    const source = await resolveBase({ href, defaultBase, fetch, storage });
    const precision = forcedPrecision(href);
    const profile = profiled(href);
    const kernels = stepKernels(href);
    return {
        ...source,
        ...(precision ? { precision, label: `${source.label} · ${precision}` } : {}),
        ...(profile ? { profile } : {}),
        ...(kernels ? {} : { stepKernels: /** @type {false} */ (false) }),
    };
}

/**
 * @param {Page} page
 * @returns {Promise<ModelSource>}
 */
async function resolveBase({ href, defaultBase, fetch, storage = null }) {
    const override = new URL(href).searchParams.get('model');
    const origin = new URL(href).origin;
    if (override) {
        const url = parseBase(override, href);
        return { base: url.toString(), kind: 'url', label: describeBase(url, origin) };
    }
    const local = new URL('models/', href);
    const found = await hasManifest(new URL('manifest.json', local), fetch);
    if (found !== null) rememberLocal(storage, found ? local.href : null);
    if (found ?? recallLocal(storage) === local.href) {
        return { base: local.toString(), kind: 'local', label: 'Local: models/ on this server' };
    }
    const url = parseBase(defaultBase, href);
    return { base: url.toString(), kind: 'default', label: describeBase(url, origin) };
}

/**
 * A real manifest answers 200 with JSON; a static host's SPA fallback may answer 200 with HTML, which
 * must not count as a local repository. Null when the server could not be reached (offline).
 * @param {URL} url
 * @param {typeof fetch} fetch
 * @returns {Promise<boolean | null>}
 */
async function hasManifest(url, fetch) {
    let response;
    try {
        response = await fetch(url, { cache: 'no-store' });
    } catch {
        return null;
    }
    if (!response.ok) return false;
    try {
        const body = await response.json();
        return typeof body === 'object' && body !== null && body.format === FORMAT;
    } catch {
        return false;
    }
}

/**
 * @param {Storage | null} storage
 * @param {string | null} base  The local repository found, or null when there is none.
 */
function rememberLocal(storage, base) {
    try {
        if (base) storage?.setItem(LOCAL_MODELS_KEY, base);
        else storage?.removeItem(LOCAL_MODELS_KEY);
    } catch {
        // Storage can throw (blocked site data): offline visits then use the default base.
    }
}

/**
 * @param {Storage | null} storage
 * @returns {string | null}
 */
function recallLocal(storage) {
    try {
        return storage?.getItem(LOCAL_MODELS_KEY) ?? null;
    } catch {
        return null;
    }
}
