// @ts-check
/**
 * @file generate(): one text-to-image run, the browser's `Flux2KleinPipeline.__call__`. Its numbered stages
 * are those of builder/pipeline/reference.py's generate() (the CPU reference this is tested against), in diffusers'
 * order, with the same names; each stage is one call, timed under the key in brackets:
 *   1. Check inputs (check)        2. Load models (download, load)   3. Encode prompt (encode)
 *   4. Prepare latents (latents)   5. Prepare timesteps (timesteps)  6. Denoising loop (denoise)
 *   7. Decode (decode)
 * A session that does not fit the memory budget beside the others is created when its stage needs it; that
 * time is reported under `load`, not under the stage.
 * @module pipeline/generate
 */

import { PRECISIONS } from '../protocol.js';
import { InputError, ModelFileError } from '../shared/errors.js';
import { LIMITS } from '../shared/limits.js';
import { assertFinite, checkImage, toRgba } from './image.js';
import { eulerStep, packLatents, prepareLatentIds, prepareTextIds, unpackLatents } from './latents.js';
import { torchRandn } from './rng.js';
import { retrieveTimesteps } from './schedule.js';
import { MAX_SEQUENCE_LENGTH, PromptTokenizer } from './tokenizer.js';

/** transformer.config.in_channels: 32 VAE latent channels x 2x2 patch. */
export const LATENT_CHANNELS = 128;
/** vae_scale_factor * 2: one latent token per 16x16 pixels. */
export const PATCH = 16;

/** @typedef {import('../protocol.js').GenerateParams} GenerateParams */
/** @typedef {import('../protocol.js').GenerateResult} GenerateResult */
/** @typedef {import('../protocol.js').Stage} Stage */
/** @typedef {import('../protocol.js').StageTimings} StageTimings */
/** @typedef {import('./models.js').Models} Models */
/** @typedef {import('./models.js').HostTensor} HostTensor */
/** @typedef {import('./models.js').Meter} Meter */
/** @typedef {import('./models.js').PromptEmbedding} PromptEmbedding */
/** @typedef {import('./schedule.js').Schedule} Schedule */

/**
 * @typedef {{type: 'progress', progress: import('../shared/types.js').DownloadProgress}
 *   | {type: 'stage', stage: Stage, detail?: string}
 *   | {type: 'step', step: number, steps: number, elapsedMs: number, etaMs: number}} GenerateEvent
 *   The protocol's events without the request id (worker/main.js adds it).
 */

/**
 * @typedef {Object} RunContext  What every stage of one run shares.
 * @property {Models} models
 * @property {Meter} meter
 * @property {AbortSignal} signal
 */

/**
 * @typedef {Object} Latents  Stage 4's output: the packed noise and the position ids of both token sets.
 * @property {Float32Array} latents  [1, H*W, C] packed tokens, updated in place by the denoising loop.
 * @property {BigInt64Array} imgIds   [H*W, 4] rows (0, y, x, 0).
 * @property {BigInt64Array} txtIds   [L, 4] rows (0, 0, 0, l).
 * @property {number} latentHeight
 * @property {number} latentWidth
 */

/** @type {import('./models.js').Pin} The text encoder's one shape: a prompt padded to MAX_SEQUENCE_LENGTH. */
const TEXT_ENCODER_PIN = Object.freeze({ dims: Object.freeze({ batch: 1, seq: MAX_SEQUENCE_LENGTH }), capture: false });

/**
 * How the sessions of one run are created: every graph pinned to the dims it will run at (onnxruntime folds
 * the shape arithmetic at creation), and the transformer, run once per step at the same dims, capturing its
 * kernels. The text encoder always sees one prompt padded to MAX_SEQUENCE_LENGTH tokens.
 * @param {number} imageSeqLen
 * @returns {{text_encoder: import('./models.js').Pin, transformer: import('./models.js').Pin}}
 */
export function sessionPins(imageSeqLen) {
    return {
        text_encoder: TEXT_ENCODER_PIN,
        transformer: { dims: { img_seq: imageSeqLen, txt_seq: MAX_SEQUENCE_LENGTH }, capture: true },
    };
}

/**
 * Reject bad parameters before any download or GPU work (never adjust them silently).
 * @param {any} params
 * @returns {GenerateParams}
 */
