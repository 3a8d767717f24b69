// @ts-check
/**
 * @file A batch's images as a strip of thumbnails under the large image (`#batch-strip`, shown for more than one
 * image): one slot per image, filled as each finishes; clicking one shows it large with its own caption, timings
 * and PNG. `#batch-timings` lists each image's time and the batch's total. The strip's `data-json` holds the
 * same per image (seed, state, time, whether its input images were cached) for automation.
 * @module page/ui/batch_strip
 */

import { formatDuration } from '../../shared/format.js';
import { cell, requireElement } from './dom.js';

/** @typedef {import('../../protocol.js').GenerateResult} GenerateResult */
/** @typedef {import('./result.js').EncodedImage} EncodedImage */
/** @typedef {import('../batch.js').BatchRun} BatchRun */
/** @typedef {{output: GenerateResult, encoded: EncodedImage}} Shown */

/** What a slot says of an image that has no picture. */
const STATE_TEXT = Object.freeze({
    pending: 'waiting',
    running: 'running',
    cancelled: 'cancelled',
    failed: 'failed',
    skipped: 'not run',
    done: '',
});

export class BatchStripView {
    /**
     * @param {Document} doc
     * @param {{onShow: (output: GenerateResult, encoded: EncodedImage) => void}} handlers  Shows one image large.
     */
    constructor(doc, { onShow }) {
        this.strip = requireElement(doc, 'batch-strip', HTMLElement);
        this.timings = requireElement(doc, 'batch-timings', HTMLElement);
        this.onShow = onShow;
        /** @type {(Shown | null)[]} each slot's finished image */
        this.shown = [];
        /** @type {string[]} thumbnail object URLs, revoked when the next batch begins */
        this.urls = [];
        /** @type {BatchRun | null} */
        this.batch = null;
    }

    /** @param {BatchRun} batch */
    begin(batch) {
        for (const url of this.urls) URL.revokeObjectURL(url);
        this.urls = [];
        this.batch = batch;
        this.shown = batch.items.map(() => null);
        this.strip.hidden = batch.count === 1;
        this.timings.hidden = batch.count === 1;
        this.strip.replaceChildren(...batch.items.map((_, index) => this.#slot(index)));
        this.render();
    }

    /**
     * An image of the batch finished: its thumbnail fills its slot and it is shown large.
     * @param {number} index
     * @param {GenerateResult} output
     * @param {EncodedImage} encoded
     */
    add(index, output, encoded) {
        this.shown[index] = { output, encoded };
        const url = URL.createObjectURL(encoded.thumb);
        this.urls.push(url);
        const image = document.createElement('img');
        image.src = url;
        image.alt = `Seed ${output.params.seed}`;
        this.#button(index).replaceChildren(image, cell('span', `seed ${output.params.seed}`, 'batch-seed'));
        this.select(index);
    }

    /**
     * Shows image `index` large (a finished one only).
     * @param {number} index
     */
    select(index) {
        const shown = this.shown[index];
        if (!shown) return;
        for (const [i, item] of [...this.strip.children].entries()) {
            item.querySelector('button')?.setAttribute('aria-pressed', String(i === index));
        }
        this.onShow(shown.output, shown.encoded);
    }

    /** Draws each slot's state, the per-image times and `data-json` from the batch. */
    render() {
        const batch = this.batch;
        if (!batch) return;
        for (const [index, item] of batch.items.entries()) {
            const button = this.#button(index);
            button.dataset.state = item.state;
            button.disabled = item.state !== 'done';
            const label = button.querySelector('.batch-state');
            if (label) label.textContent = STATE_TEXT[item.state];
        }
        this.strip.dataset.json = JSON.stringify(
            batch.items.map((item, index) => ({
                ...item,
                imagesCached: this.shown[index]?.output.inputs?.images.map((image) => image.cached) ?? null,
            })),
        );
        this.#renderTimings(batch);
    }

    /** @param {BatchRun} batch */
    #renderTimings(batch) {
        const table = document.createElement('table');
        table.append(cell('caption', `Batch of ${batch.count}: time per image`));
        const body = document.createElement('tbody');
        for (const [index, item] of batch.items.entries()) {
            const row = document.createElement('tr');
            const cached = this.shown[index]?.output.inputs?.images ?? [];
            const note = cached.length > 0 && cached.every((image) => image.cached) ? ' (input images cached)' : '';
            const time = item.totalMs === null ? STATE_TEXT[item.state] : `${formatDuration(item.totalMs)}${note}`;
            row.append(cell('th', `Image ${index + 1} · seed ${item.seed}`), cell('td', time, 'num'));
            body.append(row);
        }
        const total = document.createElement('tr');
        total.className = 'total';
        const wall = batch.endedAt === null ? 'running' : formatDuration(batch.wallMs());
        total.append(cell('th', 'Batch total'), cell('td', wall, 'num'));
        body.append(total);
        table.append(body);
        this.timings.replaceChildren(table);
    }

    /**
     * @param {number} index
     * @returns {HTMLLIElement}
     */
    #slot(index) {
        const item = document.createElement('li');
        const button = document.createElement('button');
        button.type = 'button';
        button.className = 'batch-item';
        button.setAttribute('aria-label', `Image ${index + 1} of the batch`);
        button.append(cell('span', '', 'batch-state'));
        button.addEventListener('click', () => this.select(index));
        item.append(button);
        return item;
    }

    /**
     * @param {number} index
     * @returns {HTMLButtonElement}
     */
    #button(index) {
        return /** @type {HTMLButtonElement} */ (this.strip.children[index].querySelector('button'));
    }
}
