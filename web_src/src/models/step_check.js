// @ts-check
/**
 * @file Our kernels' step against onnxruntime's (GenerateParams.stepCheck): the fidelity check for GPU runs.
 * @module models/step_check
 */

import { release } from '../runtime/ort.js';
import { filesToRead } from './graph_upload.js';
import { submitRun } from './session_runs.js';
import { compareSteps, isStepSession } from './step_session.js';

/** @typedef {import('./sessions.js').Sessions} Sessions */
/** @typedef {import('./step_session.js').AnySession} AnySession */
/** @typedef {import('./session_runs.js').HostInput} HostInput */
/** @typedef {import('./meter.js').Meter} Meter */
/** @typedef {import('../store/weights.js').WeightStore} WeightStore */
/** @typedef {import('./sessions.js').Pin} Pin */

/**
 * Run `inputs` on an onnxruntime session of the transformer, created beside our kernels' session for this one run
 * and then released, and compare its noise_pred with ours. Null when `session` is onnxruntime's already.
 * @param {Sessions} sessions
 * @param {AnySession} session  The transformer's session that computed `got`.
 * @param {Record<string, HostInput>} inputs
 * @param {Float32Array} got  Its noise_pred.
 * @param {{meter: Meter, signal?: AbortSignal, pin?: Pin}} options
 * @returns {Promise<import('../shared/types.js').StepCheck | null>}
 */
export async function checkStep(sessions, session, inputs, got, { meter, signal, pin }) {
    if (!isStepSession(session)) return null;
    const choice = sessions.source.requireChoice('transformer');
    const device = await sessions.gpu.getDevice();
    const store = /** @type {WeightStore} */ (sessions.source.store);
    const [graphBytes, ...data] = await store.readFiles(filesToRead(choice));
    // The check's session streams the weights again: not the job's transformer's count.
    const streamed = sessions.streamed.get('transformer') ?? 0;
    const onnx = await sessions.createOrt('transformer', choice, { graphBytes, data, device, signal, pin, meter });
    sessions.streamed.set('transformer', streamed);
    try {
        const { outputs } = await submitRun(sessions.gpu, onnx, inputs, { meter, what: 'The step on onnxruntime' });
        return compareSteps(got, /** @type {Float32Array} */ ((await outputs).noise_pred.data));
    } finally {
        await release(onnx).catch(() => {});
    }
}
