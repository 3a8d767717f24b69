// @ts-check
/** @file store/download (with store/http_answers and store/partial_copy): Range resume, refusals, and what is kept, against an in-memory backend and fetch. @module tests/js/test_store_download */

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { afterEach, test } from 'node:test';

import { IntegrityError, ModelFileError } from '../../web_src/src/shared/errors.js';
import { downloadFile } from '../../web_src/src/store/download.js';
import { parseContentRange, unsatisfiedRangeTotal } from '../../web_src/src/store/http_answers.js';
import { MemoryBackend } from './memory_backend.mjs';

const FILE = Uint8Array.from({ length: 1000 }, (_, i) => i % 251);
/** The same size, one byte different: another version of FILE. */
const OTHER = FILE.map((b, i) => (i === 700 ? b ^ 1 : b));
/** @param {Uint8Array} bytes */
const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');
const realFetch = globalThis.fetch;
/** @type {{range: string | null, ifRange: string | null, status?: number}[]} */
let requests = [];

/**
 * Serve `file` like klein-web serve (Starlette): ETag and Last-Modified, Range honoured only when If-Range
 * (if sent) matches, or answer with `answer` when given.
 * @param {{answer?: (range: string | null, ifRange: string | null) => Response, file?: Uint8Array, etag?: string | null, lastModified?: string | null}} [options]
 */
function serve({ answer, file = FILE, etag = '"v1"', lastModified = 'Tue, 01 Dec 2026 10:00:00 GMT' } = {}) {
    requests = [];
    globalThis.fetch = async (_url, init) => {
        const headers = new Headers(init?.headers);
        const range = headers.get('range');
        const ifRange = headers.get('if-range');
        /** @type {{range: string | null, ifRange: string | null, status?: number}} */
        const request = { range, ifRange };
        requests.push(request);
        const response = answer ? answer(range, ifRange) : fileResponse(file, range, ifRange, etag, lastModified);
        request.status = response.status;
        return response;
    };
}

/**
 * @param {Uint8Array} file @param {string | null} range @param {string | null} ifRange
 * @param {string | null} etag @param {string | null} lastModified
 */
function fileResponse(file, range, ifRange, etag, lastModified) {
    /** @type {Record<string, string>} */
    const headers = { 'content-type': 'application/octet-stream' };
    if (etag) headers.etag = etag;
    if (lastModified) headers['last-modified'] = lastModified;
    const honoured = range && (ifRange === null || ifRange === etag || ifRange === lastModified);
    const start = honoured ? Number(/bytes=(\d+)-/.exec(range)?.[1]) : 0;
    if (honoured && start >= file.length) {
        return new Response(null, { status: 416, headers: { 'content-range': `bytes */${file.length}` } });
    }
    const body = file.slice(start);
    headers['content-length'] = String(body.length);
    if (!honoured) return new Response(body, { status: 200, headers });
    headers['content-range'] = `bytes ${start}-${file.length - 1}/${file.length}`;
    return new Response(body, { status: 206, headers });
}

/**
 * A partial copy of FILE's first `bytes` bytes, recorded as begun for `identity`.
 * @param {MemoryBackend} backend @param {string} path @param {number} bytes @param {any} identity
 * @param {Uint8Array} [from]
 */
async function partialCopy(backend, path, bytes, identity, from = FILE) {
    backend.files.set(path + '.partial', from.slice(0, bytes));
    if (identity) await backend.writeIdentity(path + '.partial', identity);
}

/** A body that delivers `bytes` and then fails like a cut connection. @param {Uint8Array} bytes */
function cutBody(bytes) {
    return new ReadableStream({
        start(controller) {
            controller.enqueue(bytes);
        },
        pull(controller) {
            controller.error(new TypeError('network error'));
        },
    });
}

const WANT = { size: FILE.length, sha256: sha256(FILE), etag: null, lastModified: null };
const V1 = { size: FILE.length, sha256: WANT.sha256, etag: '"v1"', lastModified: 'Tue, 01 Dec 2026 10:00:00 GMT' };

