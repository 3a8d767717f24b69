// @ts-check
/**
 * @file How many sessions stay on the GPU at once: the memory mode, and the budget of one worker's sessions that
 * follows from it (MemoryBudget). Pure policy, so node tests it.
 * - `fast`: the sessions stay loaded while they fit a budget of half the machine's memory as the browser reports
 *   it (`navigator.deviceMemory`); a hot image with a new seed loads nothing.
 * - `lean`: one session at a time: each is released before the next stage loads its own, and all of them when
 *   the image is done, so the GPU holds one graph's weights and activations at most and nothing between images.
 *   Prompt embeddings and encoded input images stay cached (CPU memory), so a repeated prompt skips the text
 *   encoder. The transformer runs the size class whose attention score buffers stay within
 *   LEAN_SCORE_BUFFER_BYTES. It costs a session creation per stage per image and more attention kernels
 *   (docs/machines.md).
 * The user's choice (the page's Memory field, `?memory=`) wins; otherwise the mode follows what the browser tells
 * about the machine, and a fast run that runs out of GPU memory or loses its device is run again in lean mode.
 * @module models/memory_mode
 */

/** Below this (GiB, as navigator.deviceMemory reports: Chrome rounds down to a power of two and caps at 8) the
 * machine is too small to keep several multi-GB sessions beside the browser. */
const SMALL_MACHINE_GIB = 8;
/** An adapter whose largest buffer is under this is a small or mobile GPU (or Safari's 1-2 GiB limit on a
 * unified-memory Mac, where GPU memory is the machine's memory). */
const SMALL_ADAPTER_BYTES = 2 ** 31;

/** Lean mode's budget for one attention score buffer of the transformer (its largest activations, held in fp32
 * for the softmax): 128 MiB takes 512^2 from one query block (216 MiB per score buffer) to four and 1024^2 from
 * four (486 MiB) to seventeen (115 MiB). The converter's budget, what every adapter must allow, is 512 MiB
 * (builder/convert/attention.py). */
export const LEAN_SCORE_BUFFER_BYTES = 128 * 2 ** 20;

/**
 * @typedef {Object} MemoryChoice
 * @property {'fast' | 'lean'} mode
 * @property {string} why  One sentence for the timings panel.
 */

/**
 * @param {{requested?: string, deviceMemory?: number, maxBufferSize?: number, software?: boolean}} facts
 *   `requested`: the request's `memory`; `deviceMemory`: navigator.deviceMemory (GiB, undefined where the browser
 *   does not say); `maxBufferSize`: the adapter's limit.
 * @returns {MemoryChoice}
 */
export function chooseMemoryMode({ requested, deviceMemory, maxBufferSize, software = false }) {
    if (requested === 'fast' || requested === 'lean') return { mode: requested, why: `${requested} mode, as asked` };
    if (typeof deviceMemory === 'number' && deviceMemory > 0 && deviceMemory < SMALL_MACHINE_GIB) {
        return { mode: 'lean', why: `lean mode: the browser reports ${deviceMemory} GB of memory` };
    }
    if (typeof maxBufferSize === 'number' && maxBufferSize > 0 && maxBufferSize < SMALL_ADAPTER_BYTES && !software) {
        return {
            mode: 'lean',
            why: `lean mode: the GPU's largest buffer is ${(maxBufferSize / 2 ** 30).toFixed(1)} GiB (a small or shared-memory GPU)`,
        };
    }
    return { mode: 'fast', why: 'fast mode: sessions stay loaded while they fit (the machine reports enough memory)' };
}

const GIB = 1024 ** 3;

/**
 * How many bytes of sessions may stay loaded at once in fast mode. There is no WebGPU API for total GPU memory;
 * navigator.deviceMemory (GiB, capped at 8 by Chrome) is the best hint, and half of it is left for the browser and
 * the activations.
 * @param {number | undefined} deviceMemory  navigator.deviceMemory
 * @returns {number}
 */
export function memoryBudget(deviceMemory) {
    const gib = typeof deviceMemory === 'number' && deviceMemory > 0 ? deviceMemory : 4;
    return (gib * GIB) / 2;
}

/**
 * The memory budget of one worker's sessions: the mode of the current request (chosen when its model is prepared),
 * and the bytes of sessions that mode lets stay loaded. Once a fast run of this worker ran out of memory
 * (`leanAfterFailure`, set by worker/recovery.js), requests that ask for no mode run lean.
 */
export class MemoryBudget {
    /**
     * @param {number | undefined} deviceMemory  navigator.deviceMemory (GiB; undefined where the browser does not say).
     */
    constructor(deviceMemory) {
        this.deviceMemory = deviceMemory;
        /** The bytes of sessions fast mode keeps loaded. */
        this.fastBytes = memoryBudget(deviceMemory);
        /** @type {MemoryChoice} The current request's memory mode. */
        this.current = { mode: 'fast', why: '' };
        /** @type {string | null} Why this worker runs lean from now on: a fast run ran out of memory. */
        this.leanAfterFailure = null;
    }

    /**
     * Choose the current request's mode: the one it asks for, else lean once a fast run of this worker ran out of
     * memory, else the one the machine's facts suggest.
     * @param {string | undefined} requested  The request's `memory`.
     * @param {{maxBufferSize?: number, software?: boolean}} adapter
     * @returns {MemoryChoice}
     */
    choose(requested, { maxBufferSize, software }) {
        this.current =
            requested === undefined && this.leanAfterFailure
                ? { mode: 'lean', why: `lean mode: ${this.leanAfterFailure}` }
                : chooseMemoryMode({ requested, deviceMemory: this.deviceMemory, maxBufferSize, software });
        return this.current;
    }

    /** How many bytes of sessions may stay loaded at once: none beside the one in use in lean mode. */
    get bytes() {
        return this.current.mode === 'lean' ? 0 : this.fastBytes;
    }
}
