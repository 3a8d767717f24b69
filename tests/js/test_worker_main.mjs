// @ts-check
/**
 * @file worker/main.js, the inference worker's entry, imported as a module worker would be: into a scope of its own
 * (this node process) with the worker's URL, no WebGPU and no OPFS. It must make the real parts (onnxruntime
 * configured, the GPU, the model, the store's lock) and answer the page's protocol on them through the channel.
 * @module tests/js/test_worker_main
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { PROTOCOL_VERSION } from '../../web_src/src/protocol.js';
import { ErrorCode } from '../../web_src/src/shared/errors.js';

const g = /** @type {any} */ (globalThis);
/** @type {any[]} */
const posted = [];
/** @type {string[]} */
const warnings = [];
g.self = globalThis;
// An unknown feature to break: the worker says it ignores it.
g.location = new URL('https://app.example.test/assets/worker.js?gpu-fault=no-such-feature');
Object.defineProperty(globalThis, 'navigator', { value: { deviceMemory: 4 }, configurable: true });
g.postMessage = (/** @type {any} */ message) => posted.push(message);
// The store's lock listens to other tabs on a BroadcastChannel, which would keep this process alive (a worker ends
// with its page): unref'd, the process ends after the tests.
g.BroadcastChannel = class extends BroadcastChannel {
    /** @param {string} name */
    constructor(name) {
        super(name);
        /** @type {any} */ (this).unref();
    }
};
const warn = console.warn;
console.warn = (/** @type {any[]} */ ...args) => warnings.push(args.join(' '));
await import('../../web_src/src/worker/main.js');
console.warn = warn;
// The model server cannot be reached: every fetch fails as a dropped connection does.
g.fetch = async () => {
    throw new TypeError('fetch failed');
};

/**
 * Post a request to the worker as the page does; resolves with the messages of that id, the last one its answer.
 * @param {Record<string, any>} request
 * @returns {Promise<any[]>}
 */
async function send(request) {
    g.onmessage({ data: request });
    for (;;) {
        const mine = posted.filter((m) => m.id === request.id);
        if (mine.some((m) => m.type === 'result' || m.type === 'error')) return mine;
        await new Promise((resolve) => setTimeout(resolve, 10));
    }
}

test('an unknown feature to break is ignored, and the worker says so', () => {
    assert.equal(typeof g.onmessage, 'function', 'the worker answers messages');
    assert.ok(
        warnings.some((w) => w.startsWith('gpu-fault=no-such-feature ignored')),
        warnings.join('\n'),
    );
});

test('probe answers with the protocol version, and what the page decides on: no WebGPU here, the memory', async () => {
    const [answer] = await send({ type: 'probe', id: 'p1' });
    assert.equal(answer.type, 'result');
    const { result } = answer;
    assert.equal(result.protocolVersion, PROTOCOL_VERSION);
    assert.deepEqual([result.webgpu, result.gpuApi, result.deviceMemory], [false, false, 4]);
    assert.match(result.error, /does not expose WebGPU/);
    assert.equal(typeof result.opfs, 'object');
});

test("modelInfo reads the model base's manifest, and a server it cannot reach is a network error naming it", async () => {
    const [answer] = await send({
        type: 'modelInfo',
        id: 'm1',
        params: { modelBase: 'https://models.example.test/k/' },
    });
    assert.equal(answer.type, 'error');
    assert.equal(answer.error.code, ErrorCode.NETWORK);
    assert.equal(answer.error.detail.url, 'https://models.example.test/k/manifest.json');
});

test('generate runs the stages on the real parts: without a store, it stops at the download with what to do', async () => {
    const params = { prompt: 'a fox', seed: 1, steps: 1, width: 64, height: 64, modelBase: 'https://m.example.test/' };
    const messages = await send({ type: 'generate', id: 'g1', params });
    assert.deepEqual(
        messages.map((m) => (m.type === 'stage' ? m.stage : m.type)),
        ['check', 'download', 'error'],
    );
    assert.equal(messages.at(-1).error.code, ErrorCode.QUOTA);
    assert.match(messages.at(-1).error.message, /no Origin Private File System/);
    const refused = await send({ type: 'generate', id: 'g2', params: { ...params, steps: 0 } });
    assert.deepEqual(
        refused.map((m) => m.stage ?? m.type),
        ['check', 'error'],
    );
    assert.equal(refused.at(-1).error.code, ErrorCode.INPUT, 'stage 1 refuses before anything else');
});
