// @ts-check
/**
 * @file A job's meter: where its time went (session creation, file reads, runs) and a timeline of what it did
 * when, for the result and the timeline view.
 * @module models/meter
 */

/** @typedef {import('../shared/model_repo.js').AnyComponent} AnyComponent */

/**
 * @typedef {Object} Meter  Per-job time accounting, filled in by load and run.
 * @property {number} loadMs
 * @property {number} runMs
 * @property {Partial<Record<AnyComponent, number>>} loadMsByComponent  Session creation (incl. shader compilation) this job.
 * @property {Partial<Record<AnyComponent, number>>} readMsByComponent  The part of it spent waiting for the graph's
 *   files from the store (files read ahead while another session was created cost only the wait that was left;
 *   the rest is onnxruntime: parsing, optimising, uploading the weights).
 * @property {number} startedAt  performance.now() when the job began.
 * @property {import('../protocol.js').TimelineEvent[]} timeline  What the job did when (reads, session creations,
 *   runs, stages), in milliseconds since `startedAt`.
 */

/** @returns {Meter} A meter for a job starting now. */
export function newMeter() {
    return {
        loadMs: 0,
        runMs: 0,
        loadMsByComponent: {},
        readMsByComponent: {},
        startedAt: performance.now(),
        timeline: [],
    };
}

/**
 * Record on the meter's timeline that `what` ran from `started` until now.
 * @param {Meter} meter
 * @param {string} what
 * @param {number} started  performance.now() when it began.
 */
export function mark(meter, what, started) {
    meter.timeline.push({ what, startMs: started - meter.startedAt, endMs: performance.now() - meter.startedAt });
}
