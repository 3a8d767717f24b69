// @ts-check
/** @file runtime/gpu_weights: weights streamed into GPU buffers, on a recording stand-in device. @module tests/js/test_gpu_weights */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { CHUNK_BYTES, READS_IN_FLIGHT, uploadWeights } from '../../web_src/src/runtime/gpu_weights.js';
import { runtimeError } from '../../web_src/src/runtime/errors.js';
import { DeviceLostError, ErrorCode, StoredFileError } from '../../web_src/src/shared/errors.js';

// WebGPU's usage flags, as a browser defines them.
Object.assign(globalThis, { GPUBufferUsage: { STORAGE: 0x80, COPY_DST: 0x8, COPY_SRC: 0x4 } });

/**
 * A device that keeps what is written into each buffer, and reports `oom` to the error scope around allocation.
 * @param {{oom?: boolean}} [options]
 */
function recordingDevice({ oom = false } = {}) {
    /** @type {{size: number, bytes: Uint8Array, destroyed: boolean}[]} */
    const buffers = [];
    let scopes = 0;
    const device = {
        buffers,
        get openScopes() {
            return scopes;
        },
        pushErrorScope() {
            scopes++;
        },
        async popErrorScope() {
            scopes--;
            return oom ? { message: 'Not enough memory left' } : null;
        },
        /** @param {{size: number}} descriptor */
        createBuffer({ size }) {
            const buffer = {
                size,
                bytes: new Uint8Array(size),
                destroyed: false,
                destroy() {
                    buffer.destroyed = true;
                },
            };
            buffers.push(buffer);
            return buffer;
        },
        queue: {
            /**
             * @param {{bytes: Uint8Array}} buffer
             * @param {number} at
             * @param {ArrayBufferLike} data
             * @param {number} offset
             * @param {number} length
             */
            writeBuffer(buffer, at, data, offset, length) {
                assert.equal(length % 4, 0, 'writes are whole 4-byte words');
                buffer.bytes.set(new Uint8Array(data, offset, length), at);
            },
            async onSubmittedWorkDone() {},
        },
    };
    return device;
}

/** A stored file: byte i is i mod 251. */
const STORED = Uint8Array.from({ length: CHUNK_BYTES + 5000 }, (_, i) => i % 251);
/** @type {ArrayBufferLike[]} The buffers reads were made into, in order. */
const readBuffers = [];
/** @type {(location: string, offset: number, into: Uint8Array) => Promise<void>} */
const read = async (location, offset, into) => {
    assert.equal(location, 'model.onnx_data');
    readBuffers.push(into.buffer);
    into.set(STORED.subarray(offset, offset + into.byteLength));
};

test('each weight lands whole in a buffer of its own, a large one in chunks, odd lengths padded', async () => {
    const device = recordingDevice();
    const weights = [
        { name: 'small', location: 'model.onnx_data', offset: 3, length: 10 }, // not a whole word
        { name: 'large', location: 'model.onnx_data', offset: 100, length: CHUNK_BYTES + 777 }, // two chunks
    ];
    /** @type {number[]} */
    const progress = [];
    const gpu = /** @type {GPUDevice} */ (/** @type {unknown} */ (device));
    const buffers = await uploadWeights(gpu, weights, read, { onBytes: (b) => progress.push(b) });
    assert.deepEqual([...buffers.keys()], ['small', 'large']);
    assert.equal(device.openScopes, 0);
    for (const weight of weights) {
        const buffer = /** @type {{size: number, bytes: Uint8Array}} */ (
            /** @type {unknown} */ (buffers.get(weight.name))
        );
        assert.equal(buffer.size % 16, 0);
        assert.ok(buffer.size >= weight.length);
        assert.deepEqual(
            buffer.bytes.subarray(0, weight.length),
            STORED.subarray(weight.offset, weight.offset + weight.length),
        );
    }
    assert.deepEqual(progress, [10, 10 + CHUNK_BYTES, 10 + CHUNK_BYTES + 777]);
});

