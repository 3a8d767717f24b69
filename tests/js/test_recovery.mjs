// @ts-check
/** @file worker/recovery: which failures run again, and how. @module tests/js/test_recovery */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { recoveryFor, runRecovering } from '../../web_src/src/worker/recovery.js';
import {
    DeviceLostError,
    GpuFeatureError,
    InputError,
    OutOfMemoryError,
    StoredFileError,
} from '../../web_src/src/shared/errors.js';

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

test('a stored file found changed is deleted and the job runs again, once per file', async () => {
    const changed = (/** @type {string} */ path) =>
        new StoredFileError(`${path} changed in this browser's storage since it was downloaded: ...`, { path });
    const plan = recoveryFor(changed('a.onnx_data'), fast);
    assert.deepEqual(plan, { kind: 'refetch', path: 'a.onnx_data', reason: changed('a.onnx_data').message });
    assert.equal(recoveryFor(changed('a.onnx_data'), { ...fast, refetched: new Set(['a.onnx_data']) }), null);
    assert.equal(recoveryFor(changed('a.onnx_data'), { ...fast, aborted: true }), null);

    /** @type {string[]} */
    const forgotten = [];
    /** @type {string[]} */
    const said = [];
    const failures = [changed('a.onnx_data'), changed('b.onnx_data'), changed('a.onnx_data')];
    let runs = 0;
    const options = {
        model: /** @type {any} */ ({
            sessions: { releaseAll: async () => {} },
            memory: { current: { mode: 'fast' } },
            source: { store: { forget: async (/** @type {string} */ path) => void forgotten.push(path) } },
        }),
        gpu: /** @type {any} */ ({ dropFeature() {}, remember: async () => {}, restore() {} }),
        signal: new AbortController().signal,
        askedMemory: undefined,
        onEvent: (/** @type {{stage: string, detail: string}} */ event) =>
            void said.push(`${event.stage}: ${event.detail}`),
    };
    const job = async () => {
        runs += 1;
        const failure = failures.shift();
        if (failure) throw failure;
        return 'image';
    };
    // a changed, b changed, then a again: the third failure is reported, and a is deleted each time.
    await assert.rejects(
        runRecovering(job, options),
        (err) => err instanceof StoredFileError && err.detail.path === 'a.onnx_data',
    );
    assert.equal(runs, 3);
    assert.deepEqual(forgotten, ['a.onnx_data', 'b.onnx_data', 'a.onnx_data']);
    assert.deepEqual(said, [
        `download: ${changed('a.onnx_data').message}: downloading it again`,
        `download: ${changed('b.onnx_data').message}: downloading it again`,
    ]);
    runs = 0;
    failures.push(changed('c.onnx_data'));
    assert.equal(await runRecovering(job, options), 'image');
    assert.equal(runs, 2);
});
