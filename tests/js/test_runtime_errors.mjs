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
