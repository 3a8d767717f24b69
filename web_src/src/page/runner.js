// @ts-check
/**
 * @file One Generate from click to result: reads the settings and input images (a bad one starts nothing),
 * waits for the browser check, then asks the worker for each image of the batch in turn (page/batch.js), shows
 * each, keeps each in history, and says why the batch stopped when it did not finish. `<body data-state>` is
 * running from the click to done | idle (cancelled) | error.
 * @module page/runner
 */

import { CancelledError, ErrorCode, InputError, KleinError } from '../shared/errors.js';
import { BatchRun, batchSeeds } from './batch.js';
import { runRequest } from './run_request.js';
import { adviseError } from './ui/error_view.js';
import { randomSeed } from './ui/form.js';
import { currentState, setState } from './ui/page_state.js';

/** @typedef {import('./ui/form.js').FormValues} FormValues */
/** @typedef {import('./ui/editing.js').Collected} Collected */
/** @typedef {import('./model_source.js').ModelSource} ModelSource */

/**
 * @typedef {Object} RunnerParts
 * @property {import('./worker_client.js').WorkerClient} client
 * @property {import('./readiness.js').Readiness} readiness
 * @property {Promise<ModelSource>} source
 * @property {string} version
 * @property {import('./ui/form.js').FormView} form
 * @property {import('./ui/editing.js').EditingView} editing
 * @property {import('./ui/memory_setting.js').MemorySetting} memory
 * @property {import('./ui/batch_setting.js').BatchSetting} batchSetting
 * @property {import('./ui/progress.js').ProgressView} progress
 * @property {import('./ui/batch_strip.js').BatchStripView} strip
 * @property {import('./ui/error_view.js').ErrorView} errors
 * @property {import('./ui/capabilities.js').CapabilitiesView} capabilities
 * @property {import('./history_panel.js').HistoryPanel} history
 * @property {HTMLElement} outputCard
 * @property {import('./ui/step_preview.js').PreviewSetting} preview
 * @property {import('./ui/step_preview.js').StepPreviewView} stepPreview
 * @property {(result: import('../protocol.js').GenerateResult, context: {modelLabel: string, version: string})
 *   => Promise<import('./ui/result.js').EncodedImage>} encode  The image as a tagged PNG and a thumbnail
 *   (ui/result.js encodeImage).
 */

/**
 * @typedef {Object} Job  What one click asks for, read before anything is sent.
 * @property {FormValues} values
 * @property {Collected} inputs
 * @property {BatchRun} batch
 */

export class Runner {
    /** @param {RunnerParts} parts */
    constructor(parts) {
        this.parts = parts;
        /** Between the click and the running state (reading the files is async): a second click starts nothing. */
        this.starting = false;
        this.persistAsked = false;
        /** @type {BatchRun | null} the batch running now */
        this.batch = null;
    }

    /** Generate: one batch, unless one is running or starting. */
    async generate() {
        const { form, errors, capabilities, strip } = this.parts;
        if (form.running || this.starting) return;
        const job = await this.#collect();
        if (!job) return;
        errors.clear();
        form.setRunning(true);
        capabilities.setBusy(true);
        this.batch = job.batch;
        strip.begin(job.batch);
        this.#revealOutput();
        try {
            await this.#run(job);
        } catch (err) {
            this.#stopped(err, job);
        } finally {
            this.batch = null;
            form.setRunning(false);
            capabilities.setBusy(false);
        }
    }

    /** Cancel: the worker stops the running image at its next step boundary, and no further image starts. */
    cancel() {
        this.batch?.cancel();
        this.parts.form.cancel.disabled = true;
        this.parts.progress.idle('Cancelling after the current step…');
        this.parts.client.cancel().catch(() => {});
    }

    /**
     * The validated settings, input images and batch, or null after saying what to fix (nothing is sent then).
     * @returns {Promise<Job | null>}
     */
    async #collect() {
        const { form, editing, batchSetting, errors } = this.parts;
        this.starting = true;
        // Running from the click on (reading the images is async), so automation waiting for done|error never
        // sees the previous run's state.
        const before = currentState();
        setState('running');
        try {
            const values = form.read();
            const { count, mode } = batchSetting.read();
            const inputs = await editing.collect();
            return {
                values,
                inputs,
                batch: new BatchRun(batchSeeds(values.seed, count, mode, randomSeed), performance.now()),
            };
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
     * Each image of the batch in turn, in the worker's same sessions; the input images are read once and sent
     * with each request (the worker encodes them once and keeps their latents).
     * @param {Job} job
     */
    async #run({ values, inputs, batch }) {
        const { readiness, source, progress, strip } = this.parts;
        progress.start({ images: inputs.record !== null, label: batch.label(0) });
        await readiness.ready();
        const found = await source;
        this.#askPersistence();
        for (let index = batch.next(); index !== null; index = batch.next()) {
            if (index > 0) progress.start({ images: inputs.record !== null, label: batch.label(index) });
            strip.render();
            await this.#image({ ...values, seed: batch.items[index].seed }, inputs, found, { batch, index });
        }
        // A cancel that came after the last image's last step stops nothing.
        if (batch.cancelled && batch.doneCount < batch.count) throw new CancelledError();
        batch.end('done', performance.now());
        strip.render();
        progress.stop(batch.endText('done'), { complete: true });
        setState('done');
        readiness.refresh(); // the model is cached now: storage use changed
    }

    /**
     * One image: asks the worker, shows it in the strip and large, and keeps it in history.
     * @param {FormValues} values  This image's seed included.
     * @param {Collected} inputs
     * @param {ModelSource} found
     * @param {{batch: BatchRun, index: number}} place  Which image of which batch.
     */
    async #image(values, inputs, found, { batch, index }) {
        const { client, memory, progress, strip, history, version, preview, stepPreview, encode } = this.parts;
        const { settings, params } = runRequest(values, found, memory.value(), inputs.params);
        const request = preview.enabled() ? { ...params, preview: true } : params;
        let output;
        try {
            output = await client.generate(request, {
                onEvent: (event) => (progress.handle(event), stepPreview.handle(event)),
            });
        } finally {
            stepPreview.clear();
        }
        const encoded = await encode(output, { modelLabel: found.label, version });
        batch.finish(index, output.timings.total);
        strip.add(index, output, encoded);
        strip.render();
        // The settings without the image bytes: the files go to history as the Blobs the page holds.
        history.record(
            {
                createdAt: Date.now(),
                params: settings,
                modelLabel: found.label,
                totalMs: output.timings.total,
                thumb: encoded.thumb,
            },
            inputs.record,
        );
    }

    /**
     * Says why a batch ended early (a cancel is no error); the images it finished stay shown and in history.
     * @param {unknown} err
     * @param {Job} job
     */
    #stopped(err, { values, batch }) {
        const { client, readiness, errors, progress, strip } = this.parts;
        const code = err instanceof KleinError ? err.code : ErrorCode.INTERNAL;
        if (code === ErrorCode.CANCELLED) {
            batch.end('cancelled', performance.now());
            strip.render();
            progress.stop(batch.endText('cancelled'), { complete: false });
            setState('idle');
            return;
        }
        batch.end('failed', performance.now());
        strip.render();
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
        if (card.getBoundingClientRect().top > window.innerHeight - 120)
            card.scrollIntoView({ behavior: 'smooth', block: 'start' });
    }
}
