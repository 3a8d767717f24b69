// @ts-check
/**
 * @file The storage backend of the weight store: the Origin Private File System (OPFS).
 *
 * Why OPFS and not Cache Storage: a multi-GB download is interrupted sooner or later (tab closed,
 * network drop), and restarting 3 GB from zero is what users complain about most. Cache Storage only
 * stores whole Responses (`cache.put`), so a partial file cannot be kept or appended to. OPFS keeps
 * a partial file that we extend in place: an HTTP `Range: bytes=N-` request, then writes at offset N
 * (`createWritable({keepExistingData: true})` + `seek(N)` would do too; in a worker we use a sync
 * access handle, which writes in place instead of through a swap file, so flushed bytes survive
 * even a killed tab). `File` objects read back from OPFS are disk-backed. Optional OPFS methods have fallbacks: a browser without
 * `FileSystemHandle.move()` (Safari) renames by copying (rename), one without `createWritable` (Safari before 26)
 * writes small files through a sync access handle (writeText); opfsSupport() reports which are there.
 *
 * Layout: `<root>/<key>/<repo path>` for complete files, `<repo path>.partial` while downloading; the
 * key is derived from the model base URL so two model sources never mix. Beside each file (complete or
 * partial) `<name>.identity.json` records which version of it the bytes are (store/identity.js); a complete
 * file's is written only after its bytes are complete and checked, and removed before they are.
 * @module store/backend
 */

import { hex } from '../shared/bytes.js';
import { ErrorCode, KleinError, QuotaError } from '../shared/errors.js';
import { parseIdentity } from './identity.js';
import { openStoredFile } from './stored_file.js';

/** @typedef {import('./identity.js').FileIdentity} FileIdentity */
/** @typedef {import('./stored_file.js').StoredFile} StoredFile */

/** Suffix of a file still being downloaded; only a complete, size-checked file loses it. */
export const PARTIAL_SUFFIX = '.partial';

/** Suffix of the identity record beside a file (`x.onnx_data.identity.json`, `x.onnx_data.partial.identity.json`). */
export const IDENTITY_SUFFIX = '.identity.json';

/** Top-level OPFS directory holding every model source. */
export const ROOT_DIR = 'klein-models';

/**
 * @typedef {Object} PartialWriter  Appends to `<path>.partial` from `offset` on.
 * @property {number} offset                        Bytes in the file so far.
 * @property {(chunk: Uint8Array) => void} write
 * @property {() => void} flush                     Make the written bytes durable.
 * @property {() => void} close
 */

/**
 * A safe directory name for a model base URL: a SHA-256 prefix (URLs contain '/' and ':').
 * @param {string} modelBase
 * @returns {Promise<string>}
 */
export async function keyFor(modelBase) {
    const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(modelBase));
    return hex(new Uint8Array(digest).subarray(0, 16));
}

/** @typedef {import('../shared/types.js').OpfsSupport} OpfsSupport */

/**
 * Which OPFS methods this scope has, from the interfaces alone (nothing is created): what the worker's probe
 * reports so the page can say what the store will fall back on (shared/browser_needs.js).
 * @param {any} [scope]  globalThis, or a stand-in in tests.
 * @returns {OpfsSupport}
 */
export function opfsSupport(scope = globalThis) {
    const fileHandle = scope.FileSystemFileHandle?.prototype;
    const handle = scope.FileSystemHandle?.prototype;
    return {
        directory: typeof scope.navigator?.storage?.getDirectory === 'function',
        syncAccessHandle: typeof fileHandle?.createSyncAccessHandle === 'function',
        createWritable: typeof fileHandle?.createWritable === 'function',
        move: typeof handle?.move === 'function' || typeof fileHandle?.move === 'function',
    };
}

/** @returns {Promise<FileSystemDirectoryHandle>} */
async function opfsRoot() {
    if (typeof navigator === 'undefined' || !navigator.storage || !navigator.storage.getDirectory) {
        throw new QuotaError(
            'This browser has no Origin Private File System (navigator.storage.getDirectory), so the model cannot be ' +
                'cached. Use a browser that has it (Chrome and Edge 102+, Safari 15.2+, Firefox 111+) in a normal, not ' +
                'private, window.',
        );
    }
    return navigator.storage.getDirectory();
}

