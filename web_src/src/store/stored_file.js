// @ts-check
/**
 * @file Reading a stored file back: whole (a graph, the VAE's weights) or in parts (weights streamed to the GPU).
 *
 * Where the browser has read-only sync access handles (Chromium 121+; `FileSystemSyncAccessHandle.mode` says so),
 * a worker reads the file's bytes straight from disk into its own memory. A File's Blob reads go through the
 * browser's blob machinery instead, measured at about 0.9 GB/s on a 2-core VM against 8-17 GB/s for the handle,
 * from the same cached file (`scripts/read_bench.py`); on the H200 the warm reload's uploads ran at 0.55-0.65 GB/s
 * behind them. Elsewhere (Safari, Firefox, the page's own thread, a file another thread holds open for writing) the
 * File is read. Read-only handles share the file with each other and with File reads, but the file cannot be
 * removed while one is open: close the reader as soon as its reads are done.
 * @module store/stored_file
 */

/**
 * @typedef {Object} StoredFile  A stored file open for reading.
 * @property {number} size
 * @property {(into: Uint8Array, offset: number) => Promise<number>} readInto  Fill `into` with the bytes from
 *   `offset` on; resolves to the bytes read (fewer at the end of the file). Reading into a buffer the caller reuses
 *   spares a fresh allocation per read, which costs more than the read itself on a read-only handle.
 * @property {(offset: number, length: number) => Promise<Uint8Array>} read  Bytes [offset, offset + length) in a
 *   buffer of their own; fewer at the end of the file.
 * @property {() => void} close
 * @property {'handle' | 'file'} via  How it reads: a read-only sync access handle, or the File.
 */

/**
 * Whether this scope can open read-only sync access handles (a worker of a browser that knows the mode; one
 * that does not would open an exclusive handle instead, which shuts every other reader out).
 * @param {any} [scope]  globalThis, or a stand-in in tests.
 * @returns {boolean}
 */
export function readOnlyHandles(scope = globalThis) {
    const access = scope.FileSystemSyncAccessHandle?.prototype;
    return (
        typeof scope.FileSystemFileHandle?.prototype?.createSyncAccessHandle === 'function' &&
        access !== undefined &&
        'mode' in access
    );
}

/**
 * Open a stored file for reading: through a read-only sync access handle where this scope has them, else (or when
 * the handle cannot be had: another thread writes the file) through its File.
 * @param {FileSystemFileHandle} handle
 * @param {{scope?: any}} [options]  `scope`: globalThis, or a stand-in in tests.
 * @returns {Promise<StoredFile>}
 */
export async function openStoredFile(handle, { scope = globalThis } = {}) {
    if (readOnlyHandles(scope)) {
        /** @type {FileSystemSyncAccessHandle | null} */
        let access = null;
        try {
            // `mode` is not in TypeScript's DOM types yet.
            const open = /** @type {(options: {mode: string}) => Promise<FileSystemSyncAccessHandle>} */ (
                /** @type {any} */ (handle).createSyncAccessHandle.bind(handle)
            );
            access = await open({ mode: 'read-only' });
        } catch (err) {
            if (!(err instanceof DOMException)) throw err;
        }
        if (access && /** @type {any} */ (access).mode === 'read-only') return handleReader(access);
        access?.close();
    }
    return fileStoredFile(await handle.getFile());
}

/**
 * A stored file's bytes, whole, read through openFile (store/backend.js OpfsBackend.openFile) and closed.
 * @param {{openFile: (path: string) => Promise<StoredFile>}} backend
 * @param {string} path
 * @returns {Promise<Uint8Array>}
 */
export async function readStored(backend, path) {
    const file = await backend.openFile(path);
    try {
        const bytes = await file.read(0, file.size);
        if (bytes.byteLength !== file.size)
            throw new DOMException(`read ${bytes.byteLength} of the ${file.size} bytes of ${path}`, 'NotReadableError');
        return bytes;
    } finally {
        file.close();
    }
}

/**
 * @param {FileSystemSyncAccessHandle} access  Opened read-only.
 * @returns {StoredFile}
 */
function handleReader(access) {
    const size = access.getSize();
    let open = true;
    /** @type {(into: Uint8Array, offset: number) => number} */
    const readInto = (into, offset) => {
        if (!open) throw closed();
        const want = Math.max(0, Math.min(into.byteLength, size - offset));
        let done = 0;
        // read() may read less than asked (spec: "returns the number of bytes read"); 0 is the end of the file.
        while (done < want) {
            const n = access.read(into.subarray(done, want), { at: offset + done });
            if (n === 0) break;
            done += n;
        }
        return done;
    };
    return {
        size,
        via: 'handle',
        async readInto(into, offset) {
            return readInto(into, offset);
        },
        async read(offset, length) {
            const bytes = new Uint8Array(Math.max(0, Math.min(length, size - offset)));
            const done = readInto(bytes, offset);
            return done === bytes.byteLength ? bytes : bytes.slice(0, done);
        },
        close() {
            if (open) access.close();
            open = false;
        },
    };
}

/**
 * A File (or any Blob) read as a StoredFile: through its Blob reads.
 * @param {Blob} file
 * @returns {StoredFile}
 */
export function fileStoredFile(file) {
    let open = true;
    /** @type {(offset: number, length: number) => Promise<Uint8Array>} */
    const read = async (offset, length) => {
        if (!open) throw closed();
        return new Uint8Array(await file.slice(offset, offset + length).arrayBuffer());
    };
    return {
        size: file.size,
        via: 'file',
        async readInto(into, offset) {
            const bytes = await read(offset, into.byteLength);
            into.set(bytes);
            return bytes.byteLength;
        },
        read,
        close() {
            open = false;
        },
    };
}

/** @returns {DOMException} What a read of a closed StoredFile throws. */
function closed() {
    return new DOMException('the stored file was closed', 'InvalidStateError');
}
