// @ts-check
/** @file store/weights: which stored copies are kept, and how the missing ones download, against an in-memory backend
 * and fetch. @module tests/js/test_store_weights */

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { afterEach, test } from 'node:test';

import { IntegrityError } from '../../web_src/src/shared/errors.js';
import { DOWNLOADS_AT_ONCE, WeightStore } from '../../web_src/src/store/weights.js';
import { MemoryBackend } from './memory_backend.mjs';

const BYTES = Uint8Array.from({ length: 300 }, (_, i) => (i * 7) % 256);
const SHA = createHash('sha256').update(BYTES).digest('hex');
const OTHER_SHA = 'f'.repeat(64);
const MANIFEST = { size: BYTES.length, sha256: SHA, etag: null, lastModified: null };

/** @param {(backend: MemoryBackend) => void | Promise<void>} fill */
async function storeWith(fill) {
    const backend = new MemoryBackend();
    backend.files.set('a.bin', BYTES);
    await fill(backend);
    const store = new WeightStore(/** @type {any} */ (backend), 'https://x/');
    return { backend, store };
}

test('a copy stored without an identity is hashed once against the manifest and kept when it matches', async () => {
    const { backend, store } = await storeWith(() => {});
    assert.equal(await store.check('a.bin', MANIFEST, undefined), BYTES.length);
    assert.deepEqual(await backend.readIdentity('a.bin'), {
        size: BYTES.length,
        sha256: SHA,
        etag: null,
        lastModified: null,
    });
});

test('a copy stored without an identity whose bytes differ from the manifest is removed', async () => {
    const { backend, store } = await storeWith(() => {});
    assert.equal(await store.check('a.bin', { ...MANIFEST, sha256: OTHER_SHA }, undefined), null);
    assert.ok(!backend.files.has('a.bin') && !backend.files.has('a.bin.identity.json'));
});

test('without a manifest hash, a copy without an identity cannot be vouched for and is removed', async () => {
    const { backend, store } = await storeWith(() => {});
    const server = { size: BYTES.length, sha256: null, etag: '"v1"', lastModified: null };
    assert.equal(await store.check('a.bin', server, undefined), null);
    assert.ok(!backend.files.has('a.bin'));
});

test('a copy recorded as another version is removed, even at the same size; the same version is kept', async () => {
    const recorded = { size: BYTES.length, sha256: OTHER_SHA, etag: '"v0"', lastModified: null };
    let { backend, store } = await storeWith((b) => b.writeIdentity('a.bin', recorded));
    assert.equal(await store.check('a.bin', MANIFEST, undefined), null);
    assert.ok(!backend.files.has('a.bin'));

    ({ backend, store } = await storeWith((b) => b.writeIdentity('a.bin', recorded)));
    assert.equal(
        await store.check('a.bin', { size: BYTES.length, sha256: null, etag: '"v0"', lastModified: null }, undefined),
        BYTES.length,
    );
    assert.equal(
        await store.check('a.bin', { size: BYTES.length, sha256: null, etag: '"v1"', lastModified: null }, undefined),
        null,
    );
});

test('with the server out of reach, a stored copy is used as it is', async () => {
    const { store } = await storeWith(() => {});
    assert.equal(await store.check('a.bin', null, undefined), BYTES.length);
});

/** A WeightStore whose quota and persistence questions (navigator.storage) have fixed answers. */
class NodeStore extends WeightStore {
    async estimate() {
        return { usage: 0, quota: 0 };
    }
    async persist() {
        return false;
    }
}

const realFetch = globalThis.fetch;
afterEach(() => {
    globalThis.fetch = realFetch;
});

/**
 * Serve `files` (path -> bytes), each body a few milliseconds late, counting the requests in flight at once.
 * @param {Map<string, Uint8Array>} files
 * @returns {{most: number, served: string[]}}
 */
function serveSlowly(files) {
    const seen = { most: 0, served: /** @type {string[]} */ ([]) };
    let inFlight = 0;
    globalThis.fetch = async (url) => {
        const path = String(url).replace('https://x/', '');
        const bytes = /** @type {Uint8Array} */ (files.get(path));
        inFlight += 1;
        seen.most = Math.max(seen.most, inFlight);
        seen.served.push(path);
        const body = new ReadableStream({
            async pull(controller) {
                await new Promise((resolve) => setTimeout(resolve, 20));
                controller.enqueue(bytes.slice());
                controller.close();
                inFlight -= 1;
            },
            cancel() {
                inFlight -= 1;
            },
        });
        return new Response(body, { status: 200, headers: { 'content-length': String(bytes.length), etag: '"v1"' } });
    };
    return seen;
}

/** Six files of other bytes served slowly (serveSlowly), an empty store, and the files as a manifest lists them. */
function sixFilesServedSlowly() {
    const files = new Map(Array.from({ length: 6 }, (_, i) => [`f${i}.bin`, BYTES.map((b) => b ^ i)]));
    const seen = serveSlowly(files);
    const backend = new MemoryBackend();
    const store = new NodeStore(/** @type {any} */ (backend), 'https://x/');
    const wanted = [...files].map(([path, bytes]) => ({
        path,
        size: bytes.length,
        sha256: createHash('sha256').update(bytes).digest('hex'),
    }));
    return { files, seen, backend, store, wanted };
}

test('the missing files download several at once, each checked against its hash', async () => {
    const { files, seen, backend, store, wanted } = sixFilesServedSlowly();
    /** @type {import('../../web_src/src/shared/types.js').DownloadProgress[]} */
    const progress = [];
    const result = await store.ensure(wanted, { onProgress: (p) => progress.push(p) });
    assert.equal(result.files, 6);
    assert.equal(result.downloadedBytes, 6 * BYTES.length);
    assert.ok(seen.most > 1 && seen.most <= DOWNLOADS_AT_ONCE, `at most ${seen.most} at once`);
    for (const [path, bytes] of files) assert.deepEqual(backend.files.get(path), bytes, path);
    const loaded = progress.map((p) => p.loaded);
    assert.deepEqual(
        loaded,
        [...loaded].sort((a, b) => a - b),
        'overall progress never goes back',
    );
    assert.equal(progress.at(-1)?.loaded, 6 * BYTES.length);
});

test('a file whose bytes differ from the manifest stops the others and is refused; what was checked stays', async () => {
    const { files, seen, backend, store, wanted } = sixFilesServedSlowly();
    wanted[1].sha256 = OTHER_SHA;
    await assert.rejects(
        store.ensure(wanted),
        (err) => err instanceof IntegrityError && err.message.includes('f1.bin'),
    );
    assert.ok(!backend.files.has('f1.bin') && !backend.files.has('f1.bin.partial'), 'the refused copy is deleted');
    assert.ok(seen.served.length < files.size, `the downloads after the refusal did not start: ${seen.served}`);
    // Every file that became complete is the manifest's version.
    for (const { path, sha256 } of wanted) {
        const stored = backend.files.get(path);
        if (stored) assert.equal(createHash('sha256').update(stored).digest('hex'), sha256, path);
    }
});
