// @ts-check
/**
 * @file What the worker does when a job fails: run it again another way, or report the error. recoveryFor() decides,
 * runRecovering() runs a job and applies the decision; neither touches the GPU or the store but through the parts it
 * is given, so node tests every rule.
 * - An optional GPU feature that failed at its first use (GpuFeatureError): again without that feature.
 * - A run in fast memory mode that ran out of GPU memory or lost its device, when the request did not ask for
 *   fast mode itself: once more in lean mode (models/memory_mode.js), which holds one session at a time.
 * - Half precision that overflowed (NaN or infinity in the text encoder's or the transformer's output, from q4f16 or
 *   fp16 graphs): once more on the same weights' graphs with fp32 activations (q4, fp32) where the repository has
 *   them, remembered for that model in this browser (store/feature_memory.js precisionMemory) so later runs start
 *   there; where it has none, one sentence naming what overflowed.
 * - A stored model file that is no longer the file that was downloaded (StoredFileError, store/stored_check.js):
 *   it is deleted from the store whatever happens next, and the job runs again, which downloads it (once per file).
 * - Anything else, a cancelled job included: no retry.
 * Each retry first releases the sessions; a job that fails or is cancelled after giving up a feature releases them
 * too, and turns the features back on (they were not the cause).
 * @module worker/recovery
 */

import { activationFallback } from '../models/graph_choice.js';
import { DegenerateOutputError, ErrorCode, GpuFeatureError, KleinError, StoredFileError } from '../shared/errors.js';

/** @typedef {import('../models/model.js').Model} Model */
/** @typedef {import('../runtime/gpu.js').Gpu} Gpu */

/**
 * @typedef {{kind: 'drop-feature', feature: string, reason: string} | {kind: 'lean', reason: string}
 *   | {kind: 'precision', precision: string, reason: string} | {kind: 'refetch', path: string, reason: string}} Recovery
 */

/**
 * @typedef {Object} PrecisionMemory  The precision each model falls back to in this browser (store/feature_memory.js).
 * @property {(modelBase: string) => Promise<{precision: string, reason: string} | null>} recall
 * @property {(modelBase: string, precision: string, reason: string) => Promise<void>} remember
 */

/** @param {unknown} err @returns {err is KleinError} A half-precision overflow of the text encoder or transformer. */
function overflowed(err) {
    return (
        err instanceof KleinError &&
        err.code === ErrorCode.DEGENERATE_OUTPUT &&
        err.detail?.nonFinite === true &&
        (err.detail.component === 'text_encoder' || err.detail.component === 'transformer')
    );
}

/**
 * @param {unknown} err
 * @param {{aborted: boolean, memoryMode: string, askedMemory: string | undefined, leanTried: boolean,
 *   fallback?: {from: string, to: string | null} | null, refetched?: ReadonlySet<string>}} state
 *   `memoryMode`: the mode the failed run used; `askedMemory`: the request's own `memory`; `leanTried`: this job
 *   already ran again in lean mode; `fallback`: the failed run's half-precision variant and its fp32-activation
 *   sibling in the repository (models/graph_choice.js activationFallback), null when it ran fp32 activations;
 *   `refetched`: the stored files this job already downloaded again.
 * @returns {Recovery | null}
 */
