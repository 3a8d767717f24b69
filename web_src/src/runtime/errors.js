// @ts-check
/**
 * @file onnxruntime's failures as errors the user can act on. onnxruntime-web reports device loss, memory
 * exhaustion and missing GPU features only in its message text; this module is the one place that reads it.
 * @module runtime/errors
 */

import { DeviceLostError, ErrorCode, KleinError, OutOfMemoryError } from '../shared/errors.js';

/** @typedef {import('./gpu.js').Gpu} Gpu */

const DEVICE_LOST = /device (is |was |has been )?lost|GPUDevice.*(lost|destroyed)/i;
const OUT_OF_MEMORY =
    /out of memory|\boom\b|failed to allocate|allocation failed|array buffer allocation|cannot allocate|exceeds? the (max|limit)/i;
const NEEDS_F16 = /requires f16/i;

/**
 * Map a runtime failure to the error the user can act on.
 * @param {unknown} err
 * @param {Gpu} gpu  A device lost under the call explains any failure, whatever its message.
 * @param {string} what  e.g. 'Loading transformer (q4)'.
 * @returns {KleinError}
 */
export function runtimeError(err, gpu, what) {
    if (err instanceof KleinError) return err;
    if (gpu.lost) return gpu.lostError();
    const message = err instanceof Error ? err.message : String(err);
    if (DEVICE_LOST.test(message)) {
        return new DeviceLostError(
            `${what} failed because the GPU device was lost (${message}). Press Generate again to reload.`,
        );
    }
    if (OUT_OF_MEMORY.test(message)) {
        return new OutOfMemoryError(
            `${what} ran out of memory (${message}). Try a smaller image size, close other tabs, or reload the page.`,
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
