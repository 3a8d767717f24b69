// @ts-check
/**
 * @file Page entry: builds the views and one WorkerClient, then wires DOM events to client calls.
 * The page only renders; every model byte and every GPU call lives in the module worker, so the page
 * thread never blocks. `document.body.dataset.state` is idle | running | done | error (CSS and
 * automation key on it).
 * @module page/main
 */

import { PROTOCOL_VERSION } from '../protocol.js';
import { ErrorCode, InputError, KleinError, NoWebGPUError } from '../shared/errors.js';
import { formatBytes, formatDuration } from '../shared/format.js';
import { resolveModelSource } from './model_source.js';
import { WorkerClient } from './worker_client.js';
import { decide } from '../shared/browser_needs.js';
import { SUPPORT_NOTE, detectBrowser, missingAdvice, webgpuAdvice } from './ui/browser_support.js';
import { CapabilitiesView, summaryNote } from './ui/capabilities.js';
import { EditingView } from './ui/editing.js';
import { ErrorView, adviseError } from './ui/error_view.js';
import { requireElement } from './ui/dom.js';
import { FormView, randomSeed, shareUrl, valuesFromUrl } from './ui/form.js';
import { MemorySetting } from './ui/memory_setting.js';
import { HistoryFullError, HistoryStore, HistoryView } from './ui/history.js';
import { ProgressView } from './ui/progress.js';
import { ResultView, encodeImage } from './ui/result.js';
import { PreviewSetting, StepPreviewView } from './ui/step_preview.js';

/** @typedef {import('../shared/types.js').Capabilities} Capabilities */
/** @typedef {import('./model_source.js').ModelSource} ModelSource */
/** @typedef {'idle' | 'running' | 'done' | 'error'} PageState */

/**
 * @param {string} name
 * @returns {string}
 */
function meta(name) {
    const content = document.querySelector(`meta[name="${name}"]`)?.getAttribute('content');
    if (!content) throw new Error(`index.html has no <meta name="${name}">: rebuild with \`klein-web build\`.`);
    return content;
}

/** @param {PageState} state */
function setState(state) {
    document.body.dataset.state = state;
}

/**
 * A short message in `#toast` (role=status), cleared after a few seconds.
 * @param {HTMLElement} toast
 * @param {string} text
 */
function announce(toast, text) {
    toast.textContent = text;
    clearTimeout(Number(toast.dataset.timer));
    toast.dataset.timer = String(setTimeout(() => (toast.textContent = ''), 4000));
}

/** @returns {Storage | null} localStorage, or null where the browser refuses it (blocked site data). */
function storageOrNull() {
    try {
        return globalThis.localStorage ?? null;
    } catch {
        return null;
    }
}

