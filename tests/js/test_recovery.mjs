// @ts-check
/** @file worker/recovery: which failures run again, and how. @module tests/js/test_recovery */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { recoveryFor } from '../../web_src/src/worker/recovery.js';
import { DeviceLostError, GpuFeatureError, InputError, OutOfMemoryError } from '../../web_src/src/shared/errors.js';

const fast = { aborted: false, memoryMode: 'fast', askedMemory: undefined, leanTried: false };

test('a failed feature runs again without it', () => {
    const err = new GpuFeatureError('x', { feature: 'subgroups', cause: 'Invalid ShaderModule "DP4AMatMulNBits"' });
    assert.deepEqual(recoveryFor(err, fast), {
        kind: 'drop-feature',
        feature: 'subgroups',
        reason: 'Invalid ShaderModule "DP4AMatMulNBits"',
    });
    assert.equal(recoveryFor(err, { ...fast, aborted: true }), null, 'a cancelled job is never run again');
});

test('running out of GPU memory or losing the device in fast mode runs once more in lean mode', () => {
    const oom = new OutOfMemoryError('Denoising step 1 ran out of GPU memory', { runtime: true });
    const lost = new DeviceLostError('The GPU device was lost');
    for (const err of [oom, lost]) {
        const plan = recoveryFor(err, fast);
        assert.equal(plan?.kind, 'lean', err.message);
        assert.ok(plan && plan.reason.startsWith('fast mode'), plan?.reason);
        // Once only; never when the run was lean already or the user asked for fast mode.
        assert.equal(recoveryFor(err, { ...fast, leanTried: true }), null);
        assert.equal(recoveryFor(err, { ...fast, memoryMode: 'lean' }), null);
        assert.equal(recoveryFor(err, { ...fast, askedMemory: 'fast' }), null);
    }
});

test('refusals before any GPU work and other errors are reported as they are', () => {
    // A size whose buffers cannot fit is refused by the graph choice: lean mode would not help.
    const tooLarge = new OutOfMemoryError('At 2048x2048 the VAE decoder needs ...', { needed: 1, limit: 0 });
    assert.equal(recoveryFor(tooLarge, fast), null);
    assert.equal(recoveryFor(new InputError('bad seed'), fast), null);
    assert.equal(recoveryFor(new Error('a bug'), fast), null);
});
