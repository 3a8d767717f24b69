// @ts-check
/**
 * @file Page entry: builds the views and one WorkerClient, then wires DOM events to them. The page only
 * renders; every model byte and every GPU call lives in the module worker, so the page thread never blocks.
 * The jobs live in their own modules: readiness.js (can this browser run it), runner.js (one Generate),
 * history_panel.js (this browser's history), run_request.js (what a run asks of the worker).
 * @module page/main
 */

import { ErrorCode, InputError, KleinError } from '../shared/errors.js';
import { formatBytes } from '../shared/format.js';
import { HistoryPanel } from './history_panel.js';
import { resolveModelSource } from './model_source.js';
import { Readiness } from './readiness.js';
import { Runner } from './runner.js';
import { WorkerClient } from './worker_client.js';
import { SUPPORT_NOTE, detectBrowser, webgpuAdvice } from './ui/browser_support.js';
import { CapabilitiesView } from './ui/capabilities.js';
import { requireElement } from './ui/dom.js';
import { BatchSetting } from './ui/batch_setting.js';
import { BatchStripView } from './ui/batch_strip.js';
import { EditingView } from './ui/editing.js';
import { ErrorView, adviseError } from './ui/error_view.js';
import { FormView, randomSeed, shareUrl, valuesFromUrl } from './ui/form.js';
import { MemorySetting } from './ui/memory_setting.js';
import { PreviewSetting, StepPreviewView } from './ui/step_preview.js';
import { OfflineStatus } from './ui/offline_status.js';
import { Toast, setState } from './ui/page_state.js';
import { ProgressView } from './ui/progress.js';
import { ResultView, encodeImage } from './ui/result.js';

/** @typedef {import('./model_source.js').ModelSource} ModelSource */

/**
 * @param {string} name
 * @returns {string}
 */
function meta(name) {
    const content = document.querySelector(`meta[name="${name}"]`)?.getAttribute('content');
    if (!content) throw new Error(`index.html has no <meta name="${name}">: rebuild with \`klein-web build\`.`);
    return content;
}

/** @returns {Storage | null} localStorage, or null where the browser refuses it (blocked site data). */
function storageOrNull() {
    try {
        return globalThis.localStorage ?? null;
    } catch {
        return null;
    }
}

/**
 * @param {unknown} err
 * @returns {import('../shared/errors.js').ErrorCode}
 */
function codeOf(err) {
    return err instanceof KleinError ? err.code : ErrorCode.INTERNAL;
}

/**
 * Settings from a share link (a fresh random seed otherwise); a bad part of the link is said, not fixed.
 * @param {FormView} form
 * @param {ErrorView} errors
 * @param {(InputError | null)[]} settingErrors  What the other settings refused of the link.
 */
function applyShareLink(form, errors, settingErrors) {
    const fromUrl = valuesFromUrl(location.search);
    form.write({ seed: String(randomSeed()), ...fromUrl.values });
    const problems = [...fromUrl.problems, ...settingErrors.flatMap((err) => (err ? [err.message] : []))];
    if (problems.length) {
        errors.show(adviseError(new InputError(problems.join(' ')), {}), ErrorCode.INPUT, { reveal: false });
    }
}

/**
 * Where the model comes from, decided once and shown in the header; a bad `?model=` blocks Generate.
 * @param {FormView} form
 * @param {ErrorView} errors
 * @returns {Promise<ModelSource>}
 */
function showModelSource(form, errors) {
    const label = requireElement(document, 'model-source', HTMLElement);
    const source = resolveModelSource({
        href: location.href,
        defaultBase: meta('klein-model-base'),
        fetch: fetch.bind(globalThis),
        storage: storageOrNull(),
    });
    source.then(
        (found) => {
            label.textContent = found.label;
            label.title = found.base;
            label.dataset.kind = found.kind;
        },
        (err) => {
            label.textContent = 'Model source: invalid';
            form.block('Fix the ?model= or ?precision= part of the address first.');
            errors.show(adviseError(err, {}), ErrorCode.INPUT, { reveal: false });
            setState('error');
        },
    );
    return source;
}

/**
 * The model's kind, asked of the worker once the model source is known: the form then shows a base model's guidance
 * fields, or why a distilled model has none, and takes the model's default steps.
 * @param {WorkerClient} client
 * @param {Promise<ModelSource>} source
 * @param {FormView} form
 */
