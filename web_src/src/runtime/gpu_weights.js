// @ts-check
/**
 * @file Weights the app uploads to the GPU itself (models/graph_weights.js chooses them): each in a GPU buffer of
 * its own, streamed from the store in chunks with a bounded amount queued, so the tab holds a few chunks of a graph
 * at a time instead of the whole graph and its copies.
 * @module runtime/gpu_weights
 */

/** One read from the store: large weights (the token embedding) arrive in several. */
export const CHUNK_BYTES = 16 * 1024 * 1024;
/** Chunks read from the store at once (the store reads faster with several reads under way). */
export const READS_IN_FLIGHT = 4;
/** Bytes queued to the GPU before waiting for it to take them: the upload staging the tab may hold. */
export const QUEUED_BYTES = 128 * 1024 * 1024;

/**
 * @typedef {Object} WeightSource  Where one weight's bytes are, and what its buffer holds.
 * @property {string} name
 * @property {string} location  The external-data file's bare name.
 * @property {number} offset
 * @property {number} length
 */

/**
 * Upload `weights` into GPU buffers, in order. Any failure (a read, the device running out of memory) destroys the
 * buffers and throws.
 * @param {GPUDevice} device
 * @param {WeightSource[]} weights
 * @param {(location: string, offset: number, into: Uint8Array) => Promise<void>} readInto  Fill `into` with the stored
 *   bytes from `offset` on (throwing when the file has fewer).
 * @param {{signal?: AbortSignal, onBytes?: (bytes: number) => void, verified?: () => Promise<void>}} [options]
 *   `onBytes`: bytes uploaded so far; `verified`: waited for once every byte is uploaded (the store's check of the
 *   files read, store/stored_check.js), so the buffers are destroyed when the bytes were not the model's.
 * @returns {Promise<Map<string, GPUBuffer>>}
 */
export async function uploadWeights(device, weights, readInto, { signal, onBytes, verified } = {}) {
    // Every buffer is made first, inside one error scope opened and closed in this same task, so no other GPU
    // work of the device (onnxruntime's) can land in it; running out of memory is reported to it.
    device.pushErrorScope('out-of-memory');
    /** @type {Map<string, GPUBuffer>} */
    const buffers = new Map(
        weights.map((weight) => [
            weight.name,
            device.createBuffer({
                // Kernels read whole 16-byte vectors; writes are whole 4-byte words.
                size: Math.max(16, Math.ceil(weight.length / 16) * 16),
                usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC,
            }),
        ]),
    );
    const allocated = device.popErrorScope();
    const chunks = weights.flatMap((weight) => {
        const parts = [];
        for (let at = 0; at < weight.length; at += CHUNK_BYTES)
            parts.push({ weight, at, length: Math.min(CHUNK_BYTES, weight.length - at) });
        return parts;
    });
    // Reads run READS_IN_FLIGHT chunks ahead of the copy to the GPU, each into a buffer of a ring that is reused once
    // its chunk is written (writeBuffer copies the bytes at the call), so the upload allocates READS_IN_FLIGHT chunks.
    const ring = Array.from({ length: Math.min(READS_IN_FLIGHT, chunks.length) }, () => new Uint8Array(CHUNK_BYTES));
    /** @type {Promise<Uint8Array>[]} */
    const reads = [];
    const readAhead = (/** @type {number} */ i) => {
        if (i >= chunks.length) return;
        const { weight, at, length } = chunks[i];
        // Padded to whole 4-byte words (writeBuffer's unit) with zeros.
        const into = ring[i % ring.length].subarray(0, Math.ceil(length / 4) * 4);
        into.fill(0, length);
        const read = readInto(weight.location, weight.offset + at, into.subarray(0, length)).then(() => into);
        read.catch(() => {});
        reads[i] = read;
    };
    try {
        const error = await allocated;
        if (error) throw new Error(`Out of memory allocating the weights on the GPU: ${error.message}`);
        for (let i = 0; i < ring.length; i++) readAhead(i);
        let uploaded = 0;
        let queued = 0;
        for (const [i, chunk] of chunks.entries()) {
            signal?.throwIfAborted();
            const bytes = await reads[i];
            delete reads[i];
            const buffer = /** @type {GPUBuffer} */ (buffers.get(chunk.weight.name));
            device.queue.writeBuffer(buffer, chunk.at, bytes.buffer, bytes.byteOffset, bytes.byteLength);
            readAhead(i + ring.length);
            uploaded += chunk.length;
            queued += chunk.length;
            onBytes?.(uploaded);
            if (queued >= QUEUED_BYTES) {
                // The staging copies are freed once the GPU has taken them.
                await device.queue.onSubmittedWorkDone();
                queued = 0;
            }
        }
        await device.queue.onSubmittedWorkDone();
        await verified?.();
        return buffers;
    } catch (err) {
        for (const buffer of buffers.values()) buffer.destroy();
        throw err;
    }
}
