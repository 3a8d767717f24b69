// @ts-check
/**
 * @file onnxruntime's failures as errors the user can act on. onnxruntime-web reports device loss, memory
 * exhaustion and missing GPU features only in its message text; this module is the one place that reads it.
 * @module runtime/errors
 */

import { DeviceLostError, ErrorCode, GpuFeatureError, KleinError, OutOfMemoryError } from '../shared/errors.js';
import { OPTIONAL_FEATURES } from './gpu.js';

/** @typedef {import('./gpu.js').Gpu} Gpu */

const DEVICE_LOST = /device (is |was |has been )?lost|GPUDevice.*(lost|destroyed)/i;
const OUT_OF_MEMORY =
    /out of memory|\boom\b|failed to allocate|allocation failed|array buffer allocation|cannot allocate|exceeds? the (max|limit)/i;
const NEEDS_F16 = /requires f16/i;
/** A shader or pipeline the browser would not build: what a feature it implements wrongly produces. onnxruntime-web
 * 1.31 creates pipelines asynchronously and reports a failed one at its first dispatch ("No cached or pending
 * pipeline for deferred dispatch: <program>"). */
const PIPELINE_FAILURE =
    /failed to create a webgpu compute pipeline|invalid shader ?module|shader ?module[^.]*(invalid|error)|error while parsing wgsl|shader compilation|no cached or pending pipeline/i;
/** Which optional feature a failing program uses, from the program's name in the message (onnxruntime names its
 * programs after their kernel: SubgroupMatrixMatMulNBits, DP4AMatMulNBits, ...). */
const FEATURE_HINTS = Object.freeze([
    /** @type {const} */ ([/subgroup_?matrix|subgroup-matrix/i, 'chromium-experimental-subgroup-matrix']),
    /** @type {const} */ ([/subgroup|dp4a/i, 'subgroups']),
    /** @type {const} */ ([/\bf16\b|fp16|shader-f16/i, 'shader-f16']),
]);
/** The feature a device lost before its first run is blamed on: the experimental one, and only that (a loss
 * from running out of memory must not strip the device of the features that make it fast). */
const EXPERIMENTAL_FEATURE = 'chromium-experimental-subgroup-matrix';

/**
 * The part of an onnxruntime failure a person reads: the browser's own sentence, without onnxruntime's build
 * path and call prefix ("failed to call OrtRun(). ... [ONNXRuntimeError] : 1 : FAIL : Failed to create ...").
 * @param {string} message
 * @returns {string}
 */
export function failureSummary(message) {
    const tail = message.replace(/^[\s\S]*\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*/, '');
    return tail.split('\n')[0].trim() || message.trim();
}

/**
 * The optional feature to give up for a shader or pipeline failure: the one the message names, if the device has
 * it, else the most experimental one it has; null when it has none (then no feature is to blame).
 * @param {string} message
 * @param {readonly string[]} granted  The device's features.
 * @returns {string | null}
 */
export function featureAtFault(message, granted) {
    const optional = OPTIONAL_FEATURES.filter((f) => granted.includes(f));
    if (optional.length === 0) return null;
    const named = FEATURE_HINTS.find(([pattern]) => pattern.test(message))?.[1];
    return named && optional.includes(named) ? named : optional[0];
}

/**
 * Map a runtime failure to the error the user can act on.
 * @param {unknown} err
 * @param {Gpu} gpu  A device lost under the call explains any failure, whatever its message.
 * @param {string} what  e.g. 'Loading transformer (q4)'.
 * @returns {KleinError}
 */
export function runtimeError(err, gpu, what) {
    if (err instanceof KleinError) return err;
    const message = err instanceof Error ? err.message : String(err);
    const granted = gpu.grant?.features ?? [];
    if (PIPELINE_FAILURE.test(message)) {
        const feature = featureAtFault(message, granted);
        if (feature) {
            return new GpuFeatureError(
                `${what} failed: the browser could not build a GPU program that uses ${feature} (${message}).`,
                { feature, cause: failureSummary(message) },
            );
        }
    }
    if (gpu.lost) {
        if (!gpu.used && granted.includes(EXPERIMENTAL_FEATURE)) {
            return new GpuFeatureError(
                `${what} failed: the GPU device was lost before its first run finished (${gpu.lostMessage}).`,
                { feature: EXPERIMENTAL_FEATURE, cause: `device lost before its first run: ${gpu.lostMessage}` },
            );
        }
        return gpu.lostError();
    }
    if (DEVICE_LOST.test(message)) {
        return new DeviceLostError(
            `${what} failed because the GPU device was lost (${message}). Press Generate again to reload.`,
        );
    }
    if (OUT_OF_MEMORY.test(message)) {
        return new OutOfMemoryError(
            `${what} ran out of memory (${failureSummary(message)}). Choose the lean memory mode or a smaller ` +
                'image size, close other GPU-heavy tabs, or reload the page.',
            { runtime: true },
        );
    }
    if (NEEDS_F16.test(message)) {
        return new KleinError(
            `${what} needs shader-f16, which this GPU lacks (${message}). Choose the fp32 precision.`,
            { code: ErrorCode.UNSUPPORTED },
        );
    }
    return new KleinError(`${what} failed: ${message}`, { code: ErrorCode.RUNTIME, cause: err });
}
