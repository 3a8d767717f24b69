// @ts-check
/**
 * @file store/block_check (a download checked against the manifest's block hashes with WebCrypto), alone and inside
 * store/download: what it accepts, which block it names when it refuses, that a refused download stops early and
 * stores nothing, and that resumes are checked from byte 0.
 * @module tests/js/test_store_block_check
 */

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { afterEach, test } from 'node:test';

import { IntegrityError } from '../../web_src/src/shared/errors.js';
import { BlockCheck } from '../../web_src/src/store/block_check.js';
import { downloadFile } from '../../web_src/src/store/download.js';
import { MemoryBackend } from './memory_backend.mjs';

const BLOCK = 256;
/** Ten blocks and a short one. */
const FILE = Uint8Array.from({ length: 10 * BLOCK + 77 }, (_, i) => (i * 31 + (i >> 9)) % 256);
/** @param {Uint8Array} bytes */
const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');
/**
 * @param {Uint8Array} file
 * @param {number} [size]
 */
const blocksOf = (file, size = BLOCK) => ({
    size,
    sha256: Array.from({ length: Math.ceil(file.length / size) }, (_, i) =>
        sha256(file.slice(i * size, (i + 1) * size)),
    ),
});
const BLOCKS = blocksOf(FILE);
const URL = 'https://x/t/a.onnx_data';
/** FILE with one byte changed in its third block (bytes 512-767). */
const CORRUPT = FILE.map((b, i) => (i === 600 ? b ^ 0x40 : b));
const WANT = {
    size: FILE.length,
    sha256: sha256(FILE),
    etag: null,
    lastModified: null,
};
const V1 = { ...WANT, etag: '"v1"' };

const realFetch = globalThis.fetch;
afterEach(() => {
    globalThis.fetch = realFetch;
});

/** @param {MemoryBackend} backend */
const asBackend = (backend) =>
    /** @type {import('../../web_src/src/store/backend.js').OpfsBackend} */ (/** @type {unknown} */ (backend));

/**
 * Feed `bytes` to a fresh BlockCheck in chunks of `chunk` bytes.
 * @param {Uint8Array} bytes
 * @param {number} chunk
 */
async function check(bytes, chunk) {
    const checker = new BlockCheck({
        blocks: BLOCKS,
        sha256: WANT.sha256,
        url: URL,
    });
    for (let at = 0; at < bytes.length; at += chunk) await checker.update(bytes.slice(at, at + chunk));
    return checker.hex();
}

/**
 * Serve `file` with an ETag, honouring Range + If-Range, in chunks of 32 bytes one timer tick apart, counting the
 * bytes the client pulled.
 * @param {Uint8Array} file
 */
function serve(file) {
    const served = { requests: /** @type {(string | null)[]} */ ([]), pulled: 0 };
    globalThis.fetch = async (_url, init) => {
        const range = new Headers(init?.headers).get('range');
        served.requests.push(range);
        const start = range ? Number(/bytes=(\d+)-/.exec(range)?.[1]) : 0;
        let at = start;
        const body = new ReadableStream({
            async pull(controller) {
                await new Promise((resolve) => setTimeout(resolve, 1));
                if (at >= file.length) return controller.close();
                const chunk = file.slice(at, at + 32);
                at += chunk.length;
                served.pulled += chunk.length;
                controller.enqueue(chunk);
            },
        });
        /** @type {Record<string, string>} */
        const headers = {
            etag: '"v1"',
            'content-length': String(file.length - start),
        };
        if (!range) return new Response(body, { status: 200, headers });
        headers['content-range'] = `bytes ${start}-${file.length - 1}/${file.length}`;
        return new Response(body, { status: 206, headers });
    };
    return served;
}

test('every block matching gives the manifest sha256, however the bytes are cut into chunks', async () => {
    for (const chunk of [1, 100, BLOCK, BLOCK + 1, 3 * BLOCK - 5, FILE.length]) {
        assert.equal(await check(FILE, chunk), WANT.sha256, `chunks of ${chunk}`);
    }
    const empty = new BlockCheck({
        blocks: { size: BLOCK, sha256: [] },
        sha256: sha256(new Uint8Array(0)),
        url: URL,
    });
    assert.equal(await empty.hex(), sha256(new Uint8Array(0)));
});

