// @ts-check
/**
 * @file The store on an OPFS without its optional methods: store/backend.js, download.js, weights.js and
 * feature_memory.js against an in-memory OPFS (tests/js/fake_opfs.mjs) as Chromium has it, as Safari 26 has it (no
 * FileSystemHandle.move) and as Safari before 26 has it (no move, no createWritable). Every path must store the
 * same files, whole and verified, and take the fallback only where the method is missing.
 * @module tests/js/test_store_opfs
 */

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { afterEach, test } from 'node:test';

import {
    IDENTITY_SUFFIX,
    OpfsBackend,
    PARTIAL_SUFFIX,
    ROOT_DIR,
    keyFor,
    opfsSupport,
    rename,
} from '../../web_src/src/store/backend.js';
import { downloadFile } from '../../web_src/src/store/download.js';
import { FEATURE_MEMORY_FILE, featureMemory } from '../../web_src/src/store/feature_memory.js';
import { fromManifest, fromResponse, parseIdentity } from '../../web_src/src/store/identity.js';
import { readOnlyHandles } from '../../web_src/src/store/stored_file.js';
import { WeightStore } from '../../web_src/src/store/weights.js';
import { installFakeOpfs } from './fake_opfs.mjs';

/** Where each OPFS profile comes from: /work/shared/reference/browsers-runtimes-weights-2026.md ("Browsers"). */
const PROFILES = Object.freeze([
    { name: 'Chromium (move, createWritable, read-only handles)', move: true, createWritable: true, handleModes: true },
    {
        name: 'Safari 26 (no FileSystemHandle.move: whatwg/fs#180; no handle modes)',
        move: false,
        createWritable: true,
        handleModes: false,
    },
    { name: 'Safari before 26 (no move, no createWritable)', move: false, createWritable: false, handleModes: false },
]);

const BASE = 'http://models.test/repo/';
const WEIGHTS = Uint8Array.from({ length: 40000 }, (_, i) => (i * 7 + (i >> 8)) % 256);
const GRAPH = new TextEncoder().encode('graph bytes');
/** @param {Uint8Array} bytes */
const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');
const FILES = Object.freeze([
    { path: 'transformer/model.onnx', size: GRAPH.length, sha256: sha256(GRAPH), bytes: GRAPH },
    { path: 'transformer/model.onnx_data', size: WEIGHTS.length, sha256: sha256(WEIGHTS), bytes: WEIGHTS },
]);

const realFetch = globalThis.fetch;
/** @type {(() => void) | null} */
let restoreOpfs = null;
afterEach(() => {
    globalThis.fetch = realFetch;
    restoreOpfs?.();
    restoreOpfs = null;
});

/**
 * Serve FILES under BASE: whole (200) or, for `Range: bytes=N-`, the rest (206); `cutAfter` bytes of the first
 * response of `cutPath` and then a dropped connection.
 * @param {{cutPath?: string, cutAfter?: number}} [options]
 * @returns {string[]} The requests, as `path range`.
 */
function serve({ cutPath, cutAfter = 0 } = {}) {
    /** @type {string[]} */
    const requests = [];
    let cut = false;
    globalThis.fetch = async (url, init) => {
        const path = String(url).slice(BASE.length);
        const file = FILES.find((f) => f.path === path);
        const range = new Headers(init?.headers).get('range');
        requests.push(`${path} ${range ?? ''}`.trim());
        if (!file) return new Response('missing', { status: 404 });
        const headers = { 'content-type': 'application/octet-stream', etag: `"${file.sha256.slice(0, 8)}"` };
        const start = range ? Number(/bytes=(\d+)-/.exec(range)?.[1]) : 0;
        const body = file.bytes.slice(start);
        const status = range ? 206 : 200;
        const rangeHeader = range ? { 'content-range': `bytes ${start}-${file.size - 1}/${file.size}` } : {};
        if (path === cutPath && !cut) {
            cut = true;
            const stream = new ReadableStream({
                start(controller) {
                    controller.enqueue(body.slice(0, cutAfter));
                },
                pull(controller) {
                    controller.error(new TypeError('network error'));
                },
            });
            return new Response(stream, {
                status,
                headers: { ...headers, ...rangeHeader, 'content-length': String(body.length) },
            });
        }
        return new Response(body, {
            status,
            headers: { ...headers, ...rangeHeader, 'content-length': String(body.length) },
        });
    };
    return requests;
}