/**
 * @param {unknown} err
 * @returns {boolean}
 */
function isNotFound(err) {
    return err instanceof DOMException && (err.name === 'NotFoundError' || err.name === 'TypeMismatchError');
}

/**
 * Turn a storage DOMException into a QuotaError the user can act on; anything else is re-thrown as is.
 * @param {unknown} err
 * @param {string} path
 * @returns {never}
 */
function rethrowStorageError(err, path) {
    if (err instanceof DOMException && err.name === 'QuotaExceededError') {
        throw new QuotaError(
            `The browser refused to store more data while writing ${path} (quota exceeded). Free disk space, leave ` +
                "private/incognito mode, or clear other sites' data, then press Generate again: the download resumes.",
            { path },
        );
    }
    throw err;
}

/** OPFS storage for one model source. */
export class OpfsBackend {
    /**
     * @param {FileSystemDirectoryHandle} dir
     * @param {string} key
     */
    constructor(dir, key) {
        this.dir = dir;
        this.key = key;
    }

    /**
     * @param {string} modelBase
     * @returns {Promise<OpfsBackend>}
     */
    static async open(modelBase) {
        const key = await keyFor(modelBase);
        const root = await (await opfsRoot()).getDirectoryHandle(ROOT_DIR, { create: true });
        const dir = await root.getDirectoryHandle(key, { create: true });
        const backend = new OpfsBackend(dir, key);
        // A human-readable note of where the files came from (for anyone inspecting OPFS).
        await backend.writeText('source.txt', modelBase);
        return backend;
    }

    /**
     * The storage of a model source that another thread has opened, found by its key (a helper worker's view of
     * it: nothing is created or written here).
     * @param {string} key  OpfsBackend.key of the opened source.
     * @returns {Promise<OpfsBackend>}
     */
    static async ofKey(key) {
        const root = await (await opfsRoot()).getDirectoryHandle(ROOT_DIR);
        return new OpfsBackend(await root.getDirectoryHandle(key), key);
    }

    /**
     * Whether this store's folder is still there (the browser's "clear site data" removes it under a running page).
     * @returns {Promise<boolean>}
     */
    async present() {
        try {
            const root = await (await opfsRoot()).getDirectoryHandle(ROOT_DIR);
            return await (await root.getDirectoryHandle(this.key)).isSameEntry(this.dir);
        } catch (err) {
            if (isNotFound(err)) return false;
            throw err;
        }
    }

    /**
     * The folder holding `path` and the bare file name.
     * @param {string} path  Repo-relative, '/'-separated.
     * @param {boolean} create
     * @returns {Promise<[FileSystemDirectoryHandle, string]>}
     */
    async locate(path, create) {
        const parts = path.split('/');
        if (parts.some((p) => p === '' || p === '.' || p === '..')) {
            throw new TypeError(`Storage path ${JSON.stringify(path)} must be a plain relative path.`);
        }
        let dir = this.dir;
        for (const part of parts.slice(0, -1)) dir = await dir.getDirectoryHandle(part, { create });
        return [dir, /** @type {string} */ (parts.at(-1))];
    }

    /**
     * @param {string} path
     * @returns {Promise<FileSystemFileHandle | null>}
     */
    async handle(path) {
        try {
            const [dir, name] = await this.locate(path, false);
            return await dir.getFileHandle(name);
        } catch (err) {
            if (isNotFound(err)) return null;
            throw err;
        }
    }

    /**
     * Size of the complete file at `path`, or null when it is not stored.
     * @param {string} path
     * @returns {Promise<number | null>}
     */
    async size(path) {
        const handle = await this.handle(path);
        return handle ? (await handle.getFile()).size : null;
    }

    /**
     * Bytes already downloaded into `<path>.partial` (0 when none).
     * @param {string} path
     * @returns {Promise<number>}
     */
    async partialSize(path) {
        return (await this.size(path + PARTIAL_SUFFIX)) ?? 0;
    }

