// @ts-check
/**
 * @file This browser's history, wired to the form: opens the store, lists it, restores an entry's settings
 * (and its images, mask and strength for Edit and Inpaint), deletes, clears, and records each finished image.
 * @module page/history_panel
 */

import { ErrorCode, KleinError } from '../shared/errors.js';
import { adviseError } from './ui/error_view.js';
import { HistoryFullError, HistoryStore, HistoryView } from './ui/history.js';

/** @typedef {import('./ui/history.js').HistoryEntry} HistoryEntry */
/** @typedef {import('./ui/editing.js').RunInputs} RunInputs */

/**
 * @param {HistoryEntry['mode']} mode
 * @returns {string}
 */
function restoredWhat(mode) {
    if (mode === 'edit') return 'Settings and images';
    if (mode === 'inpaint') return 'Settings, image and mask';
    return 'Settings';
}

export class HistoryPanel {
    /**
     * @param {Document} doc
     * @param {{form: import('./ui/form.js').FormView, editing: import('./ui/editing.js').EditingView,
     *   errors: import('./ui/error_view.js').ErrorView, toast: import('./ui/page_state.js').Toast}} views
     */
    constructor(doc, { form, editing, errors, toast }) {
        this.form = form;
        this.editing = editing;
        this.errors = errors;
        this.toast = toast;
        /** @type {HistoryStore | null} null until opened, or where IndexedDB is unavailable */
        this.store = null;
        this.view = new HistoryView(doc, {
            onRestore: (entry) => this.#restore(entry),
            onDelete: (entry) => this.#delete(entry),
            onClear: () => this.#clear(),
        });
    }

    /** @param {IDBFactory} indexedDB */
    open(indexedDB) {
        HistoryStore.open(indexedDB)
            .then(async (store) => {
                this.store = store;
                this.view.render(await store.list());
            })
            .catch((err) => this.view.unavailable(`History is unavailable in this browser (${err?.message ?? err}).`));
    }

    /**
     * Keeps a finished image; a full storage is said where errors are, any other failure in the toast.
     * @param {HistoryEntry} entry
     * @param {RunInputs | null} inputs
     * @returns {Promise<void>}
     */
    record(entry, inputs) {
        const store = this.store;
        if (!store) return Promise.resolve();
        return store
            .add(entry, inputs)
            .then(async () => this.view.render(await store.list()))
            .catch((err) => {
                if (err instanceof HistoryFullError) {
                    const advice = { title: 'History is full', message: err.message, action: '' };
                    this.errors.show(advice, ErrorCode.QUOTA, { reveal: false });
                } else this.toast.announce(`Not saved to history: ${err?.message ?? err}`);
            });
    }

    /** @param {HistoryEntry} entry */
    async #restore(entry) {
        const { params } = entry;
        this.form.write({
            prompt: params.prompt,
            seed: String(params.seed),
            steps: String(params.steps),
            width: String(params.width),
            height: String(params.height),
            // A base model's guidance; an entry without it leaves the fields empty (the model's defaults).
            guidance: params.guidanceScale === undefined ? '' : String(params.guidanceScale),
            negativePrompt: params.negativePrompt ?? '',
        });
        try {
            const inputs = entry.id !== undefined && this.store ? await this.store.inputs(entry.id) : null;
            await this.editing.restore(inputs, params);
        } catch (err) {
            this.errors.show(adviseError(err, {}), err instanceof KleinError ? err.code : ErrorCode.INTERNAL);
            return;
        }
        this.form.prompt.focus();
        this.toast.announce(
            `${restoredWhat(entry.mode)} restored: seed ${params.seed}, ${params.width}×${params.height}.`,
        );
    }

    /** @param {HistoryEntry} entry */
    async #delete(entry) {
        if (entry.id === undefined || !this.store) return;
        try {
            await this.store.delete(entry.id);
            this.view.render(await this.store.list());
            this.toast.announce('Deleted from history.');
        } catch (err) {
            this.toast.announce(`Could not delete it: ${err instanceof Error ? err.message : String(err)}`);
        }
    }

    async #clear() {
        await this.store?.clear();
        this.view.render([]);
        this.toast.announce('History cleared.');
    }
}