afterEach(() => {
    globalThis.fetch = realFetch;
});

/** @param {MemoryBackend} backend */
const asBackend = (backend) =>
    /** @type {import('../../web_src/src/store/backend.js').OpfsBackend} */ (/** @type {unknown} */ (backend));

test('parseContentRange reads start and total', () => {
    assert.deepEqual(parseContentRange('bytes 10-99/100'), { start: 10, total: 100 });
    assert.deepEqual(parseContentRange('bytes 10-99/*'), { start: 10, total: null });
    assert.equal(parseContentRange('items 1-2/3'), null);
    assert.equal(parseContentRange(null), null);
    assert.equal(unsatisfiedRangeTotal('bytes */100'), 100);
    assert.equal(unsatisfiedRangeTotal(null), null);
});

test('a partial copy of the same version resumes with Range + If-Range, and the digest covers the whole file', async () => {
    const backend = new MemoryBackend();
    await partialCopy(backend, 't/a.bin', 400, V1);
    serve();
    /** @type {number[]} */
    const loaded = [];
    const { size, identity } = await downloadFile(asBackend(backend), 'https://x/t/a.bin', 't/a.bin', {
        want: WANT,
        onProgress: (bytes) => loaded.push(bytes),
    });
    assert.equal(size, FILE.length);
    assert.deepEqual(requests, [{ range: 'bytes=400-', ifRange: '"v1"', status: 206 }]);
    assert.deepEqual(backend.files.get('t/a.bin'), FILE);
    assert.ok(!backend.files.has('t/a.bin.partial') && !backend.files.has('t/a.bin.partial.identity.json'));
    assert.equal(loaded.at(-1), FILE.length);
    // The stored bytes were hashed before the rest was appended: the recorded digest is the file's.
    assert.deepEqual(identity, V1);
    assert.deepEqual(await backend.readIdentity('t/a.bin'), V1);
});

test('a partial copy of another version restarts from byte 0: the server answers If-Range with the whole file', async () => {
    const backend = new MemoryBackend();
    await partialCopy(backend, 'a.bin', 400, { ...V1, etag: '"v0"' }, OTHER);
    serve();
    await downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin', { want: WANT });
    assert.deepEqual(requests, [{ range: 'bytes=400-', ifRange: '"v0"', status: 200 }]);
    assert.deepEqual(backend.files.get('a.bin'), FILE);
});

test('without a validator nothing is resumed: Last-Modified is used when there is no ETag, else byte 0', async () => {
    const backend = new MemoryBackend();
    await partialCopy(backend, 'a.bin', 400, { ...V1, etag: null });
    serve({ etag: null });
    await downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin', { want: WANT });
    assert.deepEqual(requests, [{ range: 'bytes=400-', ifRange: V1.lastModified, status: 206 }]);

    for (const identity of [null, { ...V1, etag: 'W/"v1"' }, { ...V1, etag: null, lastModified: null }]) {
        await partialCopy(backend, 'b.bin', 400, identity);
        serve({ etag: null, lastModified: null });
        await downloadFile(asBackend(backend), 'https://x/b.bin', 'b.bin', { want: WANT });
        assert.deepEqual(requests, [{ range: null, ifRange: null, status: 200 }], JSON.stringify(identity));
        assert.deepEqual(backend.files.get('b.bin'), FILE);
    }
});

test('a partial copy begun for another manifest hash is not resumed', async () => {
    const backend = new MemoryBackend();
    await partialCopy(backend, 'a.bin', 400, { ...V1, sha256: sha256(OTHER) }, OTHER);
    serve();
    await downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin', { want: WANT });
    assert.deepEqual(requests, [{ range: null, ifRange: null, status: 200 }]);
    assert.deepEqual(backend.files.get('a.bin'), FILE);
});

