// @ts-check
/**
 * @file Renders the worker's progress events: the stage list, `#status` (the current stage in words),
 * `#progress` (bytes, then steps), a detail line (file, bytes, rate) and elapsed time + ETA.
 *
 * Kept cheap on purpose: while the worker computes, the GPU and CPU are saturated and every frame the
 * page renders competes with it. Download progress is drawn at most every PROGRESS_INTERVAL_MS, the
 * clock ticks once a second, and nothing animates indefinitely (see style.css).
 * @module page/ui/progress
 */

import { STAGES } from '../../protocol.js';
import { formatBytes, formatDuration, formatRate, formatSeconds } from '../../shared/format.js';
import { requireElement } from './dom.js';

/** @typedef {import('../../protocol.js').JobEvent} WorkerEvent */
/** @typedef {import('../../protocol.js').Stage} Stage */

/** What `#status` says when a stage begins. */
const STAGE_TEXT = Object.freeze({
    check: 'Checking the model files',
    download: 'Downloading the model',
    load: 'Loading the model',
    encode: 'Encoding the prompt',
    images: 'Encoding the images',
    latents: 'Preparing the latents',
    timesteps: 'Preparing the timesteps',
    denoise: 'Denoising',
    decode: 'Decoding the image',
});

/** Download progress can arrive hundreds of times a second; people read it a few times a second. */
const PROGRESS_INTERVAL_MS = 200;

export class ProgressView {
    /** @param {Document} doc */
    constructor(doc) {
        this.status = requireElement(doc, 'status', HTMLElement);
        this.bar = requireElement(doc, 'progress', HTMLProgressElement);
        this.detail = requireElement(doc, 'progress-detail', HTMLElement);
        this.clock = requireElement(doc, 'elapsed', HTMLElement);
        this.stages = requireElement(doc, 'stages', HTMLElement);
        /** @type {number} performance.now() at start */
        this.startedAt = 0;
        /** @type {number | null} ms from now until done, when the worker gave one */
        this.etaMs = null;
        /** @type {number} performance.now() when etaMs was last set */
        this.etaAt = 0;
        /** @type {ReturnType<typeof setInterval> | null} */
        this.timer = null;
        /** @type {import('../../shared/types.js').DownloadProgress | null} latest download progress not drawn yet */
        this.pendingProgress = null;
        /** @type {ReturnType<typeof setTimeout> | null} */
        this.progressTimer = null;
        this.progressDrawnAt = -Infinity;
        /** What leads the status lines of this job ('' for a single image). */
        this.label = '';
    }

    /**
     * A job starts: reset everything and start the clock. The "Encode images" stage is listed only for a
     * request with input images (text to image never runs it). `label` leads each status line ("Image 2 of 3").
     * @param {{images?: boolean, label?: string}} [options]
     */
    start({ images = false, label = '' } = {}) {
        this.label = label;
        const imagesStage = this.stages.querySelector('li[data-stage="images"]');
        if (imagesStage instanceof HTMLElement) imagesStage.hidden = !images;
        this.startedAt = performance.now();
        this.etaMs = null;
        this.#setStage(null);
        this.#say('Starting…');
        this.detail.textContent = '';
        this.bar.removeAttribute('value'); // indeterminate until the first measurable event
        this.#tick();
        if (this.timer !== null) clearInterval(this.timer); // the batch's previous image
        this.timer = setInterval(() => this.#tick(), 1000);
    }

    /** @param {WorkerEvent} event */
    handle(event) {
        if (event.type === 'progress') {
            this.#queueProgress(event.progress);
            return;
        }
        this.#dropProgress();
        if (event.type === 'stage') {
            this.#setStage(event.stage);
            this.#say(STAGE_TEXT[event.stage] ?? event.stage);
            this.detail.textContent = event.detail ?? '';
            this.etaMs = null;
            this.bar.removeAttribute('value');
        } else if (event.type === 'step') {
            this.#setStage('denoise');
            this.#say(`Denoising: step ${event.step} of ${event.steps}`);
            this.bar.max = event.steps;
            this.bar.value = event.step;
            const perStep = event.step > 0 ? event.elapsedMs / event.step : NaN;
            this.detail.textContent = `${formatDuration(perStep)} per step`;
            this.#setEta(event.etaMs);
        }
        this.#tick();
    }

    /**
     * Draws now if the last drawing is old enough, else once the interval has passed (latest wins).
     * @param {import('../../shared/types.js').DownloadProgress} progress
     */
    #queueProgress(progress) {
        this.pendingProgress = progress;
        if (this.progressTimer !== null) return;
        const wait = this.progressDrawnAt + PROGRESS_INTERVAL_MS - performance.now();
        if (wait <= 0) {
            this.#drawProgress();
        } else {
            this.progressTimer = setTimeout(() => this.#drawProgress(), wait);
        }
    }

    #dropProgress() {
        if (this.progressTimer !== null) clearTimeout(this.progressTimer);
        this.progressTimer = null;
        this.pendingProgress = null;
    }

