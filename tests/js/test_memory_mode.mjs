// @ts-check
/** @file models/memory_mode: the user's mode wins, else the machine's facts choose. @module tests/js/test_memory_mode */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { chooseMemoryMode } from '../../web_src/src/models/memory_mode.js';

const GIB = 2 ** 30;

test('an asked mode wins over every fact', () => {
    assert.equal(chooseMemoryMode({ requested: 'fast', deviceMemory: 2, maxBufferSize: GIB }).mode, 'fast');
    assert.equal(chooseMemoryMode({ requested: 'lean', deviceMemory: 8, maxBufferSize: 4 * GIB }).mode, 'lean');
});

test('a small machine or a small GPU gets lean mode, saying why; a large one fast', () => {
    // A 16 GB desktop with a discrete GPU (Chrome reports deviceMemory 8 at most).
    assert.deepEqual(chooseMemoryMode({ deviceMemory: 8, maxBufferSize: 4 * GIB }).mode, 'fast');
    // A phone or a 4 GB laptop.
    const phone = chooseMemoryMode({ deviceMemory: 4, maxBufferSize: 4 * GIB });
    assert.equal(phone.mode, 'lean');
    assert.match(phone.why, /4 GB/);
    // Safari on a Mac (no deviceMemory; buffers up to 2 GiB - 4), Chrome on Android (1 GiB).
    assert.equal(chooseMemoryMode({ maxBufferSize: 2 * GIB - 4 }).mode, 'lean');
    assert.equal(chooseMemoryMode({ maxBufferSize: GIB }).mode, 'lean');
    // SwiftShader's 1 GiB limit says nothing about memory.
    assert.equal(chooseMemoryMode({ deviceMemory: 8, maxBufferSize: GIB, software: true }).mode, 'fast');
    // Nothing known: fast.
    assert.equal(chooseMemoryMode({}).mode, 'fast');
});
