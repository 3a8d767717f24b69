// @ts-check
/**
 * @file What the worker does when a job fails: run it again another way, or report the error. recoveryFor() decides,
 * runRecovering() runs a job and applies the decision; neither touches the GPU or the store but through the parts it
 * is given, so node tests every rule.
 * - An optional GPU feature that failed at its first use (GpuFeatureError): again without that feature.
 * - A run in fast memory mode that ran out of GPU memory or lost its device, when the request did not ask for
 *   fast mode itself: once more in lean mode (models/memory_mode.js), which holds one session at a time.
 * - A stored model file that is no longer the file that was downloaded (StoredFileError, store/stored_check.js):
 *   it is deleted from the store whatever happens next, and the job runs again, which downloads it (once per file).
 * - Anything else, a cancelled job included: no retry.
 * Each retry first releases the sessions; a job that fails or is cancelled after giving up a feature releases them
 * too, and turns the features back on (they were not the cause).
 * @module worker/recovery
 */

import { ErrorCode, GpuFeatureError, KleinError, StoredFileError } from '../shared/errors.js';

/** @typedef {import('../models/model.js').Model} Model */
/** @typedef {import('../runtime/gpu.js').Gpu} Gpu */

/**
 * @typedef {{kind: 'drop-feature', feature: string, reason: string} | {kind: 'lean', reason: string}
 *   | {kind: 'refetch', path: string, reason: string}} Recovery
 */

/**
 * @param {unknown} err
 * @param {{aborted: boolean, memoryMode: string, askedMemory: string | undefined, leanTried: boolean,
 *   refetched?: ReadonlySet<string>}} state  `memoryMode`: the mode the failed run used; `askedMemory`: the request's
 *   own `memory`; `leanTried`: this job already ran again in lean mode; `refetched`: the stored files this job
 *   already downloaded again.
 * @returns {Recovery | null}
 */
export function recoveryFor(err, { aborted, memoryMode, askedMemory, leanTried, refetched = new Set() }) {
    if (aborted || !(err instanceof KleinError)) return null;
    if (err instanceof StoredFileError && !refetched.has(err.detail.path))
        return { kind: 'refetch', path: err.detail.path, reason: err.message };
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

/**
 * Run `job`, and run it again another way while recoveryFor() finds one: without a GPU feature that failed (each
 * retry gives up one more feature the device has, so this ends), once in lean memory mode, or once per stored file
 * found changed, after deleting it. A job that succeeds without features has the browser remember that they fail
 * (Gpu.remember).
 * @template T
 * @param {() => Promise<T>} job
 * @param {{model: Pick<Model, 'sessions' | 'memory' | 'source'>, gpu: Pick<Gpu, 'dropFeature' | 'remember' |
 *   'restore'>, signal: AbortSignal, askedMemory: string | undefined, onEvent: (event: {type: 'stage',
 *   stage: 'load' | 'download', detail: string}) => void}} options  `askedMemory`: the request's own `memory`;
 *   `onEvent`: says why the job loads or downloads again.
 * @returns {Promise<T>}
 */
export async function runRecovering(job, { model, gpu, signal, askedMemory, onEvent }) {
    /** @type {string[]} Features given up during this job. */
    const dropped = [];
    let leanTried = false;
    /** @type {Set<string>} Stored files this job downloads again. */
    const refetched = new Set();
    for (;;) {
        try {
            const result = await job();
            await gpu.remember(dropped);
            return result;
        } catch (err) {
            // Never kept, whether or not this job runs again: the next one downloads it.
            if (err instanceof StoredFileError) await model.source.store?.forget(err.detail.path).catch(() => {});
            const recovery = recoveryFor(err, {
                aborted: signal.aborted,
                memoryMode: model.memory.current.mode,
                askedMemory,
                leanTried,
                refetched,
            });
            if (recovery?.kind === 'refetch') {
                refetched.add(recovery.path);
                onEvent({ type: 'stage', stage: 'download', detail: `${recovery.reason}: downloading it again` });
                continue;
            }
            if (recovery?.kind === 'drop-feature') {
                await model.sessions.releaseAll();
                gpu.dropFeature(recovery.feature, recovery.reason);
                dropped.push(recovery.feature);
                onEvent({
                    type: 'stage',
                    stage: 'load',
                    detail: `again without ${recovery.feature}, which failed in this browser`,
                });
                continue;
            }
            if (recovery?.kind === 'lean') {
                // This worker runs lean from now on: the machine could not hold the fast mode's sessions.
                leanTried = true;
                await model.sessions.releaseAll();
                model.memory.leanAfterFailure = recovery.reason;
                onEvent({ type: 'stage', stage: 'load', detail: `again in lean memory mode: ${recovery.reason}` });
                continue;
            }
            // Cancelled or failed mid-run: give the GPU memory back; the next run reloads from the store.
            if (signal.aborted || dropped.length > 0) await model.sessions.releaseAll();
            // Failing without the features as well, they were not the cause: the next job has them again.
            if (!signal.aborted) gpu.restore(dropped);
            throw signal.aborted ? signal.reason : err;
        }
    }
}
