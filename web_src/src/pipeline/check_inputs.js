// @ts-check
/**
 * @file Stage 1 of generate(), Check inputs, for the parameters: every one against the limits, the input images'
 * fields included, before any download or GPU work (the image files themselves are decoded and checked next, by
 * encode_images.js checkInputImages).
 * builder/pipeline/reference_request.py is its twin.
 * @module pipeline/check_inputs
 */

import { MEMORY_MODES, PRECISIONS } from '../protocol.js';
import { InputError } from '../shared/errors.js';
import { LIMITS } from '../shared/limits.js';
import { guidanceScaleProblem, negativePromptProblem } from './guidance.js';
import { checkImageParams } from './input_images.js';
import { vaeTileProblem } from './vae_tiles.js';

/** @typedef {import('../protocol.js').GenerateParams} GenerateParams */
/** @typedef {ReturnType<typeof checkImageParams>} ImageParams */

/**
 * Reject bad parameters before any download or GPU work (never adjust them silently).
 * @param {any} params
 * @returns {{params: GenerateParams, images: ImageParams}}  `params`: the request's parameters without the image
 *   files (the result carries them back); `images`: the mode and its image fields (input_images.js
 *   checkImageParams).
 */
export function checkInputs(params) {
    if (!params || typeof params !== 'object') {
        throw new InputError(`\`params\` must be an object, got ${JSON.stringify(params)}.`);
    }
    const { prompt, seed, steps, width, height, modelBase, precision, profile, memory, preview, vaeTile } = params;
    const { stepKernels, stepCheck } = params;
    const { sizeMin, sizeMax, sizeMultiple, stepsMin, stepsMax, seedMax } = LIMITS;
    // diffusers accepts an empty prompt (it encodes the chat template alone), so we do too.
    if (typeof prompt !== 'string') {
        throw new InputError(`\`prompt\` must be a string, got ${JSON.stringify(prompt)}.`, { prompt });
    }
    // Refused here, before any work, not when the PNG is written (builder/pipeline/limits.py check_prompt: twin).
    if (prompt.includes('\0')) {
        throw new InputError(
            `The prompt contains a NUL character (\\0, character ${prompt.indexOf('\0')}): a saved image keeps its ` +
                'prompt as text, which cannot hold one; remove it.',
            { prompt },
        );
    }
    for (const [name, value] of /** @type {[string, any][]} */ ([
        ['width', width],
        ['height', height],
    ])) {
        if (!Number.isInteger(value) || value % sizeMultiple !== 0 || value < sizeMin || value > sizeMax) {
            const near = Number.isFinite(value)
                ? Math.min(sizeMax, Math.max(sizeMin, Math.round(value / sizeMultiple) * sizeMultiple))
                : 512;
            throw new InputError(
                `\`${name}\` must be a multiple of ${sizeMultiple} between ${sizeMin} and ${sizeMax} (one latent ` +
                    `token per 16x16 pixels), got ${JSON.stringify(value)}; try ${near}.`,
                { [name]: value },
            );
        }
    }
    if (!Number.isInteger(steps) || steps < stepsMin || steps > stepsMax) {
        throw new InputError(
            `\`steps\` must be an integer from ${stepsMin} to ${stepsMax} (klein is distilled for 4), ` +
                `got ${JSON.stringify(steps)}.`,
            { steps },
        );
    }
    if (!Number.isInteger(seed) || seed < 0 || seed >= seedMax) {
        throw new InputError(
            `\`seed\` must be an integer in [0, 2^32) (0 to ${seedMax - 1}), got ${JSON.stringify(seed)}.`,
            { seed },
        );
    }
    if (typeof modelBase !== 'string' || !/^https?:\/\/.+\/$/.test(modelBase)) {
        throw new InputError(
            `\`modelBase\` must be an absolute http(s) URL ending in '/', got ${JSON.stringify(modelBase)}.`,
            { modelBase },
        );
    }
    if (precision !== undefined && precision !== null && precision !== '' && !PRECISIONS.includes(precision)) {
        throw new InputError(
            `\`precision\` must be one of ${PRECISIONS.join(', ')} (or empty for the best available), ` +
                `got ${JSON.stringify(precision)}.`,
            { precision },
        );
    }
    if (profile !== undefined && typeof profile !== 'boolean') {
        throw new InputError(`\`profile\` must be true or false, got ${JSON.stringify(profile)}.`, { profile });
    }
    for (const [name, value] of Object.entries({ stepKernels, stepCheck })) {
        if (value !== undefined && typeof value !== 'boolean')
            throw new InputError(`\`${name}\` must be true or false, got ${JSON.stringify(value)}.`, { [name]: value });
    }
    if (preview !== undefined && typeof preview !== 'boolean') {
        throw new InputError(`\`preview\` must be true or false, got ${JSON.stringify(preview)}.`, { preview });
    }
    if (memory !== undefined && !MEMORY_MODES.includes(memory)) {
        throw new InputError(
            `\`memory\` must be one of ${MEMORY_MODES.join(', ')} (or absent to let the app choose), got ${JSON.stringify(memory)}.`,
            { memory },
        );
    }
    const tileProblem = vaeTile === undefined ? null : vaeTileProblem(vaeTile);
    if (tileProblem) throw new InputError(tileProblem, { vaeTile });
    // Checked for every model; whether they apply is the model's to say, once its manifest is read (stage 2).
    const { guidanceScale, negativePrompt } = params;
    const given = (/** @type {unknown} */ value) => value !== undefined && value !== null;
    const guidanceProblem = given(guidanceScale) ? guidanceScaleProblem(guidanceScale) : null;
    if (guidanceProblem) throw new InputError(guidanceProblem, { guidanceScale });
    const negativeProblem = given(negativePrompt) ? negativePromptProblem(negativePrompt) : null;
    if (negativeProblem) throw new InputError(negativeProblem, { negativePrompt });
    /** @type {GenerateParams} */
    const checked = { prompt, seed, steps, width, height, modelBase };
    if (precision) checked.precision = precision;
    if (profile) checked.profile = true;
    if (stepKernels === false) checked.stepKernels = false;
    if (stepCheck) checked.stepCheck = true;
    if (memory !== undefined) checked.memory = memory;
    if (preview) checked.preview = true;
    if (vaeTile !== undefined) checked.vaeTile = vaeTile;
    if (given(guidanceScale)) checked.guidanceScale = /** @type {number} */ (guidanceScale);
    if (given(negativePrompt)) checked.negativePrompt = /** @type {string} */ (negativePrompt);
    // The image files stay out of the checked parameters (the result would carry them back); `inputs` names them.
    const images = checkImageParams(params);
    if (images.mode === 'inpaint') checked.strength = /** @type {number} */ (images.strength);
    return { params: checked, images };
}
