// @ts-check
/**
 * @file runtime/wasm_parts and shared/runtime_parts: onnxruntime's `.wasm` from the service worker's joined copy when
 * it serves one, else joined from the build's parts here; refused with a sentence when a part is missing or the parts
 * are not the build's.
 * @module tests/js/test_wasm_parts
 */

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';

import { runtimeBinary, runtimeFiles, runtimeSource } from '../../web_src/src/runtime/wasm_parts.js';
import { JOINED_HEADER } from '../../web_src/src/shared/runtime_parts.js';
import { ErrorCode, KleinError } from '../../web_src/src/shared/errors.js';

const WHOLE = Uint8Array.from({ length: 1000 }, (_, i) => (i * 37 + 11) % 256);
const SITE = 'https://example.org/app/assets/';

/**
 * The runtime as the build would describe it, and a fetch that serves `served` (url -> bytes, or a status).
 * @param {(Uint8Array | number)[]} served  What each part's URL answers.
 * @param {Response} [whole]  What the joined copy's URL answers (default: 404, as a host does).
 */
function site(served, whole = new Response('not found', { status: 404 })) {
    const names = {
        mjs: 'ort.mjs',
        whole: 'ort-whole.wasm',
        parts: served.map((_, i) => `p${i}.wasm`),
        bytes: WHOLE.length,
        sha256: sha(WHOLE),
    };
    const files = runtimeFiles(names, SITE + 'worker.js');
    /** @type {string[]} */
    const asked = [];
    const fetchImpl = /** @type {typeof fetch} */ (
        async (/** @type {any} */ url) => {
            asked.push(String(url));
            if (String(url) === files.whole) return whole;
            const answer = served[files.parts.indexOf(String(url))];
            return typeof answer === 'number' ? new Response('gone', { status: answer }) : new Response(answer);
        }
    );
    return { files, fetchImpl, asked };
}

/** @param {Uint8Array} bytes */
function sha(bytes) {
    return createHash('sha256').update(bytes).digest('hex');
}

test('the parts, fetched together, join into the whole runtime', async () => {
    const { files, fetchImpl, asked } = site([WHOLE.slice(0, 400), WHOLE.slice(400, 800), WHOLE.slice(800)]);
    assert.equal(files.mjs, SITE + 'ort.mjs');
    const joined = await runtimeBinary(files, fetchImpl);
    assert.deepEqual(joined, WHOLE);
    assert.deepEqual(asked, [SITE + 'p0.wasm', SITE + 'p1.wasm', SITE + 'p2.wasm']);
});

test('a missing part is a network error that says to deploy the whole site', async () => {
    const { files, fetchImpl } = site([WHOLE.slice(0, 500), 404]);
    await assert.rejects(runtimeBinary(files, fetchImpl), (/** @type {KleinError} */ err) => {
        assert.ok(err instanceof KleinError);
        assert.equal(err.code, ErrorCode.NETWORK);
        assert.match(err.message, /p1\.wasm answered HTTP 404.*whole dist\//);
        return true;
    });
});

test('parts of another build, or in the wrong order, are refused before onnxruntime sees them', async () => {
    const other = WHOLE.slice();
    other[700] ^= 1;
    for (const served of [
        [WHOLE.slice(0, 500), other.slice(500)], // one part of another build, same length
        [WHOLE.slice(500), WHOLE.slice(0, 500)], // swapped
        [WHOLE.slice(0, 500), WHOLE.slice(500, 999)], // cut short
    ]) {
        const { files, fetchImpl } = site(served);
        await assert.rejects(runtimeBinary(files, fetchImpl), (/** @type {KleinError} */ err) => {
            assert.equal(err.code, ErrorCode.VERSION_MISMATCH);
            assert.match(err.message, /not this build's.*reload/);
            return true;
        });
    }
});

test("the service worker's joined copy is fetched by onnxruntime itself, the parts left alone", async () => {
    const joined = new Response(WHOLE, {
        headers: { [JOINED_HEADER]: sha(WHOLE), 'Content-Type': 'application/wasm' },
    });
    const { files, fetchImpl, asked } = site([WHOLE.slice(0, 500), WHOLE.slice(500)], joined);
    assert.deepEqual(await runtimeSource(files, fetchImpl), { wasm: SITE + 'ort-whole.wasm' });
    assert.deepEqual(asked, [SITE + 'ort-whole.wasm']);
});

test("without the service worker (a 404, a host's index page, another build's copy) the parts are joined here", async () => {
    for (const whole of [
        new Response('not found', { status: 404 }),
        new Response('<!doctype html>', { headers: { 'Content-Type': 'text/html' } }),
        new Response(WHOLE, { headers: { [JOINED_HEADER]: '0'.repeat(64) } }),
    ]) {
        const { files, fetchImpl, asked } = site([WHOLE.slice(0, 500), WHOLE.slice(500)], whole);
        const source = await runtimeSource(files, fetchImpl);
        assert.ok('binary' in source);
        assert.deepEqual(source.binary, WHOLE);
        assert.deepEqual(asked, [SITE + 'ort-whole.wasm', SITE + 'p0.wasm', SITE + 'p1.wasm']);
    }
});
