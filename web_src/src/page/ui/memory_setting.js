// @ts-check
/**
 * @file The Memory field: Auto, Fast or Lean (GenerateParams.memory; models/memory_mode.js says what each
 * does). The choice is kept in this browser (localStorage) and `?memory=fast|lean|auto` on the address sets it.
 * @module page/ui/memory_setting
 */

import { MEMORY_MODES } from '../../protocol.js';
import { InputError } from '../../shared/errors.js';
import { requireElement } from './dom.js';
import { keep, readKept } from './kept_setting.js';

/** Where the choice is kept. */
export const MEMORY_KEY = 'klein-web:memory';

/**
 * The mode `?memory=` asks for: a mode, 'auto', or null when the address has none.
 * @param {string} href
 * @returns {string | null}
 */
export function memoryFromUrl(href) {
    const value = new URL(href).searchParams.get('memory');
    if (value === null || value === '') return null;
    if (value !== 'auto' && !MEMORY_MODES.includes(value)) {
        throw new InputError(`?memory=${value} is not a memory mode; use ?memory=lean, ?memory=fast or ?memory=auto.`);
    }
    return value;
}

export class MemorySetting {
    /**
     * @param {Document} doc
     * @param {{storage: Storage | null, href: string}} options  `storage`: localStorage (null where the browser
     *   refuses it: the choice then lasts for this page only).
     */
    constructor(doc, { storage, href }) {
        this.select = requireElement(doc, 'memory', HTMLSelectElement);
        this.storage = storage;
        let initial = 'auto';
        const stored = readKept(storage, MEMORY_KEY);
        if (stored && (stored === 'auto' || MEMORY_MODES.includes(stored))) initial = stored;
        /** @type {InputError | null} A bad `?memory=`, for the page to show (the stored choice applies). */
        this.urlError = null;
        try {
            const fromUrl = memoryFromUrl(href);
            if (fromUrl !== null) initial = fromUrl;
        } catch (err) {
            this.urlError = /** @type {InputError} */ (err);
        }
        this.select.value = initial;
        this.#keep();
        this.select.addEventListener('change', () => this.#keep());
    }

    #keep() {
        keep(this.storage, MEMORY_KEY, this.select.value);
    }

    /** @returns {'fast' | 'lean' | undefined} The mode to ask for; undefined lets the worker choose. */
    value() {
        const value = this.select.value;
        return value === 'fast' || value === 'lean' ? value : undefined;
    }
}
