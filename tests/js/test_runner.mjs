// @ts-check
/**
 * @file page/runner.js: one Generate from the click to the result, with fakes of the parts it is given (the worker
 * client, the views, history) and of the little DOM it touches itself (`<body data-state>`, the window's height):
 * each image of a batch asked for in turn with its seed, shown and kept; a batch that fails or is cancelled says so
 * and keeps what it finished; bad settings send nothing.
 * @module tests/js/test_runner
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Runner } from '../../web_src/src/page/runner.js';
import { CancelledError, DeviceLostError, ErrorCode, InputError } from '../../web_src/src/shared/errors.js';

const g = /** @type {any} */ (globalThis);
g.document = { body: { dataset: {} } };
g.window = { innerHeight: 800 };
if (!('navigator' in g)) g.navigator = {};

const VALUES = { prompt: 'a fox', seed: 10, steps: 4, width: 64, height: 64 };

/**
 * A runner on fakes; `calls` lists what each part was asked, in order.
 * @param {{count?: number, generate?: (params: any, index: number) => Promise<any>, read?: () => any,
 *   preview?: boolean}} [options]  `preview`: the step preview setting is on.
 */
function runner({ count = 1, generate, read = () => ({ ...VALUES }), preview = false } = {}) {
    /** @type {string[]} */
    const calls = [];
    /** @type {any[]} */
    const requests = [];
    /** @type {any[]} */
    const recorded = [];
    /** @type {any[]} */
    const shown = [];
    const note = (/** @type {string} */ what) => () => {
        calls.push(what);
    };
    const client = {
        /** @param {any} params @param {{onEvent: (e: any) => void}} options */
        async generate(params, { onEvent }) {
            requests.push(params);
            calls.push(`generate ${params.seed}`);
            onEvent({ type: 'step', step: 1, steps: 4 });
            if (generate) return generate(params, requests.length - 1);
            return { width: 64, height: 64, params, timings: { total: 5 } };
        },
        cancel: async () => (calls.push('cancel'), { cancelled: true }),
        restart: note('restart'),
    };
    const parts = {
        client,
        readiness: {
            ready: async () => calls.push('ready'),
            refresh: note('refresh'),
            advise: (/** @type {any} */ err) => ({ title: `Failed: ${err.message}` }),
        },
        source: Promise.resolve({ base: 'https://example.test/m/', label: 'example', precision: '', profile: false }),
        version: 'test',
        form: {
            running: false,
            read,
            /** @param {boolean} on */
            setRunning(on) {
                parts.form.running = on;
                calls.push(`running ${on}`);
            },
            cancel: { disabled: false },
        },
        editing: { collect: async () => ({ params: {}, record: null }) },
        memory: { value: () => undefined },
        batchSetting: { read: () => ({ count, mode: 'sequence' }) },
        progress: {
            start: note('progress start'),
            handle: note('progress event'),
            /** @param {string} text */
            stop: (text) => calls.push(`progress stop: ${text}`),
            idle: note('progress idle'),
        },
        strip: { begin: note('strip begin'), render: () => {}, add: note('strip add') },
        errors: {
            clear: note('errors clear'),
            /** @param {{title: string}} error @param {string} code */
            show: (error, code) => shown.push({ title: error.title, code }),
        },
        capabilities: { setBusy: () => {} },
        history: { record: (/** @type {any} */ entry) => recorded.push(entry) },
        outputCard: { getBoundingClientRect: () => ({ top: 0 }), scrollIntoView: () => {} },
        preview: { enabled: () => preview },
        stepPreview: { handle: note('step preview event'), clear: note('step preview clear') },
        encode: async (/** @type {any} */ result) => ({
            png: null,
            thumb: `thumb ${result.params.seed}`,
            fileName: '',
        }),
    };
    return { runner: new Runner(/** @type {any} */ (parts)), calls, requests, recorded, shown };
}

