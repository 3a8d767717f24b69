// @ts-check
/**
 * @file The status line of the app shell (`#app-status`): whether this build is stored for offline use, whether
 * the page runs offline, and when a newer build is waiting (with a button that switches to it and reloads). The
 * facts come from the site's service worker (src/service_worker.js), which answers `build` with its build id.
 * @module page/ui/offline_status
 */

import { requireElement } from './dom.js';

/**
 * @typedef {Object} ShellFacts
 * @property {boolean} supported   The browser has service workers and the page is a secure context.
 * @property {boolean} online      navigator.onLine.
 * @property {string | null} workerBuild  The build of the worker that controls this page; null while none does.
 * @property {boolean} cachesShell The controlling worker keeps the shell (false in a `serve --watch` build).
 * @property {string} pageBuild    This page's build (`<meta name="klein-build">`).
 * @property {boolean} waiting     A newer worker is installed and waits for the page to switch.
 */

/**
 * @typedef {Object} ShellStatus
 * @property {'hidden' | 'storing' | 'stored' | 'offline' | 'development' | 'update'} kind
 * @property {string} text
 * @property {boolean} action  Whether the "Reload to use it" button applies.
 */

/**
 * What the line says. A waiting update, or a page of another build than the worker serving the shell (another tab
 * switched), comes first: it is the one thing the user has to act on. A worker that keeps no shell serves every
 * page from the network, so the page is the newest there is, whatever build that worker is.
 * @param {ShellFacts} facts
 * @returns {ShellStatus}
 */
export function shellStatus(facts) {
    if (!facts.supported) return { kind: 'hidden', text: '', action: false };
    const stale = facts.cachesShell && facts.workerBuild !== null && facts.workerBuild !== facts.pageBuild;
    if (facts.waiting || stale) {
        return { kind: 'update', text: 'An update of the app is ready.', action: true };
    }
    if (!facts.online) {
        return {
            kind: 'offline',
            text: 'Offline: running the stored app; the model runs from this device.',
            action: false,
        };
    }
    if (facts.workerBuild === null) return { kind: 'storing', text: 'Not yet stored for offline use.', action: false };
    if (!facts.cachesShell) {
        return { kind: 'development', text: 'Development build: not stored for offline use.', action: false };
    }
    return { kind: 'stored', text: 'Stored for offline use.', action: false };
}

/**
 * The controlling worker's answer to `build`.
 * @param {ServiceWorker} worker
 * @returns {Promise<{build: string, cachesShell: boolean}>}
 */
function askBuild(worker) {
    return new Promise((resolve) => {
        const channel = new MessageChannel();
        channel.port1.onmessage = (event) => resolve(event.data);
        worker.postMessage({ type: 'build' }, [channel.port2]);
    });
}

export class OfflineStatus {
    /**
     * @param {Document} doc
     * @param {{pageBuild: string}} options
     */
    constructor(doc, { pageBuild }) {
        this.line = requireElement(doc, 'app-status', HTMLElement);
        this.text = requireElement(doc, 'app-status-text', HTMLElement);
        this.button = requireElement(doc, 'app-update', HTMLButtonElement);
        const container = window.isSecureContext && 'serviceWorker' in navigator ? navigator.serviceWorker : null;
        this.container = container;
        /** @type {ShellFacts} */
        this.facts = {
            supported: container !== null,
            online: navigator.onLine,
            workerBuild: null,
            cachesShell: false,
            pageBuild,
            waiting: false,
        };
        /** @type {ServiceWorkerRegistration | null} */
        this.registration = null;
        /** The user asked to switch: the next controller change reloads the page. */
        this.switching = false;
        this.line.dataset.build = pageBuild;
        this.render();
        if (!container) return;
        for (const name of ['online', 'offline']) {
            window.addEventListener(name, () => {
                this.update({ online: navigator.onLine });
                if (navigator.onLine) this.registration?.update().catch(() => {}); // a deploy made while offline
            });
        }
        container.addEventListener('controllerchange', () => {
            if (this.switching) location.reload();
            else this.#askController();
        });
        this.button.addEventListener('click', () => this.#switch());
        this.#askController();
        container.ready.then(
            (registration) => this.#watch(registration),
            () => {},
        );
    }

    /** @param {Partial<ShellFacts>} changed */
    update(changed) {
        this.facts = { ...this.facts, ...changed };
        this.render();
    }

    render() {
        const status = shellStatus(this.facts);
        this.line.hidden = status.kind === 'hidden';
        this.line.dataset.status = status.kind;
        this.text.textContent = status.text;
        this.button.hidden = !status.action;
        this.line.title = this.facts.workerBuild ? `Build ${this.facts.workerBuild}` : '';
    }

    #askController() {
        const controller = this.container?.controller;
        if (!controller) return;
        askBuild(controller).then(({ build, cachesShell }) => this.update({ workerBuild: build, cachesShell }));
    }

    /** @param {ServiceWorkerRegistration} registration */
    #watch(registration) {
        this.registration = registration;
        const found = () =>
            this.update({ waiting: registration.waiting !== null && this.container?.controller != null });
        found();
        registration.addEventListener('updatefound', () => {
            const installing = registration.installing;
            installing?.addEventListener('statechange', found);
        });
    }

    #switch() {
        const waiting = this.registration?.waiting;
        if (!waiting) {
            location.reload(); // another tab switched already: this page only has to load the new build
            return;
        }
        this.switching = true;
        this.button.disabled = true;
        waiting.postMessage({ type: 'skip-waiting' });
    }
}
