// @ts-check
/**
 * @file GPU time of a kernel from timestamp queries: each pass records `dispatches` back-to-back calls of the
 * kernel into one command buffer between two empty timestamped compute passes, so the figure is the time per
 * call in a stream of calls (launch gaps included, host work excluded). The median over passes is reported.
 * @module lab/timing
 */

/**
 * @typedef {Object} Timing
 * @property {number} ms  Median per-call milliseconds over the passes.
 * @property {number[]} passes  Per-call milliseconds of each pass.
 * @property {number} dispatches  Calls per pass.
 */

/**
 * @param {number[]} values
 * @returns {number}
 */
export function median(values) {
    const sorted = [...values].sort((a, b) => a - b);
    const middle = Math.floor(sorted.length / 2);
    return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

/**
 * Nanoseconds between the two timestamps of each of `count` recorded passes.
 * @param {GPUDevice} device
 * @param {(encoder: GPUCommandEncoder, querySet: GPUQuerySet, pass: number) => void} recordPass
 * @param {number} count
 * @returns {Promise<number[]>}
 */
async function timedPasses(device, recordPass, count) {
    const querySet = device.createQuerySet({ type: 'timestamp', count: 2 * count });
    const resolved = device.createBuffer({
        size: 16 * count,
        usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC,
    });
    const readback = device.createBuffer({
        size: 16 * count,
        usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    try {
        for (let pass = 0; pass < count; pass++) {
            const encoder = device.createCommandEncoder();
            recordPass(encoder, querySet, pass);
            device.queue.submit([encoder.finish()]);
            await device.queue.onSubmittedWorkDone();
        }
        const encoder = device.createCommandEncoder();
        encoder.resolveQuerySet(querySet, 0, 2 * count, resolved, 0);
        encoder.copyBufferToBuffer(resolved, 0, readback, 0, 16 * count);
        device.queue.submit([encoder.finish()]);
        await readback.mapAsync(GPUMapMode.READ);
        const stamps = new BigInt64Array(readback.getMappedRange().slice(0));
        readback.unmap();
        return Array.from({ length: count }, (_, i) => Number(stamps[2 * i + 1] - stamps[2 * i]));
    } finally {
        querySet.destroy();
        resolved.destroy();
        readback.destroy();
    }
}

/**
 * Time `record` (one call of a kernel into an encoder). The call count per pass is chosen from a first timed
 * call so that a pass lasts about `targetMs`, within [minDispatches, maxDispatches].
 * @param {GPUDevice} device
 * @param {(encoder: GPUCommandEncoder) => void} record
 * @param {{passes?: number, targetMs?: number, minDispatches?: number, maxDispatches?: number}} [options]
 * @returns {Promise<Timing>}
 */
export async function timeKernel(
    device,
    record,
    { passes = 5, targetMs = 60, minDispatches = 10, maxDispatches = 500 } = {},
) {
    const bracket =
        (/** @type {number} */ n) =>
        (/** @type {GPUCommandEncoder} */ encoder, /** @type {GPUQuerySet} */ querySet, /** @type {number} */ pass) => {
            encoder.beginComputePass({ timestampWrites: { querySet, beginningOfPassWriteIndex: 2 * pass } }).end();
            for (let i = 0; i < n; i++) record(encoder);
            encoder.beginComputePass({ timestampWrites: { querySet, endOfPassWriteIndex: 2 * pass + 1 } }).end();
        };
    // A first pass compiles and warms caches; its figure sizes the real passes.
    const [first] = await timedPasses(device, bracket(2), 1);
    const perCall = Math.max(first / 2, 1) / 1e6;
    const dispatches = Math.max(minDispatches, Math.min(maxDispatches, Math.ceil(targetMs / perCall)));
    const times = await timedPasses(device, bracket(dispatches), passes);
    const perPass = times.map((ns) => ns / dispatches / 1e6);
    return { ms: median(perPass), passes: perPass, dispatches };
}
