// @ts-check
/**
 * @file The site's service worker, served as `coi-sw.js` at the site root (a service worker controls only the
 * pages under its own folder; the name is kept so browsers that registered it before update it in place).
 * Two jobs:
 *   1. The app shell offline. The build writes `KLEIN_SHELL` (the page, its scripts and styles, the inference
 *      worker, onnxruntime-web's .mjs/.wasm, the web app manifest and icons) and `KLEIN_BUILD` (a hash over those
 *      files) into this script. Installing fetches the whole shell into the cache `klein-shell-<build>`; it is
 *      used only once it is complete, and activating deletes every other build's cache, so a page and its files
 *      always come from one build. A new build is a new script: the browser installs it beside the running one and
 *      it waits until the page asks it to take over (`skip-waiting`) or every tab of the app is closed. An empty
 *      shell (`klein-web serve --watch`) caches nothing and takes over at once.
 *      onnxruntime-web's `.wasm` comes in parts (no host may refuse a file of the site: builder/site/runtime_files.py):
 *      installing joins them, checks the whole against `KLEIN_RUNTIME`'s SHA-256 and keeps only the whole, served at
 *      a URL of its own (`KLEIN_RUNTIME.whole`, with the header runtime/wasm_parts.js looks for), so onnxruntime
 *      fetches one `.wasm` and the browser keeps its compiled code between starts.
 *   2. Cross-origin isolation on hosts that cannot send headers (GitHub Pages): documents and worker scripts get
 *      COOP/COEP/CORP added, so the page is `crossOriginIsolated` and onnxruntime-web can use threads.
 * Everything else (the model's files, other origins) goes to the network untouched: model weights live in the
 * Origin Private File System (store/), never in this cache.
 * @module service_worker
 */

import { JOINED_HEADER, joinParts } from './shared/runtime_parts.js';

/** @type {ServiceWorkerGlobalScope} */
const sw = /** @type {any} */ (self);

const BUILD = typeof KLEIN_BUILD === 'string' ? KLEIN_BUILD : 'unbuilt';
/** Shell files relative to this script's folder (the site root); `index.html` is the page. */
const SHELL = typeof KLEIN_SHELL === 'object' ? KLEIN_SHELL : [];
/** The runtime's parts and their joined copy; null when the shell is not cached. */
const RUNTIME = typeof KLEIN_RUNTIME === 'object' && SHELL.length > 0 ? KLEIN_RUNTIME : null;
const CACHE_PREFIX = 'klein-shell-';
const CACHE = CACHE_PREFIX + BUILD;
const PAGE = 'index.html';
/** Responses that carry a policy of their own, which cross-origin isolation needs on them. */
const POLICY_DESTINATIONS = new Set(['document', 'worker', 'sharedworker', 'script']);
const ISOLATION_HEADERS = Object.freeze({
    'Cross-Origin-Opener-Policy': 'same-origin',
    'Cross-Origin-Embedder-Policy': 'require-corp',
    'Cross-Origin-Resource-Policy': 'same-origin',
});

const root = new URL('./', sw.location.href);
/** What the cache holds: the shell, the runtime's joined copy in place of its parts. */
const KEPT = [...SHELL.filter((path) => !RUNTIME?.parts.includes(path)), ...(RUNTIME ? [RUNTIME.whole] : [])];
const shellUrls = new Set(KEPT.map((path) => new URL(path, root).href));

sw.addEventListener('install', (event) => event.waitUntil(install()));
sw.addEventListener('activate', (event) => event.waitUntil(activate()));
sw.addEventListener('message', (event) => {
    const data = event.data ?? {};
    if (data.type === 'skip-waiting') sw.skipWaiting();
    else if (data.type === 'build') event.ports[0]?.postMessage({ build: BUILD, cachesShell: SHELL.length > 0 });
});
sw.addEventListener('fetch', (event) => {
    const request = event.request;
    // Chrome throws on this combination when it is re-fetched from a service worker.
    if (request.cache === 'only-if-cached' && request.mode !== 'same-origin') return;
    const url = new URL(request.url);
    if (url.origin !== root.origin || request.method !== 'GET') return;
    const shellUrl = shellFile(request, url);
    if (shellUrl) event.respondWith(fromShell(shellUrl, request));
    else if (request.mode === 'navigate' || POLICY_DESTINATIONS.has(request.destination)) {
        event.respondWith(fromNetwork(request));
    }
});

