// @ts-check
/**
 * @file What the worker does when a job fails: run it again another way, or report the error. Pure, so node tests
 * every rule (worker/main.js applies the answer).
 * - An optional GPU feature that failed at its first use (GpuFeatureError): again without that feature.
 * - A run in fast memory mode that ran out of GPU memory or lost its device, when the request did not ask for
 *   fast mode itself: once more in lean mode (models/memory_mode.js), which holds one session at a time.
 * - Anything else, a cancelled job included: no retry.
 * @module worker/recovery
 */

import { ErrorCode, GpuFeatureError, KleinError } from '../shared/errors.js';

/**
 * @typedef {{kind: 'drop-feature', feature: string, reason: string} | {kind: 'lean', reason: string}} Recovery
 */

/**
 * @param {unknown} err
 * @param {{aborted: boolean, memoryMode: string, askedMemory: string | undefined, leanTried: boolean}} state
 *   `memoryMode`: the mode the failed run used; `askedMemory`: the request's own `memory`; `leanTried`: this job
 *   already ran again in lean mode.
 * @returns {Recovery | null}
 */
export function recoveryFor(err, { aborted, memoryMode, askedMemory, leanTried }) {
    if (aborted || !(err instanceof KleinError)) return null;
    if (err instanceof GpuFeatureError)
        return { kind: 'drop-feature', feature: err.detail.feature, reason: err.detail.cause };
    const ranOutOfMemory = err.code === ErrorCode.OUT_OF_MEMORY && err.detail?.runtime === true;
    if (
        (ranOutOfMemory || err.code === ErrorCode.DEVICE_LOST) &&
        memoryMode === 'fast' &&
        askedMemory === undefined &&
        !leanTried
    ) {
        const what = ranOutOfMemory ? 'ran out of memory' : 'lost the GPU device';
        return { kind: 'lean', reason: `fast mode ${what} (${err.message.slice(0, 200)})` };
    }
    return null;
}
