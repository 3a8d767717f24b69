// @ts-check
/**
 * @file An in-memory Origin Private File System for node tests of web_src/src/store: directory and file handles,
 * sync access handles (exclusive, as in browsers; `{mode: 'read-only'}` ones shared with each other, as in Chromium
 * 121+), writable streams and FileSystemHandle.move, each optional feature removable so the store can be run as
 * Safari runs it (no move(), no handle modes; before 26, no createWritable()).
 * Errors are the DOMExceptions browsers throw (NotFoundError, TypeMismatchError, NoModificationAllowedError).
 * @module tests/js/fake_opfs
 */

/**
 * @typedef {Object} FakeOptions
 * @property {boolean} [move]            FileSystemHandle.move (default true)
 * @property {boolean} [createWritable]  FileSystemFileHandle.createWritable (default true)
 * @property {boolean} [handleModes]     createSyncAccessHandle's `mode` (default true); without it the option is
 *   ignored and every handle is exclusive, as in browsers that do not know it
 */

/** Counts of what the store called, so a test can tell which path it took. */
export class Calls {
    constructor() {
        this.move = 0;
        this.createWritable = 0;
        this.createSyncAccessHandle = 0;
        /** Read-only handles opened (a subset of createSyncAccessHandle). */
        this.readOnlyHandles = 0;
    }
}

class FakeFileHandle {
    /**
     * @param {FakeDirectoryHandle} parent
     * @param {string} name
     * @param {FakeOptions} options
     * @param {Calls} calls
     */
    constructor(parent, name, options, calls) {
        this.kind = 'file';
        this.parent = parent;
        this.name = name;
        this.calls = calls;
        /** @type {Uint8Array} */
        this.bytes = new Uint8Array(0);
        /** An exclusive handle is open. */
        this.locked = false;
        /** Read-only handles open. */
        this.readers = 0;
        this.handleModes = options.handleModes !== false;
        if (options.move === false) Object.defineProperty(this, 'move', { value: undefined });
        if (options.createWritable === false) Object.defineProperty(this, 'createWritable', { value: undefined });
    }

    async getFile() {
        return new File([this.bytes.slice()], this.name);
    }

    /** @param {{mode?: string}} [options] */
    async createSyncAccessHandle({ mode = 'readwrite' } = {}) {
        this.calls.createSyncAccessHandle += 1;
        const readOnly = this.handleModes && mode === 'read-only';
        if (this.locked || (!readOnly && this.readers > 0))
            throw new DOMException(`${this.name} is open elsewhere`, 'NoModificationAllowedError');
        if (readOnly) {
            this.calls.readOnlyHandles += 1;
            this.readers += 1;
        } else this.locked = true;
        const file = this;
        let open = true;
        const check = (/** @type {boolean} */ writes = false) => {
            if (!open) throw new DOMException('the access handle is closed', 'InvalidStateError');
            if (writes && readOnly)
                throw new DOMException('the access handle is read-only', 'NoModificationAllowedError');
        };
        return {
            ...(this.handleModes ? { mode: readOnly ? 'read-only' : 'readwrite' } : {}),
            getSize() {
                check();
                return file.bytes.length;
            },
            /** @param {number} size */
            truncate(size) {
                check(true);
                const next = new Uint8Array(size);
                next.set(file.bytes.subarray(0, size));
                file.bytes = next;
            },
            /** @param {Uint8Array} chunk @param {{at?: number}} [options] */
            write(chunk, { at = 0 } = {}) {
                check(true);
                const end = at + chunk.byteLength;
                if (end > file.bytes.length) {
                    const next = new Uint8Array(end);
                    next.set(file.bytes);
                    file.bytes = next;
                }
                file.bytes.set(chunk, at);
                return chunk.byteLength;
            },
            /** @param {Uint8Array} into @param {{at?: number}} [options] */
            read(into, { at = 0 } = {}) {
                check();
                const part = file.bytes.subarray(at, at + into.byteLength);
                into.set(part);
                return part.length;
            },
            flush() {
                check();
            },
            close() {
                if (open && readOnly) file.readers -= 1;
                else if (open) file.locked = false;
                open = false;
            },
        };
    }

    /** A writable stream whose content replaces the file on close(), as browsers' swap files do. */
    async createWritable() {
        this.calls.createWritable += 1;
        const file = this;
        /** @type {Uint8Array[]} */
        const parts = [];
        return {
            /** @param {string | Uint8Array} data */
            async write(data) {
                parts.push(typeof data === 'string' ? new TextEncoder().encode(data) : data);
            },
            async close() {
                file.bytes = new Uint8Array(await new Blob(parts).arrayBuffer());
            },
            async abort() {},
        };
    }

    /** @param {string} name  A new name in the same folder (the only form the store uses). */
    async move(name) {
        this.calls.move += 1;
        const entries = this.parent.entries;
        const existing = entries.get(name);
        if (existing && existing.kind !== 'file') throw new DOMException(name, 'TypeMismatchError');
        entries.delete(this.name);
        this.name = name;
        entries.set(name, this);
    }
}

