// @ts-check
/**
 * @file This browser's past generations in IndexedDB (the last HISTORY_LIMIT only), rendered as `#history`;
 * clicking an entry restores its settings, and for Edit and Inpaint its input images, mask and strength.
 * Entries (settings + a small JPEG thumbnail) are listed often; the input files, which can be megabytes, sit in
 * a second store under the entry's id, read only when the entry is restored. An entry and its files are added
 * and removed in one transaction, so a full disk leaves no entry without its files, and eviction no orphans.
 * @module page/ui/history
 */

import { requireElement } from './dom.js';

/** @typedef {import('./editing.js').RunInputs} RunInputs */

/** Enough to find yesterday's image again; small thumbnails keep the entries around 1-2 MB. */
export const HISTORY_LIMIT = 50;

const DB_NAME = 'klein-web-history';
/** 1: entries only. 2: the `inputs` store (entries of version 1 stay, as text-to-image entries). */
const DB_VERSION = 2;
const STORE = 'generations';
const INPUTS = 'inputs';

/**
 * @typedef {Object} HistoryEntry
 * @property {number} [id]        Assigned by IndexedDB (increasing, so newest = largest).
 * @property {number} createdAt   Date.now()
 * @property {{prompt: string, seed: number, steps: number, width: number, height: number, modelBase: string,
 *   guidanceScale?: number, negativePrompt?: string}} params  A base model's run keeps its guidance too.
 * @property {string} modelLabel
 * @property {number} totalMs
 * @property {Blob} thumb
 * @property {'text' | 'edit' | 'inpaint'} [mode]  Absent in entries from before editing (text to image).
 * @property {number} [imageCount]  Input images of the run (its files are in the `inputs` store).
 * @property {number | null} [strength]
 */

/** The storage ran out: said as such, since "QuotaExceededError" means nothing to most people. */
export class HistoryFullError extends Error {}

/**
 * @template T
 * @param {IDBRequest<T>} request
 * @returns {Promise<T>}
 */
function settle(request) {
    return new Promise((resolve, reject) => {
        request.onsuccess = () => resolve(request.result);
        request.onerror = () => reject(request.error);
    });
}

/**
 * @param {IDBTransaction} transaction
 * @returns {Promise<void>}
 */
function committed(transaction) {
    return new Promise((resolve, reject) => {
        transaction.oncomplete = () => resolve();
        transaction.onerror = () => reject(transaction.error);
        transaction.onabort = () => reject(transaction.error ?? new Error('IndexedDB transaction aborted.'));
    });
}

export class HistoryStore {
    /** @param {IDBDatabase} db */
    constructor(db) {
        this.db = db;
    }

    /**
     * @param {IDBFactory} indexedDB
     * @returns {Promise<HistoryStore>}
     */
    static async open(indexedDB) {
        const request = indexedDB.open(DB_NAME, DB_VERSION);
        request.onupgradeneeded = (event) => {
            const db = request.result;
            // Each step upgrades from the version before it, so any older database arrives at this one intact.
            if (event.oldVersion < 1) db.createObjectStore(STORE, { keyPath: 'id', autoIncrement: true });
            if (event.oldVersion < 2) db.createObjectStore(INPUTS);
        };
        return new HistoryStore(await settle(request));
    }

    /** @returns {Promise<HistoryEntry[]>} Newest first. */
    async list() {
        const transaction = this.db.transaction(STORE, 'readonly');
        const entries = /** @type {HistoryEntry[]} */ (await settle(transaction.objectStore(STORE).getAll()));
        return entries.reverse();
    }

    /**
     * The input files of an entry, or null for a text-to-image one.
     * @param {number} id
     * @returns {Promise<RunInputs | null>}
     */
    async inputs(id) {
        const transaction = this.db.transaction(INPUTS, 'readonly');
        const found = await settle(transaction.objectStore(INPUTS).get(id));
        return /** @type {RunInputs | undefined} */ (found) ?? null;
    }

    /**
     * Adds an entry with its input files and drops the oldest beyond HISTORY_LIMIT (files included), all in
     * one transaction: on any failure nothing of it is stored. A full storage rejects with HistoryFullError.
     * @param {HistoryEntry} entry
     * @param {RunInputs | null} inputs
     * @returns {Promise<number>}  The new entry's id.
     */
    async add(entry, inputs) {
        const transaction = this.db.transaction([STORE, INPUTS], 'readwrite');
        const done = committed(transaction);
        done.catch(() => {}); // awaited below; a failed request rejects it before that
        try {
            const store = transaction.objectStore(STORE);
            const files = transaction.objectStore(INPUTS);
            const record = inputs
                ? { ...entry, mode: inputs.mode, imageCount: inputs.images.length, strength: inputs.strength }
                : entry;
            const id = /** @type {number} */ (await settle(store.add(record)));
            if (inputs) files.put(inputs, id);
            const keys = await settle(store.getAllKeys());
            for (const key of keys.slice(0, Math.max(0, keys.length - HISTORY_LIMIT))) {
                store.delete(key);
                files.delete(key);
            }
            await done;
            return id;
        } catch (err) {
            // A request that threw leaves the transaction open: abort it, or the entry would commit without its files.
            try {
                transaction.abort();
            } catch {
                // already aborted (a failed request or commit) or finished
            }
            const error = err instanceof DOMException || err instanceof Error ? err : transaction.error;
            if (error?.name === 'QuotaExceededError') {
                throw new HistoryFullError(
                    "Not saved to history: this browser's storage for the page is full (input images take the " +
                        'most room). Clear the history, or delete older entries, to keep new ones.',
                );
            }
            throw err;
        }
    }

