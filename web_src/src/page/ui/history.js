// @ts-check
/**
 * @file This browser's past generations: settings + a small JPEG thumbnail in IndexedDB (the last
 * HISTORY_LIMIT only), rendered as `#history`; clicking an entry restores its settings.
 * @module page/ui/history
 */

import { requireElement } from './dom.js';

/** Enough to find yesterday's image again; small thumbnails keep the whole store around 1-2 MB. */
export const HISTORY_LIMIT = 50;

const DB_NAME = 'klein-web-history';
const DB_VERSION = 1;
const STORE = 'generations';

/**
 * @typedef {Object} HistoryEntry
 * @property {number} [id]        Assigned by IndexedDB (increasing, so newest = largest).
 * @property {number} createdAt   Date.now()
 * @property {{prompt: string, seed: number, steps: number, width: number, height: number, modelBase: string}} params
 * @property {string} modelLabel
 * @property {number} totalMs
 * @property {Blob} thumb
 */

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
        request.onupgradeneeded = () => {
            request.result.createObjectStore(STORE, { keyPath: 'id', autoIncrement: true });
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
     * Adds an entry and drops the oldest beyond HISTORY_LIMIT, in one transaction.
     * @param {HistoryEntry} entry
     */
    async add(entry) {
        const transaction = this.db.transaction(STORE, 'readwrite');
        const store = transaction.objectStore(STORE);
        store.add(entry);
        const keys = await settle(store.getAllKeys());
        for (const key of keys.slice(0, Math.max(0, keys.length - HISTORY_LIMIT))) store.delete(key);
        await committed(transaction);
    }

    async clear() {
        const transaction = this.db.transaction(STORE, 'readwrite');
        transaction.objectStore(STORE).clear();
        await committed(transaction);
    }
}

export class HistoryView {
    /**
     * @param {Document} doc
     * @param {{onRestore: (entry: HistoryEntry) => void, onClear: () => void}} handlers
     */
    constructor(doc, { onRestore, onClear }) {
        this.list = requireElement(doc, 'history', HTMLElement);
        this.clearButton = requireElement(doc, 'clear-history', HTMLButtonElement);
        this.count = requireElement(doc, 'history-count', HTMLElement);
        this.onRestore = onRestore;
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
        meta.textContent = `${params.width}×${params.height} · seed ${params.seed} · ${params.steps} step${params.steps === 1 ? '' : 's'}`;
        text.append(prompt, meta);
        button.append(image, text);
        button.addEventListener('click', () => this.onRestore(entry));
        item.append(button);
        return item;
    }
}