test('a block that differs is named with its bytes and both digests', async () => {
    await assert.rejects(check(CORRUPT, 100), (err) => {
        assert.ok(err instanceof IntegrityError, String(err));
        assert.match(err.message, /bytes 512-767 \(block 3 of 11\)/);
        assert.ok(err.message.includes(BLOCKS.sha256[2]) && err.message.includes(sha256(CORRUPT.slice(512, 768))));
        assert.equal(err.detail.block, 2);
        return true;
    });
});

test('a file shorter or longer than its blocks is refused', async () => {
    await assert.rejects(check(FILE.slice(0, 10 * BLOCK), 100), /it has 10 blocks of 256 bytes, the manifest lists 11/);
    const longer = new Uint8Array(FILE.length + BLOCK);
    longer.set(FILE);
    await assert.rejects(check(longer, 100), IntegrityError);
});

test('a download checked by its blocks is stored with the manifest sha256', async () => {
    const backend = new MemoryBackend();
    const served = serve(FILE);
    const hashed = [];
    const { identity } = await downloadFile(asBackend(backend), URL, 't/a.onnx_data', {
        want: WANT,
        blocks: BLOCKS,
        // The blocks replace the running SHA-256: it must not be asked for.
        openHasher: async () => {
            hashed.push(true);
            throw new Error('the whole-file hash was used');
        },
    });
    assert.deepEqual(backend.files.get('t/a.onnx_data'), FILE);
    assert.equal(identity.sha256, WANT.sha256);
    assert.deepEqual(served.requests, [null]);
    assert.deepEqual(hashed, []);
});

test('a corrupt block stops the download early and nothing is stored', async () => {
    // Big enough that the stream would run on for a while after the bad block.
    const big = Uint8Array.from({ length: 64 * BLOCK }, (_, i) => (i * 7) % 253);
    const corrupt = big.map((b, i) => (i === BLOCK + 3 ? b ^ 1 : b));
    const backend = new MemoryBackend();
    const served = serve(corrupt);
    const want = {
        size: big.length,
        sha256: sha256(big),
        etag: null,
        lastModified: null,
    };
    await assert.rejects(
        downloadFile(asBackend(backend), URL, 'a.bin', {
            want,
            blocks: blocksOf(big),
        }),
        /bytes 256-511 \(block 2 of 64\)/,
    );
    assert.deepEqual([...backend.files.keys()], []);
    assert.ok(served.pulled < big.length / 2, `${served.pulled} of ${big.length} bytes pulled`);
});

test("a resumed download checks the stored bytes from byte 0, and starts over once when they are not the manifest's", async () => {
    // Stored bytes of the same version: the rest is fetched with Range and the whole file passes.
    let backend = new MemoryBackend();
    backend.files.set('a.bin.partial', FILE.slice(0, 3 * BLOCK + 10));
    await backend.writeIdentity('a.bin.partial', V1);
    let served = serve(FILE);
    await downloadFile(asBackend(backend), URL, 'a.bin', {
        want: WANT,
        blocks: BLOCKS,
    });
    assert.deepEqual(served.requests, [`bytes=${3 * BLOCK + 10}-`]);
    assert.deepEqual(backend.files.get('a.bin'), FILE);

    // Stored bytes the server vouched for but that are not the manifest's: refused before the rest is read, then
    // one whole fresh download.
    backend = new MemoryBackend();
    backend.files.set('a.bin.partial', CORRUPT.slice(0, 3 * BLOCK + 10));
    await backend.writeIdentity('a.bin.partial', V1);
    served = serve(FILE);
    await downloadFile(asBackend(backend), URL, 'a.bin', {
        want: WANT,
        blocks: BLOCKS,
    });
    assert.deepEqual(served.requests, [`bytes=${3 * BLOCK + 10}-`, null]);
    assert.deepEqual(backend.files.get('a.bin'), FILE);
});