    /**
     * Removes one entry and its files.
     * @param {number} id
     */
    async delete(id) {
        const transaction = this.db.transaction([STORE, INPUTS], 'readwrite');
        transaction.objectStore(STORE).delete(id);
        transaction.objectStore(INPUTS).delete(id);
        await committed(transaction);
    }

    async clear() {
        const transaction = this.db.transaction([STORE, INPUTS], 'readwrite');
        transaction.objectStore(STORE).clear();
        transaction.objectStore(INPUTS).clear();
        await committed(transaction);
    }
}

/**
 * "Edit, 2 images · " / "Inpaint, strength 0.8 · " before the size; nothing for text to image.
 * @param {HistoryEntry} entry
 * @returns {string}
 */
function modeText(entry) {
    if (entry.mode === 'edit') return `Edit, ${entry.imageCount ?? 0} image${entry.imageCount === 1 ? '' : 's'} · `;
    if (entry.mode === 'inpaint') return `Inpaint, strength ${entry.strength} · `;
    return '';
}

export class HistoryView {
    /**
     * @param {Document} doc
     * @param {{onRestore: (entry: HistoryEntry) => void, onDelete: (entry: HistoryEntry) => void,
     *   onClear: () => void}} handlers
     */
    constructor(doc, { onRestore, onDelete, onClear }) {
        this.list = requireElement(doc, 'history', HTMLElement);
        this.clearButton = requireElement(doc, 'clear-history', HTMLButtonElement);
        this.count = requireElement(doc, 'history-count', HTMLElement);
        this.onRestore = onRestore;
        this.onDelete = onDelete;
        /** @type {string[]} thumbnail object URLs of the current render, revoked on the next */
        this.urls = [];
        this.clearButton.addEventListener('click', onClear);
    }

    /** @param {HistoryEntry[]} entries  Newest first. */
    render(entries) {
        for (const url of this.urls) URL.revokeObjectURL(url);
        this.urls = [];
        this.clearButton.disabled = entries.length === 0;
        this.count.textContent = entries.length ? `${entries.length} of the last ${HISTORY_LIMIT}` : '';
        if (entries.length === 0) {
            const empty = document.createElement('li');
            empty.className = 'empty';
            empty.textContent =
                'Images you make appear here, stored only in this browser. Click one to restore its settings.';
            this.list.replaceChildren(empty);
            return;
        }
        this.list.replaceChildren(...entries.map((entry) => this.#item(entry)));
    }

    /**
     * Shows why history is unavailable (e.g. storage blocked) instead of failing silently.
     * @param {string} message
     */
    unavailable(message) {
        this.clearButton.disabled = true;
        const item = document.createElement('li');
        item.className = 'empty';
        item.textContent = message;
        this.list.replaceChildren(item);
    }

    /**
     * @param {HistoryEntry} entry
     * @returns {HTMLLIElement}
     */
    #item(entry) {
        const { params } = entry;
        const item = document.createElement('li');
        const button = document.createElement('button');
        button.type = 'button';
        button.className = 'history-item';
        button.dataset.seed = String(params.seed);
        button.title = `Restore: ${params.prompt || '(empty prompt)'}`;
        const url = URL.createObjectURL(entry.thumb);
        this.urls.push(url);
        const image = document.createElement('img');
        image.src = url;
        image.alt = '';
        image.loading = 'lazy';
        const text = document.createElement('span');
        text.className = 'history-text';
        const prompt = document.createElement('span');
        prompt.className = 'history-prompt';
        prompt.textContent = params.prompt || '(empty prompt)';
        const meta = document.createElement('span');
        meta.className = 'history-meta';
        const steps = `${params.steps} step${params.steps === 1 ? '' : 's'}`;
        meta.textContent = `${modeText(entry)}${params.width}×${params.height} · seed ${params.seed} · ${steps}`;
        text.append(prompt, meta);
        button.append(image, text);
        button.addEventListener('click', () => this.onRestore(entry));
        if (entry.mode && entry.mode !== 'text') button.dataset.mode = entry.mode;
        const remove = document.createElement('button');
        remove.type = 'button';
        remove.className = 'history-delete';
        remove.textContent = '×';
        remove.title = 'Delete from history';
        remove.setAttribute(
            'aria-label',
            `Delete from history: ${params.prompt || '(empty prompt)'}, seed ${params.seed}`,
        );
        remove.addEventListener('click', () => this.onDelete(entry));
        item.className = 'history-entry';
        item.append(button, remove);
        return item;
    }
}
