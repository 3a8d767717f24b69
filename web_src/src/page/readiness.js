// @ts-check
/**
 * @file Whether this browser can run the app, asked of the worker before anything is downloaded: probes,
 * renders the capabilities and the browser note, and blocks Generate with advice when WebGPU or another
 * need is missing. A probe that itself failed (the worker script did not load) is asked again on the next run.
 * @module page/readiness
 */

import { PROTOCOL_VERSION } from '../protocol.js';
import { decide } from '../shared/browser_needs.js';
import { ErrorCode, KleinError, NoWebGPUError } from '../shared/errors.js';
import { missingAdvice } from './ui/browser_support.js';
import { summaryNote } from './ui/capabilities.js';
import { adviseError } from './ui/error_view.js';
import { setState } from './ui/page_state.js';

/** @typedef {import('../shared/types.js').Capabilities} Capabilities */
/** @typedef {import('./ui/error_view.js').ErrorAdvice} ErrorAdvice */

/**
 * @typedef {Object} ReadinessViews
 * @property {import('./worker_client.js').WorkerClient} client
 * @property {import('./ui/capabilities.js').CapabilitiesView} capabilities
 * @property {import('./ui/form.js').FormView} form
 * @property {import('./ui/error_view.js').ErrorView} errors
 * @property {import('./ui/progress.js').ProgressView} progress
 * @property {HTMLElement} browserNote
 * @property {import('./ui/browser_support.js').BrowserInfo} browser
 * @property {string} advice  What to do about WebGPU in this browser.
 */

export class Readiness {
    /** @param {ReadinessViews} views */
    constructor(views) {
        this.views = views;
        /** @type {KleinError | null} Why this browser cannot run the app, once the probe has said so. */
        this.cannotRun = null;
        /** @type {ErrorAdvice | null} What to do about `cannotRun` when it is not WebGPU. */
        this.cannotRunAdvice = null;
        /** @type {Promise<Capabilities | null>} */
        this.probe = Promise.resolve(null);
        /** @type {import('../shared/browser_needs.js').RepoFacts | null} The model's manifest, once read. */
        this.repo = null;
    }

    /**
     * The model's manifest is read: decide again with its own sizes (a klein-9B repository needs a larger buffer
     * for its token embedding and downloads more than klein-4B), and render the panel and the note with them.
     * @param {import('../shared/browser_needs.js').RepoFacts} repo
     */
    setModel(repo) {
        this.repo = repo;
        this.views.capabilities.setModel(repo);
        this.probe.then(
            (caps) => {
                if (caps) this.#judge(caps);
            },
            () => {},
        );
    }

    /** Probes once at page load; a failure is shown without scrolling to it. */
    start() {
        const { capabilities, progress, errors, advice } = this.views;
        setState('idle');
        progress.idle('Checking WebGPU…');
        capabilities.placeholder('Probing the GPU…');
        this.probe = this.#run();
        this.probe.catch((err) => {
            const code = err instanceof KleinError ? err.code : ErrorCode.INTERNAL;
            errors.show(adviseError(err, { advice }), code, { reveal: false });
            setState('error');
        });
    }

    /**
     * The capabilities of a browser that can run the app, or the reason it cannot (thrown). A failed probe
     * (not a "no WebGPU" answer) is retried: the client starts a fresh worker.
     * @returns {Promise<Capabilities>}
     */
    async ready() {
        const caps = await this.probe.catch(() => (this.probe = this.#run()));
        if (caps === null) throw this.cannotRun ?? new NoWebGPUError('WebGPU is not available in this browser.');
        if (this.cannotRun) throw this.cannotRun; // the model's manifest asked for more than this browser has
        return caps;
    }

    /**
     * What to tell the user about an error that stopped a run.
     * @param {unknown} err
     * @param {{width?: number, height?: number}} size
     * @returns {ErrorAdvice}
     */
    advise(err, size) {
        if (err === this.cannotRun && this.cannotRunAdvice) return this.cannotRunAdvice;
        return adviseError(err, { ...size, advice: this.views.advice });
    }

    /** Renders the capabilities again (storage use changes once the model is cached or cleared). */
    refresh() {
        this.views.client.probe().then(
            (caps) => this.views.capabilities.render(caps),
            () => {},
        );
    }

    /**
     * Probes the worker and renders the answer. Resolves to the capabilities, to null when this browser
     * cannot run the app (final: Generate is blocked), or rejects when the probe itself failed.
     * @returns {Promise<Capabilities | null>}
     */
    async #run() {
        const { client, capabilities, form, errors, progress, browserNote, browser, advice } = this.views;
        this.cannotRun = null;
        this.cannotRunAdvice = null;
        let caps;
        try {
            caps = await client.probe();
        } catch (err) {
            capabilities.placeholder('The GPU probe failed.');
            progress.idle('Not ready.');
            throw err;
        }
        const workerVersion = /** @type {{protocolVersion?: number}} */ (caps).protocolVersion;
        if (workerVersion !== undefined && workerVersion !== PROTOCOL_VERSION) {
            // A page and a worker from different builds (a half-updated cache): messages may not match.
            throw new KleinError(
                `This page speaks protocol ${PROTOCOL_VERSION} but its worker speaks ${workerVersion}. Reload the page.`,
                { code: ErrorCode.VERSION_MISMATCH },
            );
        }
        capabilities.render(caps);
        if (!caps.webgpu) {
            // Whether the app runs here is decided from what the worker found, never from the browser's name.
            const decision = decide(caps, { repo: this.repo });
            const error = new NoWebGPUError(caps.error ?? 'This browser exposes no WebGPU adapter.');
            this.cannotRun = error;
            const found = decision.missing.find((m) => m.need === 'webgpu' || m.need === 'adapter');
            form.block('WebGPU is not available in this browser.');
            errors.show(adviseError(error, { advice: found ? missingAdvice(found, browser) : advice }), error.code, {
                reveal: false,
            });
            browserNote.textContent =
                'WebGPU is not available in this browser, so the app cannot run here. What to do is shown under the Generate button.';
            progress.idle('WebGPU is not available.');
            setState('error');
            return null;
        }
        if (!this.#judge(caps)) return null;
        progress.idle(caps.software ? 'Ready (software GPU: expect minutes per image).' : 'Ready.');
        return caps;
    }

    /**
     * The note at the top for a browser with WebGPU, from the decision for the model (klein-4B's figures until its
     * manifest is read); when the browser lacks what the model needs, Generate is blocked with advice.
     * @param {Capabilities} caps
     * @returns {boolean}  Whether the app can run here.
     */
    #judge(caps) {
        const { form, errors, progress, browserNote, browser } = this.views;
        const decision = decide(caps, { repo: this.repo });
        const note = summaryNote(decision);
        browserNote.textContent = note.text;
        browserNote.dataset.tone = note.tone;
        if (!decision.canRun) {
            this.cannotRun = new KleinError(`The app needs ${decision.missing.map((m) => m.what).join('; ')}.`, {
                code: ErrorCode.UNSUPPORTED,
            });
            this.cannotRunAdvice = {
                title: 'This browser lacks what the app needs',
                message: this.cannotRun.message,
                action: decision.missing.map((m) => missingAdvice(m, browser)).join(' '),
            };
            form.block('This browser lacks what the app needs.');
            errors.show(this.cannotRunAdvice, ErrorCode.UNSUPPORTED, { reveal: false });
            progress.idle('This browser lacks what the app needs.');
            setState('error');
            return false;
        }
        return true;
    }
}
