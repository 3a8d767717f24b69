// @ts-check
/**
 * @file How a job's result and the load stage's detail line describe the chosen graphs: variant, EP, how each
 * ran and what its session cost to create.
 * @module models/model_report
 */

import { formatBytes } from '../shared/format.js';

/** @typedef {import('../shared/model_repo.js').AnyComponent} AnyComponent */
/** @typedef {import('./graph_choice.js').Choices} Choices */
/** @typedef {import('./meter.js').Meter} Meter */
/** @typedef {import('../shared/types.js').StepRunner} StepRunner */
/** @typedef {import('../shared/types.js').GraphReport} GraphReport */

/**
 * The variant and EP of each component, how it runs, and this job's session creation time, as the result
 * reports them.
 * @param {Choices} choices
 * @param {Map<AnyComponent, string>} captureState  Whether each component's last session captured its kernels.
 * @param {Meter} meter
 * @param {Partial<Record<AnyComponent, string>>} how  What the run did with a component beyond its graph (e.g.
 *   the VAE decoder's tiles).
 * @param {Map<AnyComponent, number>} streamed  The weight bytes the app streamed to the GPU for each component's
 *   session (models/graph_upload.js); absent: onnxruntime loaded them all.
 * @param {Map<AnyComponent, StepRunner>} [runners]  What ran the transformer's steps: our kernels or onnxruntime.
 * @returns {Record<string, GraphReport>}
 */
export function describeChoices(choices, captureState, meter, how, streamed, runners = new Map()) {
    return Object.fromEntries(
        Object.entries(choices).map(([c, choice]) => {
            const component = /** @type {AnyComponent} */ (c);
            const blocks = choice.graph.attentionQueryBlocks;
            const runner = runners.get(component);
            const detail = [];
            if (runner?.runner === 'kernels') detail.push(`our kernels (${runner.kernels})`);
            else if (c !== 'text_encoder')
                detail.push(blocks > 1 ? `attention in ${blocks} query blocks` : 'attention unsplit');
            const extra = how[component];
            if (extra) detail.push(extra);
            const capture = captureState.get(component);
            if (capture) detail.push(capture);
            if (runner?.dispatches) detail.push(`${runner.dispatches} dispatches a step`);
            if (runner?.runner === 'onnxruntime')
                detail.push(`onnxruntime${runner.why ? ` (not our kernels: ${runner.why})` : ''}`);
            const loadMs = meter.loadMsByComponent[component] ?? 0;
            const readMs = meter.readMsByComponent[component] ?? 0;
            const streamedBytes = streamed.get(component) ?? 0;
            return [
                c,
                {
                    variant: choice.graph.variant,
                    ep: choice.ep,
                    detail: detail.join(', '),
                    loadMs,
                    readMs,
                    streamedBytes,
                    ...(runner ? { step: runner } : {}),
                },
            ];
        }),
    );
}

/**
 * Human-readable sizes of the chosen graphs (for the load stage's detail line).
 * @param {Choices} choices
 * @returns {string}
 */
export function summarizeChoices(choices) {
    return Object.entries(choices)
        .map(([c, choice]) => `${c} ${choice.graph.variant}/${choice.ep} ${formatBytes(choice.bytes)}`)
        .join(', ');
}
