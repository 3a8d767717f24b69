// @ts-check
/**
 * @file generate(): one text-to-image run, the browser's `Flux2KleinPipeline.__call__`. The numbered
 * stages and their names are those of diffusers and of builder/reference.py (the CPU reference this
 * is tested against); each stage is one call.
 * @module pipeline/generate
 */

import { PRECISIONS } from '../protocol.js';
import { InputError, ModelFileError } from '../shared/errors.js';
import { checkImage, assertFinite, toRgba } from './image.js';
import { eulerStep, packLatents, prepareLatentIds, prepareTextIds, unpackLatents } from './latents.js';
import { torchRandn } from './rng.js';
import { retrieveTimesteps } from './schedule.js';
import { PromptTokenizer } from './tokenizer.js';

/** Flux2KleinPipeline.tokenizer_max_length: prompts are padded / truncated to exactly this many tokens. */
export const MAX_SEQUENCE_LENGTH = 512;
/** transformer.config.in_channels: 32 VAE latent channels x 2x2 patch. */
export const LATENT_CHANNELS = 128;
/** vae_scale_factor * 2: one latent token per 16x16 pixels. */
export const PATCH = 16;
export const MIN_SIZE = 64;
export const MAX_SIZE = 2048;
export const MAX_STEPS = 50;

/** @typedef {import('../protocol.js').GenerateParams} GenerateParams */
/** @typedef {import('../protocol.js').GenerateResult} GenerateResult */
/** @typedef {import('../protocol.js').StageTimings} StageTimings */
/** @typedef {import('./models.js').Models} Models */
/** @typedef {import('./models.js').Meter} Meter */
/** @typedef {import('./models.js').PromptEmbedding} PromptEmbedding */

/**
 * @typedef {{type: 'progress', progress: import('../shared/types.js').DownloadProgress}
 *   | {type: 'stage', stage: import('../protocol.js').Stage, detail?: string}
 *   | {type: 'step', step: number, steps: number, elapsedMs: number, etaMs: number}} GenerateEvent
 *   The protocol's events without the request id (worker/main.js adds it).
 */

/**
 * Reject bad parameters before any download or GPU work (never adjust them silently).
 * @param {any} params
 * @returns {GenerateParams}
 */
export function checkInputs(params) {
    if (!params || typeof params !== 'object') throw new InputError(`\`params\` must be an object, got ${JSON.stringify(params)}.`);
    const { prompt, seed, steps, width, height, modelBase, precision } = params;
    // diffusers accepts an empty prompt (it encodes the chat template alone), so we do too.
    if (typeof prompt !== 'string') throw new InputError(`\`prompt\` must be a string, got ${JSON.stringify(prompt)}.`, { prompt });
    for (const [name, value] of /** @type {[string, any][]} */ ([['width', width], ['height', height]])) {
        if (!Number.isInteger(value) || value % PATCH !== 0 || value < MIN_SIZE || value > MAX_SIZE) {
            const near = Number.isFinite(value) ? Math.min(MAX_SIZE, Math.max(MIN_SIZE, Math.round(value / PATCH) * PATCH)) : 512;
            throw new InputError(
                `\`${name}\` must be a multiple of ${PATCH} between ${MIN_SIZE} and ${MAX_SIZE} (one latent token per ` +
                    `16x16 pixels), got ${JSON.stringify(value)}; try ${near}.`,
                { [name]: value },
            );
        }
    }
    if (!Number.isInteger(steps) || steps < 1 || steps > MAX_STEPS) {
        throw new InputError(`\`steps\` must be an integer from 1 to ${MAX_STEPS} (klein is distilled for 4), got ${JSON.stringify(steps)}.`, { steps });
    }
    if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) {
        throw new InputError(`\`seed\` must be an integer in [0, 2^32) (0 to 4294967295), got ${JSON.stringify(seed)}.`, { seed });
    }
    if (typeof modelBase !== 'string' || !/^https?:\/\/.+\/$/.test(modelBase)) {
        throw new InputError(`\`modelBase\` must be an absolute http(s) URL ending in '/', got ${JSON.stringify(modelBase)}.`, { modelBase });
    }
    if (precision !== undefined && precision !== null && precision !== '' && !PRECISIONS.includes(precision)) {
        throw new InputError(`\`precision\` must be one of ${PRECISIONS.join(', ')} (or empty for the best available), got ${JSON.stringify(precision)}.`, { precision });
    }
    /** @type {GenerateParams} */
    const checked = { prompt, seed, steps, width, height, modelBase };
    if (precision) checked.precision = precision;
    return checked;
}

/**
 * An output by its contract name, or a ModelFileError naming what the graph has instead.
 * @param {Record<string, import('../runtime/ort.js').HostTensor>} outputs
 * @param {string} name
 * @param {string} graph
 * @returns {{data: Float32Array, dims: number[]}}
 */
function output(outputs, name, graph) {
    const tensor = outputs[name];
    if (!tensor || !(tensor.data instanceof Float32Array)) {
        throw new ModelFileError(`The ${graph} graph has no float32 output \`${name}\` (it has: ${Object.keys(outputs).join(', ')}); the model does not follow the klein-web contract.`);
    }
    return { data: tensor.data, dims: tensor.dims };
}

/**
 * Stage 4: chat template + tokenizer, then the text encoder -> prompt_embeds [1, 512, joint_dim].
 * @param {string} prompt
 * @param {{models: Models, meter: Meter, signal: AbortSignal}} context
 * @returns {Promise<PromptEmbedding>}
 */