function learnModel(client, source, form) {
    source
        .then((found) => client.modelInfo(found.base))
        .then(
            (info) => form.setModel(info.pipeline),
            (err) => form.guidance.unreadable(err instanceof Error ? err.message : String(err)),
        );
}

/**
 * Copy link: the address bar and the clipboard get a link that opens the page with these settings.
 * @param {FormView} form
 * @param {ErrorView} errors
 * @param {Toast} toast
 */
async function copyShareLink(form, errors, toast) {
    let values;
    try {
        values = form.read();
    } catch (err) {
        if (err instanceof InputError) errors.show(adviseError(err, {}), err.code);
        return;
    }
    const link = shareUrl(location.href, values);
    window.history.replaceState(null, '', link);
    try {
        await navigator.clipboard.writeText(link);
        toast.announce('Link copied: it opens this page with these settings.');
    } catch {
        toast.announce('Copy this link from the address bar (clipboard access was refused).');
    }
}

/**
 * The device panel's Clear cache button: deletes the stored model and shows the storage freed.
 * @param {WorkerClient} client
 * @param {CapabilitiesView} capabilities
 * @param {FormView} form
 * @param {Readiness} readiness
 */
async function clearCache(client, capabilities, form, readiness) {
    capabilities.setBusy(true);
    capabilities.message('Clearing…');
    try {
        const { freedBytes } = await client.clearCache();
        capabilities.message(`Freed ${formatBytes(freedBytes)}. The model downloads again on the next Generate.`);
        readiness.refresh();
    } catch (err) {
        capabilities.message(`Could not clear the cache: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
        capabilities.setBusy(form.running);
    }
}

function main() {
    const version = meta('klein-version');
    const client = new WorkerClient(new URL(meta('klein-worker'), location.href));
    const browser = detectBrowser(navigator);

    const form = new FormView(document);
    const memory = new MemorySetting(document, { storage: storageOrNull(), href: location.href });
    const batchSetting = new BatchSetting(document, { storage: storageOrNull(), href: location.href });
    const preview = new PreviewSetting(document, { storage: storageOrNull(), href: location.href });
    const stepPreview = new StepPreviewView(document);
    const progress = new ProgressView(document);
    const result = new ResultView(document);
    const strip = new BatchStripView(document, { onShow: (output, encoded) => result.show(output, encoded) });
    const errors = new ErrorView(document);
    const toast = new Toast(requireElement(document, 'toast', HTMLElement));
    const errorBox = requireElement(document, 'error', HTMLElement);
    const editing = new EditingView(document, form, {
        onProblem: (err) => errors.show(adviseError(err, {}), codeOf(err)),
        // A file taken answers the message about the one refused before it (other errors stay).
        onAdded: () => {
            if (errorBox.dataset.code === ErrorCode.INPUT) errors.clear();
        },
    });
    const capabilities = new CapabilitiesView(document, {
        onClearCache: () => clearCache(client, capabilities, form, readiness),
    });
    const history = new HistoryPanel(document, { form, editing, errors, toast });
    const browserNote = requireElement(document, 'browser-note', HTMLElement);
    browserNote.textContent = SUPPORT_NOTE;
    requireElement(document, 'version', HTMLElement).textContent = `klein-web ${version}`;
    new OfflineStatus(document, { pageBuild: meta('klein-build') });

    applyShareLink(form, errors, [memory.urlError, batchSetting.urlError, preview.urlError]);
    const source = showModelSource(form, errors);
    const readiness = new Readiness({
        client,
        capabilities,
        form,
        errors,
        progress,
        browserNote,
        browser,
        advice: webgpuAdvice(browser),
    });
    readiness.start();
    learnModel(client, source, form);
    history.open(indexedDB);

    const outputCard = requireElement(document, 'output', HTMLElement);
    const runner = new Runner({
        client,
        readiness,
        source,
        version,
        form,
        editing,
        memory,
        batchSetting,
        progress,
        strip,
        errors,
        capabilities,
        history,
        outputCard,
        preview,
        stepPreview,
        encode: encodeImage,
    });
    form.onSubmit(() => {
        runner.generate().catch((err) => {
            errors.show(adviseError(err, {}), ErrorCode.INTERNAL);
            setState('error');
        });
    });
    form.cancel.addEventListener('click', () => runner.cancel());
    requireElement(document, 'copy-link', HTMLButtonElement).addEventListener('click', () =>
        copyShareLink(form, errors, toast),
    );
}

main();