/**
 * The store's folder for BASE in the fake OPFS.
 * @param {ReturnType<typeof installFakeOpfs>['root']} root
 */
async function storeFiles(root) {
    const all = root.files();
    const prefix = `${ROOT_DIR}/${await keyFor(BASE)}/`;
    return new Map(
        [...all].filter(([path]) => path.startsWith(prefix)).map(([path, bytes]) => [path.slice(prefix.length), bytes]),
    );
}

for (const profile of PROFILES) {
    test(`${profile.name}: opfsSupport reports what the browser has`, () => {
        const opfs = installFakeOpfs(profile);
        restoreOpfs = opfs.restore;
        assert.deepEqual(opfsSupport(), {
            directory: true,
            syncAccessHandle: true,
            createWritable: profile.createWritable,
            move: profile.move,
        });
    });

    test(`${profile.name}: the store downloads, verifies and keeps every file`, async () => {
        const opfs = installFakeOpfs(profile);
        restoreOpfs = opfs.restore;
        const requests = serve();
        const store = await WeightStore.open(BASE);
        const wanted = FILES.map(({ path, size, sha256 }) => ({ path, size, sha256 }));
        const result = await store.ensure(wanted);
        assert.equal(result.files, 2);
        assert.equal(result.downloadedBytes, GRAPH.length + WEIGHTS.length);

        const stored = await storeFiles(opfs.root);
        assert.deepEqual(stored.get('transformer/model.onnx_data'), WEIGHTS);
        assert.deepEqual(stored.get('transformer/model.onnx'), GRAPH);
        assert.equal(new TextDecoder().decode(stored.get('source.txt')), BASE);
        assert.deepEqual(
            [...stored.keys()].filter((p) => p.includes(PARTIAL_SUFFIX)),
            [],
            'no partial copy is left',
        );
        const identity = parseIdentity(
            new TextDecoder().decode(stored.get('transformer/model.onnx_data' + IDENTITY_SUFFIX)),
        );
        assert.equal(identity?.sha256, sha256(WEIGHTS));
        // Each optional method is used where it exists, and never where it does not.
        assert.equal(opfs.calls.move > 0, profile.move);
        assert.equal(opfs.calls.createWritable > 0, profile.createWritable);

        // A second visit trusts what is stored: nothing is requested again, and the bytes read back whole.
        requests.length = 0;
        const again = await (await WeightStore.open(BASE)).ensure(wanted);
        assert.deepEqual([again.files, requests], [0, []]);
        assert.deepEqual(await store.read('transformer/model.onnx_data'), WEIGHTS);
    });

    test(`${profile.name}: a helper worker's view of the store (found by its key) reads and writes the same files`, async () => {
        const opfs = installFakeOpfs(profile);
        restoreOpfs = opfs.restore;
        serve();
        const opened = await OpfsBackend.open(BASE);
        const helperView = await OpfsBackend.ofKey(opened.key);
        // What a download helper stores (store/store_worker.js) is what the opening thread sees, and the other way.
        await downloadFile(helperView, BASE + FILES[1].path, FILES[1].path, { want: fromManifest(FILES[1]) });
        assert.equal(await opened.size(FILES[1].path), WEIGHTS.length);
        assert.equal((await opened.readIdentity(FILES[1].path))?.sha256, FILES[1].sha256);
        assert.equal(await helperView.readText('source.txt'), BASE);
        await assert.rejects(OpfsBackend.ofKey('0'.repeat(32)), /NotFound/);
    });

    test(`${profile.name}: stored files read back whole and in parts, by read-only handles where the browser has them`, async () => {
        const opfs = installFakeOpfs(profile);
        restoreOpfs = opfs.restore;
        serve();
        const store = await WeightStore.open(BASE);
        await store.ensure(FILES.map(({ path, size, sha256 }) => ({ path, size, sha256 })));
        assert.equal(readOnlyHandles(), profile.handleModes);
        const handlesBefore = opfs.calls.createSyncAccessHandle;

        const path = 'transformer/model.onnx_data';
        assert.deepEqual(await store.read(path), WEIGHTS);
        const first = await store.openFile(path);
        const second = await store.openFile(path);
        assert.deepEqual([first.via, first.size], [profile.handleModes ? 'handle' : 'file', WEIGHTS.length]);
        // Two readers of one file at once (the read ahead and a session's upload), each byte range as stored.
        assert.deepEqual(await first.read(1000, 5000), WEIGHTS.subarray(1000, 6000));
        assert.deepEqual(await second.read(WEIGHTS.length - 10, 100), WEIGHTS.subarray(WEIGHTS.length - 10));
        const chunk = await first.read(0, 16);
        chunk[0] ^= 0xff;
        assert.deepEqual(await first.read(0, 16), WEIGHTS.subarray(0, 16), 'each read has a buffer of its own');
        // An open handle keeps the file from being removed (store/stored_file.js): closed readers do not.
        if (profile.handleModes)
            await assert.rejects(store.backend.discard(path), { code: 'busy', message: /in use by another tab/ });
        first.close();
        second.close();
        await assert.rejects(first.read(0, 1), /closed|InvalidState/);
        // A browser without handle modes never opens a handle to read (it would be exclusive).
        assert.equal(opfs.calls.readOnlyHandles, profile.handleModes ? 3 : 0);
        assert.equal(opfs.calls.createSyncAccessHandle - handlesBefore, profile.handleModes ? 3 : 0);
        assert.equal(await store.backend.discard(path), WEIGHTS.length);
        await assert.rejects(store.openFile(path), /not in the local model cache/);
    });

    test(`${profile.name}: a cut download resumes and completes`, async () => {
        const opfs = installFakeOpfs(profile);
        restoreOpfs = opfs.restore;
        const requests = serve({ cutPath: 'transformer/model.onnx_data', cutAfter: 15000 });
        const store = await WeightStore.open(BASE);
        await store.ensure(FILES.map(({ path, size, sha256 }) => ({ path, size, sha256 })));
        assert.ok(requests.includes('transformer/model.onnx_data bytes=15000-'), requests.join('\n'));
        const stored = await storeFiles(opfs.root);
        assert.deepEqual(stored.get('transformer/model.onnx_data'), WEIGHTS);
        assert.equal(stored.has('transformer/model.onnx_data' + PARTIAL_SUFFIX), false);
    });

    test(`${profile.name}: a partial copy left by an earlier visit is read back, checked and completed`, async () => {
        const opfs = installFakeOpfs(profile);
        restoreOpfs = opfs.restore;
        const requests = serve();
        const [, file] = FILES;
        // What a download cut off in an earlier visit leaves: its first bytes and the version they are of.
        const backend = await OpfsBackend.open(BASE);
        const writer = await backend.openPartial(file.path, { fromZero: true });
        writer.write(WEIGHTS.subarray(0, 15000));
        writer.close();
        const etag = new Headers({ etag: `"${file.sha256.slice(0, 8)}"` });
        await backend.writeIdentity(file.path + PARTIAL_SUFFIX, {
            ...fromResponse(etag, file.size),
            sha256: file.sha256,
        });

        await (await WeightStore.open(BASE)).ensure(FILES.map(({ path, size, sha256 }) => ({ path, size, sha256 })));
        assert.ok(requests.includes(`${file.path} bytes=15000-`), requests.join('\n'));
        const stored = await storeFiles(opfs.root);
        assert.deepEqual(stored.get(file.path), WEIGHTS);
        assert.equal(stored.has(file.path + PARTIAL_SUFFIX), false);
        // The stored bytes were hashed through a read-only handle where the browser has them, closed before the
        // download opened the partial copy to write it.
        assert.equal(opfs.calls.readOnlyHandles > 0, profile.handleModes);
    });

    test(`${profile.name}: the failed-feature memory is written and read back`, async () => {
        const opfs = installFakeOpfs(profile);
        restoreOpfs = opfs.restore;
        await featureMemory.remember('browser A', { subgroups: 'shader failed' });
        await featureMemory.remember('browser A', { 'shader-f16': 'pipeline failed' });
        assert.deepEqual(await featureMemory.recall('browser A'), {
            subgroups: 'shader failed',
            'shader-f16': 'pipeline failed',
        });
        assert.deepEqual(await featureMemory.recall('browser B'), {});
        const file = opfs.root.files().get(FEATURE_MEMORY_FILE);
        assert.ok(file, 'the memory file is at the top of OPFS');
        assert.deepEqual(JSON.parse(new TextDecoder().decode(file)), {
            'browser A': { subgroups: 'shader failed', 'shader-f16': 'pipeline failed' },
        });
        assert.equal(opfs.calls.createWritable > 0, profile.createWritable);
    });

    test(`${profile.name}: clearing the cache frees every stored byte`, async () => {
        const opfs = installFakeOpfs(profile);
        restoreOpfs = opfs.restore;
        serve();
        await (await WeightStore.open(BASE)).ensure(FILES.map(({ path, size, sha256 }) => ({ path, size, sha256 })));
        const before = [...(await storeFiles(opfs.root)).values()].reduce((sum, bytes) => sum + bytes.length, 0);
        assert.equal(await WeightStore.clear(), before);
        assert.deepEqual(await storeFiles(opfs.root), new Map());
    });
}