async function encodePrompt(prompt, { models, meter, signal }) {
    const tokenizer = await models.memo('tokenizer', async () => PromptTokenizer.fromFiles(await models.tokenizerFiles()));
    const encoded = tokenizer.encode(prompt, { maxLength: MAX_SEQUENCE_LENGTH });
    const session = await models.session('text_encoder', { meter, signal });
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
    const tokens = Array.isArray(encoded.tokens) ? encoded.tokens.length : Number(encoded.tokens);
    return { data: embeds.data, dims: embeds.dims, tokens, droppedTokens: Number(encoded.droppedTokens) };
}

/**
 * Run the whole pipeline. Cancellable between stages and between denoising steps through `signal`.
 * @param {GenerateParams} params
 * @param {{models: Models, signal: AbortSignal, onEvent: (event: GenerateEvent) => void}} context
 * @returns {Promise<GenerateResult>}
 */
export async function generate(params, { models, signal, onEvent }) {
    const started = performance.now();
    /** @type {Meter} */
    const meter = { loadMs: 0, runMs: 0 };
    /** @type {StageTimings} */
    const timings = { download: 0, load: 0, encode: 0, denoise: 0, decode: 0, total: 0, sessionRun: 0 };
    /**
     * Time a stage, minus the session loading that happened inside it (reported under `load`).
     * @template T
     * @param {'download' | 'load' | 'encode' | 'denoise' | 'decode'} name
     * @param {string | undefined} detail
     * @param {() => Promise<T>} body
     * @returns {Promise<T>}
     */
    const stage = async (name, detail, body) => {
        signal.throwIfAborted();
        onEvent(detail === undefined ? { type: 'stage', stage: name } : { type: 'stage', stage: name, detail });
        const t0 = performance.now();
        const load0 = meter.loadMs;
        const value = await body();
        const loadInside = meter.loadMs - load0;
        if (name === 'load') timings.load += performance.now() - t0;
        else {
            timings[name] += performance.now() - t0 - loadInside;
            timings.load += loadInside;
        }
        return value;
    };

    // 1. Check inputs. Raise error if not correct
    onEvent({ type: 'stage', stage: 'check' });
    const checked = checkInputs(params);
    const { prompt, seed, steps, width, height } = checked;
    const latentHeight = height / PATCH;
    const latentWidth = width / PATCH;
    const imageSeqLen = latentHeight * latentWidth;

    // 2. Download the model files the store does not have yet (none on a second visit)
    // (The transformer graph is chosen for this attention length: see models.sizeClass.)
    const attentionTokens = imageSeqLen + MAX_SEQUENCE_LENGTH;
    const { notes } = await stage('download', undefined, () =>
        models.prepare({ ...checked, attentionTokens }, { signal, onProgress: (progress) => onEvent({ type: 'progress', progress }) }),
    );

    // 3. Load sessions (one at a time; those that do not fit together load when their stage comes). The
    // transformer is pinned to this size, so it captures its kernels on the first step and replays them.
    const transformerDims = { img_seq: imageSeqLen, txt_seq: MAX_SEQUENCE_LENGTH };
    const cached = models.cachedPrompt(prompt);
    await stage('load', models.summary(), () =>
        models.preload(cached ? ['transformer', 'vae_decoder'] : ['text_encoder', 'transformer', 'vae_decoder'],
            { meter, signal, dims: { transformer: transformerDims } }),
    );

    // 4. Prepare text embeddings (cached per prompt: a new seed skips the text encoder)
    const embedding = await stage('encode', cached ? 'cached' : undefined, async () => {
        if (cached) return cached;
        const fresh = await encodePrompt(prompt, { models, meter, signal });
        models.cachePrompt(prompt, fresh);
        return fresh;
    });
    const textSeqLen = embedding.dims[1];

    const denoised = await stage('denoise', `${steps} steps, ${imageSeqLen} image tokens`, async () => {
        // 5. Prepare latent variables: noise drawn in the packed 128-channel space, as torch.randn on CPU
        const noise = torchRandn(seed, [1, LATENT_CHANNELS, latentHeight, latentWidth]);
        const latents = packLatents(noise, LATENT_CHANNELS, latentHeight, latentWidth); // [1, C, H, W] -> [1, H*W, C]
        const imgIds = prepareLatentIds(latentHeight, latentWidth); // [H*W, 4] rows (0, y, x, 0)
        const txtIds = prepareTextIds(textSeqLen); // [L, 4] rows (0, 0, 0, l)

        // 6. Prepare timesteps
        const schedule = retrieveTimesteps(steps, imageSeqLen);

        // 7. Denoising loop (klein is guidance-distilled: one transformer call per step, no CFG)
        const transformer = await models.session('transformer', { meter, signal, dims: { img_seq: imageSeqLen, txt_seq: textSeqLen } });
        const loopStart = performance.now();
        for (let i = 0; i < steps; i++) {
            signal.throwIfAborted();
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
            // Float32 Euler step, x += (sigma_next - sigma) * v, as FlowMatchEulerDiscreteScheduler.step.
            eulerStep(latents, noisePred.data, schedule.sigmas[i], schedule.sigmas[i + 1]);
            const elapsedMs = performance.now() - loopStart;
            onEvent({ type: 'step', step: i + 1, steps, elapsedMs, etaMs: (elapsedMs / (i + 1)) * (steps - i - 1) });
        }
        assertFinite(latents, 'denoised latents');
        return latents;
    });

    // 8. Decode: unpack tokens, VAE (BN de-normalisation, unpatchify and (x/2+0.5).clamp are in the graph)
    const rgba = await stage('decode', undefined, async () => {
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
    });

    timings.sessionRun = meter.runMs;
    timings.total = performance.now() - started;
    return {
        width,
        height,
        rgba,
        params: checked,
        timings,
        prompt: { tokens: embedding.tokens, droppedTokens: embedding.droppedTokens },
        graphs: models.describe(),
        notes,
    };
}