test('a cut stream from a server without validators starts over from byte 0', async () => {
    const backend = new MemoryBackend();
    let first = true;
    serve({
        answer: (range) => {
            const headers = { 'content-length': String(FILE.length) };
            if (first) {
                first = false;
                return new Response(cutBody(FILE.slice(0, 500)), { status: 200, headers });
            }
            assert.equal(range, null);
            return new Response(FILE, { status: 200, headers });
        },
    });
    await downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin', { want: WANT });
    assert.deepEqual(
        requests.map((r) => r.range),
        [null, null],
    );
    assert.deepEqual(backend.files.get('a.bin'), FILE);
});

test('a host that refuses a conditional request (a CORS preflight for If-Range) but is up gets a plain download', async () => {
    const backend = new MemoryBackend();
    await partialCopy(backend, 'a.bin', 400, V1);
    /** @type {string[]} */
    const seen = [];
    globalThis.fetch = async (_url, init) => {
        const headers = new Headers(init?.headers);
        seen.push(`${init?.method ?? 'GET'} ${headers.get('if-range') ?? '-'}`);
        if (headers.has('if-range')) throw new TypeError('Failed to fetch');
        if (init?.method === 'HEAD') return new Response(null, { status: 200 });
        return fileResponse(FILE, null, null, '"v1"', null);
    };
    const { restarted } = await downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin', { want: WANT });
    assert.deepEqual(seen, ['GET "v1"', 'HEAD -', 'GET -']);
    assert.deepEqual(backend.files.get('a.bin'), FILE);
    assert.equal(
        restarted,
        'https://x/a.bin could not be resumed (the request for the rest failed: the host refused its CORS preflight), ' +
            'so it is downloaded again from its start.',
    );
});

test('a host that answers the request for the rest with an error status gets a plain download, said in one line', async () => {
    for (const status of [400, 403, 405, 500]) {
        const backend = new MemoryBackend();
        await partialCopy(backend, 'a.bin', 400, V1);
        serve({
            answer: (range) =>
                range === null ? fileResponse(FILE, null, null, '"v1"', null) : new Response('no', { status }),
        });
        const { restarted } = await downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin', { want: WANT });
        assert.deepEqual(
            requests.map((r) => [r.range, r.status]),
            [
                ['bytes=400-', status],
                [null, 200],
            ],
        );
        assert.deepEqual(backend.files.get('a.bin'), FILE);
        assert.match(
            String(restarted),
            new RegExp(`answered HTTP ${status} to the request for the rest.*again from its start`),
        );
    }
});

test('a download that resumed, or never needed to, says nothing', async () => {
    const backend = new MemoryBackend();
    await partialCopy(backend, 'a.bin', 400, V1);
    serve();
    const resumed = await downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin', { want: WANT });
    assert.deepEqual(
        requests.map((r) => r.range),
        ['bytes=400-'],
    );
    assert.equal(resumed.restarted, null);
});

