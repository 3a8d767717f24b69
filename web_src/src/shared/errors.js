// @ts-check
/**
 * @file Every error class of the app, each with a stable `code` the UI switches on. Errors cross the
 * worker boundary as plain objects through `serializeError` / `deserializeError`, never as strings.
 * @module shared/errors
 */

export class KleinError extends Error {
    /**
     * @param {string} message What went wrong and what the user can do about it.
     * @param {{code?: string, detail?: any, cause?: unknown}} [options]
     */
    constructor(message, { code = 'internal', detail = undefined, cause = undefined } = {}) {
        super(message, cause === undefined ? undefined : { cause });
        this.name = 'KleinError';
        this.code = code;
        this.detail = detail;
    }
}

/** Bad parameters (size not a multiple of 16, empty prompt...): rejected before any work starts. */
export class InputError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: 'input', detail });
        this.name = 'InputError';
    }
}

/** No `navigator.gpu`, or no adapter: the message names the browser and flags that fix it. */
export class NoWebGPUError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: 'no-webgpu', detail });
        this.name = 'NoWebGPUError';
    }
}

export class DeviceLostError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: 'device-lost', detail });
        this.name = 'DeviceLostError';
    }
}

export class OutOfMemoryError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: 'out-of-memory', detail });
        this.name = 'OutOfMemoryError';
    }
}

/** Browser storage too small for the model, or a quota error while writing. */
export class QuotaError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: 'quota', detail });
        this.name = 'QuotaError';
    }
}

/** A download failed (offline, HTTP error, cut connection). Retrying resumes where it stopped. */
export class NetworkError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: 'network', detail });
        this.name = 'NetworkError';
    }
}

/** A model file is missing, has the wrong size, or the manifest is unreadable. */
export class ModelFileError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: 'model-file', detail });
        this.name = 'ModelFileError';
    }
}

/** The pipeline produced NaN or a constant image: said out loud instead of showing a black square. */
export class DegenerateOutputError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: 'degenerate-output', detail });
        this.name = 'DegenerateOutputError';
    }
}

export class CancelledError extends KleinError {
    constructor(message = 'Cancelled.') {
        super(message, { code: 'cancelled' });
        this.name = 'CancelledError';
    }
}

const CLASSES = Object.freeze({
    KleinError,
    InputError,
    NoWebGPUError,
    DeviceLostError,
    OutOfMemoryError,
    QuotaError,
    NetworkError,
    ModelFileError,
    DegenerateOutputError,
    CancelledError,
});

/**
 * @typedef {Object} SerializedError
 * @property {string} name
 * @property {string} code
 * @property {string} message
 * @property {any} [detail]
 */

/**
 * Turns any thrown value into a plain object that survives postMessage.
 * @param {unknown} err
 * @returns {SerializedError}
 */
export function serializeError(err) {
    if (err instanceof KleinError) {
        return { name: err.name, code: err.code, message: err.message, detail: err.detail };
    }
    if (err instanceof DOMException && err.name === 'AbortError') {
        return { name: 'CancelledError', code: 'cancelled', message: 'Cancelled.' };
    }
    const message = err instanceof Error ? err.message : String(err);
    return { name: 'KleinError', code: 'internal', message, detail: err instanceof Error ? err.stack : undefined };
}

/**
 * @param {SerializedError} obj
 * @returns {KleinError}
 */
export function deserializeError(obj) {
    const Cls = /** @type {any} */ (CLASSES)[obj.name] ?? KleinError;
    const err = Cls === KleinError ? new KleinError(obj.message, { code: obj.code, detail: obj.detail }) : obj.name === 'CancelledError' ? new CancelledError(obj.message) : new Cls(obj.message, obj.detail);
    return err;
}
