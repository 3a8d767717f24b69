// @ts-check
/**
 * @file Running a session on CPU tensors: its inputs made into runtime tensors, the run queued, its outputs
 * checked against the device's state on their way back, the time metered, and failures mapped to user-facing
 * errors. Sessions.submit() runs sessions through here.
 * @module models/session_runs
 */

import { runtimeError } from '../runtime/errors.js';
import { float32, int64, submit } from '../runtime/ort.js';
import { mark } from './meter.js';
import { isStepSession, stepKernelsError, submitStep } from './step_session.js';

/** @typedef {import('../runtime/gpu.js').Gpu} Gpu */
/** @typedef {import('../runtime/ort.js').HostTensor} HostTensor  A session output, on the CPU. */
/** @typedef {import('./meter.js').Meter} Meter */

/**
 * @typedef {Object} HostInput  A CPU tensor the pipeline hands to a session.
 * @property {Float32Array | BigInt64Array} data
 * @property {number[]} dims
 */

/**
 * Run `session` on CPU tensors: resolves once its work is queued, with its outputs on their way to the CPU
 * (`outputs`).
 * @param {Gpu} gpu  The shared device the session may run on.
 * @param {import('./step_session.js').AnySession} session  An onnxruntime session, or the transformer on our kernels.
 * @param {Record<string, HostInput>} inputs  By graph input name.
 * @param {{meter: Meter, what: string}} options
 * @returns {Promise<{outputs: Promise<Record<string, HostTensor>>}>}
 */
export async function submitRun(gpu, session, inputs, { meter, what }) {
    if (isStepSession(session)) return submitStepRun(gpu, session, inputs, { meter, what });
    /** @type {Record<string, import('../runtime/ort.js').Tensor>} */
    const feeds = {};
    for (const [name, input] of Object.entries(inputs)) {
        feeds[name] =
            input.data instanceof BigInt64Array ? int64(input.data, input.dims) : float32(input.data, input.dims);
    }
    const started = performance.now();
    const fail = (/** @type {unknown} */ err) => {
        throw runtimeError(err, gpu, what);
    };
    const queued = await submit(session, feeds).catch(fail);
    const outputs = queued.outputs
        .then((host) => {
            // Outputs read back from a device that died during the run cannot be trusted.
            if (gpu.lost) throw new Error(gpu.lostMessage ?? 'device lost');
            if (session.ep === 'webgpu') gpu.used = true;
            return host;
        })
        .catch(fail)
        .finally(() => {
            meter.runMs += performance.now() - started;
            mark(meter, what, started);
        });
    return { outputs };
}

/**
 * submitRun() for the transformer on our kernels: a failure of theirs gives them up (models/step_session.js).
 * @param {Gpu} gpu
 * @param {import('./step_session.js').StepSession} session
 * @param {Record<string, HostInput>} inputs
 * @param {{meter: Meter, what: string}} options
 * @returns {Promise<{outputs: Promise<Record<string, HostTensor>>}>}
 */
async function submitStepRun(gpu, session, inputs, { meter, what }) {
    const started = performance.now();
    const fail = (/** @type {unknown} */ err) => {
        throw stepKernelsError(err, gpu, what);
    };
    const queued = await submitStep(session, inputs).catch(fail);
    const outputs = queued.outputs
        .then((host) => {
            if (gpu.lost) throw new Error(gpu.lostMessage ?? 'device lost');
            gpu.used = true;
            return host;
        })
        .catch(fail)
        .finally(() => {
            meter.runMs += performance.now() - started;
            mark(meter, what, started);
        });
    return { outputs };
}
