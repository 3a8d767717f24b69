// @ts-check
/**
 * @file onnxruntime-web's equivalent graph of a case on the same GPUDevice (the graph the Python side wrote, e.g.
 * attention as the converter exports it): its output rows for the check, and its GPU time per run from
 * onnxruntime's own profiler (timestamp queries around each of its kernels, summed per run; median over runs,
 * the first run left out).
 * @module lab/ort_compare
 */

import { createSession, float16, float32, profileEvents, release, run, uint8 } from '../runtime/ort.js';
import { median } from './timing.js';

/**
 * @typedef {Object} OrtResult
 * @property {number | null} ms  Median GPU milliseconds per run (null: the profile held no GPU times).
 * @property {number[]} runs
 * @property {number} kernels  GPU programs per run.
 * @property {Record<string, number>} programs  Milliseconds per run of each program (op&program).
 * @property {Uint8Array} output  The output's bytes.
 */

/**
 * @param {GPUDevice} device
 * @param {Uint8Array} graph
 * @param {Record<string, {dtype: string, data: Float32Array | Uint16Array | Uint32Array, dims: number[]}>} feeds
 *   'u32' data (packed 4-bit weights) is fed as the uint8 tensor of its bytes.
 * @param {string} outputName
 * @param {number} runs
 * @returns {Promise<OrtResult>}
 */
export async function runOrt(device, graph, feeds, outputName, runs) {
    const session = await createSession(graph, [], { ep: 'webgpu', device, profile: true });
    try {
        const tensors = Object.fromEntries(
            Object.entries(feeds).map(([name, { dtype, data, dims }]) => [
                name,
                dtype === 'u32'
                    ? uint8(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), dims)
                    : dtype === 'f16'
                      ? float16(/** @type {Uint16Array} */ (data), dims)
                      : float32(/** @type {Float32Array} */ (data), dims),
            ]),
        );
        /** @type {Record<string, import('../runtime/ort.js').HostTensor>} */
        let outputs = {};
        for (let i = 0; i < runs + 1; i++) outputs = await run(session, tensors);
        const events = await profileEvents(session);
        const api = events.filter((e) => e.cat === 'Api');
        const perRun = api.length / (runs + 1);
        /** @type {number[]} */
        const totals = [];
        /** @type {Record<string, number>} */
        const programs = {};
        if (Number.isInteger(perRun) && perRun > 0) {
            for (let r = 1; r <= runs; r++) {
                const slice = api.slice(r * perRun, (r + 1) * perRun);
                totals.push(slice.reduce((sum, e) => sum + e.dur, 0) / 1000);
                for (const e of slice) {
                    const [, op = '?', program = op] = String(e.name).split('&');
                    programs[`${op}&${program}`] = (programs[`${op}&${program}`] ?? 0) + e.dur / 1000 / runs;
                }
            }
        }
        const out = outputs[outputName];
        const data = /** @type {ArrayBufferView} */ (/** @type {unknown} */ (out.data));
        return {
            ms: totals.length ? median(totals) : null,
            runs: totals,
            kernels: Number.isInteger(perRun) ? perRun : 0,
            programs,
            output: new Uint8Array(data.buffer, data.byteOffset, data.byteLength),
        };
    } finally {
        await release(session);
    }
}
