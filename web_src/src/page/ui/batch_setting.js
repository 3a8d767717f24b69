// @ts-check
/**
 * @file The Images field (how many images one Generate makes, 1 to BATCH_MAX) and its Seeds choice (the next
 * seeds, or random ones). Both are kept in this browser; `?batch=N` on the address sets the count.
 * @module page/ui/batch_setting
 */

import { InputError } from '../../shared/errors.js';
import { BATCH_MAX, SEED_MODES, parseBatchCount } from '../batch.js';
import { requireElement } from './dom.js';
import { keep, readKept } from './kept_setting.js';

/** Where the count and the seed mode are kept. */
export const BATCH_KEY = 'klein-web:batch';
export const SEED_MODE_KEY = 'klein-web:batch-seeds';

/** @typedef {import('../batch.js').SeedMode} SeedMode */

export class BatchSetting {
    /**
     * @param {Document} doc
     * @param {{storage: Storage | null, href: string}} options  `storage`: localStorage (or null).
     */
    constructor(doc, { storage, href }) {
        this.count = requireElement(doc, 'batch', HTMLInputElement);
        this.seeds = requireElement(doc, 'batch-seeds', HTMLSelectElement);
        this.storage = storage;
        this.count.min = '1';
        this.count.max = String(BATCH_MAX);
        this.count.step = '1';
        const kept = readKept(storage, BATCH_KEY);
        if (kept !== null && this.#valid(kept)) this.count.value = kept;
        const mode = readKept(storage, SEED_MODE_KEY);
        if (mode !== null && SEED_MODES.includes(/** @type {SeedMode} */ (mode))) this.seeds.value = mode;
        /** @type {InputError | null} A bad `?batch=`, for the page to show (the kept count applies). */
        this.urlError = null;
        const fromUrl = new URL(href).searchParams.get('batch');
        if (fromUrl !== null) {
            try {
                this.count.value = String(parseBatchCount(fromUrl, `The link's ?batch=`));
            } catch (err) {
                this.urlError = /** @type {InputError} */ (err);
            }
        }
        this.count.addEventListener('input', () => {
            this.count.removeAttribute('aria-invalid');
            if (this.#valid(this.count.value)) keep(storage, BATCH_KEY, this.count.value.trim());
            this.#sync();
        });
        this.seeds.addEventListener('change', () => keep(storage, SEED_MODE_KEY, this.seeds.value));
        this.#sync();
    }

    /**
     * The count and seed mode, or an InputError (after marking and focusing the count).
     * @returns {{count: number, mode: SeedMode}}
     */
    read() {
        try {
            return {
                count: parseBatchCount(this.count.value, 'Images'),
                mode: /** @type {SeedMode} */ (this.seeds.value),
            };
        } catch (err) {
            this.count.setAttribute('aria-invalid', 'true');
            this.count.focus();
            throw err;
        }
    }

    /**
     * @param {string} text
     * @returns {boolean}
     */
    #valid(text) {
        try {
            parseBatchCount(text, 'Images');
            return true;
        } catch {
            return false;
        }
    }

    /** The seed choice matters only for more than one image. */
    #sync() {
        this.seeds.disabled = !(Number(this.count.value) > 1);
    }
}
