// @ts-check
/**
 * @file Cross-origin isolation for hosts that cannot send headers (GitHub Pages, plain file hosts).
 * `coi_register.js` installs this service worker only when the page is not `crossOriginIsolated`. It
 * re-serves every same-origin response with COOP/COEP/CORP added, so after one reload the page is
 * isolated and onnxruntime-web can use SharedArrayBuffer threads. Cross-origin requests (the model
 * download from the Hub) are not touched: they are CORS requests, which COEP require-corp accepts.
 * It must live at the site root (unhashed): a service worker only controls pages under its own folder.
 * @module coi-sw
 */

/** @type {any} */
const sw = self;

sw.addEventListener('install', () => sw.skipWaiting());
sw.addEventListener('activate', (/** @type {any} */ event) => event.waitUntil(sw.clients.claim()));

sw.addEventListener('fetch', (/** @type {any} */ event) => {
    /** @type {Request} */
    const request = event.request;
    // Chrome throws on this combination when it is re-fetched from a service worker.
    if (request.cache === 'only-if-cached' && request.mode !== 'same-origin') return;
    if (new URL(request.url).origin !== sw.location.origin) return;
    event.respondWith(withIsolationHeaders(request));
});

/**
 * @param {Request} request
 * @returns {Promise<Response>}
 */
async function withIsolationHeaders(request) {
    const response = await fetch(request);
    // Opaque and error responses cannot be rebuilt; pass them through unchanged.
    if (response.status === 0 || response.type === 'opaque' || response.type === 'opaqueredirect') return response;
    const headers = new Headers(response.headers);
    headers.set('Cross-Origin-Opener-Policy', 'same-origin');
    headers.set('Cross-Origin-Embedder-Policy', 'require-corp');
    headers.set('Cross-Origin-Resource-Policy', 'same-origin');
    return new Response(response.body, { status: response.status, statusText: response.statusText, headers });
}
