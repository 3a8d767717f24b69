// @ts-check
/** @file runtime/errors: onnxruntime's failure messages become errors with the right code. @module tests/js/test_runtime_errors */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { runtimeError } from '../../web_src/src/runtime/errors.js';
import { DeviceLostError, ErrorCode, InputError } from '../../web_src/src/shared/errors.js';

/** A stand-in for runtime/gpu.js's Gpu: only `lost` and `lostError()` are read. */
const alive = /** @type {import('../../web_src/src/runtime/gpu.js').Gpu} */ (
    /** @type {unknown} */ ({ lost: false, lostError: () => new DeviceLostError('lost') })
);

test('each onnxruntime message kind maps to its code, naming what failed', () => {
    const cases = [
        ['GPUDevice was destroyed', ErrorCode.DEVICE_LOST],
        ['the device is lost', ErrorCode.DEVICE_LOST],
        ['Failed to allocate a buffer of size 4294967296', ErrorCode.OUT_OF_MEMORY],
        ['RangeError: Array buffer allocation failed', ErrorCode.OUT_OF_MEMORY],
        ['buffer size exceeds the max binding size', ErrorCode.OUT_OF_MEMORY],
        ['Cast node requires f16 support', ErrorCode.UNSUPPORTED],
        ['Non-zero status code returned while running MatMul node', ErrorCode.RUNTIME],
    ];
    for (const [message, code] of cases) {
        const err = runtimeError(new Error(message), alive, 'Loading the transformer');
        assert.equal(err.code, code, message);
        assert.ok(err.message.startsWith('Loading the transformer'), err.message);
        assert.ok(err.message.includes(message), err.message);
    }
    assert.equal(runtimeError('plain string', alive, 'Run').code, ErrorCode.RUNTIME);
});

test('app errors pass through, and a lost device explains any failure', () => {
    const input = new InputError('bad');
    assert.equal(runtimeError(input, alive, 'x'), input);
    const lostError = new DeviceLostError('the device died');
    const lost = /** @type {import('../../web_src/src/runtime/gpu.js').Gpu} */ (
        /** @type {unknown} */ ({ lost: true, lostError: () => lostError })
    );
    assert.equal(runtimeError(new Error('Non-zero status code'), lost, 'x'), lostError);
});

/**
 * A stand-in Gpu with a grant of `features`.
 * @param {string[]} features
 * @param {{lost?: boolean, used?: boolean}} [state]
 */
function gpuWith(features, { lost = false, used = false } = {}) {
    return /** @type {import('../../web_src/src/runtime/gpu.js').Gpu} */ (
        /** @type {unknown} */ ({
            lost,
            used,
            lostMessage: lost ? 'unknown: device lost' : null,
            grant: { features, limits: {}, off: [] },
            lostError: () => new DeviceLostError('lost'),
        })
    );
}

/** What Chromium 150 on an H200 answered at the text encoder's first run. */
const CHROMIUM_150 =
    'Failed to create a WebGPU compute pipeline: [Invalid ShaderModule "SubgroupMatrixMatMulNBits"] is invalid due to a previous error.';

/** The same browser with onnxruntime-web 1.31.1, which creates pipelines asynchronously. */
const CHROMIUM_150_ORT_131 =
    "failed to call OrtRun(). ERROR_CODE: 1, ERROR_MESSAGE: Non-zero status code returned while running MatMulNBits node. Name:'/layers.0/self_attn/q_proj/MatMul_Q4' Status Message: No cached or pending pipeline for deferred dispatch: SubgroupMatrixMatMulLayout[16|16]:32,1,1:1|1:3;3:2";