test('a batch asks for each image in turn with the next seed, shows each and keeps each in history', async () => {
    const { runner: r, requests, recorded, calls } = runner({ count: 3 });
    await r.generate();
    assert.deepEqual(
        requests.map((p) => p.seed),
        [10, 11, 12],
    );
    assert.deepEqual(requests[0], { ...VALUES, modelBase: 'https://example.test/m/' });
    assert.deepEqual(
        recorded.map((e) => [e.params.seed, e.thumb, e.modelLabel]),
        [
            [10, 'thumb 10', 'example'],
            [11, 'thumb 11', 'example'],
            [12, 'thumb 12', 'example'],
        ],
    );
    assert.equal(calls.filter((c) => c === 'strip add').length, 3);
    assert.ok(calls.indexOf('ready') < calls.indexOf('generate 10'), 'the browser check comes first');
    assert.equal(g.document.body.dataset.state, 'done');
    const [stop, ...last] = calls.slice(-3);
    assert.match(stop, /^progress stop: Done: 3 images in /);
    assert.deepEqual(last, ['refresh', 'running false']);
});

test('a failure stops the batch, says why, and keeps the images it finished', async () => {
    const {
        runner: r,
        recorded,
        shown,
        calls,
    } = runner({
        count: 3,
        generate: async (params, index) => {
            if (index === 1) throw new InputError('no such size');
            return { width: 64, height: 64, params, timings: { total: 5 } };
        },
    });
    await r.generate();
    assert.deepEqual(
        recorded.map((e) => e.params.seed),
        [10],
    );
    assert.deepEqual(shown, [{ title: 'Failed: no such size', code: ErrorCode.INPUT }]);
    assert.ok(calls.includes('progress stop: Stopped: failed: no such size.'), calls.join('\n'));
    assert.ok(!calls.includes('generate 12'));
    assert.equal(g.document.body.dataset.state, 'error');
});

test('a lost GPU device restarts the worker for the next Generate', async () => {
    const { runner: r, calls } = runner({
        generate: async () => {
            throw new DeviceLostError('The GPU device was lost');
        },
    });
    await r.generate();
    assert.equal(calls.at(-2), 'restart');
    assert.equal(g.document.body.dataset.state, 'error');
});

test('a cancel ends the batch without an error: no further image starts', async () => {
    /** @type {Runner | null} */
    let current = null;
    const made = runner({
        count: 3,
        generate: async (params, index) => {
            if (index === 0) {
                current?.cancel();
                throw new CancelledError();
            }
            return { width: 64, height: 64, params, timings: { total: 5 } };
        },
    });
    current = made.runner;
    await made.runner.generate();
    assert.ok(made.calls.includes('cancel'), 'the worker is asked to stop');
    assert.deepEqual(made.requests.length, 1);
    assert.deepEqual(made.shown, []);
    assert.equal(g.document.body.dataset.state, 'idle');
});

test('bad settings send nothing: the error is shown and the page keeps its state', async () => {
    g.document.body.dataset.state = 'done';
    const {
        runner: r,
        requests,
        shown,
        calls,
    } = runner({
        read: () => {
            throw new InputError('`steps` must be an integer from 1 to 50.');
        },
    });
    await r.generate();
    assert.equal(requests.length, 0);
    assert.deepEqual(
        shown.map((s) => s.code),
        [ErrorCode.INPUT],
    );
    assert.equal(g.document.body.dataset.state, 'done');
    assert.ok(!calls.includes('running true'));
});

test("each image's events reach the progress and the step preview, which is asked for only when on", async () => {
    const off = runner();
    await off.runner.generate();
    assert.ok(!('preview' in off.requests[0]));
    const on = runner({ preview: true });
    await on.runner.generate();
    assert.equal(on.requests[0].preview, true);
    const around = on.calls.slice(on.calls.indexOf('generate 10'), on.calls.indexOf('strip add'));
    assert.deepEqual(around, ['generate 10', 'progress event', 'step preview event', 'step preview clear']);
});
