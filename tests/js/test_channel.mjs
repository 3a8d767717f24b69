// @ts-check
/**
 * @file shared/channel.js over a real MessageChannel (structured clone, buffers that move): each request settles
 * with its own answer, its events come before it, errors keep their class, and nothing waits forever.
 * @module tests/js/test_channel
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { Channel, serve } from '../../web_src/src/shared/channel.js';
import { ErrorCode, InputError, KleinError, OutOfMemoryError } from '../../web_src/src/shared/errors.js';

/**
 * @typedef {{
 *   add: {request: {a: number, b: number}, result: number},
 *   count: {request: {to: number}, result: string, event: {type: 'tick', n: number}},
 *   bytes: {request: {size: number}, result: Uint8Array},
 *   wait: {request: {ms: number, say: string}, result: string},
 *   fail: {request: {how: string}, result: never},
 * }} TestApi
 */

/** @type {Uint8Array[]} What the answering side made for `bytes`, to see whether it moved. */
const made = [];

/**
 * A channel to handlers answering TestApi, across a MessageChannel.
 * @returns {{channel: Channel<TestApi>, close: () => void, server: MessagePort}}
 */
function connect() {
    const { port1, port2 } = new MessageChannel();
    /** @type {Channel<TestApi>} */
    const channel = new Channel(port1);
    port1.onmessage = ({ data }) => channel.receive(data);
    serve(
        /** @type {any} */ (port2),
        /** @type {import('../../web_src/src/shared/channel.js').Handlers<TestApi>} */ ({
            add: async ({ a, b }) => a + b,
            count: async ({ to }, reply) => {
                for (let n = 1; n <= to; n++) reply.event({ type: 'tick', n });
                return `counted to ${to}`;
            },
            bytes: async ({ size }, reply) => {
                const bytes = new Uint8Array(size).fill(7);
                made.push(bytes);
                reply.transfer(bytes.buffer);
                return bytes;
            },
            wait: async ({ ms, say }) => {
                await new Promise((resolve) => setTimeout(resolve, ms));
                return say;
            },
            fail: async ({ how }) => {
                if (how === 'input') throw new InputError('`a` must be a number', { a: 'x' });
                if (how === 'memory') throw new OutOfMemoryError('out of GPU memory', { runtime: true });
                throw new TypeError('x is not a function');
            },
        }),
    );
    return {
        channel,
        server: port2,
        close: () => {
            port1.close();
            port2.close();
        },
    };
}

test('each request settles with its own result, whatever order the answers come in', async () => {
    const { channel, close } = connect();
    const slow = channel.request('wait', { ms: 30, say: 'slow' });
    const fast = channel.request('wait', { ms: 1, say: 'fast' });
    const sum = channel.request('add', { a: 2, b: 3 });
    assert.deepEqual(await Promise.all([slow, fast, sum]), ['slow', 'fast', 5]);
    const first = channel.send('add', { a: 1, b: 1 });
    const second = channel.send('add', { a: 1, b: 2 });
    assert.notEqual(first.id, second.id);
    assert.deepEqual([await first.result, await second.result], [2, 3]);
    assert.equal(channel.waiting.size, 0, 'nothing is left waiting');
    close();
});

test("a request's events reach its onEvent, in order, before its result", async () => {
    const { channel, close } = connect();
    /** @type {any[]} */
    const seen = [];
    const { id, result } = channel.send('count', { to: 3 }, { onEvent: (event) => seen.push(event) });
    assert.equal(await result, 'counted to 3');
    assert.deepEqual(
        seen.map((e) => [e.type, e.n, e.id]),
        [
            ['tick', 1, id],
            ['tick', 2, id],
            ['tick', 3, id],
        ],
    );
    close();
});

test('a thrown error comes back as its class with its code; an unknown request names the known ones', async () => {
    const { channel, close } = connect();
    await assert.rejects(channel.request('fail', { how: 'input' }), (err) => {
        assert.ok(err instanceof InputError);
        assert.deepEqual([err.code, err.message, err.detail], [ErrorCode.INPUT, '`a` must be a number', { a: 'x' }]);
        return true;
    });
    await assert.rejects(
        channel.request('fail', { how: 'memory' }),
        (err) => err instanceof OutOfMemoryError && err.detail.runtime === true,
    );
    await assert.rejects(channel.request('fail', { how: 'bug' }), (err) => {
        assert.ok(err instanceof KleinError);
        assert.equal(err.code, ErrorCode.INTERNAL);
        assert.match(err.message, /x is not a function/);
        return true;
    });
    await assert.rejects(channel.request(/** @type {any} */ ('paint'), {}), (err) => {
        assert.ok(err instanceof InputError);
        assert.match(err.message, /Unknown request type "paint"; expected one of add, count, bytes, wait, fail\./);
        return true;
    });
    close();
});

test('a result moves the buffers its handler names instead of copying them', async () => {
    const { channel, close } = connect();
    const bytes = await channel.request('bytes', { size: 1024 });
    assert.equal(bytes.length, 1024);
    assert.equal(bytes[1023], 7);
    assert.equal(made.at(-1)?.byteLength, 0, "the answering side's buffer moved");
    close();
});

test('failAll fails every waiting request at once, and a late answer to one of them is dropped', async () => {
    const { channel, close } = connect();
    const waiting = channel.request('wait', { ms: 20, say: 'late' });
    channel.failAll(new KleinError('the helper stopped', { code: ErrorCode.WORKER_CRASHED }));
    await assert.rejects(waiting, (err) => err instanceof KleinError && err.code === ErrorCode.WORKER_CRASHED);
    await new Promise((resolve) => setTimeout(resolve, 40));
    assert.equal(channel.waiting.size, 0);
    assert.equal(await channel.request('add', { a: 1, b: 2 }), 3, 'the channel still works');
    close();
});