test('a shader or pipeline failure blames the optional feature it names, else the most experimental one', async () => {
    const { GpuFeatureError } = await import('../../web_src/src/shared/errors.js');
    const all = ['shader-f16', 'subgroups', 'timestamp-query', 'chromium-experimental-subgroup-matrix'];
    const blamed = (/** @type {string} */ message, /** @type {string[]} */ features) => {
        const err = runtimeError(new Error(message), gpuWith(features), 'The text encoder');
        return err instanceof GpuFeatureError ? err.detail.feature : null;
    };
    assert.equal(blamed(CHROMIUM_150, all), 'chromium-experimental-subgroup-matrix');
    assert.equal(blamed(CHROMIUM_150_ORT_131, all), 'chromium-experimental-subgroup-matrix');
    assert.equal(
        blamed('Failed to create a WebGPU compute pipeline: [Invalid ShaderModule "DP4AMatMulNBits"]', all),
        'subgroups',
    );
    assert.equal(
        blamed('Error while parsing WGSL: enable f16; is not allowed', ['shader-f16', 'subgroups']),
        'shader-f16',
    );
    // A program that names no feature: the most experimental the device has goes first.
    assert.equal(
        blamed('Failed to create a WebGPU compute pipeline: [Invalid ShaderModule "Transpose"]', all),
        'chromium-experimental-subgroup-matrix',
    );
    assert.equal(
        blamed('Failed to create a WebGPU compute pipeline: [Invalid ShaderModule "Transpose"]', [
            'shader-f16',
            'subgroups',
        ]),
        'subgroups',
    );
    // A device without optional features has nothing to give up: an ordinary runtime error, message kept.
    const plain = runtimeError(new Error(CHROMIUM_150), gpuWith(['timestamp-query']), 'The text encoder');
    assert.equal(plain.code, ErrorCode.RUNTIME);
    assert.ok(!(plain instanceof GpuFeatureError) && plain.message.includes('SubgroupMatrixMatMulNBits'));
    // Other failures are not a feature's.
    assert.equal(blamed('Failed to allocate a buffer of size 4294967296', all), null);
    assert.equal(blamed('Non-zero status code returned while running MatMul node', all), null);
});

test('a device lost before its first run blames the matrix units only; after a run it is a device loss', async () => {
    const { GpuFeatureError } = await import('../../web_src/src/shared/errors.js');
    const matrix = ['shader-f16', 'subgroups', 'chromium-experimental-subgroup-matrix'];
    const first = runtimeError(new Error('x'), gpuWith(matrix, { lost: true }), 'Denoising step 1');
    assert.ok(first instanceof GpuFeatureError && first.detail.feature === 'chromium-experimental-subgroup-matrix');
    assert.equal(
        runtimeError(new Error('x'), gpuWith(matrix, { lost: true, used: true }), 'x').code,
        ErrorCode.DEVICE_LOST,
    );
    assert.equal(
        runtimeError(new Error('x'), gpuWith(['shader-f16', 'subgroups'], { lost: true }), 'x').code,
        ErrorCode.DEVICE_LOST,
    );
});

test("the reason kept for a dropped feature is the browser's sentence, not onnxruntime's build path", async () => {
    const { failureSummary } = await import('../../web_src/src/runtime/errors.js');
    // Chromium 150 on an H200 (docs/gpu-runs/2026-12-03-h200-chromium150/), as onnxruntime-web 1.30 words it.
    const raw =
        'failed to call OrtRun(). ERROR_CODE: 1, ERROR_MESSAGE: /mnt/azure_nvme_temp/_work/1/s/onnxruntime/core/' +
        'providers/webgpu/buffer_manager.cc:562 WGPUBuffer onnxruntime::webgpu::BufferManager::Create(size_t, wgpu::BufferUsage, ' +
        `bool, bool) const [ONNXRuntimeError] : 1 : FAIL : ${CHROMIUM_150}\n - While validating compute stage ([Invalid ` +
        'ShaderModule "SubgroupMatrixMatMulNBits"], entryPoint: "main").\n\n';
    assert.equal(failureSummary(raw), CHROMIUM_150);
    const err = runtimeError(
        new Error(raw),
        gpuWith(['shader-f16', 'subgroups', 'chromium-experimental-subgroup-matrix']),
        'x',
    );
    assert.equal(err.detail.cause, CHROMIUM_150);
    assert.equal(failureSummary('plain message'), 'plain message');
});
