// @ts-check
/**
 * @file Classic script, loaded first by index.html: when the host sent no COOP/COEP headers (the page
 * is not `crossOriginIsolated`), register `coi-sw.js` (which adds them) and reload once. Without
 * isolation the app still works, with onnxruntime-web on one thread, so every failure here is only
 * logged. A sessionStorage flag makes sure the page reloads at most once per tab.
 * @module coi_register
 */
(() => {
    const RELOAD_FLAG = 'klein-coi-reloaded';
    if (self.crossOriginIsolated || !window.isSecureContext || !('serviceWorker' in navigator)) return;
    if (sessionStorage.getItem(RELOAD_FLAG)) {
        // Already reloaded once and still not isolated: the browser does not honour it; do not loop.
        console.warn('klein-web: not cross-origin isolated even with coi-sw.js; onnxruntime runs single-threaded.');
        return;
    }
    // Relative to the page, not to this script (which is in assets/): the worker must control the site root.
    const url = new URL('coi-sw.js', document.baseURI);
    navigator.serviceWorker
        .register(url)
        .then((registration) => {
            const reload = () => {
                sessionStorage.setItem(RELOAD_FLAG, '1');
                location.reload();
            };
            if (registration.active && navigator.serviceWorker.controller) reload();
            else navigator.serviceWorker.addEventListener('controllerchange', reload, { once: true });
        })
        .catch((error) => console.warn('klein-web: could not register coi-sw.js:', error));
})();