export function checkInputs(params) {
    if (!params || typeof params !== 'object') {
        throw new InputError(`\`params\` must be an object, got ${JSON.stringify(params)}.`);
    }
    const { prompt, seed, steps, width, height, modelBase, precision } = params;
    const { sizeMin, sizeMax, sizeMultiple, stepsMin, stepsMax, seedMax } = LIMITS;
    // diffusers accepts an empty prompt (it encodes the chat template alone), so we do too.
    if (typeof prompt !== 'string') {
        throw new InputError(`\`prompt\` must be a string, got ${JSON.stringify(prompt)}.`, { prompt });
    }
    for (const [name, value] of /** @type {[string, any][]} */ ([['width', width], ['height', height]])) {
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
    /** @type {GenerateParams} */
    const checked = { prompt, seed, steps, width, height, modelBase };
    if (precision) checked.precision = precision;
    return checked;
}

/**
 * An output by its contract name, or a ModelFileError naming what the graph has instead.
 * @param {Record<string, HostTensor>} outputs
 * @param {string} name
 * @param {string} graph
 * @returns {{data: Float32Array, dims: number[]}}
 */
function output(outputs, name, graph) {
    const tensor = outputs[name];
    if (!tensor || !(tensor.data instanceof Float32Array)) {
        throw new ModelFileError(
            `The ${graph} graph has no float32 output \`${name}\` (it has: ${Object.keys(outputs).join(', ')}); ` +
                'the model does not follow the klein-web contract.',
        );
    }
    return { data: tensor.data, dims: tensor.dims };
}

/**
 * Stage 2: the model files the store lacks are downloaded (none on a second visit, timed as `download`), then
 * the sessions are created in order while they fit the memory budget together (`load`). The text encoder is
 * left out when an earlier run already encoded this prompt. The transformer's graph is chosen for this
 * attention length (graph_choice.sizeClass) and pinned to these dims, so it captures its kernels on the first
 * step and replays them.
 * @param {GenerateParams} params
 * @param {number} imageSeqLen
 * @param {RunContext & {clock: StageClock, onEvent: (event: GenerateEvent) => void}} context
 * @returns {Promise<{notes: string[], cached: PromptEmbedding | undefined}>}  `cached`: the prompt's embedding
 *   from an earlier run.
 */
async function loadModels(params, imageSeqLen, { models, meter, signal, clock, onEvent }) {
    const { notes } = await clock.time('download', undefined, () =>
        models.prepare(
            { ...params, attentionTokens: imageSeqLen + MAX_SEQUENCE_LENGTH },
            { signal, onProgress: (progress) => onEvent({ type: 'progress', progress }) },
        ),
    );
    // The cache is keyed by the text encoder chosen above.
    const cached = models.cachedPrompt(params.prompt);
    /** @type {import('../shared/model_repo.js').Component[]} */
    const order = cached ? ['transformer', 'vae_decoder'] : ['text_encoder', 'transformer', 'vae_decoder'];
    const pins = sessionPins(imageSeqLen);
    await clock.time('load', models.summary(), () => models.preload(order, { meter, signal, pins }));
    return { notes, cached };
}

/**
 * Stage 3: chat template + tokenizer, then the text encoder -> prompt_embeds [1, 512, joint_dim]. Cached per
 * prompt: a new seed with the same prompt skips the text encoder.
 * @param {string} prompt
 * @param {PromptEmbedding | undefined} cached  This prompt's embedding from an earlier run.
 * @param {RunContext} context
 * @returns {Promise<PromptEmbedding>}
 */
async function encodePrompt(prompt, cached, { models, meter, signal }) {
    if (cached) return cached;
    const tokenizer = await models.memo('tokenizer', async () =>
        PromptTokenizer.fromFiles(await models.tokenizerFiles()),
    );
    const encoded = tokenizer.encode(prompt, { maxLength: MAX_SEQUENCE_LENGTH });
    const session = await models.session('text_encoder', { meter, signal, pin: TEXT_ENCODER_PIN });
    const outputs = await models.run(
        session,
        {
            input_ids: { data: encoded.inputIds, dims: [1, encoded.inputIds.length] },
            attention_mask: { data: encoded.attentionMask, dims: [1, encoded.attentionMask.length] },
        },
        { meter, what: 'The text encoder' },
    );
    const embeds = output(outputs, 'prompt_embeds', 'text encoder'); // [1, 512, joint_dim]
    assertFinite(embeds.data, 'prompt embeddings');
    /** @type {PromptEmbedding} */
    const embedding = { ...embeds, tokens: encoded.tokens, droppedTokens: encoded.droppedTokens };
    models.cachePrompt(prompt, embedding);
    return embedding;
}

/**
 * Stage 4: noise drawn in the packed 128-channel space exactly as torch.randn on the CPU draws it, and the
 * position ids of the image and text tokens.
 * @param {number} seed
 * @param {{width: number, height: number, textSeqLen: number}} size
 * @returns {Latents}
 */
function prepareLatents(seed, { width, height, textSeqLen }) {
    const latentHeight = height / PATCH;
    const latentWidth = width / PATCH;
    const noise = torchRandn(seed, [1, LATENT_CHANNELS, latentHeight, latentWidth]);
    return {
        latents: packLatents(noise, LATENT_CHANNELS, latentHeight, latentWidth), // [1, C, H, W] -> [1, H*W, C]
        imgIds: prepareLatentIds(latentHeight, latentWidth), // [H*W, 4] rows (0, y, x, 0)
        txtIds: prepareTextIds(textSeqLen), // [L, 4] rows (0, 0, 0, l)
        latentHeight,
        latentWidth,
    };
}

/**
 * Stage 6: one transformer call per step (klein is guidance-distilled: no CFG), then a float32 Euler step,
 * x += (sigma_next - sigma) * v, as FlowMatchEulerDiscreteScheduler.step. Cancellable between steps.
 * @param {Latents} prepared  Its `latents` are updated in place.
 * @param {PromptEmbedding} embedding
 * @param {Schedule} schedule
 * @param {RunContext & {onEvent: (event: GenerateEvent) => void}} context
 * @returns {Promise<{denoised: Float32Array, stepMs: number[]}>} The denoised tokens [1, H*W, C], and the wall
 *   time of each step (the first one records the graph capture).
 */
async function denoise(prepared, embedding, schedule, { models, meter, signal, onEvent }) {
    const { latents, imgIds, txtIds, latentHeight, latentWidth } = prepared;
    const imageSeqLen = latentHeight * latentWidth;
    const textSeqLen = embedding.dims[1];
    const steps = schedule.modelTimesteps.length;
    const transformer = await models.session('transformer', { meter, signal, pin: sessionPins(imageSeqLen).transformer });
    /** @type {number[]} */
    const stepMs = [];
    const loopStart = performance.now();
    for (let i = 0; i < steps; i++) {
        signal.throwIfAborted();
        const stepStart = performance.now();
        const outputs = await models.run(
            transformer,
            {
                hidden_states: { data: latents, dims: [1, imageSeqLen, LATENT_CHANNELS] },
                encoder_hidden_states: { data: embedding.data, dims: embedding.dims },
                // float32(t / 1000), which is not always sigma itself (see schedule.js).
                timestep: { data: Float32Array.of(schedule.modelTimesteps[i]), dims: [1] },
                img_ids: { data: imgIds, dims: [imageSeqLen, 4] },
                txt_ids: { data: txtIds, dims: [textSeqLen, 4] },
            },
            { meter, what: `Denoising step ${i + 1}` },
        );
        const noisePred = output(outputs, 'noise_pred', 'transformer'); // [1, H*W, C]
        eulerStep(latents, noisePred.data, schedule.sigmas[i], schedule.sigmas[i + 1]);
        stepMs.push(performance.now() - stepStart);
        const elapsedMs = performance.now() - loopStart;
        onEvent({ type: 'step', step: i + 1, steps, elapsedMs, etaMs: (elapsedMs / (i + 1)) * (steps - i - 1) });
    }
    assertFinite(latents, 'denoised latents');
    return { denoised: latents, stepMs };
}

/**
 * Stage 7: unpack the tokens, then the VAE decoder (its graph holds the BN de-normalisation, the unpatchify
 * and (x/2+0.5).clamp), then RGBA bytes for the page.
 * @param {Float32Array} denoised  [1, H*W, C]
 * @param {{width: number, height: number}} size
 * @param {RunContext} context
 * @returns {Promise<Uint8ClampedArray>}
 */
async function decode(denoised, { width, height }, { models, meter, signal }) {
    const latentHeight = height / PATCH;
    const latentWidth = width / PATCH;
    const latents = unpackLatents(denoised, LATENT_CHANNELS, latentHeight, latentWidth); // [1, H*W, C] -> [1, C, H, W]
    const vae = await models.session('vae_decoder', { meter, signal });
    const outputs = await models.run(
        vae,
        { latents: { data: latents, dims: [1, LATENT_CHANNELS, latentHeight, latentWidth] } },
        { meter, what: 'The VAE decoder' },
    );
    const decoded = output(outputs, 'image', 'VAE decoder'); // [1, 3, H, W] RGB in [0, 1]
    checkImage(decoded.data);
    return toRgba(decoded.data, width, height);
}

/**
 * Announces each stage and times it into `timings`, minus the session loading that happened inside it
 * (counted under `load`). Cancellation is checked before every stage.
 */
class StageClock {
    /**
     * @param {{meter: Meter, signal: AbortSignal, onEvent: (event: GenerateEvent) => void}} context
     */
    constructor({ meter, signal, onEvent }) {
        this.meter = meter;
        this.signal = signal;
        this.onEvent = onEvent;
        /** @type {StageTimings} */
        this.timings = {
            check: 0,
            download: 0,
            load: 0,
            encode: 0,
            images: 0,
            latents: 0,
            timesteps: 0,
            denoise: 0,
            decode: 0,
            total: 0,
            sessionRun: 0,
        };
    }

    /**
     * @template T
     * @param {Stage} stage
     * @param {string | undefined} detail  Shown beside the stage name (e.g. 'cached').
     * @param {() => T | Promise<T>} body
     * @returns {Promise<T>}
     */
    async time(stage, detail, body) {
        this.signal.throwIfAborted();
        this.onEvent(detail === undefined ? { type: 'stage', stage } : { type: 'stage', stage, detail });
        const started = performance.now();
        const loadBefore = this.meter.loadMs;
        const value = await body();
        const elapsed = performance.now() - started;
        if (stage === 'load') {
            this.timings.load += elapsed;
        } else {
            const loadInside = this.meter.loadMs - loadBefore;
            this.timings[stage] += elapsed - loadInside;
            this.timings.load += loadInside;
        }
        return value;
    }
}

/**
 * Run the whole pipeline. Cancellable between stages and between denoising steps through `signal`.
 * @param {GenerateParams} params
 * @param {{models: Models, signal: AbortSignal, onEvent: (event: GenerateEvent) => void}} options
 * @returns {Promise<GenerateResult>}
 */
export async function generate(params, { models, signal, onEvent }) {
    const started = performance.now();
    /** @type {Meter} */
    const meter = { loadMs: 0, runMs: 0, loadMsByComponent: {}, readMsByComponent: {} };
    const clock = new StageClock({ meter, signal, onEvent });
    /** @type {RunContext} */
    const context = { models, meter, signal };

    // 1. Check inputs
    const checked = await clock.time('check', undefined, () => checkInputs(params));
    const { prompt, seed, steps, width, height } = checked;
    const imageSeqLen = (height / PATCH) * (width / PATCH);

    // 2. Load models
    const { notes, cached } = await loadModels(checked, imageSeqLen, { ...context, clock, onEvent });

    // 3. Encode prompt
    const embedding = await clock.time('encode', cached ? 'cached' : undefined, () =>
        encodePrompt(prompt, cached, context),
    );

    // 4. Prepare latents
    const textSeqLen = embedding.dims[1];
    const latents = await clock.time('latents', undefined, () => prepareLatents(seed, { width, height, textSeqLen }));

    // 5. Prepare timesteps
    const schedule = await clock.time('timesteps', undefined, () => retrieveTimesteps(steps, imageSeqLen));

    // 6. Denoising loop
    const { denoised, stepMs } = await clock.time('denoise', `${steps} steps, ${imageSeqLen} image tokens`, () =>
        denoise(latents, embedding, schedule, { ...context, onEvent }),
    );

    // 7. Decode
    const rgba = await clock.time('decode', undefined, () => decode(denoised, { width, height }, context));

    const { timings } = clock;
    timings.sessionRun = meter.runMs;
    timings.total = performance.now() - started;
    return {
        width,
        height,
        rgba,
        params: checked,
        timings,
        stepMs,
        prompt: { tokens: embedding.tokens, droppedTokens: embedding.droppedTokens },
        graphs: models.describe(meter),
        device: models.deviceGrant(),
        notes,
        inputs: { mode: 'text', images: [], mask: null, strength: null, steps, referenceTokens: 0 },
    };
}
