// @ts-check
/**
 * @file store/stored_check (a stored file checked against the manifest's size and block hashes each time a load
 * reads it), alone and through store/weights.js WeightStore on an in-memory OPFS (tests/js/fake_opfs.mjs): files read
 * whole, opened to stream and read as Files; a changed byte names its block, a short file is refused at once, a
 * changed file is deleted by forget(), and a store whose folder was removed under it opens it again.
 * @module tests/js/test_store_stored_check
 */

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { afterEach, test } from 'node:test';

import { StoredFileError } from '../../web_src/src/shared/errors.js';
import { ROOT_DIR } from '../../web_src/src/store/backend.js';
import { checkStoredBytes, checkStoredFile } from '../../web_src/src/store/stored_check.js';
import { fileStoredFile } from '../../web_src/src/store/stored_file.js';
import { WeightStore } from '../../web_src/src/store/weights.js';
import { installFakeOpfs } from './fake_opfs.mjs';

const BLOCK = 4096;
/** Nine blocks and a short one. */
const WEIGHTS = Uint8Array.from({ length: 9 * BLOCK + 1234 }, (_, i) => (i * 13 + (i >> 7)) % 256);
const GRAPH = new TextEncoder().encode('graph bytes');
/** @param {Uint8Array} bytes */
const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');
/** @param {Uint8Array} bytes */
const blocksOf = (bytes) => ({
    size: BLOCK,
    sha256: Array.from({ length: Math.ceil(bytes.length / BLOCK) }, (_, i) =>
        sha256(bytes.slice(i * BLOCK, (i + 1) * BLOCK)),
    ),
});
const DATA = 'transformer/model.onnx_data';
const FILES = Object.freeze([
    { path: 'transformer/model.onnx', size: GRAPH.length, sha256: sha256(GRAPH), blocks: blocksOf(GRAPH) },
    { path: DATA, size: WEIGHTS.length, sha256: sha256(WEIGHTS), blocks: blocksOf(WEIGHTS) },
]);
const BYTES = new Map([
    [FILES[0].path, GRAPH],
    [DATA, WEIGHTS],
]);
const BASE = 'http://models.test/repo/';
const EXPECTED = { size: WEIGHTS.length, blocks: blocksOf(WEIGHTS) };
/** WEIGHTS with one byte changed in block 7 (bytes 24576-28671). */
const FLIPPED = WEIGHTS.map((b, i) => (i === 6 * BLOCK + 100 ? b ^ 0x80 : b));

const realFetch = globalThis.fetch;
/** @type {(() => void) | null} */
let restoreOpfs = null;
afterEach(() => {
    globalThis.fetch = realFetch;
    restoreOpfs?.();
    restoreOpfs = null;
});

/** @returns {string[]} The paths fetched from BASE. */
function serve() {
    /** @type {string[]} */
    const fetched = [];
    globalThis.fetch = async (url) => {
        const path = String(url).slice(BASE.length);
        const bytes = BYTES.get(path);
        if (!bytes) return new Response('missing', { status: 404 });
        fetched.push(path);
        return new Response(bytes, { headers: { 'content-length': String(bytes.length) } });
    };
    return fetched;
}

/**
 * A fresh fake OPFS, and a store of BASE that holds FILES.
 * @returns {Promise<{store: WeightStore, root: ReturnType<typeof installFakeOpfs>['root'], fetched: string[]}>}
 */
async function storedModel() {
    const opfs = installFakeOpfs({ move: true, createWritable: true, handleModes: true });
    restoreOpfs = opfs.restore;
    const fetched = serve();
    const store = await WeightStore.open(BASE);
    await store.ensure([...FILES]);
    return { store, root: opfs.root, fetched };
}

/**
 * Replace the bytes of a stored file (what a disk, a browser or an extension may do after it was downloaded).
 * @param {ReturnType<typeof installFakeOpfs>['root']} root
 * @param {string} path
 * @param {Uint8Array} bytes
 */
async function overwrite(root, path, bytes) {
    let dir = (await root.getDirectoryHandle(ROOT_DIR)).entries.values().next().value;
    const parts = path.split('/');
    for (const part of parts.slice(0, -1)) dir = await /** @type {any} */ (dir).getDirectoryHandle(part);
    const handle = await /** @type {any} */ (dir).getFileHandle(parts.at(-1));
    handle.bytes = bytes;
}