    /**
     * Open `<path>.partial` for appending; `fromZero` discards what it held.
     * @param {string} path
     * @param {{fromZero: boolean}} options
     * @returns {Promise<PartialWriter>}
     */
    async openPartial(path, { fromZero }) {
        const [dir, name] = await this.locate(path, true);
        const fileHandle = await dir.getFileHandle(name + PARTIAL_SUFFIX, { create: true });
        let access;
        try {
            access = await fileHandle.createSyncAccessHandle();
        } catch (err) {
            // The handle is exclusive: another tab (or worker) is downloading this very file.
            if (err instanceof DOMException && err.name === 'NoModificationAllowedError') {
                throw new KleinError(
                    `${path} is being downloaded in another tab of this app. Close the other tab or wait for it, then try again.`,
                    {
                        code: ErrorCode.BUSY,
                    },
                );
            }
            throw err;
        }
        if (fromZero) access.truncate(0);
        let offset = access.getSize();
        return {
            get offset() {
                return offset;
            },
            write(chunk) {
                try {
                    let done = 0;
                    // write() may write less than asked (spec: "returns the number of bytes written").
                    while (done < chunk.byteLength) done += access.write(chunk.subarray(done), { at: offset + done });
                    offset += chunk.byteLength;
                } catch (err) {
                    rethrowStorageError(err, path);
                }
            },
            flush() {
                access.flush();
            },
            close() {
                access.flush();
                access.close();
            },
        };
    }

    /**
     * Turn a whole, verified `<path>.partial` into `<path>`, then record its identity. The old identity goes
     * first: should the tab die in between, the file has none (unverified), never a stale one.
     * @param {string} path
     * @param {FileIdentity} identity
     */
    async commit(path, identity) {
        const [dir, name] = await this.locate(path, false);
        const partial = await dir.getFileHandle(name + PARTIAL_SUFFIX);
        await this.delete(path + IDENTITY_SUFFIX);
        await this.delete(path);
        await rename(dir, partial, name);
        await this.writeIdentity(path, identity);
        await this.delete(path + PARTIAL_SUFFIX + IDENTITY_SUFFIX);
    }

    /**
     * The identity recorded beside `path` (a complete file, or `<path>.partial`); null when none is.
     * @param {string} path
     * @returns {Promise<FileIdentity | null>}
     */
    async readIdentity(path) {
        return parseIdentity(await this.readText(path + IDENTITY_SUFFIX));
    }

    /**
     * @param {string} path
     * @param {FileIdentity} identity
     */
    async writeIdentity(path, identity) {
        await this.writeText(path + IDENTITY_SUFFIX, JSON.stringify(identity));
    }

    /**
     * Remove a stored file and its identity (identity first, for the reason given at commit()).
     * @param {string} path
     * @returns {Promise<number>} Bytes freed.
     */
    async discard(path) {
        await this.delete(path + IDENTITY_SUFFIX);
        return this.delete(path);
    }

    /**
     * The stored file as a disk-backed File.
     * @param {string} path
     * @returns {Promise<File>}
     */
    async read(path) {
        const handle = await this.handle(path);
        if (!handle) throw new DOMException(`${path} is not stored`, 'NotFoundError');
        return handle.getFile();
    }

    /**
     * The stored file open for reading (store/stored_file.js: by a read-only sync access handle where this scope has
     * them). Close it when done: the file cannot be removed while it is open.
     * @param {string} path
     * @returns {Promise<StoredFile>}
     */
    async openFile(path) {
        const handle = await this.handle(path);
        if (!handle) throw new DOMException(`${path} is not stored`, 'NotFoundError');
        return openStoredFile(handle);
    }

    /**
     * Remove `path` if present; returns the bytes freed.
     * @param {string} path
     * @returns {Promise<number>}
     */
    async delete(path) {
        const handle = await this.handle(path);
        if (!handle) return 0;
        const size = (await handle.getFile()).size;
        const [dir, name] = await this.locate(path, false);
        try {
            await dir.removeEntry(name);
        } catch (err) {
            // An open handle keeps the file: another tab of this app is reading it (store/stored_file.js) or
            // writing it.
            if (err instanceof DOMException && err.name === 'NoModificationAllowedError')
                throw new KleinError(
                    `${path} is in use by another tab of this app (loading the model from it). Wait for that tab to ` +
                        'finish loading or close it, then try again.',
                    { code: ErrorCode.BUSY },
                );
            throw err;
        }
        return size;
    }

