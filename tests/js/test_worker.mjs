// @ts-check
/**
 * @file The inference worker's answers (web_src/src/worker/requests.js) with the real pipeline on a fake of the model's
 * parts (tests/js/fake_model.mjs), a fake GPU and a fake store lock: one result or error per request id, the job
 * queue and its cancels, the runs again without a failed GPU feature or in lean mode, and clearing the store.
 * @module tests/js/test_worker
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { PROTOCOL_VERSION } from '../../web_src/src/protocol.js';
import { ErrorCode, GpuFeatureError, NetworkError, OutOfMemoryError } from '../../web_src/src/shared/errors.js';
import { serveRequests } from '../../web_src/src/worker/requests.js';
import { VELOCITY, fakeModel, pngFile, runsOf } from './fake_model.mjs';

const PARAMS = { prompt: 'a fox', seed: 1, steps: 2, width: 64, height: 64, modelBase: 'https://example.test/m/' };

/**
 * A worker scope serving requests on `fake`'s model, with a fake GPU and store lock; `send` posts a request and
 * resolves with its last message (result or error) and every message it got.
 * @param {ReturnType<typeof fakeModel>} fake
 * @param {{whileUsing?: <T>(task: () => Promise<T>) => Promise<T>, modelInfo?: (modelBase: string) => Promise<any>}}
 *   [parts]  The store lock's `whileUsing`; `modelInfo`: what the manifest of a model base says.
 */
function worker(fake, { whileUsing = (task) => task(), modelInfo = async () => ({}) } = {}) {
    /** @type {{message: any, transfer: Transferable[]}[]} */
    const posted = [];
    /** @type {Map<string, (message: any) => void>} */
    const waiting = new Map();
    const scope = {
        /** @type {((message: MessageEvent) => void) | null} */
        onmessage: null,
        /** @param {any} message @param {Transferable[]} transfer */
        postMessage(message, transfer) {
            posted.push({ message, transfer });
            if (message.type === 'result' || message.type === 'error') waiting.get(message.id)?.(message);
        },
    };
    const gpu = {
        /** @type {string[]} */
        dropped: [],
        /** @type {string[][]} */
        remembered: [],
        /** @type {string[][]} */
        restored: [],
        /** @param {string} feature */
        dropFeature(feature) {
            gpu.dropped.push(feature);
        },
        /** @param {string[]} features */
        async remember(features) {
            gpu.remembered.push([...features]);
        },
        /** @param {string[]} features */
        restore(features) {
            gpu.restored.push([...features]);
        },
    };
    /** @type {(() => void) | null} */
    let clearedElsewhere = null;
    const store = {
        whileUsing,
        /** @type {<T>(task: () => Promise<T>) => Promise<T>} */
        clearing: (task) => task(),
        /** @param {() => void} onCleared */
        onCleared(onCleared) {
            clearedElsewhere = onCleared;
        },
        clear: async () => 1234,
    };
    const probe = async () => /** @type {any} */ ({ webgpu: true, adapter: { vendor: 'test' } });
    serveRequests(scope, /** @type {any} */ ({ model: fake.model, gpu, probe, store, modelInfo }));
    /**
     * @param {Record<string, any>} request
     * @returns {Promise<{answer: any, messages: any[], transfer: Transferable[]}>}
     */
    const send = (request) =>
        new Promise((resolve) => {
            waiting.set(request.id, (answer) => {
                const mine = posted.filter((p) => p.message.id === request.id);
                resolve({ answer, messages: mine.map((p) => p.message), transfer: mine.at(-1)?.transfer ?? [] });
            });
            scope.onmessage?.(/** @type {MessageEvent} */ ({ data: request }));
        });
    return { send, gpu, posted, clearedElsewhere: () => clearedElsewhere?.() };
}

test('probe answers with the protocol version; an unknown request is an input error naming the known ones', async () => {
    const { send } = worker(fakeModel());
    const { answer } = await send({ type: 'probe', id: 'a' });
    assert.deepEqual(answer, {
        type: 'result',
        id: 'a',
        result: { webgpu: true, adapter: { vendor: 'test' }, protocolVersion: PROTOCOL_VERSION },
    });
    const unknown = (await send({ type: 'paint', id: 'b' })).answer;
    assert.equal(unknown.type, 'error');
    assert.equal(unknown.error.code, ErrorCode.INPUT);
    assert.match(unknown.error.message, /Unknown request type "paint"; expected one of probe, generate, load/);
});