class FakeDirectoryHandle {
    /**
     * @param {string} name
     * @param {FakeOptions} options
     * @param {Calls} calls
     */
    constructor(name, options, calls) {
        this.kind = 'directory';
        this.name = name;
        this.options = options;
        this.calls = calls;
        /** @type {Map<string, FakeFileHandle | FakeDirectoryHandle>} */
        this.entries = new Map();
    }

    /** @param {string} name @param {{create?: boolean}} [options] */
    async getDirectoryHandle(name, { create = false } = {}) {
        const entry = this.entries.get(name);
        if (entry instanceof FakeDirectoryHandle) return entry;
        if (entry) throw new DOMException(name, 'TypeMismatchError');
        if (!create) throw new DOMException(name, 'NotFoundError');
        const dir = new FakeDirectoryHandle(name, this.options, this.calls);
        this.entries.set(name, dir);
        return dir;
    }

    /** @param {string} name @param {{create?: boolean}} [options] */
    async getFileHandle(name, { create = false } = {}) {
        const entry = this.entries.get(name);
        if (entry instanceof FakeFileHandle) return entry;
        if (entry) throw new DOMException(name, 'TypeMismatchError');
        if (!create) throw new DOMException(name, 'NotFoundError');
        const file = new FakeFileHandle(this, name, this.options, this.calls);
        this.entries.set(name, file);
        return file;
    }

    /** @param {string} name @param {{recursive?: boolean}} [options] */
    async removeEntry(name, { recursive = false } = {}) {
        const entry = this.entries.get(name);
        if (!entry) throw new DOMException(name, 'NotFoundError');
        if (entry instanceof FakeDirectoryHandle && entry.entries.size > 0 && !recursive) {
            throw new DOMException(name, 'InvalidModificationError');
        }
        if (entry instanceof FakeFileHandle && (entry.locked || entry.readers > 0))
            throw new DOMException(name, 'NoModificationAllowedError');
        this.entries.delete(name);
    }

    async *values() {
        yield* [...this.entries.values()];
    }

    /** @param {unknown} other */
    async isSameEntry(other) {
        return other === this;
    }

    /**
     * Every file below this folder: '/'-separated path -> bytes (a test's view, not an OPFS method).
     * @param {string} [prefix]
     * @returns {Map<string, Uint8Array>}
     */
    files(prefix = '') {
        /** @type {Map<string, Uint8Array>} */
        const out = new Map();
        for (const [name, entry] of this.entries) {
            if (entry instanceof FakeFileHandle) out.set(prefix + name, entry.bytes);
            else for (const [path, bytes] of entry.files(`${prefix}${name}/`)) out.set(path, bytes);
        }
        return out;
    }
}

/**
 * Install a fresh fake OPFS as `navigator.storage` (with estimate and persisted), and the handle interfaces on
 * globalThis the way a worker has them, so store/backend.js opfsSupport() sees what the fake offers.
 * @param {FakeOptions} [options]
 * @returns {{root: FakeDirectoryHandle, calls: Calls, restore: () => void}}
 */
export function installFakeOpfs(options = {}) {
    const calls = new Calls();
    const root = new FakeDirectoryHandle('', options, calls);
    const saved = {
        navigator: Object.getOwnPropertyDescriptor(globalThis, 'navigator'),
        FileSystemFileHandle: Object.getOwnPropertyDescriptor(globalThis, 'FileSystemFileHandle'),
        FileSystemHandle: Object.getOwnPropertyDescriptor(globalThis, 'FileSystemHandle'),
        FileSystemSyncAccessHandle: Object.getOwnPropertyDescriptor(globalThis, 'FileSystemSyncAccessHandle'),
    };
    const storage = {
        getDirectory: async () => root,
        estimate: async () => ({ usage: 0, quota: 1e12 }),
        persisted: async () => true,
    };
    Object.defineProperty(globalThis, 'navigator', { value: { storage }, configurable: true, writable: true });
    // The interfaces as a worker of that browser exposes them (no FileSystemHandle.move where it is missing).
    const fileProto = {
        createSyncAccessHandle() {},
        ...(options.createWritable === false ? {} : { createWritable() {} }),
    };
    const handleProto = options.move === false ? {} : { move() {} };
    Object.defineProperty(globalThis, 'FileSystemFileHandle', {
        value: { prototype: fileProto },
        configurable: true,
        writable: true,
    });
    Object.defineProperty(globalThis, 'FileSystemHandle', {
        value: { prototype: handleProto },
        configurable: true,
        writable: true,
    });
    Object.defineProperty(globalThis, 'FileSystemSyncAccessHandle', {
        value: { prototype: options.handleModes === false ? {} : { mode: undefined } },
        configurable: true,
        writable: true,
    });
    const restore = () => {
        for (const [key, descriptor] of Object.entries(saved)) {
            if (descriptor) Object.defineProperty(globalThis, key, descriptor);
            else Reflect.deleteProperty(globalThis, key);
        }
    };
    return { root, calls, restore };
}