    /**
     * Small text files (source note, last manifest), written whole.
     * @param {string} path
     * @param {string} text
     */
    async writeText(path, text) {
        const [dir, name] = await this.locate(path, true);
        const handle = await dir.getFileHandle(name, { create: true });
        // createWritable is missing before Safari 26; the store runs in a worker, where sync access handles exist.
        if (typeof handle.createWritable !== 'function') {
            try {
                writeWhole(await handle.createSyncAccessHandle(), new TextEncoder().encode(text));
            } catch (err) {
                rethrowStorageError(err, path);
            }
            return;
        }
        const writable = await handle.createWritable();
        try {
            await writable.write(text);
            await writable.close();
        } catch (err) {
            await writable.abort().catch(() => {});
            rethrowStorageError(err, path);
        }
    }

    /**
     * @param {string} path
     * @returns {Promise<string | null>}
     */
    async readText(path) {
        const handle = await this.handle(path);
        return handle ? (await handle.getFile()).text() : null;
    }
}

/** Bytes copied at a time when a file is renamed by copying (COPY_CHUNK_BYTES of memory at most). */
const COPY_CHUNK_BYTES = 16 * 1024 * 1024;

/**
 * Replace a file's whole content through a sync access handle, then close it.
 * @param {FileSystemSyncAccessHandle} access
 * @param {Uint8Array} bytes
 */
function writeWhole(access, bytes) {
    try {
        access.truncate(0);
        let done = 0;
        // write() may write less than asked (spec: "returns the number of bytes written").
        while (done < bytes.byteLength) done += access.write(bytes.subarray(done), { at: done });
        access.flush();
    } finally {
        access.close();
    }
}

/**
 * Rename `file` in `dir` to `name`. FileSystemHandle.move (Chromium 110+ for OPFS; not standard, whatwg/fs#180, so
 * not in TypeScript's DOM types) renames in place; where it is missing (Safari) or refuses, the bytes are copied
 * into `name` through a sync access handle, chunk by chunk, and `file` is removed once the copy is flushed. A tab
 * closed mid-copy leaves `file` whole beside an incomplete `name` without an identity record, which the store
 * treats as unverified and replaces (store/weights.js check), and the download completes from `file` again.
 * @param {FileSystemDirectoryHandle} dir
 * @param {FileSystemFileHandle} file
 * @param {string} name
 */
export async function rename(dir, file, name) {
    const movable = /** @type {FileSystemFileHandle & {move?: (name: string) => Promise<void>}} */ (file);
    if (typeof movable.move === 'function') {
        try {
            await movable.move(name);
            return;
        } catch (err) {
            if (!(
                err instanceof DOMException &&
                (err.name === 'NotSupportedError' || err.name === 'InvalidModificationError')
            ))
                throw err;
        }
    }
    const source = await file.getFile();
    const target = await dir.getFileHandle(name, { create: true });
    const access = await target.createSyncAccessHandle();
    try {
        access.truncate(0);
        for (let at = 0; at < source.size; at += COPY_CHUNK_BYTES) {
            const chunk = new Uint8Array(await source.slice(at, at + COPY_CHUNK_BYTES).arrayBuffer());
            let done = 0;
            while (done < chunk.byteLength) done += access.write(chunk.subarray(done), { at: at + done });
        }
        access.flush();
    } catch (err) {
        rethrowStorageError(err, name);
    } finally {
        access.close();
    }
    await dir.removeEntry(file.name);
}

/**
 * Delete every stored model (all sources) and report the bytes freed.
 * @returns {Promise<number>}
 */
export async function clearAll() {
    const root = await opfsRoot();
    let dir;
    try {
        dir = await root.getDirectoryHandle(ROOT_DIR);
    } catch (err) {
        if (isNotFound(err)) return 0;
        throw err;
    }
    const freed = await directorySize(dir);
    await root.removeEntry(ROOT_DIR, { recursive: true });
    return freed;
}

/**
 * @param {FileSystemDirectoryHandle} dir
 * @returns {Promise<number>}
 */
async function directorySize(dir) {
    let total = 0;
    for await (const entry of dir.values()) {
        // `kind` tells the two handle types apart; TypeScript types values() as the common base.
        total +=
            entry.kind === 'file'
                ? (await /** @type {FileSystemFileHandle} */ (entry).getFile()).size
                : await directorySize(/** @type {FileSystemDirectoryHandle} */ (entry));
    }
    return total;
}
