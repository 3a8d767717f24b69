// @ts-check
/** @file shared/bytes: concat and hex, against node's own. @module tests/js/test_bytes */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';

import { concat, hex } from '../../web_src/src/shared/bytes.js';

test('concat puts the parts one after another, empty ones included', () => {
    const parts = [Uint8Array.of(1, 2), new Uint8Array(0), Uint8Array.of(3), new Uint8Array([4, 5, 6]).subarray(1)];
    assert.deepEqual(concat(parts), Uint8Array.of(1, 2, 3, 5, 6));
    assert.deepEqual(concat([]), new Uint8Array(0));
    assert.ok(concat(parts).buffer instanceof ArrayBuffer);
});

test('hex writes two lowercase digits a byte, as node writes a digest', () => {
    const bytes = Uint8Array.from({ length: 256 }, (_, i) => i);
    const expected = Buffer.from(bytes).toString('hex');
    assert.equal(hex(bytes), expected);
    assert.equal(hex(bytes.buffer), expected);
    assert.equal(hex(bytes.subarray(250, 252)), 'fafb');
    const digest = createHash('sha256').update('klein').digest();
    assert.equal(hex(new Uint8Array(digest)), digest.toString('hex'));
});