test('a move() that refuses (NotSupportedError) falls back to the copy; other errors are not swallowed', async () => {
    const opfs = installFakeOpfs();
    restoreOpfs = opfs.restore;
    const dir = await opfs.root.getDirectoryHandle('d', { create: true });
    const file = await dir.getFileHandle('x.partial', { create: true });
    const access = await file.createSyncAccessHandle();
    access.write(WEIGHTS, { at: 0 });
    access.close();
    file.move = async () => {
        throw new DOMException('not here', 'NotSupportedError');
    };
    await rename(/** @type {any} */ (dir), /** @type {any} */ (file), 'x');
    assert.deepEqual([...dir.entries.keys()], ['x']);
    assert.deepEqual(dir.files().get('x'), WEIGHTS);

    const other = await dir.getFileHandle('y.partial', { create: true });
    other.move = async () => {
        throw new DOMException('disk full', 'QuotaExceededError');
    };
    await assert.rejects(rename(/** @type {any} */ (dir), /** @type {any} */ (other), 'y'), /disk full/);
});

test('the copy fallback replaces an older file of the same name and copies in several chunks', async () => {
    const opfs = installFakeOpfs({ move: false });
    restoreOpfs = opfs.restore;
    const dir = await opfs.root.getDirectoryHandle('d', { create: true });
    const big = Uint8Array.from({ length: 16 * 1024 * 1024 + 12345 }, (_, i) => (i * 31) % 251);
    const stale = await dir.getFileHandle('big', { create: true });
    const staleAccess = await stale.createSyncAccessHandle();
    staleAccess.write(new Uint8Array(20 * 1024 * 1024).fill(9), { at: 0 });
    staleAccess.close();
    const partial = await dir.getFileHandle('big.partial', { create: true });
    const access = await partial.createSyncAccessHandle();
    access.write(big, { at: 0 });
    access.close();
    await rename(/** @type {any} */ (dir), /** @type {any} */ (partial), 'big');
    const copied = dir.files().get('big');
    assert.equal(copied?.length, big.length);
    assert.ok(copied && Buffer.from(copied).equals(Buffer.from(big)));
    assert.equal(dir.entries.has('big.partial'), false);
});