function main() {
    const version = meta('klein-version');
    const client = new WorkerClient(new URL(meta('klein-worker'), location.href));
    const browser = detectBrowser(navigator);
    const advice = webgpuAdvice(browser);

    const form = new FormView(document);
    const memory = new MemorySetting(document, { storage: storageOrNull(), href: location.href });
    const previewSetting = new PreviewSetting(document, { storage: storageOrNull(), href: location.href });
    const stepPreview = new StepPreviewView(document);
    const progress = new ProgressView(document);
    const result = new ResultView(document);
    const errors = new ErrorView(document);
    const errorBox = requireElement(document, 'error', HTMLElement);
    const editing = new EditingView(document, form, {
        onProblem: (err) => {
            const code = err instanceof KleinError ? err.code : ErrorCode.INTERNAL;
            errors.show(adviseError(err, {}), code);
        },
        // A file taken answers the message about the one refused before it (other errors stay).
        onAdded: () => {
            if (errorBox.dataset.code === ErrorCode.INPUT) errors.clear();
        },
    });
    const toast = requireElement(document, 'toast', HTMLElement);
    const sourceLabel = requireElement(document, 'model-source', HTMLElement);
    const copyLink = requireElement(document, 'copy-link', HTMLButtonElement);
    const browserNote = requireElement(document, 'browser-note', HTMLElement);
    browserNote.textContent = SUPPORT_NOTE;
    requireElement(document, 'version', HTMLElement).textContent = `klein-web ${version}`;

    /** @type {HistoryStore | null} */
    let historyStore = null;
    const history = new HistoryView(document, {
        onRestore: async (entry) => {
            const { params } = entry;
            form.write({
                prompt: params.prompt,
                seed: String(params.seed),
                steps: String(params.steps),
                width: String(params.width),
                height: String(params.height),
            });
            try {
                const inputs = entry.id !== undefined && historyStore ? await historyStore.inputs(entry.id) : null;
                await editing.restore(inputs, params);
            } catch (err) {
                errors.show(adviseError(err, {}), err instanceof KleinError ? err.code : ErrorCode.INTERNAL);
                return;
            }
            form.prompt.focus();
            const what =
                entry.mode === 'edit'
                    ? 'Settings and images'
                    : entry.mode === 'inpaint'
                      ? 'Settings, image and mask'
                      : 'Settings';
            announce(toast, `${what} restored: seed ${params.seed}, ${params.width}×${params.height}.`);
        },
        onDelete: async (entry) => {
            if (entry.id === undefined || !historyStore) return;
            try {
                await historyStore.delete(entry.id);
                history.render(await historyStore.list());
                announce(toast, 'Deleted from history.');
            } catch (err) {
                announce(toast, `Could not delete it: ${err instanceof Error ? err.message : String(err)}`);
            }
        },
        onClear: async () => {
            await historyStore?.clear();
            history.render([]);
            announce(toast, 'History cleared.');
        },
    });
    const capabilities = new CapabilitiesView(document, {
        onClearCache: async () => {
            capabilities.setBusy(true);
            capabilities.message('Clearing…');
            try {
                const { freedBytes } = await client.clearCache();
                capabilities.message(
                    `Freed ${formatBytes(freedBytes)}. The model downloads again on the next Generate.`,
                );
                client.probe().then(
                    (caps) => capabilities.render(caps),
                    () => {},
                ); // storage use changed
            } catch (err) {
                capabilities.message(`Could not clear the cache: ${err instanceof Error ? err.message : String(err)}`);
            } finally {
                capabilities.setBusy(form.running);
            }
        },
    });

    // 1. Settings from a share link; a fresh random seed otherwise.
    const fromUrl = valuesFromUrl(location.search);
    form.write({ seed: String(randomSeed()), ...fromUrl.values });
    const problems = [...fromUrl.problems, ...[memory.urlError, previewSetting.urlError].flatMap((e) => (e ? [e.message] : []))];
    if (problems.length) {
        errors.show(adviseError(new InputError(problems.join(' ')), {}), ErrorCode.INPUT, { reveal: false });
    }

    // 2. Where the model comes from (shown in the header), decided once.
    /** @type {Promise<ModelSource>} */
    const source = resolveModelSource({
        href: location.href,
        defaultBase: meta('klein-model-base'),
        fetch: fetch.bind(globalThis),
    });
    source.then(
        (found) => {
            sourceLabel.textContent = found.label;
            sourceLabel.title = found.base;
            sourceLabel.dataset.kind = found.kind;
        },
        (err) => {
            sourceLabel.textContent = 'Model source: invalid';
            form.block('Fix the ?model= or ?precision= part of the address first.');
            errors.show(adviseError(err, {}), ErrorCode.INPUT, { reveal: false });
            setState('error');
        },
    );

    // 3. Can this browser run it at all? Probed in the worker before anything is downloaded.
    setState('idle');
    progress.idle('Checking WebGPU…');
    capabilities.placeholder('Probing the GPU…');
    /** @type {KleinError | null} Why this browser cannot run the app, once the probe has said so. */
    let cannotRun = null;
    /** @type {import('./ui/error_view.js').ErrorAdvice | null} What to do about `cannotRun` when it is not WebGPU. */
    let cannotRunAdvice = null;
    /**
     * Probes the worker and renders the answer. Resolves to the capabilities, to null when this browser
     * has no usable WebGPU (final: Generate is blocked), or rejects when the probe itself failed (e.g. the
     * worker script did not load), in which case the next Generate probes again.
     * @returns {Promise<Capabilities | null>}
     */
    async function runProbe() {
        cannotRun = null;
        cannotRunAdvice = null;
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
        // Whether the app runs here is decided from what the worker found, never from the browser's name.
        const decision = decide(caps);
        const note = summaryNote(decision);
        browserNote.textContent = note.text;
        browserNote.dataset.tone = note.tone;
        if (!caps.webgpu) {
            const error = new NoWebGPUError(caps.error ?? 'This browser exposes no WebGPU adapter.');
            cannotRun = error;
            const found = decision.missing.find((m) => m.need === 'webgpu' || m.need === 'adapter');
            form.block('WebGPU is not available in this browser.');
            errors.show(adviseError(error, { advice: found ? missingAdvice(found, browser) : advice }), error.code, { reveal: false });
            browserNote.textContent =
                'WebGPU is not available in this browser, so the app cannot run here. What to do is shown under the Generate button.';
            progress.idle('WebGPU is not available.');
            setState('error');
            return null;
        }
        if (!decision.canRun) {
            cannotRun = new KleinError(`The app needs ${decision.missing.map((m) => m.what).join('; ')}.`, { code: ErrorCode.UNSUPPORTED });
            cannotRunAdvice = {
                title: 'This browser lacks what the app needs',
                message: cannotRun.message,
                action: decision.missing.map((m) => missingAdvice(m, browser)).join(' '),
            };
            form.block('This browser lacks what the app needs.');
            errors.show(cannotRunAdvice, ErrorCode.UNSUPPORTED, { reveal: false });
            progress.idle('This browser lacks what the app needs.');
            setState('error');
            return null;
        }
        progress.idle(caps.software ? 'Ready (software GPU: expect minutes per image).' : 'Ready.');
        return caps;
    }

    /** @type {Promise<Capabilities | null>} */
    let probe = runProbe();
    probe.catch((err) => {
        const code = err instanceof KleinError ? err.code : ErrorCode.INTERNAL;
        errors.show(adviseError(err, { advice }), code, { reveal: false });
        setState('error');
    });

    // 4. This browser's history.
    HistoryStore.open(indexedDB)
        .then(async (store) => {
            historyStore = store;
            history.render(await store.list());
        })
        .catch((err) => history.unavailable(`History is unavailable in this browser (${err?.message ?? err}).`));

    const outputCard = requireElement(document, 'output', HTMLElement);
    /** In a one-column (narrow) layout the progress is below the form: scroll it into view once. */
    function revealOutput() {
        const top = outputCard.getBoundingClientRect().top;
        if (top > window.innerHeight - 120) outputCard.scrollIntoView({ behavior: 'smooth', block: 'start' });
    }

    let persistAsked = false;
    /** Between the click and the running state (reading the files is async): a second click starts nothing. */
    let starting = false;
    async function generate() {
        if (form.running || starting) return;
        /** @type {import('./ui/form.js').FormValues} */
        let values;
        /** @type {import('./ui/editing.js').Collected} */
        let inputs;
        starting = true;
        // Running from the click on (reading the images below is async), so automation waiting for done|error
        // never sees the previous run's state.
        const before = /** @type {PageState} */ (document.body.dataset.state ?? 'idle');
        setState('running');
        try {
            values = form.read();
            inputs = await editing.collect();
        } catch (err) {
            if (!(err instanceof InputError)) {
                setState('error');
                throw err;
            }
            // Invalid settings or missing images: say why and start nothing (no message goes to the worker).
            setState(before);
            errors.show(adviseError(err, {}), err.code);
            return;
        } finally {
            starting = false;
        }
        errors.clear();
        form.setRunning(true);
        capabilities.setBusy(true);
        progress.start({ images: inputs.record !== null });
        revealOutput();
        try {
            // A failed probe (not a "no WebGPU" answer) is retried: the client starts a fresh worker.
            const caps = await probe.catch(() => (probe = runProbe()));
            if (caps === null) throw cannotRun ?? new NoWebGPUError('WebGPU is not available in this browser.');
            const { base, label, precision, profile } = await source;
            const mode = memory.value();
            const settings = { ...values, modelBase: base, ...(precision ? { precision } : {}), ...(mode ? { memory: mode } : {}) };
            // A profiled run (?profile=kernels) is a way of looking, not a setting: history does not keep it.
            const params = { ...settings, ...(profile ? { profile } : {}), ...(previewSetting.enabled() ? { preview: true } : {}), ...inputs.params };
            // Ask once, from a user gesture, that the browser never evicts the cached model (a worker
            // cannot ask). Chrome grants it silently to sites the user engages with; a "no" is not an error.
            if (!persistAsked && navigator.storage?.persist) {
                persistAsked = true;
                navigator.storage.persist().catch(() => false);
            }
            const output = await client.generate(params, { onEvent: (event) => (progress.handle(event), stepPreview.handle(event)) });
            const encoded = await encodeImage(output, { modelLabel: label, version });
            result.show(output, encoded);
            progress.stop(`Done in ${formatDuration(output.timings.total)}.`, { complete: true });
            setState('done');
            // Storage use changed (the model is cached now): refresh the device panel.
            client.probe().then(
                (caps) => capabilities.render(caps),
                () => {},
            );
            // The settings without the image bytes: the files go to history as the Blobs the page holds.
            historyStore
                ?.add(
                    {
                        createdAt: Date.now(),
                        params: settings,
                        modelLabel: label,
                        totalMs: output.timings.total,
                        thumb: encoded.thumb,
                    },
                    inputs.record,
                )
                .then(async () => historyStore && history.render(await historyStore.list()))
                .catch((err) => {
                    if (err instanceof HistoryFullError) {
                        const advice = { title: 'History is full', message: err.message, action: '' };
                        errors.show(advice, ErrorCode.QUOTA, { reveal: false });
                    } else announce(toast, `Not saved to history: ${err?.message ?? err}`);
                });
        } catch (err) {
            const code = err instanceof KleinError ? err.code : ErrorCode.INTERNAL;
            if (code === ErrorCode.CANCELLED) {
                progress.stop('Cancelled.', { complete: false });
                setState('idle');
                return;
            }
            const shown =
                err === cannotRun && cannotRunAdvice ? cannotRunAdvice : adviseError(err, { width: values.width, height: values.height, advice });
            errors.show(shown, code);
            progress.stop(`Stopped: ${shown.title.toLowerCase()}.`, { complete: false });
            setState('error');
            // A lost device can leave the worker's runtime unusable: the next Generate gets a fresh one.
            if (code === ErrorCode.DEVICE_LOST) client.restart();
        } finally {
            stepPreview.clear();
            form.setRunning(false);
            capabilities.setBusy(false);
        }
    }

    form.onSubmit(() => {
        generate().catch((err) => {
            errors.show(adviseError(err, {}), ErrorCode.INTERNAL);
            setState('error');
        });
    });

    form.cancel.addEventListener('click', () => {
        form.cancel.disabled = true;
        progress.idle('Cancelling after the current step…');
        client.cancel().catch(() => {});
    });

    copyLink.addEventListener('click', async () => {
        let values;
        try {
            values = form.read();
        } catch (err) {
            if (err instanceof InputError) errors.show(adviseError(err, {}), err.code);
            return;
        }
        const link = shareUrl(location.href, values);
        window.history.replaceState(null, '', link); // the address bar is a share link too
        try {
            await navigator.clipboard.writeText(link);
            announce(toast, 'Link copied: it opens this page with these settings.');
        } catch {
            announce(toast, 'Copy this link from the address bar (clipboard access was refused).');
        }
    });
}

main();
