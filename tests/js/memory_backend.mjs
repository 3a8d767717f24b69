// @ts-check
/** @file An in-memory stand-in for the store's OPFS backend, for the store's node tests. @module tests/js/memory_backend */

import { parseIdentity } from '../../web_src/src/store/identity.js';
import { fileStoredFile } from '../../web_src/src/store/stored_file.js';

/** The methods of store/backend.js OpfsBackend the store uses, over a Map of byte arrays. */
export class MemoryBackend {
    constructor() {
        /** @type {Map<string, Uint8Array>} */
        this.files = new Map();
    }
    /** @param {string} path */
    async size(path) {
        return this.files.get(path)?.length ?? null;
    }
    /** @param {string} path */
    async partialSize(path) {
        return this.files.get(path + '.partial')?.length ?? 0;
    }
    /** @param {string} path */
    async readText(path) {
        const bytes = this.files.get(path);
        return bytes ? new TextDecoder().decode(bytes) : null;
    }
    /** @param {string} path @param {string} text */
    async writeText(path, text) {
        this.files.set(path, new TextEncoder().encode(text));
    }
    /** @param {string} path */
    async delete(path) {
        this.files.delete(path);
        return 0;
    }
    /** @param {string} path */
    async discard(path) {
        this.files.delete(path + '.identity.json');
        this.files.delete(path);
        return 0;
    }
    /** @param {string} path @param {any} identity */
    async commit(path, identity) {
        this.files.set(path, /** @type {Uint8Array} */ (this.files.get(path + '.partial')));
        this.files.delete(path + '.partial');
        this.files.delete(path + '.partial.identity.json');
        await this.writeIdentity(path, identity);
    }
    /** @param {string} path */
    async read(path) {
        const bytes = this.files.get(path);
        if (!bytes) throw new DOMException(path, 'NotFoundError');
        return new Blob([bytes]);
    }
    /** @param {string} path */
    async openFile(path) {
        return fileStoredFile(await this.read(path));
    }
    /** @param {string} path */
    async readIdentity(path) {
        return parseIdentity(await this.readText(path + '.identity.json'));
    }
    /** @param {string} path @param {any} identity */
    async writeIdentity(path, identity) {
        await this.writeText(path + '.identity.json', JSON.stringify(identity));
    }
    /** @param {string} path @param {{fromZero: boolean}} options */
    async openPartial(path, { fromZero }) {
        const key = path + '.partial';
        if (fromZero || !this.files.has(key)) this.files.set(key, new Uint8Array(0));
        const files = this.files;
        return {
            get offset() {
                return /** @type {Uint8Array} */ (files.get(key)).length;
            },
            /** @param {Uint8Array} chunk */
            write(chunk) {
                const old = /** @type {Uint8Array} */ (files.get(key));
                const grown = new Uint8Array(old.length + chunk.length);
                grown.set(old);
                grown.set(chunk, old.length);
                files.set(key, grown);
            },
            flush() {},
            close() {},
        };
    }
}