/** The whole shell into a fresh cache, or nothing: a failed file fails the install and the cache is dropped. */
async function install() {
    if (SHELL.length === 0) {
        await sw.skipWaiting(); // nothing cached, nothing to keep consistent: take over at once
        return;
    }
    await caches.delete(CACHE); // a half-filled cache of an install that was cut off
    const cache = await caches.open(CACHE);
    try {
        // no-cache: revalidated with the server, so an HTTP cache cannot hand an older index.html to a newer build.
        const responses = await Promise.all(SHELL.map((path) => fetch(new Request(path, { cache: 'no-cache' }))));
        const failed = SHELL.filter((_path, i) => !responses[i].ok);
        if (failed.length) throw new Error(`shell files answered an error: ${failed.join(', ')}`);
        const page = await responses[SHELL.indexOf(PAGE)].clone().text();
        // The host already serves a newer deploy: this build cannot be installed whole; the newer worker will be.
        if (!page.includes(`<meta name="klein-build" content="${BUILD}">`)) {
            throw new Error(`${PAGE} on the server is not build ${BUILD}`);
        }
        /** @type {[string, Response][]} */
        const kept = [];
        SHELL.forEach((path, i) => RUNTIME?.parts.includes(path) || kept.push([path, responses[i]]));
        if (RUNTIME) kept.push([RUNTIME.whole, await joinedRuntime(RUNTIME, responses)]);
        await Promise.all(kept.map(([path, response]) => cache.put(new URL(path, root).href, response)));
    } catch (err) {
        await caches.delete(CACHE);
        throw err;
    }
}

/**
 * The runtime's `.wasm` joined from the parts among the shell's responses, checked (it throws when they are not this
 * build's, which fails the install), as the response onnxruntime will fetch.
 * @param {import('./shared/runtime_parts.js').RuntimeNames} runtime
 * @param {Response[]} responses  The shell's, in SHELL's order.
 * @returns {Promise<Response>}
 */
async function joinedRuntime(runtime, responses) {
    const parts = await Promise.all(
        runtime.parts.map(async (path) => new Uint8Array(await responses[SHELL.indexOf(path)].arrayBuffer())),
    );
    const whole = await joinParts(parts, runtime);
    const headers = { 'Content-Type': 'application/wasm', [JOINED_HEADER]: runtime.sha256 };
    return new Response(whole, { headers });
}

async function activate() {
    // Every other build's shell; with an empty shell every shell (a cached build of the same files has this id).
    const stale = (/** @type {string} */ name) =>
        name.startsWith(CACHE_PREFIX) && (name !== CACHE || SHELL.length === 0);
    await Promise.all((await caches.keys()).filter(stale).map((name) => caches.delete(name)));
    await sw.clients.claim(); // a first visit is served by this worker from now on, without a reload
}

/**
 * The shell URL a request is for: the page for navigations to the site root or index.html (any query), a shell
 * file by its exact URL; null for anything else.
 * @param {Request} request
 * @param {URL} url
 * @returns {string | null}
 */
function shellFile(request, url) {
    if (shellUrls.size === 0) return null;
    if (request.mode === 'navigate') {
        const path = url.pathname;
        return path === root.pathname || path === root.pathname + PAGE ? new URL(PAGE, root).href : null;
    }
    return shellUrls.has(url.href) ? url.href : null;
}

/**
 * @param {string} shellUrl
 * @param {Request} request
 * @returns {Promise<Response>}
 */
async function fromShell(shellUrl, request) {
    const cached = await caches.open(CACHE).then((cache) => cache.match(shellUrl));
    // Missing only when the user cleared site data while a page was open: the network still has it.
    return cached ? withIsolationHeaders(cached) : fromNetwork(request);
}

/**
 * @param {Request} request
 * @returns {Promise<Response>}
 */
async function fromNetwork(request) {
    return withIsolationHeaders(await fetch(request));
}

/**
 * @param {Response} response
 * @returns {Response}
 */
function withIsolationHeaders(response) {
    // Opaque and error responses cannot be rebuilt; pass them through unchanged.
    if (response.status === 0 || response.type === 'opaque' || response.type === 'opaqueredirect') return response;
    const headers = new Headers(response.headers);
    for (const [name, value] of Object.entries(ISOLATION_HEADERS)) headers.set(name, value);
    return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}
