// @ts-check
/** @file shared/png_text against PNGs written and read by Pillow (golden png.json). @module tests/js/test_png_text */

import assert from 'node:assert/strict';
import fs from 'node:fs';
import { test } from 'node:test';
import zlib from 'node:zlib';

import { InputError } from '../../web_src/src/shared/errors.js';
import { addTextChunks, readTextChunks } from '../../web_src/src/shared/png_text.js';
import { bytes, loadGolden } from './golden.mjs';

const golden = loadGolden('png.json');

/**
 * The chunk list of a PNG, each CRC checked with node's zlib (independent of the module under test).
 * @param {Uint8Array} png
 */
function chunks(png) {
    const view = new DataView(png.buffer, png.byteOffset, png.byteLength);
    const out = [];
    for (let offset = 8; offset < png.length;) {
        const length = view.getUint32(offset);
        const type = Buffer.from(png.subarray(offset + 4, offset + 8)).toString('latin1');
        const crc = view.getUint32(offset + 8 + length);
        assert.equal(zlib.crc32(png.subarray(offset + 4, offset + 8 + length)), crc, `CRC of ${type}`);
        out.push({ type, data: png.subarray(offset + 8, offset + 8 + length) });
        offset += 12 + length;
    }
    return out;
}

test('readTextChunks reads the tEXt and iTXt chunks Pillow wrote', () => {
    assert.deepEqual(readTextChunks(bytes(golden.pillow_tagged)), golden.pillow_text);
});

test('addTextChunks inserts valid tEXt (Latin-1) and iTXt (UTF-8) chunks before IDAT and reads back', () => {
    const plain = bytes(golden.plain);
    const entries = {
        prompt: 'a 🦊 fox in the snow, 雪の中の狐, ثعلب',
        seed: '4294967295',
        Comment: 'café, 100°, naïve\nsecond line',
        'model-source': 'https://example.org/models/klein/',
        empty: '',
    };
    const tagged = addTextChunks(plain, entries);
    assert.deepEqual(readTextChunks(tagged), entries);

    const types = chunks(tagged).map((c) => c.type);
    assert.equal(types[0], 'IHDR');
    assert.equal(types.at(-1), 'IEND');
    const firstIdat = types.indexOf('IDAT');
    const textTypes = types.slice(0, firstIdat).filter((t) => t === 'tEXt' || t === 'iTXt');
    assert.deepEqual(textTypes, ['iTXt', 'tEXt', 'tEXt', 'tEXt', 'tEXt'], 'one chunk per entry, all before IDAT');
    // The image chunks are untouched.
    const imageChunks = (/** @type {Uint8Array} */ png) =>
        chunks(png)
            .filter((c) => c.type !== 'tEXt' && c.type !== 'iTXt')
            .map((c) => [c.type, Buffer.from(c.data).toString('hex')]);
    assert.deepEqual(imageChunks(tagged), imageChunks(plain));
    assert.deepEqual(readTextChunks(plain), {});

    if (process.env.KLEIN_JS_OUT) {
        // tests/test_js_units.py opens this file with Pillow.
        fs.writeFileSync(`${process.env.KLEIN_JS_OUT}/tagged.png`, tagged);
        fs.writeFileSync(`${process.env.KLEIN_JS_OUT}/tagged.json`, JSON.stringify(entries));
    }
});

test('Latin-1 text round-trips byte for byte through tEXt (0x80-0xFF are not windows-1252)', () => {
    const value = Array.from({ length: 0x100 - 0x20 }, (_, i) => String.fromCharCode(0x20 + i)).join('');
    const tagged = addTextChunks(bytes(golden.plain), { latin1: value });
    assert.deepEqual(readTextChunks(tagged), { latin1: value });
    assert.ok(chunks(tagged).some((c) => c.type === 'tEXt'));
});

test('addTextChunks and readTextChunks reject bad input with InputError', () => {
    const plain = bytes(golden.plain);
    for (const key of ['', ' lead', 'trail ', 'dou  ble', 'x'.repeat(80), 'emoji🦊', 'nul\0']) {
        assert.throws(
            () => addTextChunks(plain, { [key]: 'v' }),
            (err) => {
                assert.ok(err instanceof InputError);
                assert.match(err.message, /PNG text keyword .* is invalid/);
                return true;
            },
        );
    }
    assert.throws(() => addTextChunks(plain, { k: 'a\0b' }), /without NUL/);
    assert.throws(() => readTextChunks(new Uint8Array([1, 2, 3])), /not a PNG file/);
    assert.throws(() => readTextChunks(plain.subarray(0, plain.length - 5)), /truncated/);
    const corrupt = addTextChunks(plain, { seed: '42' });
    corrupt[corrupt.indexOf(0x34 /* '4' */, 40)] ^= 1;
    assert.throws(() => readTextChunks(corrupt), /fails its CRC/);
});