test('the bytes the manifest describes pass; a changed byte names its block, a wrong size the sizes', async () => {
    await checkStoredBytes(WEIGHTS, DATA, EXPECTED);
    await checkStoredFile(fileStoredFile(new Blob([WEIGHTS])), DATA, EXPECTED);
    const block = /block 7 of 10\) no longer match the model's manifest/;
    for (const check of [
        () => checkStoredBytes(FLIPPED, DATA, EXPECTED),
        () => checkStoredFile(fileStoredFile(new Blob([FLIPPED])), DATA, EXPECTED),
    ])
        await assert.rejects(check(), (err) => {
            assert.ok(err instanceof StoredFileError && err.code === 'integrity', String(err));
            assert.match(err.message, block);
            assert.match(err.message, new RegExp(`^${DATA} changed in this browser's storage since it was downloaded`));
            assert.deepEqual(err.detail, { path: DATA, block: 6 });
            return true;
        });
    const short = WEIGHTS.slice(0, -1);
    const sizes = new RegExp(`it has ${short.length} bytes, the model's manifest ${WEIGHTS.length}`);
    await assert.rejects(checkStoredBytes(short, DATA, EXPECTED), sizes);
    await assert.rejects(checkStoredFile(fileStoredFile(new Blob([short])), DATA, EXPECTED), sizes);
    // Without block hashes only the size can be checked.
    await checkStoredBytes(FLIPPED, DATA, { size: WEIGHTS.length, blocks: null });
    await assert.rejects(checkStoredBytes(short, DATA, { size: WEIGHTS.length, blocks: null }), sizes);
});

test('a file that ends while it is read is refused, not taken as shorter', async () => {
    const file = fileStoredFile(new Blob([WEIGHTS]));
    const ending = {
        ...file,
        readInto: async (/** @type {Uint8Array} */ into, /** @type {number} */ at) =>
            at >= 5 * BLOCK ? 0 : file.readInto(into, at),
    };
    await assert.rejects(checkStoredFile(ending, DATA, EXPECTED), /ends at byte 20480 of 38098/);
});

test('the store checks every stored file a load reads: whole, opened to stream, and as a File', async () => {
    const { store, root } = await storedModel();
    assert.deepEqual(await store.read(DATA), WEIGHTS);
    const opened = await store.openFile(DATA);
    opened.close();
    await store.verify([DATA]);
    assert.equal((await store.file(DATA)).size, WEIGHTS.length);

    await overwrite(root, DATA, FLIPPED);
    await assert.rejects(store.read(DATA), /block 7 of 10/);
    await assert.rejects(store.file(DATA), /block 7 of 10/);
    const streamed = await store.openFile(DATA); // the size is right: the blocks are checked beside the reads
    assert.deepEqual(await streamed.read(0, 16), FLIPPED.subarray(0, 16));
    streamed.close();
    await assert.rejects(store.verify([DATA]), (err) => err instanceof StoredFileError && /block 7/.test(err.message));
    await store.verify([DATA]); // reported once: the next openFile checks again

    // One byte short: refused when it is opened, before any read.
    await overwrite(root, DATA, WEIGHTS.slice(0, -1));
    await assert.rejects(store.openFile(DATA), /it has 38097 bytes, the model's manifest 38098/);
    await assert.rejects(store.read(DATA), /it has 38097 bytes/);
    await assert.rejects(store.file(DATA), /it has 38097 bytes/);
});

test('a changed file is deleted by forget() and downloaded by the next ensure()', async () => {
    const { store, root, fetched } = await storedModel();
    await overwrite(root, DATA, FLIPPED);
    await store.forget(DATA);
    assert.equal(await store.backend.size(DATA), null);
    fetched.length = 0;
    await store.ensure([...FILES]);
    assert.deepEqual(fetched, [DATA]);
    assert.deepEqual(await store.read(DATA), WEIGHTS);
});

test('a store whose folder was removed under it (clear site data) opens it again, empty', async () => {
    const { store, root, fetched } = await storedModel();
    await store.reopenIfRemoved();
    const before = store.backend;
    assert.equal(store.backend, before, 'a store still there is kept');
    await root.removeEntry(ROOT_DIR, { recursive: true });
    await store.reopenIfRemoved();
    assert.notEqual(store.backend, before);
    fetched.length = 0;
    const { fetched: downloaded } = await store.ensure([...FILES]);
    assert.deepEqual(downloaded.sort(), FILES.map((f) => f.path).sort());
    assert.deepEqual(await store.read(DATA), WEIGHTS);
    // Into the folder the browser has now, not the removed one.
    const stored = [...root.files().keys()].filter((path) => !path.endsWith('.json') && !path.endsWith('.txt'));
    assert.deepEqual(stored.sort(), FILES.map((f) => `${ROOT_DIR}/${store.backend.key}/${f.path}`).sort());
});
