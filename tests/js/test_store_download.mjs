// @ts-check
/** @file store/download: Range resume, refusals, and what is kept, against an in-memory backend and fetch. @module tests/js/test_store_download */

import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';

import { ModelFileError } from '../../web_src/src/shared/errors.js';
import { downloadFile, parseContentRange } from '../../web_src/src/store/download.js';

/** The backend methods store/download.js uses, over a Map of byte arrays. */
class MemoryBackend {
    constructor() {
        /** @type {Map<string, Uint8Array>} */
        this.files = new Map();
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
    async commit(path) {
        this.files.set(path, /** @type {Uint8Array} */ (this.files.get(path + '.partial')));
        this.files.delete(path + '.partial');
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

const FILE = Uint8Array.from({ length: 1000 }, (_, i) => i % 251);
const realFetch = globalThis.fetch;
/** @type {{range: string | null}[]} */
let requests = [];

/** Serve FILE with Range support, or `answer` when given. @param {(range: string | null) => Response} [answer] */
function serve(answer) {
    requests = [];
    globalThis.fetch = async (_url, init) => {
        const range = new Headers(init?.headers).get('range');
        requests.push({ range });
        if (answer) return answer(range);
        const start = range ? Number(/bytes=(\d+)-/.exec(range)?.[1]) : 0;
        const body = FILE.slice(start);
        const headers = { 'content-length': String(body.length), 'content-type': 'application/octet-stream' };
        if (!range) return new Response(body, { status: 200, headers });
        const contentRange = `bytes ${start}-${FILE.length - 1}/${FILE.length}`;
        return new Response(body, { status: 206, headers: { ...headers, 'content-range': contentRange } });
    };
}

afterEach(() => {
    globalThis.fetch = realFetch;
});

/** @param {MemoryBackend} backend */
const asBackend = (backend) => /** @type {import('../../web_src/src/store/backend.js').OpfsBackend} */ (
    /** @type {unknown} */ (backend)
);

test('parseContentRange reads start and total', () => {
    assert.deepEqual(parseContentRange('bytes 10-99/100'), { start: 10, total: 100 });
    assert.deepEqual(parseContentRange('bytes 10-99/*'), { start: 10, total: null });
    assert.equal(parseContentRange('items 1-2/3'), null);
    assert.equal(parseContentRange(null), null);
});

test('a partial copy resumes with a Range request and becomes the complete file', async () => {
    const backend = new MemoryBackend();
    backend.files.set('t/a.bin.partial', FILE.slice(0, 400));
    serve();
    /** @type {number[]} */
    const loaded = [];
    const size = await downloadFile(asBackend(backend), 'https://x/t/a.bin', 't/a.bin', {
        expectedSize: FILE.length,
        onProgress: (bytes) => loaded.push(bytes),
    });
    assert.equal(size, FILE.length);
    assert.deepEqual(requests, [{ range: 'bytes=400-' }]);
    assert.deepEqual(backend.files.get('t/a.bin'), FILE);
    assert.ok(!backend.files.has('t/a.bin.partial'));
    assert.equal(loaded.at(-1), FILE.length);
});

test('an HTML page or a missing file is refused and nothing is stored', async () => {
    const backend = new MemoryBackend();
    serve(() => new Response('<html>login</html>', { status: 200, headers: { 'content-type': 'text/html' } }));
    await assert.rejects(downloadFile(asBackend(backend), 'https://x/a.onnx', 'a.onnx'), ModelFileError);
    serve(() => new Response('no', { status: 404 }));
    await assert.rejects(downloadFile(asBackend(backend), 'https://x/a.onnx', 'a.onnx'), /HTTP 404/);
    assert.deepEqual([...backend.files.keys()], []);
});

test('a file whose size differs from the manifest is refused before a byte is written', async () => {
    const backend = new MemoryBackend();
    serve();
    await assert.rejects(
        downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin', { expectedSize: 999 }),
        /has 1000 bytes but the model manifest says 999/,
    );
    assert.ok(!backend.files.has('a.bin'));
});