test('a resume that fails while the host does not answer at all keeps the partial copy for later', async () => {
    const backend = new MemoryBackend();
    await partialCopy(backend, 'a.bin', 400, V1);
    globalThis.fetch = async () => {
        throw new TypeError('Failed to fetch');
    };
    await assert.rejects(downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin', { want: WANT }), /failed/);
    assert.deepEqual(backend.files.get('a.bin.partial'), FILE.slice(0, 400));
});

test('bytes that differ from the manifest hash are deleted with an IntegrityError', async () => {
    const backend = new MemoryBackend();
    serve({ file: OTHER });
    await assert.rejects(downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin', { want: WANT }), (err) => {
        assert.ok(err instanceof IntegrityError, String(err));
        assert.match(err.message, /does not match the model's manifest/);
        return true;
    });
    assert.deepEqual([...backend.files.keys()], []);
});

test('a resume the server vouched for but whose bytes do not add up is downloaded again whole, once', async () => {
    // An ETag that survived a copy of other bytes (mtime + size kept): the stitched file fails its hash.
    const backend = new MemoryBackend();
    await partialCopy(backend, 'a.bin', 800, V1, OTHER);
    serve();
    await downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin', { want: WANT });
    assert.deepEqual(
        requests.map((r) => [r.range, r.status]),
        [
            ['bytes=800-', 206],
            [null, 200],
        ],
    );
    assert.deepEqual(backend.files.get('a.bin'), FILE);
});

test('without a manifest, a stream that ends without a stated length is not complete until the server says so', async () => {
    const backend = new MemoryBackend();
    let first = true;
    serve({
        answer: (range, ifRange) => {
            if (first) {
                first = false;
                // Chunked, no Content-Length, ends cleanly half way.
                return new Response(FILE.slice(0, 500), { status: 200, headers: { etag: '"v1"' } });
            }
            return fileResponse(FILE, range, ifRange, '"v1"', null);
        },
    });
    const { size } = await downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin');
    assert.equal(size, FILE.length);
    assert.deepEqual(
        requests.map((r) => [r.range, r.status]),
        [
            [null, 200],
            ['bytes=500-', 206],
        ],
    );
    assert.deepEqual(backend.files.get('a.bin'), FILE);
});

test('a 416 with no stated size does not make a partial copy complete', async () => {
    const backend = new MemoryBackend();
    await partialCopy(backend, 'a.bin', 500, { size: null, sha256: null, etag: '"v1"', lastModified: null });
    let first = true;
    serve({
        answer: (range, ifRange) => {
            if (first) {
                first = false;
                return new Response(null, { status: 416 });
            }
            return fileResponse(FILE, range, ifRange, '"v1"', null);
        },
    });
    const { size } = await downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin');
    assert.equal(size, FILE.length);
    assert.deepEqual(
        requests.map((r) => [r.range, r.status]),
        [
            ['bytes=500-', 416],
            [null, 200],
        ],
    );
    assert.deepEqual(backend.files.get('a.bin'), FILE);
});

test('a 416 at the stated size completes the copy after its hash is checked', async () => {
    const backend = new MemoryBackend();
    await partialCopy(backend, 'a.bin', FILE.length, V1);
    serve();
    const { identity } = await downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin', { want: WANT });
    assert.deepEqual(
        requests.map((r) => r.status),
        [416],
    );
    assert.equal(identity.sha256, WANT.sha256);
    await partialCopy(backend, 'b.bin', FILE.length, V1, OTHER);
    serve();
    await downloadFile(asBackend(backend), 'https://x/b.bin', 'b.bin', { want: WANT });
    assert.deepEqual(
        requests.map((r) => r.status),
        [416, 200],
    );
    assert.deepEqual(backend.files.get('b.bin'), FILE);
});

test('a server that states neither a length nor a validator is refused: nothing can tell a whole copy', async () => {
    const backend = new MemoryBackend();
    serve({ answer: () => new Response(FILE.slice(0, 500), { status: 200 }) });
    await assert.rejects(
        downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin'),
        /neither the file's length nor a validator/,
    );
    assert.deepEqual([...backend.files.keys()], []);
});

test('an HTML page or a missing file is refused and nothing is stored', async () => {
    const backend = new MemoryBackend();
    serve({
        answer: () => new Response('<html>login</html>', { status: 200, headers: { 'content-type': 'text/html' } }),
    });
    await assert.rejects(downloadFile(asBackend(backend), 'https://x/a.onnx', 'a.onnx'), ModelFileError);
    serve({ answer: () => new Response('no', { status: 404 }) });
    await assert.rejects(downloadFile(asBackend(backend), 'https://x/a.onnx', 'a.onnx'), /HTTP 404/);
    assert.deepEqual([...backend.files.keys()], []);
});

test('a file whose size differs from the manifest is refused before a byte is written', async () => {
    const backend = new MemoryBackend();
    serve();
    await assert.rejects(
        downloadFile(asBackend(backend), 'https://x/a.bin', 'a.bin', { want: { ...WANT, size: 999 } }),
        /has 1000 bytes but the model manifest says 999/,
    );
    assert.ok(!backend.files.has('a.bin'));
});