export function recoveryFor(
    err,
    { aborted, memoryMode, askedMemory, leanTried, fallback = null, refetched = new Set() },
) {
    if (aborted || !(err instanceof KleinError)) return null;
    if (err instanceof StoredFileError && !refetched.has(err.detail.path))
        return { kind: 'refetch', path: err.detail.path, reason: err.message };
    if (overflowed(err) && fallback?.to) {
        return {
            kind: 'precision',
            precision: fallback.to,
            reason: `the ${fallback.from} ${err.detail.component.replace('_', ' ')} overflowed half precision (${err.message.split(' (')[0]})`,
        };
    }
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
 * (Gpu.remember). A request that asks for no precision starts on the one this browser remembers for its model; one
 * that overflowed half precision runs again on the fp32-activation graphs, and its result's notes say so.
 * @template T
 * @param {(overrides: {precision?: string}) => Promise<T>} job  Runs the request with `overrides` on its params.
 * @param {{model: Pick<Model, 'sessions' | 'memory' | 'source'>, gpu: Pick<Gpu, 'dropFeature' | 'remember' |
 *   'restore'>, signal: AbortSignal, askedMemory: string | undefined, onEvent: (event: {type: 'stage',
 *   stage: 'load' | 'download', detail: string}) => void, precisions?: PrecisionMemory, modelBase?: string,
 *   askedPrecision?: string}} options  `askedMemory`, `askedPrecision`: the request's own `memory` and `precision`;
 *   `onEvent`: says why the job loads or downloads again; `precisions`, `modelBase`: where the model's fallback
 *   precision is kept.
 * @returns {Promise<T>}
 */
export async function runRecovering(
    job,
    { model, gpu, signal, askedMemory, onEvent, precisions, modelBase, askedPrecision },
) {
    /** @type {string[]} Features given up during this job. */
    const dropped = [];
    let leanTried = false;
    /** @type {Set<string>} Stored files this job downloads again. */
    const refetched = new Set();
    /** @type {{precision?: string}} */
    const overrides = {};
    /** @type {string[]} What the result's notes say about the precision it ran on. */
    const precisionNotes = [];
    const remembered =
        askedPrecision === undefined && precisions && modelBase
            ? await precisions.recall(modelBase).catch(() => null)
            : null;
    if (remembered) {
        overrides.precision = remembered.precision;
        precisionNotes.push(
            `Ran the ${remembered.precision} graphs, as this browser remembers for this model: ${remembered.reason}.`,
        );
    }
    for (;;) {
        try {
            const result = await job(overrides);
            await gpu.remember(dropped);
            const notes = /** @type {{notes?: unknown} | null} */ (result)?.notes;
            if (precisionNotes.length > 0 && Array.isArray(notes)) notes.push(...precisionNotes);
            return result;
        } catch (err) {
            // Never kept, whether or not this job runs again: the next one downloads it.
            if (err instanceof StoredFileError) await model.source.store?.forget(err.detail.path).catch(() => {});
            // The remembered precision is gone from a re-converted repository: run as if none were remembered.
            const rememberedGone =
                remembered &&
                overrides.precision === remembered.precision &&
                err instanceof KleinError &&
                err.code === ErrorCode.INPUT &&
                err.detail?.precision === remembered.precision;
            if (rememberedGone) {
                delete overrides.precision;
                precisionNotes.length = 0;
                continue;
            }
            const source = model.source;
            const fallback =
                overflowed(err) && !overrides.precision && source?.manifest && source.choices
                    ? activationFallback(source.manifest, source.choices)
                    : null;
            const recovery = recoveryFor(err, {
                aborted: signal.aborted,
                memoryMode: model.memory.current.mode,
                askedMemory,
                leanTried,
                fallback,
                refetched,
            });
            if (recovery?.kind === 'refetch') {
                refetched.add(recovery.path);
                onEvent({ type: 'stage', stage: 'download', detail: `${recovery.reason}: downloading it again` });
                continue;
            }
            if (recovery?.kind === 'precision') {
                await model.sessions.releaseAll();
                overrides.precision = recovery.precision;
                precisionNotes.push(
                    `Ran again on the ${recovery.precision} graphs (fp32 activations): ${recovery.reason}.`,
                );
                if (precisions && modelBase) await precisions.remember(modelBase, recovery.precision, recovery.reason);
                onEvent({
                    type: 'stage',
                    stage: 'load',
                    detail: `again on the ${recovery.precision} graphs: ${recovery.reason}`,
                });
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
            if (fallback && !fallback.to && !signal.aborted && err instanceof KleinError) {
                const component = String(err.detail.component).replace('_', ' ');
                throw new DegenerateOutputError(
                    `The ${fallback.from} ${component} overflowed half precision (${err.message.split(' (')[0]}), ` +
                        `and this model has no graphs with fp32 activations to run it on instead.`,
                    err.detail,
                );
            }
            throw signal.aborted ? signal.reason : err;
        }
    }
}
