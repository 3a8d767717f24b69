// @ts-check
/**
 * @file Classifier-free guidance, as diffusers' Flux2KleinPipeline and Flux2KleinInpaintPipeline run it.
 *
 * A base model (manifest.json `pipeline.is_distilled` false) is guided when the scale is above 1: every step runs the
 * transformer a second time, on the negative prompt's embeddings (`""` unless one is given, encoded through the same
 * chat template and padding), and the two predictions are combined as `neg + scale * (pos - neg)` in float32. A
 * distilled model (klein-4B, klein-9B) runs one call a step whatever the scale: diffusers logs that the scale is
 * ignored, and the app says so in the result's notes. builder/pipeline/guidance.py is its twin.
 * @module pipeline/guidance
 */

import { LIMITS } from '../shared/limits.js';

/** @typedef {import('../shared/model_repo.js').PipelineDefaults} PipelineDefaults */

/**
 * @typedef {Object} Guidance  Guidance that runs: a scale above 1 and the negative prompt.
 * @property {number} scale
 * @property {string} negativePrompt
 */

/**
 * Why `value` is not a guidance scale (builder/pipeline/limits.py check_guidance, the same words), or null.
 * @param {unknown} value
 * @param {string} [name]  How the message names it.
 * @returns {string | null}
 */
export function guidanceScaleProblem(value, name = '`guidanceScale`') {
    const { guidanceMin, guidanceMax } = LIMITS;
    if (typeof value !== 'number' || !Number.isFinite(value)) {
        return `${name} must be a number from ${guidanceMin} to ${guidanceMax}, got ${JSON.stringify(value) ?? String(value)}; try 4.`;
    }
    if (value < guidanceMin || value > guidanceMax) {
        return `${name} ${value} is outside ${guidanceMin}..${guidanceMax} (1 is no guidance); try 4.`;
    }
    return null;
}

/**
 * Why `value` is not a prompt (builder/pipeline/limits.py check_prompt, the same words), or null: text without a NUL
 * character (the saved PNG keeps it as text, which cannot hold one) that UTF-8 can carry, so no lone surrogate.
 * @param {unknown} value
 * @param {string} [name]
 * @returns {string | null}
 */
export function negativePromptProblem(value, name = 'the negative prompt') {
    if (typeof value !== 'string') return `${name} must be text, got ${typeof value}.`;
    const characters = [...value]; // code points, as Python counts characters
    const nul = characters.indexOf('\0');
    if (nul >= 0) {
        return (
            `${name} contains a NUL character (\\0, character ${nul}): a saved image keeps its prompt as text, ` +
            'which cannot hold one; remove it.'
        );
    }
    let index = 0;
    for (const character of characters) {
        const code = character.codePointAt(0) ?? 0;
        if (code >= 0xd800 && code <= 0xdfff) {
            return (
                `${name} is not valid UTF-8 text: character ${index} is '\\u${code.toString(16)}' (undecodable ` +
                'bytes or a lone surrogate). Pass the prompt as UTF-8 text.'
            );
        }
        index++;
    }
    return null;
}

/**
 * The guidance a request runs with on this model (builder/pipeline/guidance.py resolve_guidance): null runs one
 * transformer call a step. `scale` absent takes the model's default for the mode (Flux2KleinPipeline's 4.0,
 * Flux2KleinInpaintPipeline's 8.0 for base models). Distilled models ignore a scale and a negative prompt, and
 * `notes` says so. The scale and the negative prompt are checked by checkInputs (stage 1) before this runs.
 * @param {PipelineDefaults} defaults  The model's (manifest.json `pipeline`).
 * @param {{mode: 'text' | 'edit' | 'inpaint', scale?: number | null, negativePrompt?: string | null}} request
 * @returns {{guidance: Guidance | null, notes: string[]}}
 */
export function resolveGuidance(defaults, { mode, scale = null, negativePrompt = null }) {
    /** @type {string[]} */
    const notes = [];
    if (defaults.isDistilled) {
        if (scale !== null && scale > 1)
            notes.push(`Guidance scale ${scale} is ignored for step-wise distilled models (as in diffusers).`);
        if (negativePrompt) notes.push('The negative prompt is ignored: this model is distilled and runs no guidance.');
        return { guidance: null, notes };
    }
    const chosen = scale ?? (mode === 'inpaint' ? defaults.inpaintGuidanceScale : defaults.guidanceScale);
    if (chosen === null || chosen <= 1) return { guidance: null, notes };
    return { guidance: { scale: chosen, negativePrompt: negativePrompt ?? '' }, notes };
}

/**
 * `neg + scale * (pos - neg)` in float32, one rounding per operation, as torch computes it on the CPU (the scale
 * cast to float32 first). Writing into `positive` itself (`out` = positive) is allowed.
 * @param {Float32Array} positive
 * @param {Float32Array} negative
 * @param {number} scale
 * @param {Float32Array} [out]
 * @returns {Float32Array} `out`
 */
export function guided(positive, negative, scale, out = new Float32Array(positive.length)) {
    const scale32 = Math.fround(scale);
    for (let i = 0; i < positive.length; i++) {
        const difference = Math.fround(positive[i] - negative[i]);
        // The sum of two float32 values, computed in float64 and stored once: correctly rounded to float32.
        out[i] = negative[i] + Math.fround(scale32 * difference);
    }
    return out;
}
