// @ts-check
/** @file worker/recovery: which failures run again, and how. @module tests/js/test_recovery */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { recoveryFor, runRecovering } from '../../web_src/src/worker/recovery.js';
import { activationFallback } from '../../web_src/src/models/graph_choice.js';
import { assertFinite } from '../../web_src/src/pipeline/image.js';
import {
    DeviceLostError,
    ErrorCode,
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

/** The error assertFinite throws for `component`'s output with one infinity in it. */
function overflow(component, what = 'prompt embeddings') {
    try {
        assertFinite(Float32Array.of(1, Infinity, 2), what, component);
    } catch (err) {
        return err;
    }
    throw new Error('assertFinite passed an infinity');
}

/** A manifest of `variants` for the text encoder and the transformer, and choices of `chosen` for both. */
function repoOf(variants, chosen) {
    const graphs = ['text_encoder', 'transformer'].flatMap((component) =>
        variants.map((variant) => ({ component, variant })),
    );
    const choice = (component) => ({ graph: graphs.find((g) => g.component === component && g.variant === chosen) });
    return {
        manifest: /** @type {any} */ ({ graphs }),
        choices: /** @type {any} */ ({ text_encoder: choice('text_encoder'), transformer: choice('transformer') }),
    };
}

test('a half-precision overflow names its fp32-activation sibling where the repository has it', () => {
    const both = repoOf(['q4', 'q4f16'], 'q4f16');
    assert.deepEqual(activationFallback(both.manifest, both.choices), { from: 'q4f16', to: 'q4' });
    const fp16 = repoOf(['fp16', 'fp32'], 'fp16');
    assert.deepEqual(activationFallback(fp16.manifest, fp16.choices), { from: 'fp16', to: 'fp32' });
    const alone = repoOf(['q4f16'], 'q4f16');
    assert.deepEqual(activationFallback(alone.manifest, alone.choices), { from: 'q4f16', to: null });
    const q4 = repoOf(['q4', 'q4f16'], 'q4');
    assert.equal(activationFallback(q4.manifest, q4.choices), null, 'fp32 activations have nothing to fall back to');
});

test('an overflow of the text encoder or the transformer runs again on fp32 activations; others do not', () => {
    const fallback = { from: 'q4f16', to: 'q4' };
    for (const component of ['text_encoder', 'transformer']) {
        const plan = recoveryFor(overflow(component), { ...fast, fallback });
        assert.equal(plan?.kind, 'precision', component);
        assert.ok(plan?.kind === 'precision' && plan.precision === 'q4', JSON.stringify(plan));
        assert.match(plan.reason, /q4f16 .*overflowed half precision/);
    }
    assert.equal(recoveryFor(overflow('vae_decoder', 'decoded image'), { ...fast, fallback }), null);
    assert.equal(recoveryFor(overflow('transformer'), { ...fast, fallback: { from: 'q4f16', to: null } }), null);
    assert.equal(recoveryFor(overflow('transformer'), fast), null, 'fp32 activations: no fallback');
});

/** runRecovering's parts, faked: a model whose chosen graphs are `chosen` of `variants`, a GPU, a memory. */
function parts(variants, chosen, remembered = null) {
    const { manifest, choices } = repoOf(variants, chosen);
    const memory = { saved: /** @type {any[]} */ ([]) };
    const events = /** @type {any[]} */ ([]);
    let released = 0;
    return {
        memory,
        events,
        released: () => released,
        options: {
            model: /** @type {any} */ ({
                source: { manifest, choices },
                sessions: { releaseAll: async () => void released++ },
                memory: { current: { mode: 'fast' } },
            }),
            gpu: { dropFeature() {}, remember: async () => {}, restore() {} },
            signal: new AbortController().signal,
            askedMemory: undefined,
            askedPrecision: undefined,
            modelBase: 'https://example.org/m/',
            onEvent: (/** @type {any} */ e) => events.push(e),
            precisions: {
                recall: async (/** @type {string} */ base) => (base === 'https://example.org/m/' ? remembered : null),
                remember: async (/** @type {string} */ base, /** @type {string} */ p, /** @type {string} */ r) =>
                    void memory.saved.push([base, p, r]),
            },
        },
    };
}

test('an overflowing q4f16 run finishes on q4, says so, and the browser remembers it for the model', async () => {
    const fake = parts(['q4', 'q4f16'], 'q4f16');
    const asked = /** @type {any[]} */ ([]);
    const result = await runRecovering(async (overrides) => {
        asked.push(overrides.precision);
        if (!overrides.precision) throw overflow('transformer', "transformer's prediction at denoising step 1");
        return { notes: [] };
    }, fake.options);
    assert.deepEqual(asked, [undefined, 'q4']);
    assert.equal(fake.released(), 1, 'the q4f16 sessions are released before the q4 run');
    assert.match(result.notes.join(' '), /Ran again on the q4 graphs .*q4f16 transformer overflowed/);
    assert.match(fake.events[0].detail, /^again on the q4 graphs: the q4f16 transformer overflowed/);
    assert.equal(fake.memory.saved.length, 1);
    assert.deepEqual(fake.memory.saved[0].slice(0, 2), ['https://example.org/m/', 'q4']);
});

test('a remembered fallback starts there, unless the request asks for a precision', async () => {
    const fake = parts(['q4', 'q4f16'], 'q4', { precision: 'q4', reason: 'the q4f16 text encoder overflowed' });
    const asked = /** @type {any[]} */ ([]);
    const job = async (/** @type {{precision?: string}} */ overrides) => {
        asked.push(overrides.precision);
        return { notes: /** @type {string[]} */ ([]) };
    };
    const result = await runRecovering(job, fake.options);
    assert.deepEqual(asked, ['q4']);
    assert.match(result.notes[0], /Ran the q4 graphs, as this browser remembers for this model: the q4f16 text/);
    await runRecovering(job, { ...fake.options, askedPrecision: 'q4f16' });
    assert.deepEqual(asked, ['q4', undefined], 'an asked precision is run as asked');
});

test('an overflow with no fp32-activation graphs is one sentence naming what overflowed', async () => {
    const fake = parts(['q4f16'], 'q4f16');
    await assert.rejects(
        runRecovering(async () => {
            throw overflow('text_encoder');
        }, fake.options),
        (/** @type {any} */ err) => {
            assert.equal(err.code, ErrorCode.DEGENERATE_OUTPUT);
            assert.match(err.message, /^The q4f16 text encoder overflowed half precision \(Found 0 NaN and 1 infinite/);
            assert.match(err.message, /no graphs with fp32 activations/);
            return true;
        },
    );
    assert.equal(fake.memory.saved.length, 0);
});

test('a remembered precision the repository no longer has is forgotten for the run, not reported', async () => {
    const fake = parts(['q4f16'], 'q4f16', { precision: 'q4', reason: 'the q4f16 text encoder overflowed' });
    const asked = /** @type {any[]} */ ([]);
    const result = await runRecovering(async (overrides) => {
        asked.push(overrides.precision);
        if (overrides.precision === 'q4')
            throw new InputError('`precision` "q4" is not available', { precision: 'q4' });
        return { notes: /** @type {string[]} */ ([]) };
    }, fake.options);
    assert.deepEqual(asked, ['q4', undefined]);
    assert.deepEqual(result.notes, []);
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

test('in one job a changed stored file is downloaded again and a q4f16 overflow still falls back to q4', async () => {
    const fake = parts(['q4', 'q4f16'], 'q4f16');
    const forgotten = /** @type {string[]} */ ([]);
    fake.options.model.source.store = { forget: async (/** @type {string} */ path) => void forgotten.push(path) };
    const failures = [new StoredFileError('te.onnx_data changed since it was downloaded', { path: 'te.onnx_data' })];
    const asked = /** @type {any[]} */ ([]);
    const result = await runRecovering(async (overrides) => {
        asked.push(overrides.precision);
        const failure = failures.shift();
        if (failure) throw failure;
        if (!overrides.precision) throw overflow('text_encoder');
        return { notes: /** @type {string[]} */ ([]) };
    }, fake.options);
    assert.deepEqual(asked, [undefined, undefined, 'q4']);
    assert.deepEqual(forgotten, ['te.onnx_data']);
    const stages = fake.events.map((e) => e.stage);
    assert.deepEqual(stages, ['download', 'load'], 'downloaded again, then loaded again on q4');
    assert.match(fake.events[1].detail, /^again on the q4 graphs: the q4f16 text encoder overflowed/);
    assert.match(result.notes.join(' '), /Ran again on the q4 graphs/);
    const saved = fake.memory.saved.map((s) => s[1]);
    assert.deepEqual(saved, ['q4'], 'the fallback is remembered once');
});
