// @ts-check
/**
 * @file Classic script, loaded first by index.html: registers the site's service worker (`coi-sw.js`, source
 * src/service_worker.js), which keeps the app shell for offline visits and adds the cross-origin-isolation headers
 * on hosts that cannot send them. When the host sent no COOP/COEP headers (the page is not `crossOriginIsolated`),
 * the page reloads once the worker controls it. Without isolation the app still works, with onnxruntime-web on one
 * thread, and without the worker it still works online, so every failure here is only logged. A sessionStorage
 * flag makes sure the page reloads at most once per tab.
 * @module coi_register
 */
(() => {
    const RELOAD_FLAG = 'klein-coi-reloaded';
    if (!window.isSecureContext || !('serviceWorker' in navigator)) return;
    // Relative to the page, not to this script (which is in assets/): the worker must control the site root.
    const registered = navigator.serviceWorker.register(new URL('coi-sw.js', document.baseURI));
    registered.catch((error) => console.warn('klein-web: could not register coi-sw.js:', error));
    if (self.crossOriginIsolated) return;
    if (sessionStorage.getItem(RELOAD_FLAG)) {
        // Already reloaded once and still not isolated: the browser does not honour it; do not loop.
        console.warn('klein-web: not cross-origin isolated even with coi-sw.js; onnxruntime runs single-threaded.');
        return;
    }
    registered.then(
        (registration) => {
            const reload = () => {
                sessionStorage.setItem(RELOAD_FLAG, '1');
                location.reload();
            };
            if (registration.active && navigator.serviceWorker.controller) reload();
            else navigator.serviceWorker.addEventListener('controllerchange', reload, { once: true });
        },
        () => {},
    );
})();
