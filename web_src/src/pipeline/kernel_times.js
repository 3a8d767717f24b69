// @ts-check
/**
 * @file kernelTimes(): where the GPU time of a profiled run went, per component and kernel program, from
 * onnxruntime's profile events (runtime/ort.js profileEvents). A run asks for it with GenerateParams.profile.
 *
 * onnxruntime's WebGPU EP names each GPU dispatch `<node>&<op>&<program>` in an 'Api' event whose `dur` is the
 * program's GPU time (timestamp queries, microseconds). The program is the kernel path the EP chose for the node:
 * e.g. MatMulNBits runs as `MatMulNBitsWideTile`, or with the matrix units as a subgroup-matrix program; attention
 * decomposed into MatMul + Softmax + MatMul shows as those. 'Node' events carry the CPU side of each node, and
 * the provider that ran it (CPU-placed nodes are the ones to look at there).
 * @module pipeline/kernel_times
 */

/** Kernels listed one by one per component; the rest are summed into one line. */
export const KERNELS_LISTED = 20;

/** @typedef {import('../shared/types.js').ProfileEvent} ProfileEvent */
/** @typedef {import('../shared/types.js').ComponentKernels} ComponentKernels */

/**
 * @param {Partial<Record<string, ProfileEvent[]>>} eventsByComponent
 * @returns {Record<string, ComponentKernels>}
 */
export function kernelTimes(eventsByComponent) {
    /** @type {Record<string, ComponentKernels>} */
    const out = {};
    for (const [component, events = []] of Object.entries(eventsByComponent)) {
        const runDurations = events.filter((e) => e.cat === 'Session' && e.name === 'model_run').map((e) => e.dur);
        const runs = Math.max(1, runDurations.length);
        /** @type {Map<string, {op: string, program: string, calls: number, us: number}>} */
        const byProgram = new Map();
        let gpuUs = 0;
        let cpuNodeUs = 0;
        let hostUs = 0;
        for (const event of events) {
            if (event.cat === 'Api') {
                const [, op = '?', program = op] = String(event.name).split('&');
                const key = `${op}\u0000${program}`;
                const entry = byProgram.get(key) ?? { op, program, calls: 0, us: 0 };
                entry.calls += 1;
                entry.us += event.dur;
                byProgram.set(key, entry);
                gpuUs += event.dur;
            } else if (event.cat === 'Node' && event.args?.provider === 'CPUExecutionProvider') {
                cpuNodeUs += event.dur;
            } else if (event.cat === 'Node') {
                hostUs += event.dur; // the EP's CPU side of a GPU node: binding, uniforms, dispatch recording
            }
        }
        const sorted = [...byProgram.values()].sort((a, b) => b.us - a.us);
        const listed = sorted.slice(0, KERNELS_LISTED);
        const rest = sorted.slice(KERNELS_LISTED);
        if (rest.length > 0) {
            listed.push({
                op: 'other',
                program: `${rest.length} more programs`,
                calls: rest.reduce((sum, e) => sum + e.calls, 0),
                us: rest.reduce((sum, e) => sum + e.us, 0),
            });
        }
        out[component] = {
            runs: runDurations.length,
            dispatches: events.filter((e) => e.cat === 'Api').length / runs,
            runMs: runDurations.reduce((sum, us) => sum + us, 0) / runs / 1000,
            gpuMs: gpuUs / runs / 1000,
            cpuNodeMs: cpuNodeUs / runs / 1000,
            hostMs: hostUs / runs / 1000,
            kernels: listed.map((e) => ({
                op: e.op,
                program: e.program,
                calls: e.calls / runs,
                gpuMs: e.us / runs / 1000,
                share: gpuUs > 0 ? e.us / gpuUs : 0,
            })),
        };
    }
    return out;
}
