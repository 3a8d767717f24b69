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

test('the device asks for every wanted feature the adapter has and every wanted limit at its maximum', async () => {
    const { deviceDescriptor } = await import('../../web_src/src/runtime/gpu.js');
    const adapter = {
        features: new Set(['shader-f16', 'subgroups', 'texture-compression-bc', 'subgroup-size-control',
            'chromium-experimental-subgroup-matrix']),
        limits: { maxBufferSize: 4294967292, maxStorageBufferBindingSize: 2147483644, maxComputeWorkgroupStorageSize: 49152,
            maxComputeInvocationsPerWorkgroup: 1024, maxTextureDimension2D: 16384 },
    };
    const { requiredFeatures, requiredLimits } = deviceDescriptor(adapter);
    // Only features onnxruntime uses (subgroup-matrix: its matrix-unit kernels), and only those the adapter has
    // (asking for another would fail).
    assert.deepEqual(requiredFeatures, ['shader-f16', 'subgroups', 'chromium-experimental-subgroup-matrix']);
    assert.equal(requiredLimits.maxComputeWorkgroupStorageSize, 49152);
    assert.equal(requiredLimits.maxComputeInvocationsPerWorkgroup, 1024);
    assert.equal(requiredLimits.maxBufferSize, 4294967292);
    // Limits onnxruntime does not use are left at their defaults; limits the adapter lacks are not asked for.
    assert.ok(!('maxTextureDimension2D' in requiredLimits));
    assert.ok(!('maxComputeWorkgroupSizeX' in requiredLimits));
});
