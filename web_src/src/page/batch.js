// @ts-check
/**
 * @file Batches: one Generate asks for up to BATCH_MAX images, run one after another as separate requests to
 * the worker (which keeps its sessions, prompt embeddings and encoded input images between requests). The seeds
 * of a batch, the count's validation, and `BatchRun`, the state of one batch: which image runs, which are done,
 * their times, and what the page says when it ends. No DOM here (tests/js/test_batch.mjs runs it under node).
 * @module page/batch
 */

import { InputError } from '../shared/errors.js';
import { formatDuration } from '../shared/format.js';
import { LIMITS } from '../shared/limits.js';

/** Images one click may ask for. */
export const BATCH_MAX = 8;

/** How the seeds after the first are chosen: the next integers, or a fresh random seed each. */
export const SEED_MODES = Object.freeze(/** @type {const} */ (['sequence', 'random']));

/** @typedef {(typeof SEED_MODES)[number]} SeedMode */
/** @typedef {'pending' | 'running' | 'done' | 'cancelled' | 'failed' | 'skipped'} ItemState */

/**
 * @typedef {Object} BatchItem
 * @property {number} seed
 * @property {ItemState} state
 * @property {number | null} totalMs  The worker's time for this image (GenerateResult.timings.total).
 */

/**
 * The seeds of a batch of `count`: the first is always `first` (so a batch starts with the image a single run
 * of that seed gives); then `first + 1, first + 2, …` (wrapping at 2^32), or one `random()` seed each.
 * @param {number} first
 * @param {number} count
 * @param {SeedMode} mode
 * @param {() => number} random  A seed in [0, 2^32).
 * @returns {number[]}
 */
export function batchSeeds(first, count, mode, random) {
    return Array.from({ length: count }, (_, i) => {
        if (i === 0) return first;
        return mode === 'random' ? random() : (first + i) % LIMITS.seedMax;
    });
}

/**
 * A batch count from the form or a link: a whole number in [1, BATCH_MAX], else an InputError naming `field`.
 * @param {string} text
 * @param {string} where  How the message names it ('Images', '?batch=').
 * @returns {number}
 */
export function parseBatchCount(text, where) {
    const trimmed = text.trim();
    const value = /^\d+$/.test(trimmed) ? Number(trimmed) : NaN;
    if (!(value >= 1 && value <= BATCH_MAX)) {
        throw new InputError(`${where} must be a whole number from 1 to ${BATCH_MAX} (got "${trimmed}").`, {
            field: 'batch',
        });
    }
    return value;
}

/**
 * @param {number} n
 * @returns {string}
 */
function images(n) {
    return `${n} image${n === 1 ? '' : 's'}`;
}

/** One batch, from the click to its end: the page's record of which image runs and how long each took. */
export class BatchRun {
    /**
     * @param {number[]} seeds
     * @param {number} startedAt  performance.now() when the batch starts.
     */
    constructor(seeds, startedAt) {
        /** @type {BatchItem[]} */
        this.items = seeds.map((seed) => ({ seed, state: 'pending', totalMs: null }));
        this.startedAt = startedAt;
        /** @type {number | null} */
        this.endedAt = null;
        this.cancelled = false;
    }

    get count() {
        return this.items.length;
    }

    /** @returns {number} Images finished. */
    get doneCount() {
        return this.items.filter((item) => item.state === 'done').length;
    }

    /**
     * The next image to run (now running), or null when the batch was cancelled or has run them all.
     * @returns {number | null}
     */
    next() {
        if (this.cancelled || this.endedAt !== null) return null;
        const index = this.items.findIndex((item) => item.state === 'pending');
        if (index < 0) return null;
        this.items[index].state = 'running';
        return index;
    }

    /**
     * @param {number} index
     * @param {number} totalMs
     */
    finish(index, totalMs) {
        const item = this.items[index];
        if (item.state !== 'running') throw new Error(`Image ${index + 1} of the batch is ${item.state}, not running.`);
        item.state = 'done';
        item.totalMs = totalMs;
    }

    /** Cancel: the running image stops at the worker's next step, and no further one starts. */
    cancel() {
        this.cancelled = true;
    }

    /**
     * The batch ended: the running image (if any) ended as `how`, the ones not started are skipped.
     * @param {'done' | 'cancelled' | 'failed'} how
     * @param {number} now  performance.now()
     */
    end(how, now) {
        this.endedAt = now;
        for (const item of this.items) {
            if (item.state === 'running') item.state = how === 'failed' ? 'failed' : 'cancelled';
            else if (item.state === 'pending') item.state = 'skipped';
        }
    }

    /** @returns {number} Milliseconds from the start to the end (or to now while it runs). */
    wallMs(now = this.endedAt ?? this.startedAt) {
        return now - this.startedAt;
    }

    /**
     * "Image 2 of 3" while a batch runs; '' for a single image.
     * @param {number} index
     * @returns {string}
     */
    label(index) {
        return this.count > 1 ? `Image ${index + 1} of ${this.count}` : '';
    }

    /**
     * The progress line once the batch has ended.
     * @param {'done' | 'cancelled'} how
     * @returns {string}
     */
    endText(how) {
        const wall = this.wallMs();
        if (this.count === 1)
            return how === 'done' ? `Done in ${formatDuration(this.items[0].totalMs ?? wall)}.` : 'Cancelled.';
        const done = this.doneCount;
        if (how === 'cancelled') return `Cancelled after ${done} of ${images(this.count)}.`;
        return `Done: ${images(done)} in ${formatDuration(wall)} (${formatDuration(wall / Math.max(1, done))} per image).`;
    }
}
