// @ts-check
/**
 * @file Where inpainting starts in the schedule: one formula for the worker's pipeline (stage 6,
 * pipeline/prepare_latents.js) and the page's "Runs N of M steps" hint. builder/pipeline/inpaint.py `inpaint_start`
 * is its Python twin.
 * @module shared/inpaint
 */

import { InputError } from './errors.js';

// Port of diffusers.pipelines.flux2.pipeline_flux2_klein_inpaint.Flux2KleinInpaintPipeline.get_timesteps and the
// "steps is < 1" check of its __call__ @ 0.42.1
/**
 * Inpainting runs the last steps of the schedule only: `init = min(N * strength, N)` (doubles),
 * `t_start = int(max(N - init, 0))`; steps t_start..N-1 run, from sigmas[t_start].
 * @param {number} numSteps  N, a positive integer.
 * @param {number} strength  In [0, 1].
 * @returns {number} t_start
 */
export function inpaintStart(numSteps, strength) {
    if (!Number.isInteger(numSteps) || numSteps < 1) {
        throw new InputError(`\`numSteps\` must be a positive integer, got ${JSON.stringify(numSteps)}.`, { numSteps });
    }
    const init = Math.min(numSteps * strength, numSteps);
    const start = Math.trunc(Math.max(numSteps - init, 0));
    if (numSteps - start < 1) {
        throw new InputError(
            `\`strength\` ${strength} with ${numSteps} steps leaves no denoising step to run (diffusers runs ` +
                `int(steps * strength) of them); raise the strength or the steps.`,
            { strength, steps: numSteps },
        );
    }
    return start;
}
