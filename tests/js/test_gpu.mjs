// @ts-check
/** @file Node tests of runtime/gpu.js's adapter request: a GPU process still starting answers null once. @module tests/js/test_gpu */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { requestAdapter } from '../../web_src/src/runtime/gpu.js';
import { NoWebGPUError } from '../../web_src/src/shared/errors.js';

/**
 * Install a navigator.gpu whose requestAdapter() answers from `answers` in turn.
 * @param {Array<object | null>} answers
 * @returns {{calls: number}}
 */
function fakeGpu(answers) {
    const state = { calls: 0 };
    const gpu = { requestAdapter: async () => answers[Math.min(state.calls++, answers.length - 1)] };
    Object.defineProperty(globalThis, 'navigator', { value: { gpu }, configurable: true, writable: true });
    return state;
}

test('a first null answer is retried: the adapter of the second request is used', async () => {
    const adapter = { features: new Set(['shader-f16']) };
    const state = fakeGpu([null, adapter]);
    assert.equal(await requestAdapter(), adapter);
    assert.equal(state.calls, 2);
});

test('an adapter that never comes is reported as missing, after a bounded number of tries', async () => {
    const state = fakeGpu([null]);
    await assert.rejects(requestAdapter(), (err) => err instanceof NoWebGPUError && /no GPU adapter/.test(err.message));
    assert.ok(state.calls >= 2 && state.calls <= 5, `tried ${state.calls} times`);
});
