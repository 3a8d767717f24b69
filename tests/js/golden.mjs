// @ts-check
/**
 * @file Loads the golden JSON files written by tests/golden/make_golden.py into the directory named by the
 * KLEIN_GOLDEN environment variable, and decodes their base64 little-endian arrays.
 * @module tests/js/golden
 */

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

/**
 * @param {string} name e.g. 'randn.json'
 * @returns {any}
 */
export function loadGolden(name) {
    const dir = process.env.KLEIN_GOLDEN;
    if (!dir) {
        throw new Error(
            'KLEIN_GOLDEN is not set: run `python tests/golden/make_golden.py DIR` and set KLEIN_GOLDEN=DIR ' +
                '(pytest tests/test_js_units.py does both).',
        );
    }
    return JSON.parse(fs.readFileSync(path.join(dir, name), 'utf-8'));
}

/** @param {string} text @returns {Uint8Array} */
export function bytes(text) {
    const buf = Buffer.from(text, 'base64');
    return new Uint8Array(buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength));
}

/** @param {string} text @returns {Float32Array} */
export function float32s(text) {
    return new Float32Array(bytes(text).buffer);
}

/** @param {string} text @returns {Float64Array} */
export function float64s(text) {
    return new Float64Array(bytes(text).buffer);
}

/**
 * Bitwise equality of two float32 arrays (so -0 != +0 and NaN payloads count), with the first difference
 * in the message.
 * @param {Float32Array} actual
 * @param {Float32Array} expected
 * @param {string} what
 */
export function assertSameFloat32(actual, expected, what) {
    assert.equal(actual.length, expected.length, `${what}: length`);
    const a = new Uint32Array(actual.buffer, actual.byteOffset, actual.length);
    const e = new Uint32Array(expected.buffer, expected.byteOffset, expected.length);
    let differing = 0;
    let first = -1;
    for (let i = 0; i < a.length; i++) {
        if (a[i] !== e[i]) {
            differing++;
            if (first < 0) first = i;
        }
    }
    if (differing > 0) {
        assert.fail(
            `${what}: ${differing} of ${a.length} values differ; first at index ${first}: ` +
                `got ${actual[first]} expected ${expected[first]}`,
        );
    }
}
