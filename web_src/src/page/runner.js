// @ts-check
/**
 * @file One Generate from click to result: reads the settings and input images (a bad one starts nothing),
 * waits for the browser check, asks the worker, shows the image, keeps it in history, and says why it stopped
 * when it did not finish. `<body data-state>` is running from the click to done | idle (cancelled) | error.
 * @module page/runner
 */

import { ErrorCode, InputError, KleinError } from '../shared/errors.js';
import { formatDuration } from '../shared/format.js';
import { runRequest } from './run_request.js';
import { adviseError } from './ui/error_view.js';
import { currentState, setState } from './ui/page_state.js';
import { encodeImage } from './ui/result.js';

/** @typedef {import('./ui/form.js').FormValues} FormValues */
/** @typedef {import('./ui/editing.js').Collected} Collected */

/**
 * @typedef {Object} RunnerParts
 * @property {import('./worker_client.js').WorkerClient} client
 * @property {import('./readiness.js').Readiness} readiness
 * @property {Promise<import('./model_source.js').ModelSource>} source
 * @property {string} version
 * @property {import('./ui/form.js').FormView} form
 * @property {import('./ui/editing.js').EditingView} editing
 * @property {import('./ui/memory_setting.js').MemorySetting} memory
 * @property {import('./ui/progress.js').ProgressView} progress
 * @property {import('./ui/result.js').ResultView} result
 * @property {import('./ui/error_view.js').ErrorView} errors
 * @property {import('./ui/capabilities.js').CapabilitiesView} capabilities
 * @property {import('./history_panel.js').HistoryPanel} history
 * @property {HTMLElement} outputCard
 */

export class Runner {
    /** @param {RunnerParts} parts */
    constructor(parts) {
        this.parts = parts;
        /** Between the click and the running state (reading the files is async): a second click starts nothing. */
        this.starting = false;
        this.persistAsked = false;
    }

    /** Generate: one run, unless one is running or starting. */
    async generate() {
        const { form, errors, capabilities, progress } = this.parts;
        if (form.running || this.starting) return;
        const collected = await this.#collect();
        if (!collected) return;
        const { values, inputs } = collected;
        errors.clear();
        form.setRunning(true);
        capabilities.setBusy(true);
        progress.start({ images: inputs.record !== null });
        this.#revealOutput();
        try {
            await this.#run(values, inputs);
        } catch (err) {
            this.#stopped(err, values);
        } finally {
            form.setRunning(false);
            capabilities.setBusy(false);
        }
    }

    /** Cancel: the worker stops the running job at its next step boundary. */
    cancel() {
        this.parts.form.cancel.disabled = true;
        this.parts.progress.idle('Cancelling after the current step…');
        this.parts.client.cancel().catch(() => {});
    }

    /**
     * The validated settings and the input images, or null after saying what to fix (nothing is sent then).
     * @returns {Promise<{values: FormValues, inputs: Collected} | null>}
     */
    async #collect() {
        const { form, editing, errors } = this.parts;
        this.starting = true;
        // Running from the click on (reading the images is async), so automation waiting for done|error never
        // sees the previous run's state.
        const before = currentState();
        setState('running');
        try {
            return { values: form.read(), inputs: await editing.collect() };
        } catch (err) {
            if (!(err instanceof InputError)) {
                setState('error');
                throw err;
            }
            setState(before);
            errors.show(adviseError(err, {}), err.code);
            return null;
        } finally {
            this.starting = false;
        }
    }

    /**
     * @param {FormValues} values
     * @param {Collected} inputs
     */
    async #run(values, inputs) {
        const { client, readiness, source, memory, progress, result, history, version } = this.parts;
        await readiness.ready();
        const found = await source;
        const label = found.label;
        const { settings, params } = runRequest(values, found, memory.value(), inputs.params);
        this.#askPersistence();
        const output = await client.generate(params, { onEvent: (event) => progress.handle(event) });
        const encoded = await encodeImage(output, { modelLabel: label, version });
        result.show(output, encoded);
        progress.stop(`Done in ${formatDuration(output.timings.total)}.`, { complete: true });
        setState('done');
        readiness.refresh(); // the model is cached now: storage use changed
        // The settings without the image bytes: the files go to history as the Blobs the page holds.
        history.record(
            { createdAt: Date.now(), params: settings, modelLabel: label, totalMs: output.timings.total, thumb: encoded.thumb },
            inputs.record,
        );
    }

    /**
     * Says why a run ended without an image (a cancel is no error).
     * @param {unknown} err
     * @param {FormValues} values
     */
    #stopped(err, values) {
        const { client, readiness, errors, progress } = this.parts;
        const code = err instanceof KleinError ? err.code : ErrorCode.INTERNAL;
        if (code === ErrorCode.CANCELLED) {
            progress.stop('Cancelled.', { complete: false });
            setState('idle');
            return;
        }
        const shown = readiness.advise(err, { width: values.width, height: values.height });
        errors.show(shown, code);
        progress.stop(`Stopped: ${shown.title.toLowerCase()}.`, { complete: false });
        setState('error');
        // A lost device can leave the worker's runtime unusable: the next Generate gets a fresh one.
        if (code === ErrorCode.DEVICE_LOST) client.restart();
    }

    /**
     * Asks once, from a user gesture, that the browser never evicts the cached model (a worker cannot ask).
     * Chrome grants it silently to sites the user engages with; a "no" is not an error.
     */
    #askPersistence() {
        if (this.persistAsked || !navigator.storage?.persist) return;
        this.persistAsked = true;
        navigator.storage.persist().catch(() => false);
    }

    /** In a one-column (narrow) layout the progress is below the form: scroll it into view once. */
    #revealOutput() {
        const card = this.parts.outputCard;
        if (card.getBoundingClientRect().top > window.innerHeight - 120) card.scrollIntoView({ behavior: 'smooth', block: 'start' });
    }
}