test("generate: the stages' events carry the request's id, then one result whose pixels move to the page", async () => {
    const { send } = worker(fakeModel());
    const { answer, messages, transfer } = await send({ type: 'generate', id: 'g1', params: PARAMS });
    assert.equal(answer.type, 'result', JSON.stringify(answer.error));
    assert.deepEqual(
        messages.filter((m) => m.type === 'step').map((m) => m.step),
        [1, 2],
    );
    assert.equal(messages.filter((m) => m.type === 'result' || m.type === 'error').length, 1);
    assert.ok(messages.every((m) => m.id === 'g1'));
    assert.equal(answer.result.rgba.length, 64 * 64 * 4);
    assert.deepEqual(transfer, [answer.result.rgba.buffer]);
    const bad = (await send({ type: 'generate', id: 'g2', params: { ...PARAMS, steps: 0 } })).answer;
    assert.equal(bad.error.code, ErrorCode.INPUT);
});

test('a generate queued behind another is answered `cancelled` at once; the running one still finishes', async () => {
    /** @type {() => void} */
    let open = () => {};
    const gate = new Promise((resolve) => (open = () => resolve(undefined)));
    let first = true;
    const fake = fakeModel();
    const { send } = worker(fake, {
        whileUsing: async (task) => {
            if (first) {
                first = false;
                await gate;
            }
            return task();
        },
    });
    const running = send({ type: 'generate', id: 'g1', params: PARAMS });
    const queued = send({ type: 'generate', id: 'g2', params: PARAMS });
    const cancel = await send({ type: 'cancel', id: 'c1', target: 'g2' });
    assert.deepEqual(cancel.answer.result, { cancelled: true });
    assert.equal((await queued).answer.error.code, ErrorCode.CANCELLED);
    assert.equal(runsOf(fake.log, 'transformer').length, 0, 'the first job still waits');
    open();
    assert.equal((await running).answer.type, 'result');
    assert.deepEqual((await send({ type: 'cancel', id: 'c2', target: 'g1' })).answer.result, { cancelled: false });
});

test('a cancel stops a running generate between steps and gives the GPU memory back', async () => {
    /** @type {ReturnType<typeof worker>['send']} */
    let send = async () => /** @type {any} */ ({});
    const fake = fakeModel({
        velocity: (_, call) => {
            if (call === 0) send({ type: 'cancel', id: 'c', target: 'g' });
            return VELOCITY;
        },
    });
    ({ send } = worker(fake));
    const { answer } = await send({ type: 'generate', id: 'g', params: { ...PARAMS, steps: 4 } });
    assert.equal(answer.error.code, ErrorCode.CANCELLED);
    assert.ok(runsOf(fake.log, 'transformer').length < 4);
    assert.equal(fake.log.at(-1)?.what, 'release');
});

test('a GPU feature that fails at its first use: the job runs again without it, and the browser remembers', async () => {
    const fake = fakeModel({
        fail: (component, call) =>
            component === 'transformer' && call === 0
                ? new GpuFeatureError('Denoising step 1 failed', {
                      feature: 'subgroups',
                      cause: 'Invalid ShaderModule',
                  })
                : null,
    });
    const { send, gpu } = worker(fake);
    const { answer, messages } = await send({ type: 'generate', id: 'g', params: PARAMS });
    assert.equal(answer.type, 'result', JSON.stringify(answer.error));
    assert.deepEqual(gpu.dropped, ['subgroups']);
    assert.deepEqual(gpu.remembered, [['subgroups']]);
    assert.ok(messages.some((m) => m.type === 'stage' && /again without subgroups/.test(m.detail ?? '')));
    assert.ok(
        fake.log.some((e) => e.what === 'release'),
        'the sessions of the failed run are released',
    );
});

test('running out of GPU memory in fast mode runs the job again in lean mode, and the worker stays lean', async () => {
    const fake = fakeModel({
        fail: (component, call) =>
            component === 'transformer' && call === 0
                ? new OutOfMemoryError('Denoising step 1 ran out of GPU memory', { runtime: true })
                : null,
    });
    const { send, gpu } = worker(fake);
    const { answer, messages } = await send({ type: 'generate', id: 'g', params: PARAMS });
    assert.equal(answer.result.memory.mode, 'lean');
    assert.ok(messages.some((m) => m.type === 'stage' && /again in lean memory mode/.test(m.detail ?? '')));
    assert.match(String(fake.model.memory.leanAfterFailure), /ran out of memory/);
    assert.deepEqual(gpu.dropped, []);
    // Asking for fast mode itself is answered with the failure, not run again.
    const asked = fakeModel({
        fail: (component) =>
            component === 'transformer' ? new OutOfMemoryError('out of GPU memory', { runtime: true }) : null,
    });
    const failed = await worker(asked).send({ type: 'generate', id: 'h', params: { ...PARAMS, memory: 'fast' } });
    assert.equal(failed.answer.error.code, ErrorCode.OUT_OF_MEMORY);
    assert.equal(runsOf(asked.log, 'transformer').length, 1);
});

