// @ts-check
/**
 * @file What one Generate asks of the worker, from the form's values, the model source, the memory choice and
 * the input images: `params` (the request) and `settings` (what history keeps: no image bytes, no profiling).
 * @module page/run_request
 */

/** @typedef {import('../protocol.js').GenerateParams} GenerateParams */
/** @typedef {import('./ui/form.js').FormValues} FormValues */
/** @typedef {import('./model_source.js').ModelSource} ModelSource */

/**
 * @typedef {FormValues & {modelBase: string, precision?: string, memory?: 'fast' | 'lean'}} RunSettings
 */

/**
 * @param {FormValues} values
 * @param {ModelSource} source
 * @param {'fast' | 'lean' | undefined} memory
 * @param {Pick<GenerateParams, 'images' | 'mask' | 'strength'>} inputs  What Edit and Inpaint add ({} for text).
 * @returns {{settings: RunSettings, params: GenerateParams}}
 */
export function runRequest(values, source, memory, inputs) {
    const { base, precision, profile, stepKernels } = source;
    /** @type {RunSettings} */
    const settings = { ...values, modelBase: base, ...(precision ? { precision } : {}), ...(memory ? { memory } : {}) };
    // A profiled run (?profile=kernels) or one on onnxruntime (?step-kernels=off) is a way of looking, not a
    // setting: history does not keep it.
    const params = {
        ...settings,
        ...(profile ? { profile } : {}),
        ...(stepKernels === false ? { stepKernels } : {}),
        ...inputs,
    };
    return { settings, params };
}
