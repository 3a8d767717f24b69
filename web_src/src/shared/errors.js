// @ts-check
/**
 * @file Every error class of the app, and `ErrorCode`: the stable codes the UI switches on, each thrown
 * through a class below or as a `KleinError` with that code. Errors cross the worker boundary as plain
 * objects through `serializeError` / `deserializeError`, never as strings.
 * @module shared/errors
 */

/** Every code a KleinError may carry; page/ui/error_view.js gives each one its advice. */
export const ErrorCode = Object.freeze({
    /** A bug or an unexpected exception: nothing the user did. */
    INTERNAL: 'internal',
    INPUT: 'input',
    NO_WEBGPU: 'no-webgpu',
    DEVICE_LOST: 'device-lost',
    OUT_OF_MEMORY: 'out-of-memory',
    QUOTA: 'quota',
    NETWORK: 'network',
    MODEL_FILE: 'model-file',
    /** A downloaded model file's SHA-256 differs from the manifest's: the bytes are not the model's. */
    INTEGRITY: 'integrity',
    DEGENERATE_OUTPUT: 'degenerate-output',
    CANCELLED: 'cancelled',
    /** A model file is being downloaded by another tab (its OPFS handle is exclusive). */
    BUSY: 'busy',
    /** A graph needs a GPU feature the adapter lacks (shader-f16), or the browser lacks what the app needs (OPFS, large enough buffers). */
    UNSUPPORTED: 'unsupported',
    /** The model runtime failed in a way not recognised as out-of-memory or device loss. */
    RUNTIME: 'runtime',
    /** The worker script failed to load or threw outside a request. */
    WORKER_CRASHED: 'worker-crashed',
    /** The page threw the worker away (after a lost device); its pending requests end with this. */
    WORKER_RESTARTED: 'restarted',
    /** The page and its worker come from different builds. */
    VERSION_MISMATCH: 'version-mismatch',
    /** generate() while a generation is in flight on the same client. */
    ALREADY_RUNNING: 'already-running',
});

/** @typedef {(typeof ErrorCode)[keyof typeof ErrorCode]} ErrorCode */

export class KleinError extends Error {
    /**
     * @param {string} message What went wrong and what the user can do about it.
     * @param {{code?: ErrorCode, detail?: any, cause?: unknown}} [options]
     */
    constructor(message, { code = ErrorCode.INTERNAL, detail = undefined, cause = undefined } = {}) {
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
        super(message, { code: ErrorCode.INPUT, detail });
        this.name = 'InputError';
    }
}

/** No `navigator.gpu`, or no adapter: the message names the browser and flags that fix it. */
export class NoWebGPUError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: ErrorCode.NO_WEBGPU, detail });
        this.name = 'NoWebGPUError';
    }
}

export class DeviceLostError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: ErrorCode.DEVICE_LOST, detail });
        this.name = 'DeviceLostError';
    }
}

export class OutOfMemoryError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: ErrorCode.OUT_OF_MEMORY, detail });
        this.name = 'OutOfMemoryError';
    }
}

/** Browser storage too small for the model, or a quota error while writing. */
export class QuotaError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: ErrorCode.QUOTA, detail });
        this.name = 'QuotaError';
    }
}

/** A download failed (offline, HTTP error, cut connection). Retrying resumes where it stopped. */
export class NetworkError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: ErrorCode.NETWORK, detail });
        this.name = 'NetworkError';
    }
}

/** A model file is missing, has the wrong size, or the manifest is unreadable. */
export class ModelFileError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: ErrorCode.MODEL_FILE, detail });
        this.name = 'ModelFileError';
    }
}

/**
 * A downloaded file's SHA-256 is not the one the manifest lists: the server (or a proxy) sent other bytes
 * of the same size, or the manifest is stale. The file is never kept.
 */
export class IntegrityError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: ErrorCode.INTEGRITY, detail });
        this.name = 'IntegrityError';
    }
}

/**
 * A stored model file is no longer the file that was downloaded: its bytes do not match the manifest's block hashes,
 * or it is shorter or longer than the manifest says (changed on disk, or by a browser or extension that writes
 * into the site's storage). `detail.path` is the file's repo path: the worker deletes it and downloads it again.
 */
export class StoredFileError extends KleinError {
    /** @param {string} message @param {{path: string, block?: number}} detail */
    constructor(message, detail) {
        super(message, { code: ErrorCode.INTEGRITY, detail });
        this.name = 'StoredFileError';
    }
}

/** The pipeline produced NaN or a constant image: said out loud instead of showing a black square. */
export class DegenerateOutputError extends KleinError {
    /** @param {string} message @param {any} [detail] */
    constructor(message, detail) {
        super(message, { code: ErrorCode.DEGENERATE_OUTPUT, detail });
        this.name = 'DegenerateOutputError';
    }
}

/**
 * An optional GPU feature failed at its first use (its shaders did not compile, its pipelines could not be
 * created, or the device was lost before anything ran on it). The worker drops `detail.feature` from the shared
 * device and runs the request again without it; the page sees this error only if that cannot happen.
 */
export class GpuFeatureError extends KleinError {
    /** @param {string} message @param {{feature: string, cause: string}} detail */
    constructor(message, detail) {
        super(message, { code: ErrorCode.RUNTIME, detail });
        this.name = 'GpuFeatureError';
    }
}

export class CancelledError extends KleinError {
    constructor(message = 'Cancelled.') {
        super(message, { code: ErrorCode.CANCELLED });
        this.name = 'CancelledError';
    }
}

/** The classes constructed as (message, detail), by name: what deserializeError rebuilds. */
const DETAIL_CLASSES = Object.freeze({
    InputError,
    NoWebGPUError,
    DeviceLostError,
    OutOfMemoryError,
    QuotaError,
    NetworkError,
    ModelFileError,
    IntegrityError,
    StoredFileError,
    DegenerateOutputError,
});

/**
 * @typedef {Object} SerializedError
 * @property {string} name
 * @property {ErrorCode} code
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
        return { name: 'CancelledError', code: ErrorCode.CANCELLED, message: 'Cancelled.' };
    }
    const message = err instanceof Error ? err.message : String(err);
    return {
        name: 'KleinError',
        code: ErrorCode.INTERNAL,
        message,
        detail: err instanceof Error ? err.stack : undefined,
    };
}

/**
 * @param {SerializedError} obj
 * @returns {KleinError}
 */
export function deserializeError(obj) {
    if (obj.name === 'CancelledError') return new CancelledError(obj.message);
    if (Object.hasOwn(DETAIL_CLASSES, obj.name)) {
        const Cls = DETAIL_CLASSES[/** @type {keyof typeof DETAIL_CLASSES} */ (obj.name)];
        return new Cls(obj.message, obj.detail);
    }
    return new KleinError(obj.message, { code: obj.code, detail: obj.detail });
}