test('reads reuse a ring of READS_IN_FLIGHT buffers, and a reused buffer pads with zeros, not its last bytes', async () => {
    const device = recordingDevice();
    const gpu = /** @type {GPUDevice} */ (/** @type {unknown} */ (device));
    // More chunks than the ring holds; the last weight's odd length reuses a slot that held a longer chunk.
    const weights = Array.from({ length: READS_IN_FLIGHT + 2 }, (_, i) => ({
        name: `w${i}`,
        location: 'model.onnx_data',
        offset: 1000 * i + 1,
        length: i === READS_IN_FLIGHT + 1 ? 9 : 999,
    }));
    readBuffers.length = 0;
    const buffers = await uploadWeights(gpu, weights, read);
    assert.equal(readBuffers.length, weights.length);
    assert.equal(new Set(readBuffers).size, READS_IN_FLIGHT);
    for (const weight of weights) {
        const { bytes } = /** @type {{bytes: Uint8Array}} */ (/** @type {unknown} */ (buffers.get(weight.name)));
        assert.deepEqual(
            bytes.subarray(0, weight.length),
            STORED.subarray(weight.offset, weight.offset + weight.length),
        );
        assert.ok(
            bytes.subarray(weight.length).every((b) => b === 0),
            `${weight.name}: past its bytes the buffer holds zeros`,
        );
    }
});

test('a device out of memory: every buffer destroyed, and an error the app reports as out of memory', async () => {
    const device = recordingDevice({ oom: true });
    const gpu = /** @type {GPUDevice} */ (/** @type {unknown} */ (device));
    const weights = [
        { name: 'a', location: 'model.onnx_data', offset: 0, length: 64 },
        { name: 'b', location: 'model.onnx_data', offset: 64, length: 64 },
    ];
    const err = await uploadWeights(gpu, weights, read).then(
        () => null,
        (e) => e,
    );
    assert.ok(err instanceof Error);
    assert.equal(device.buffers.length, 2);
    assert.ok(device.buffers.every((b) => b.destroyed));
    assert.equal(device.openScopes, 0);
    const alive = /** @type {import('../../web_src/src/runtime/gpu.js').Gpu} */ (
        /** @type {unknown} */ ({ lost: false, lostError: () => new DeviceLostError('lost') })
    );
    assert.equal(runtimeError(err, alive, 'Loading the transformer').code, ErrorCode.OUT_OF_MEMORY);
});

test('a failed read or a cancel destroys the buffers and passes the failure on', async () => {
    const device = recordingDevice();
    const gpu = /** @type {GPUDevice} */ (/** @type {unknown} */ (device));
    const weights = [{ name: 'a', location: 'model.onnx_data', offset: 0, length: 64 }];
    const failing = async () => {
        throw new Error('the store lost the file');
    };
    await assert.rejects(uploadWeights(gpu, weights, failing), /the store lost the file/);
    assert.ok(device.buffers.every((b) => b.destroyed));
    const controller = new AbortController();
    controller.abort();
    await assert.rejects(uploadWeights(gpu, weights, read, { signal: controller.signal }), { name: 'AbortError' });
    assert.equal(device.buffers.length, 2);
    assert.ok(device.buffers.every((b) => b.destroyed));
});

test('the buffers are kept only once the store has checked the bytes they hold', async () => {
    const device = recordingDevice();
    const gpu = /** @type {GPUDevice} */ (/** @type {unknown} */ (device));
    const weights = [{ name: 'a', location: 'model.onnx_data', offset: 0, length: 64 }];
    /** @type {string[]} */
    const order = [];
    const checked = async () => {
        order.push(
            `checked after ${device.buffers[0].bytes.subarray(0, 64).some((b) => b !== 0) ? 'the upload' : '?'}`,
        );
    };
    const buffers = await uploadWeights(gpu, weights, read, { verified: checked });
    assert.deepEqual(order, ['checked after the upload']);
    assert.ok(buffers.has('a') && !device.buffers[0].destroyed);

    const changed = async () => {
        throw new StoredFileError('model.onnx_data changed in this browser storage', { path: 'model.onnx_data' });
    };
    await assert.rejects(uploadWeights(gpu, weights, read, { verified: changed }), StoredFileError);
    assert.ok(device.buffers[1].destroyed, 'the buffers of bytes that failed the check are destroyed');
});
