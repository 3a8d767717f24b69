// @ts-check
/** @file models/memory_mode: the user's mode wins, else the machine's facts choose. @module tests/js/test_memory_mode */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { MemoryBudget, chooseMemoryMode } from '../../web_src/src/models/memory_mode.js';

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

test("a worker's budget: half the memory in fast mode, nothing beside the session in use in lean mode", () => {
    const budget = new MemoryBudget(8);
    assert.equal(budget.choose(undefined, { maxBufferSize: 4 * GIB }).mode, 'fast');
    assert.equal(budget.bytes, 4 * GIB);
    budget.choose('lean', { maxBufferSize: 4 * GIB });
    assert.equal(budget.bytes, 0);
    assert.equal(budget.current.why, 'lean mode, as asked');
});

test('after a fast run ran out of memory, requests that ask for no mode run lean; one that asks for fast runs fast', () => {
    const budget = new MemoryBudget(8);
    budget.leanAfterFailure = 'fast mode ran out of memory (Denoising step 1)';
    const chosen = budget.choose(undefined, { maxBufferSize: 4 * GIB });
    assert.equal(chosen.mode, 'lean');
    assert.match(chosen.why, /ran out of memory/);
    assert.equal(budget.choose('fast', { maxBufferSize: 4 * GIB }).mode, 'fast');
});