test("clearCache forgets the model and empties the store; another tab's clear makes the worker forget it", async () => {
    const fake = fakeModel();
    const { send, clearedElsewhere } = worker(fake);
    assert.deepEqual((await send({ type: 'clearCache', id: 'x' })).answer.result, { freedBytes: 1234 });
    assert.deepEqual(fake.log.at(-1), { what: 'release', component: 'reset' });
    fake.log.length = 0;
    clearedElsewhere();
    await send({ type: 'probe', id: 'p' });
    await new Promise((resolve) => setTimeout(resolve, 0));
    assert.deepEqual(fake.log, [{ what: 'release', component: 'reset' }]);
});

test('decode answers with the upright RGB bytes of one file, moved to the page', async () => {
    const { send } = worker(fakeModel());
    const bytes = pngFile(64, 64, (x, y) => [x, y, 7]);
    const { answer, transfer } = await send({
        type: 'decode',
        id: 'd',
        params: { image: { name: 'a.png', bytes }, role: 'image' },
    });
    assert.equal(answer.type, 'result', JSON.stringify(answer.error));
    assert.deepEqual([answer.result.width, answer.result.height], [64, 64]);
    assert.deepEqual(Array.from(answer.result.rgb.subarray(0, 6)), [0, 0, 7, 1, 0, 7]);
    assert.match(answer.result.sha256, /^[0-9a-f]{64}$/);
    assert.deepEqual(transfer, [answer.result.rgb.buffer]);
});

test("modelInfo answers at once with the model's kind, beside a running job, and its errors as errors", async () => {
    const pipeline = { isDistilled: false, steps: 50, guidanceScale: 4, inpaintGuidanceScale: 8 };
    /** @type {string[]} */
    const asked = [];
    /** @type {(value?: unknown) => void} */
    let release = () => {};
    const held = new Promise((resolve) => (release = resolve));
    const { send } = worker(fakeModel(), {
        whileUsing: async (task) => (await held, task()),
        modelInfo: async (modelBase) => {
            asked.push(modelBase);
            if (modelBase.includes('offline')) throw new NetworkError('Could not reach the model server.');
            return { pipeline };
        },
    });
    const running = send({ type: 'generate', id: 'g', params: PARAMS }); // held in the store lock
    const { answer } = await send({ type: 'modelInfo', id: 'm', params: { modelBase: PARAMS.modelBase } });
    assert.deepEqual(answer, { type: 'result', id: 'm', result: { pipeline } });
    const failed = (await send({ type: 'modelInfo', id: 'n', params: { modelBase: 'https://offline.test/' } })).answer;
    assert.equal(failed.type, 'error');
    assert.equal(failed.error.code, ErrorCode.NETWORK);
    assert.deepEqual(asked, [PARAMS.modelBase, 'https://offline.test/']);
    release();
    assert.equal((await running).answer.type, 'result');
});

test('generate and load hold the model store while they run, so that no tab clears it under them', async () => {
    let inside = 0;
    let holds = 0;
    /** @type {number[]} */
    const heldAtStep = [];
    const fake = fakeModel({ velocity: () => (heldAtStep.push(inside), VELOCITY) });
    const { send } = worker(fake, {
        whileUsing: async (task) => {
            holds++;
            inside++;
            try {
                return await task();
            } finally {
                inside--;
            }
        },
    });
    assert.equal((await send({ type: 'generate', id: 'g1', params: PARAMS })).answer.type, 'result');
    assert.deepEqual(heldAtStep, [1, 1], 'each step runs while the store is held');
    const load = { width: 64, height: 64, modelBase: PARAMS.modelBase, components: ['transformer'] };
    assert.equal((await send({ type: 'load', id: 'l1', params: load })).answer.type, 'result');
    assert.equal(holds, 2);
    // The clear takes the store exclusively instead (StoreAccess.clearing).
    assert.equal((await send({ type: 'clearCache', id: 'c1' })).answer.type, 'result');
    assert.equal(holds, 2);
});
