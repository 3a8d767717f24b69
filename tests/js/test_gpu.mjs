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
        features: new Set([
            'shader-f16',
            'subgroups',
            'texture-compression-bc',
            'subgroup-size-control',
            'chromium-experimental-subgroup-matrix',
        ]),
        limits: {
            maxBufferSize: 4294967292,
            maxStorageBufferBindingSize: 2147483644,
            maxComputeWorkgroupStorageSize: 49152,
            maxComputeInvocationsPerWorkgroup: 1024,
            maxTextureDimension2D: 16384,
        },
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

/**
 * A fake adapter offering `features`; each requestDevice() makes a device with what was asked, records the
 * descriptors its shader modules were created with, and resolves `lost` when destroyed.
 * @param {string[]} features
 */
function fakeAdapter(features) {
    const made = /** @type {any[]} */ ([]);
    const adapter = {
        features: new Set(features),
        limits: { maxBufferSize: 2 ** 30, maxStorageBufferBindingSize: 2 ** 30 },
        info: { vendor: 'nvidia', architecture: 'hopper', description: 'H200', isFallbackAdapter: false },
        made,
        requestDevice: async (/** @type {any} */ descriptor) => {
            let markLost = (/** @type {any} */ _info) => {};
            const device = {
                features: new Set(descriptor.requiredFeatures),
                limits: adapter.limits,
                lost: new Promise((resolve) => {
                    markLost = resolve;
                }),
                destroyed: false,
                shaders: /** @type {any[]} */ ([]),
                destroy() {
                    this.destroyed = true;
                    markLost({ reason: 'destroyed', message: '' });
                },
                createShaderModule(/** @type {any} */ d) {
                    this.shaders.push(d);
                    return { d };
                },
            };
            made.push(device);
            return device;
        },
    };
    return adapter;
}

/** A FeatureMemory kept in a plain object. */
function memoryStub() {
    const saved = /** @type {Record<string, Record<string, string>>} */ ({});
    return {
        saved,
        recall: async (/** @type {string} */ key) => ({ ...(saved[key] ?? {}) }),
        remember: async (/** @type {string} */ key, /** @type {Record<string, string>} */ off) => {
            saved[key] = { ...(saved[key] ?? {}), ...off };
        },
    };
}

const MATRIX = 'chromium-experimental-subgroup-matrix';

test('a dropped feature: the next device is made without it, the grant says why, and success remembers it', async () => {
    const { Gpu } = await import('../../web_src/src/runtime/gpu.js');
    const adapter = fakeAdapter(['shader-f16', 'subgroups', MATRIX]);
    fakeGpu([adapter]);
    const memory = memoryStub();
    const gpu = new Gpu({ memory });
    const first = await gpu.getDevice();
    assert.ok(first.features.has(MATRIX));
    assert.deepEqual(gpu.grant?.off, []);
    assert.equal((await gpu.getInfo()).subgroupMatrix, true);

    gpu.dropFeature(MATRIX, 'Invalid ShaderModule "SubgroupMatrixMatMulNBits"');
    assert.equal(/** @type {any} */ (first).destroyed, true, 'the device of the failed feature is destroyed');
    const second = await gpu.getDevice();
    assert.notEqual(second, first);
    assert.ok(!second.features.has(MATRIX) && second.features.has('subgroups') && second.features.has('shader-f16'));
    assert.deepEqual(gpu.grant?.off, [
        { feature: MATRIX, reason: 'Invalid ShaderModule "SubgroupMatrixMatMulNBits"', remembered: false },
    ]);
    assert.equal(gpu.info?.subgroupMatrix, false);
    assert.deepEqual(memory.saved, {}, 'nothing is remembered before a request succeeds without it');

    await gpu.remember([MATRIX]);
    const [key] = Object.keys(memory.saved);
    assert.ok(key.includes('nvidia/hopper/H200'), key);
    assert.deepEqual(memory.saved[key], { [MATRIX]: 'Invalid ShaderModule "SubgroupMatrixMatMulNBits"' });

    // The next visit (a new worker) creates its first device without the feature, and says it was remembered.
    const next = new Gpu({ memory });
    const device = await next.getDevice();
    assert.ok(!device.features.has(MATRIX));
    assert.deepEqual(
        next.grant?.off.map((o) => [o.feature, o.remembered]),
        [[MATRIX, true]],
    );
});

test('a request that fails without the feature as well restores it', async () => {
    const { Gpu } = await import('../../web_src/src/runtime/gpu.js');
    fakeGpu([fakeAdapter(['shader-f16', 'subgroups'])]);
    const gpu = new Gpu({ memory: memoryStub() });
    await gpu.getDevice();
    gpu.dropFeature('subgroups', 'x');
    assert.ok(!(await gpu.getDevice()).features.has('subgroups'));
    gpu.restore(['subgroups']);
    assert.ok((await gpu.getDevice()).features.has('subgroups'));
    assert.deepEqual(gpu.grant?.off, []);
});

test('gpu-fault breaks exactly the shaders that enable the feature', async () => {
    const { Gpu } = await import('../../web_src/src/runtime/gpu.js');
    fakeGpu([fakeAdapter(['shader-f16', 'subgroups', MATRIX])]);
    const device = /** @type {any} */ (await new Gpu({ fault: 'subgroups' }).getDevice());
    const plain = 'enable f16;\n@compute @workgroup_size(64) fn main() {}';
    const subgroup = 'enable f16;\nenable subgroups;\n@compute @workgroup_size(64) fn main() {}';
    const matrix = 'enable chromium_experimental_subgroup_matrix;\n@compute @workgroup_size(64) fn main() {}';
    for (const code of [plain, subgroup, matrix]) device.createShaderModule({ label: 'k', code });
    const seen = device.shaders.map((/** @type {any} */ d) => d.code);
    assert.equal(seen[0], plain);
    assert.ok(
        seen[1].startsWith(subgroup) && seen[1].includes('gpu_fault_injected()'),
        'the subgroup shader gets a call to nothing',
    );
    assert.equal(seen[2], matrix);
});
