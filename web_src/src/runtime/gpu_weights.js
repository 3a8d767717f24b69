// @ts-check
/**
 * @file Weights the app uploads to the GPU itself (pipeline/graph_weights.js chooses them): each in a GPU buffer of
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
 * buffers made so far and throws.
 * @param {GPUDevice} device
 * @param {WeightSource[]} weights
 * @param {(location: string, offset: number, length: number) => Promise<Uint8Array>} read  The stored bytes.
 * @param {{signal?: AbortSignal, onBytes?: (bytes: number) => void}} [options]  `onBytes`: bytes uploaded so far.
 * @returns {Promise<Map<string, GPUBuffer>>}
 */
export async function uploadWeights(device, weights, read, { signal, onBytes } = {}) {
    /** @type {Map<string, GPUBuffer>} */
    const buffers = new Map();
    const chunks = weights.flatMap((weight) => {
        const parts = [];
        for (let at = 0; at < weight.length; at += CHUNK_BYTES)
            parts.push({ weight, at, length: Math.min(CHUNK_BYTES, weight.length - at) });
        return parts;
    });
    const fetchChunk = (/** @type {typeof chunks[number]} */ c) =>
        read(c.weight.location, c.weight.offset + c.at, c.length);
    let uploaded = 0;
    let queued = 0;
    // Allocation failures surface here, not at createBuffer (WebGPU reports them to the innermost error scope).
    device.pushErrorScope('out-of-memory');
    let scoped = true;
    // Reads run READS_IN_FLIGHT chunks ahead of the copy to the GPU.
    /** @type {Promise<Uint8Array>[]} */
    const reads = [];
    const readAhead = (/** @type {number} */ i) => {
        if (i >= chunks.length) return;
        const read = fetchChunk(chunks[i]);
        read.catch(() => {});
        reads[i] = read;
    };
    for (let i = 0; i < READS_IN_FLIGHT; i++) readAhead(i);
    try {
        for (const [i, chunk] of chunks.entries()) {
            signal?.throwIfAborted();
            const bytes = wholeWords(await reads[i]);
            delete reads[i];
            readAhead(i + READS_IN_FLIGHT);
            let buffer = buffers.get(chunk.weight.name);
            if (!buffer) {
                buffer = device.createBuffer({
                    // Kernels read whole 16-byte vectors; writes are whole 4-byte words.
                    size: Math.max(16, Math.ceil(chunk.weight.length / 16) * 16),
                    usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC,
                });
                buffers.set(chunk.weight.name, buffer);
            }
            device.queue.writeBuffer(buffer, chunk.at, bytes.buffer, bytes.byteOffset, bytes.byteLength);
            uploaded += chunk.length;
            queued += chunk.length;
            onBytes?.(uploaded);
            if (queued >= QUEUED_BYTES) {
                // The staging copies are freed once the GPU has taken them.
                await device.queue.onSubmittedWorkDone();
                queued = 0;
            }
        }
        for (const weight of weights) {
            // A weight of no bytes still needs its (empty) buffer.
            if (!buffers.has(weight.name))
                buffers.set(
                    weight.name,
                    device.createBuffer({ size: 16, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST }),
                );
        }
        await device.queue.onSubmittedWorkDone();
        scoped = false;
        const error = await device.popErrorScope();
        if (error) throw new Error(`Out of memory uploading the weights to the GPU: ${error.message}`);
        return buffers;
    } catch (err) {
        if (scoped) await device.popErrorScope().catch(() => null);
        for (const buffer of buffers.values()) buffer.destroy();
        throw err;
    }
}

/**
 * `bytes` padded with zeros to a whole number of 4-byte words (writeBuffer's unit).
 * @param {Uint8Array} bytes
 * @returns {Uint8Array}
 */
function wholeWords(bytes) {
    if (bytes.byteLength % 4 === 0) return bytes;
    const padded = new Uint8Array(Math.ceil(bytes.byteLength / 4) * 4);
    padded.set(bytes);
    return padded;
}
