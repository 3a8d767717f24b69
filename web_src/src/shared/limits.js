// @ts-check
/**
 * @file The generation limits (steps, image size, seed) the form and the pipeline check. builder/pipeline/limits.py
 * holds the same numbers for the Python tools; tests/test_limits.py keeps the two equal.
 * @module shared/limits
 */

export const LIMITS = Object.freeze({
    stepsMin: 1,
    stepsMax: 50,
    sizeMin: 64,
    sizeMax: 2048,
    sizeMultiple: 16,
    seedMax: 4294967296,
});
