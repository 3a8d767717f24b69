// @ts-check
/** @file store/weights: which stored copies are kept, against an in-memory backend. @module tests/js/test_store_weights */

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';

import { parseIdentity } from '../../web_src/src/store/identity.js';
import { WeightStore } from '../../web_src/src/store/weights.js';

/** The backend methods WeightStore.check uses, over a Map of byte arrays. */
class MemoryBackend {
    constructor() {
        /** @type {Map<string, Uint8Array>} */
        this.files = new Map();
    }
    /** @param {string} path */
    async size(path) {
        return this.files.get(path)?.length ?? null;
    }
    /** @param {string} path */
    async read(path) {
        return new Blob([/** @type {Uint8Array} */ (this.files.get(path))]);
    }
    /** @param {string} path */
    async readIdentity(path) {
        const bytes = this.files.get(path + '.identity.json');
        return parseIdentity(bytes ? new TextDecoder().decode(bytes) : null);
    }
    /** @param {string} path @param {any} identity */
    async writeIdentity(path, identity) {
        this.files.set(path + '.identity.json', new TextEncoder().encode(JSON.stringify(identity)));
    }
    /** @param {string} path */
    async discard(path) {
        this.files.delete(path + '.identity.json');
        this.files.delete(path);
        return 0;
    }
}

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
