// @ts-check
/**
 * @file The app's side of tests/test_twins.py: runs the pure twin modules on the cases that test writes and writes
 * back what they compute, for it to compare with builder/pipeline's results. Arrays travel as base64 of their
 * little-endian bytes (exact), doubles as JSON numbers.
 * Usage: node tests/js/twins.mjs CASES_JSON OUT_JSON
 * @module tests/js/twins
 */

import fs from 'node:fs';

import { InputError } from '../../web_src/src/shared/errors.js';
import { guidanceText } from '../../web_src/src/shared/png_text.js';
import {
    guidanceScaleProblem,
    guided,
    negativePromptProblem,
    resolveGuidance,
} from '../../web_src/src/pipeline/guidance.js';
import { inpaintStart } from '../../web_src/src/shared/inpaint.js';
import {
    checkExtension,
    extensionProblem,
    extensionText,
    padImage,
    padMask,
    paddedProblem,
} from '../../web_src/src/shared/outpaint.js';
import {
    LATENT_CHANNELS,
    PATCH,
    blendMask,
    eulerStep,
    interpolateBilinear,
    packLatents,
    prepareImageIds,
    prepareLatentIds,
    prepareTextIds,
    scaleNoise,
    unpackLatents,
} from '../../web_src/src/pipeline/latents.js';
import { fma32, torchRandn } from '../../web_src/src/pipeline/rng.js';
import { retrieveTimesteps } from '../../web_src/src/pipeline/schedule.js';

/** @param {ArrayBufferView} array @returns {string} */
const encode = (array) => Buffer.from(array.buffer, array.byteOffset, array.byteLength).toString('base64');

/** @param {string} text @returns {Float32Array} */
function float32s(text) {
    const bytes = Buffer.from(text, 'base64');
    return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
}

/**
 * The value of `run()`, or null when it refuses its input with an InputError (the Python side's None).
 * @template T
 * @param {() => T} run
 * @returns {T | null}
 */
function refused(run) {
    try {
        return run();
    } catch (error) {
        if (error instanceof InputError) return null;
        throw error;
    }
}

/** @param {string} text @returns {Uint8Array} */
const bytes = (text) => new Uint8Array(Buffer.from(text, 'base64'));

const [casesPath, outPath] = process.argv.slice(2);
const cases = JSON.parse(fs.readFileSync(casesPath, 'utf-8'));
const C = LATENT_CHANNELS;

const out = {
    noise: cases.noise.map((/** @type {{seed: number, shape: number[]}} */ { seed, shape }) =>
        encode(torchRandn(seed, shape)),
    ),
    fma: (() => {
        const [a, b, c] = ['a', 'b', 'c'].map((name) => float32s(cases.fma[name]));
        return encode(Float32Array.from(a, (value, i) => fma32(value, b[i], c[i])));
    })(),
    schedules: cases.schedules.map((/** @type {{steps: number, tokens: number}} */ { steps, tokens }) => {
        const { mu, sigmas, timesteps, modelTimesteps } = retrieveTimesteps(steps, tokens);
        return {
            mu,
            sigmas: encode(sigmas),
            timesteps: encode(timesteps),
            modelTimesteps: encode(modelTimesteps),
        };
    }),
    inpaintStarts: cases.inpaintStarts.map((/** @type {[number, number]} */ [steps, strength]) =>
        refused(() => inpaintStart(steps, strength)),
    ),
    latentIds: cases.latentIds.map((/** @type {[number, number]} */ [h, w]) => encode(prepareLatentIds(h, w))),
    textIds: cases.textIds.map((/** @type {number} */ length) => encode(prepareTextIds(length))),
    imageIds: cases.imageIds.map((/** @type {[number, number][]} */ grids) =>
        encode(prepareImageIds(grids.map(([height, width]) => ({ height, width })))),
    ),
    packing: cases.packing.map((/** @type {{h: number, w: number, data: string}} */ { h, w, data }) => {
        const packed = packLatents(float32s(data), C, h, w);
        return {
            packed: encode(packed),
            unpacked: encode(unpackLatents(packed, C, h, w)),
        };
    }),
    euler: (() => {
        const { latents, velocity, sigma, sigmaNext } = cases.euler;
        return encode(eulerStep(float32s(latents), float32s(velocity), sigma, sigmaNext));
    })(),
    scaleNoise: encode(
        scaleNoise(float32s(cases.scaleNoise.sample), cases.scaleNoise.sigma, float32s(cases.scaleNoise.noise)),
    ),
    blendMask: (() => {
        const { latents, image, mask } = cases.blendMask;
        return encode(blendMask(float32s(latents), float32s(image), float32s(mask), C));
    })(),
    guided: cases.guided.scales.map((/** @type {number} */ scale) =>
        encode(guided(float32s(cases.guided.positive), float32s(cases.guided.negative), scale)),
    ),
    resolved: cases.resolved.map(
        (/** @type {{defaults: any, mode: any, scale: number | null, negativePrompt: string | null}} */ c) => {
            const { guidance, notes } = resolveGuidance(c.defaults, c);
            return { guidance, notes: notes.length };
        },
    ),
    scaleProblems: cases.scaleProblems.map((/** @type {number} */ value) => guidanceScaleProblem(value, '`name`')),
    promptProblems: cases.promptProblems.map((/** @type {string} */ value) => negativePromptProblem(value, 'the text')),
    guidanceText: cases.guidanceText.map((/** @type {[number, string]} */ [scale, negativePrompt]) =>
        guidanceText({ scale, negativePrompt }),
    ),
    paddings: cases.paddings.map(
        (/** @type {{width: number, height: number, extension: any, rgb: string, mask: string | null}} */ c) => {
            const extension = checkExtension(c.extension);
            const image = padImage({ width: c.width, height: c.height, rgb: bytes(c.rgb) }, extension);
            const mask = padMask(c.mask === null ? null : bytes(c.mask), c.width, c.height, extension);
            return {
                image: { size: [image.width, image.height], rgb: encode(image.rgb) },
                mask: { size: [mask.width, mask.height], rgb: encode(mask.rgb) },
                text: extensionText(extension),
            };
        },
    ),
    extensions: cases.extensions.map((/** @type {[number, number, any]} */ [width, height, values]) => {
        const problem = extensionProblem(values);
        if (problem !== null) return problem;
        return paddedProblem(checkExtension(values), width, height, 'The image to inpaint (a.png)');
    }),
    masks: cases.masks.map((/** @type {{height: number, width: number, plane: string}} */ { height, width, plane }) =>
        encode(interpolateBilinear(float32s(plane), height, width, height / PATCH, width / PATCH)),
    ),
};
fs.writeFileSync(outPath, JSON.stringify(out));
