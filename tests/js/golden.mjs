// @ts-check
/**
 * @file Loads the committed golden JSON files in tests/golden (written by tests/golden/make_golden.py from torch,
 * diffusers, transformers, numpy and Pillow; tests/test_golden.py holds them equal to what those libraries make) and
 * decodes their base64 little-endian arrays.
 * @module tests/js/golden
 */

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository's root: the goldens name files (the tokenizer's) relative to it. */
export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const GOLDEN_DIR = path.join(REPO_ROOT, 'tests', 'golden');

/**
 * @param {string} name e.g. 'randn.json'
 * @returns {any}
 */
export function loadGolden(name) {
    return JSON.parse(fs.readFileSync(path.join(GOLDEN_DIR, name), 'utf-8'));
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