    #drawProgress() {
        const p = this.pendingProgress;
        this.progressTimer = null;
        this.pendingProgress = null;
        if (!p) return;
        this.progressDrawnAt = performance.now();
        this.#setStage('download');
        this.#say(STAGE_TEXT.download);
        this.bar.max = Math.max(1, p.total);
        this.bar.value = p.loaded;
        const filePercent = p.fileTotal > 0 ? Math.floor((100 * p.fileLoaded) / p.fileTotal) : 0;
        this.detail.textContent =
            `${formatBytes(p.loaded)} of ${formatBytes(p.total)} · ${formatRate(p.bytesPerSecond)} · ` +
            `${p.file} ${filePercent}% (${formatBytes(p.fileLoaded)} of ${formatBytes(p.fileTotal)})`;
        this.#setEta(p.etaSeconds === null ? null : p.etaSeconds * 1000);
        this.#tick();
    }

    /**
     * The job ended (any way): stop the clock and leave a final line.
     * @param {string} text
     * @param {{complete: boolean}} options  complete: fill the bar and tick every stage.
     */
    stop(text, { complete }) {
        this.#dropProgress();
        if (this.timer !== null) clearInterval(this.timer);
        this.timer = null;
        this.etaMs = null;
        this.status.textContent = text;
        this.detail.textContent = '';
        this.bar.max = 1;
        this.bar.value = complete ? 1 : 0;
        if (complete) this.#setStage('done');
        else this.#setStage(null);
        this.clock.textContent = ''; // the final status line carries the time
    }

    /** @param {string} text  Status while idle (e.g. "Ready."). */
    idle(text) {
        this.status.textContent = text;
    }

    /** @param {string} text  The running job's status, after its label. */
    #say(text) {
        this.status.textContent = this.label ? `${this.label} · ${text}` : text;
    }

    /** @param {number | null} ms */
    #setEta(ms) {
        this.etaMs = ms;
        this.etaAt = performance.now();
    }

    #tick() {
        const now = performance.now();
        const elapsed = `${formatSeconds(now - this.startedAt)} elapsed`;
        if (this.etaMs === null) {
            this.clock.textContent = elapsed;
        } else {
            const left = Math.max(0, this.etaMs - (now - this.etaAt));
            this.clock.textContent = `${elapsed} · about ${formatSeconds(left)} left`;
        }
    }

    /**
     * Marks stages before `current` done and `current` active. 'done' ticks them all; null clears.
     * @param {Stage | 'done' | null} current
     */
    #setStage(current) {
        const index = current === 'done' ? STAGES.length : current === null ? -1 : STAGES.indexOf(current);
        for (const item of this.stages.querySelectorAll('li[data-stage]')) {
            const position = STAGES.indexOf(/** @type {Stage} */ (/** @type {HTMLElement} */ (item).dataset.stage));
            const state = index < 0 ? 'pending' : position < index ? 'done' : position === index ? 'active' : 'pending';
            item.setAttribute('data-status', state);
            if (state === 'active') item.setAttribute('aria-current', 'step');
            else item.removeAttribute('aria-current');
        }
    }
}
