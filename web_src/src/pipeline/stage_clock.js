// @ts-check
/**
 * @file What the stages of one generate() run share: the context each stage gets (RunContext), the events a run
 * sends (GenerateEvent), and the clock that announces and times each stage (StageClock).
 * @module pipeline/stage_clock
 */

import { mark } from '../models/meter.js';

/** @typedef {import('../protocol.js').Stage} Stage */
/** @typedef {import('../protocol.js').StageTimings} StageTimings */
/** @typedef {import('../models/meter.js').Meter} Meter */

/** @typedef {import('../protocol.js').JobEvent} GenerateEvent  The protocol's events (the channel adds the id). */

/**
 * @typedef {Object} RunContext  What every stage of one run shares.
 * @property {import('../models/model.js').Model} model  The model's parts: each stage uses those it needs.
 * @property {Meter} meter
 * @property {AbortSignal} signal
 */

/**
 * Announces each stage and times it into `timings`, minus the session loading that happened inside it
 * (counted under `load`). Cancellation is checked before every stage.
 */
export class StageClock {
    /**
     * @param {{meter: Meter, signal: AbortSignal, onEvent: (event: GenerateEvent) => void}} context
     */
    constructor({ meter, signal, onEvent }) {
        this.meter = meter;
        this.signal = signal;
        this.onEvent = onEvent;
        /** @type {StageTimings} */
        this.timings = {
            check: 0,
            download: 0,
            load: 0,
            encode: 0,
            images: 0,
            latents: 0,
            timesteps: 0,
            denoise: 0,
            decode: 0,
            total: 0,
            sessionRun: 0,
        };
    }

    /**
     * @template T
     * @param {Stage} stage
     * @param {string | undefined} detail  Shown beside the stage name (e.g. 'cached').
     * @param {() => T | Promise<T>} body
     * @returns {Promise<T>}
     */
    async time(stage, detail, body) {
        this.signal.throwIfAborted();
        this.onEvent(detail === undefined ? { type: 'stage', stage } : { type: 'stage', stage, detail });
        const started = performance.now();
        const loadBefore = this.meter.loadMs;
        const value = await body();
        mark(this.meter, stage, started);
        const elapsed = performance.now() - started;
        if (stage === 'load') {
            this.timings.load += elapsed;
        } else {
            const loadInside = this.meter.loadMs - loadBefore;
            this.timings[stage] += elapsed - loadInside;
            this.timings.load += loadInside;
        }
        return value;
    }
}
