// @ts-check
/**
 * @file generate(): one run of the browser's `Flux2KleinPipeline.__call__` (text-to-image, and editing with
 * reference images) or `Flux2KleinInpaintPipeline.__call__` (inpainting). Its numbered stages are those of
 * builder/pipeline/reference.py's generate() (the CPU reference this is tested against), in diffusers' order, with
 * the same names; each stage is one call, timed under the key in brackets:
 *   1. Check inputs (check)        2. Load models (download, load)   3. Encode prompt (encode)
 *   4. Encode images (images)      5. Prepare latents (latents)      6. Prepare timesteps (timesteps)
 *   7. Denoising loop (denoise)    8. Decode (decode)
 * Input images are decoded and checked in stage 1, so a request whose images are unusable, or whose tokens no
 * graph can hold, is refused before anything is downloaded; stage 4 resizes them and runs the VAE encoder.
 * A session that does not fit the memory budget beside the others is created when its stage needs it; that
 * time is reported under `load`, not under the stage.
 * @module pipeline/generate
 */

import { MEMORY_MODES, PRECISIONS } from '../protocol.js';
import { InputError } from '../shared/errors.js';
import { LIMITS } from '../shared/limits.js';
import { checkInputImages, encodeImages, imageJobs, maskTokens } from './encode_images.js';
import { assertFinite, checkImage, toRgba } from './image.js';
import { checkImageParams } from './input_images.js';
import { kernelTimes } from './kernel_times.js';
import {
    LATENT_CHANNELS,
    PATCH,
    blendMask,
    eulerStep,
    packLatents,
    prepareLatentIds,
    prepareTextIds,
    scaleNoise,
    unpackLatents,
} from './latents.js';
import { mark, newMeter } from './meter.js';
import { requireOutput } from './session_runs.js';
import { StepPreview, loadPreviewMap } from './preview.js';
import { torchRandn } from './rng.js';
import { TEXT_ENCODER_PIN, sessionPins, transformerPin, vaeDecoderPin } from './session_pins.js';
import { inpaintStart } from '../shared/inpaint.js';
import { retrieveTimesteps } from './schedule.js';
import { MAX_SEQUENCE_LENGTH, PromptTokenizer } from './tokenizer.js';
import { decodePlan, decodeTiles, describePlan, tileSize, vaeTileFor, vaeTileProblem } from './vae_tiles.js';

/** @typedef {import('../protocol.js').GenerateParams} GenerateParams */
/** @typedef {import('../protocol.js').GenerateResult} GenerateResult */
/** @typedef {import('../protocol.js').Stage} Stage */
/** @typedef {import('../protocol.js').StageTimings} StageTimings */
/** @typedef {import('./models.js').Models} Models */
/** @typedef {import('./meter.js').Meter} Meter */
/** @typedef {import('./model_caches.js').PromptEmbedding} PromptEmbedding */
/** @typedef {import('./schedule.js').Schedule} Schedule */
/** @typedef {import('./encode_images.js').InputPlan} InputPlan */
/** @typedef {import('./encode_images.js').Conditioning} Conditioning */
/** @typedef {import('./vae_tiles.js').TilePlan} TilePlan */

/**
 * @typedef {{type: 'progress', progress: import('../shared/types.js').DownloadProgress}
 *   | {type: 'stage', stage: Stage, detail?: string}
 *   | {type: 'step', step: number, steps: number, elapsedMs: number, etaMs: number,
 *     preview?: import('../protocol.js').PreviewFrame}} GenerateEvent
 *   The protocol's events without the request id (worker/main.js adds it).
 */

/**
 * @typedef {Object} RunContext  What every stage of one run shares.
 * @property {Models} models
 * @property {Meter} meter
 * @property {AbortSignal} signal
 */

/**
 * @typedef {Object} Latents  Stage 5's output: the packed noise and the position ids of both token sets.
 * @property {Float32Array} latents  [1, H*W, C] packed tokens, updated in place by the denoising loop.
 * @property {BigInt64Array} imgIds   [H*W, 4] rows (0, y, x, 0).
 * @property {BigInt64Array} txtIds   [L, 4] rows (0, 0, 0, l).
 * @property {number} latentHeight
 * @property {number} latentWidth
 * @property {Float32Array} noise    [1, H*W, C] the packed noise itself (inpainting re-noises the image with it).
 */

/**
 * Reject bad parameters before any download or GPU work (never adjust them silently).
 * @param {any} params
 * @returns {GenerateParams}
 */
export function checkInputs(params) {
    if (!params || typeof params !== 'object') {
        throw new InputError(`\`params\` must be an object, got ${JSON.stringify(params)}.`);
    }
    const { prompt, seed, steps, width, height, modelBase, precision, profile, memory, preview, vaeTile } = params;
    const { sizeMin, sizeMax, sizeMultiple, stepsMin, stepsMax, seedMax } = LIMITS;
    // diffusers accepts an empty prompt (it encodes the chat template alone), so we do too.
    if (typeof prompt !== 'string') {
        throw new InputError(`\`prompt\` must be a string, got ${JSON.stringify(prompt)}.`, { prompt });
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
    /** @type {GenerateParams} */
    const checked = { prompt, seed, steps, width, height, modelBase };
    if (precision) checked.precision = precision;
    if (profile) checked.profile = true;
    if (memory !== undefined) checked.memory = memory;
    if (preview) checked.preview = true;
    if (vaeTile !== undefined) checked.vaeTile = vaeTile;
    // The image files stay out of the checked parameters (the result would carry them back); `inputs` names them.
    const { mode, strength } = checkImageParams(params);
    if (mode === 'inpaint') checked.strength = /** @type {number} */ (strength);
    return checked;
}

/**
 * Stage 2: the model files the store lacks are downloaded (none on a second visit, timed as `download`), then
 * the sessions are created in order while they fit the memory budget together (`load`). The text encoder is
 * left out when an earlier run already encoded this prompt; otherwise it comes first and stage 3 starts as soon
 * as it exists, so the GPU encodes the prompt while the next sessions are created. The VAE decoder comes last,
 * during the first denoising step (stage 7), or at stage 8 when it does not fit beside the others. The
 * transformer's graph is chosen for this attention length (graph_choice.sizeClass) and pinned to these dims, so
 * it captures its kernels on the first step and replays them.
 * Input images add the VAE encoder (refused here, before any download, when the repository has none), created
 * after the text encoder unless every image's latents are cached.
 * With `preview`, the step previews' colour map comes with the download (pipeline/preview.js).
 * The VAE decoder is pinned to the tile it decodes in, which the memory mode chooses (pipeline/vae_tiles.js).
 * @param {GenerateParams} params
 * @param {number} imageSeqLen  Image tokens the transformer sees: the noise's and the input images'.
 * @param {InputPlan} plan
 * @param {RunContext & {clock: StageClock, onEvent: (event: GenerateEvent) => void}} context
 * @returns {Promise<{notes: string[], cached: PromptEmbedding | undefined, encoding: Encoding | null,
 *   imagesCached: boolean, previewMap: import('./preview.js').PreviewMap | null, tiles: TilePlan}>}  `cached`: the
 *   prompt's embedding from an earlier run; `encoding`: stage 3 under way; `imagesCached`: every input image's
 *   latents are (none to encode); `tiles`: how stage 8 decodes.
 */
async function loadModels(params, imageSeqLen, plan, { models, meter, signal, clock, onEvent }) {
    const { notes, previewMap } = await clock.time('download', undefined, async () => {
        const prepared = await models.prepare(
            { ...params, attentionTokens: imageSeqLen + MAX_SEQUENCE_LENGTH, encodeSizes: plan.used },
            { signal, onProgress: (progress) => onEvent({ type: 'progress', progress }) },
        );
        if (!params.preview) return { notes: prepared.notes, previewMap: null };
        const { map, note } = await loadPreviewMap(models, signal);
        return { notes: note ? [...prepared.notes, note] : prepared.notes, previewMap: map };
    });
    // The caches are keyed by the encoders chosen above.
    const cached = models.cachedPrompt(params.prompt);
    const encodeImages = imageJobs(plan).some((job) => !models.cachedImage(models.imageKey(job.image.sha256, job.how)));
    /** @type {import('../shared/model_repo.js').AnyComponent[]} */
    const order = [
        ...(cached ? [] : /** @type {const} */ (['text_encoder'])),
        ...(encodeImages ? /** @type {const} */ (['vae_encoder']) : []),
        'transformer',
    ];
    const tiles = decodePlan(params, vaeTileFor({ vaeTile: params.vaeTile, memory: models.memory.mode }));
    const pins = sessionPins(imageSeqLen, tileSize(tiles));
    /** @type {Encoding | null} */
    let encoding = null;
    /** @param {import('../shared/model_repo.js').AnyComponent} component */
    const onLoaded = async (component) => {
        if (component === 'text_encoder') encoding = await startEncoding(params.prompt, { models, meter, signal });
    };
    await clock.time('load', models.summary(), () =>
        models.preload(order, { meter, signal, pins, next: ['vae_decoder'], onLoaded }),
    );
    return { notes, cached, encoding, imagesCached: !encodeImages, previewMap, tiles };
}

/**
 * @typedef {Object} Encoding  Stage 3 under way: the text encoder's run is queued on the GPU.
 * @property {Promise<PromptEmbedding>} embedding
 */

/**
 * Stage 3, started: chat template + tokenizer, then the text encoder's run is queued; its prompt_embeds
 * [1, 512, joint_dim] come back through `embedding` once the GPU has computed them (the caller may create other
 * sessions meanwhile). Cached per prompt: a new seed with the same prompt skips the text encoder.
 * @param {string} prompt
 * @param {RunContext} context
 * @returns {Promise<Encoding>}
 */
async function startEncoding(prompt, { models, meter, signal }) {
    const tokenizer = await models.memo('tokenizer', async () =>
        PromptTokenizer.fromFiles(await models.tokenizerFiles()),
    );
    const encoded = tokenizer.encode(prompt, { maxLength: MAX_SEQUENCE_LENGTH });
    const session = await models.session('text_encoder', { meter, signal, pin: TEXT_ENCODER_PIN });
    const { outputs } = await models.submit(
        session,
        {
            input_ids: { data: encoded.inputIds, dims: [1, encoded.inputIds.length] },
            attention_mask: { data: encoded.attentionMask, dims: [1, encoded.attentionMask.length] },
        },
        { meter, what: 'The text encoder' },
    );
    const embedding = outputs.then((outputs) => {
        const embeds = requireOutput(outputs, 'prompt_embeds', 'text encoder'); // [1, 512, joint_dim]
        assertFinite(embeds.data, 'prompt embeddings');
        /** @type {PromptEmbedding} */
        const made = { ...embeds, tokens: encoded.tokens, droppedTokens: encoded.droppedTokens };
        models.cachePrompt(prompt, made);
        return made;
    });
    embedding.catch(() => {}); // awaited by stage 3; a failure before then is not unhandled
    return { embedding };
}

/**
 * Stage 5: noise drawn in the packed 128-channel space exactly as torch.randn on the CPU draws it, and the
 * position ids of the image and text tokens.
 * @param {number} seed
 * @param {{width: number, height: number, textSeqLen: number}} size
 * @returns {Latents}
 */
function prepareLatents(seed, { width, height, textSeqLen }) {
    const latentHeight = height / PATCH;
    const latentWidth = width / PATCH;
    const noise = torchRandn(seed, [1, LATENT_CHANNELS, latentHeight, latentWidth]);
    const packed = packLatents(noise, LATENT_CHANNELS, latentHeight, latentWidth); // [1, C, H, W] -> [1, H*W, C]
    return {
        latents: packed.slice(),
        noise: packed,
        imgIds: prepareLatentIds(latentHeight, latentWidth), // [H*W, 4] rows (0, y, x, 0)
        txtIds: prepareTextIds(textSeqLen), // [L, 4] rows (0, 0, 0, l)
        latentHeight,
        latentWidth,
    };
}

/**
 * @typedef {Object} Inpainting  What inpainting adds to the denoising loop.
 * @property {number} start  The first step that runs (shared/inpaint.js inpaintStart).
 * @property {Float32Array} imageLatents  [1, H*W, C] the image to inpaint, packed.
 * @property {Float32Array} mask  [H*W] token weights (1 repaints).
 */

/**
 * Stage 7: one transformer call per step (klein is guidance-distilled: no CFG) on the noise tokens followed by
 * the input images' tokens; the prediction for the noise tokens takes a float32 Euler step,
 * x += (sigma_next - sigma) * v, as FlowMatchEulerDiscreteScheduler.step. Inpainting runs the steps from
 * `start` on and, after each, puts the image (re-noised to the next sigma, clean after the last step) back where
 * the mask keeps it. Cancellable between steps. With `preview`, each step's event carries what the image is
 * becoming (pipeline/preview.js), made from the latents without changing them.
 * @param {Latents} prepared  Its `latents` are updated in place.
 * @param {PromptEmbedding} embedding
 * @param {Schedule} schedule
 * @param {Conditioning | null} conditioning  The input images' tokens and ids.
 * @param {Inpainting | null} inpainting
 * @param {number} imageSeqLen  The transformer's image tokens: the noise's, then the input images' (generate()
 *   works it out once, for the session's pin in stage 2 and for every step here).
 * @param {StepPreview | null} preview
 * @param {RunContext & {onEvent: (event: GenerateEvent) => void, duringFirstStep?: () => Promise<void>}} context
 *   `duringFirstStep`: work done while the GPU computes the first step (creating the VAE decoder's session).
 * @returns {Promise<{denoised: Float32Array, stepMs: number[]}>} The denoised tokens [1, H*W, C], and the wall
 *   time of each step (the first one records the graph capture).
 */
async function denoise(
    prepared,
    embedding,
    schedule,
    conditioning,
    inpainting,
    imageSeqLen,
    preview,
    { models, meter, signal, onEvent, duringFirstStep },
) {
    const { imgIds, txtIds, latentHeight, latentWidth, noise } = prepared;
    const noiseTokens = latentHeight * latentWidth;
    const extraTokens = conditioning ? conditioning.ids.length / 4 : 0;
    if (noiseTokens + extraTokens !== imageSeqLen) {
        throw new Error(
            `The input images gave ${extraTokens} tokens where stage 1 counted ${imageSeqLen - noiseTokens}.`,
        );
    }
    // One buffer holds [noise tokens | image tokens]; the loop updates the noise part in place.
    const hiddenStates = new Float32Array(imageSeqLen * LATENT_CHANNELS);
    hiddenStates.set(prepared.latents);
    if (conditioning) hiddenStates.set(conditioning.tokens, noiseTokens * LATENT_CHANNELS);
    const latents = hiddenStates.subarray(0, noiseTokens * LATENT_CHANNELS);
    const ids = new BigInt64Array(imageSeqLen * 4);
    ids.set(imgIds);
    if (conditioning) ids.set(conditioning.ids, noiseTokens * 4);
    const textSeqLen = embedding.dims[1];
    const total = schedule.modelTimesteps.length;
    const start = inpainting ? inpainting.start : 0;
    const steps = total - start;
    const transformer = await models.session('transformer', { meter, signal, pin: transformerPin(imageSeqLen) });
    /** @type {number[]} */
    const stepMs = [];
    const loopStart = performance.now();
    /** @type {(() => void) | null} A finished step's event, sent (with its preview) while the GPU runs the next. */
    let announce = null;
    for (let i = start; i < total; i++) {
        signal.throwIfAborted();
        const stepStart = performance.now();
        const { outputs } = await models.submit(
            transformer,
            {
                hidden_states: { data: hiddenStates, dims: [1, imageSeqLen, LATENT_CHANNELS] },
                encoder_hidden_states: { data: embedding.data, dims: embedding.dims },
                // float32(t / 1000), which is not always sigma itself (see schedule.js).
                timestep: { data: Float32Array.of(schedule.modelTimesteps[i]), dims: [1] },
                img_ids: { data: ids, dims: [imageSeqLen, 4] },
                txt_ids: { data: txtIds, dims: [textSeqLen, 4] },
            },
            { meter, what: `Denoising step ${i - start + 1}` },
        );
        // The previous step's preview is drawn on the CPU while the GPU runs this step, off the steps' critical path
        // (the latents it reads change only after this step's output arrives).
        announce?.();
        // While the GPU computes the first step: work that is not a step (its time is not the step's).
        const asideMs = i === start && duringFirstStep ? await timed(duringFirstStep) : 0;
        const noisePred = requireOutput(await outputs, 'noise_pred', 'transformer'); // [1, imageSeqLen, C]
        // Only the noise tokens' prediction is a step (noise_pred[:, :latents.size(1)]).
        const velocity = noisePred.data.subarray(0, latents.length);
        eulerStep(latents, velocity, schedule.sigmas[i], schedule.sigmas[i + 1]);
        if (inpainting) {
            const proper =
                i < total - 1
                    ? scaleNoise(inpainting.imageLatents, schedule.sigmas[i + 1], noise)
                    : inpainting.imageLatents;
            blendMask(latents, proper, inpainting.mask, LATENT_CHANNELS);
        }
        stepMs.push(performance.now() - stepStart - asideMs);
        const done = i - start + 1;
        const elapsedMs = performance.now() - loopStart;
        const sigmaNext = schedule.sigmas[i + 1];
        announce = () => {
            const frame = preview?.frame(latents, velocity, sigmaNext);
            onEvent({
                type: 'step',
                step: done,
                steps,
                elapsedMs,
                etaMs: (elapsedMs / done) * (steps - done),
                ...(frame ? { preview: frame } : {}),
            });
        };
    }
    announce?.();
    assertFinite(latents, 'denoised latents');
    return { denoised: latents.slice(), stepMs };
}

/**
 * @param {() => Promise<unknown>} work
 * @returns {Promise<number>} The milliseconds it took.
 */
async function timed(work) {
    const started = performance.now();
    await work();
    return performance.now() - started;
}

/**
 * Stage 8: unpack the tokens, then the VAE decoder (its graph holds the BN de-normalisation, the unpatchify
 * and (x/2+0.5).clamp), on the whole image or tile by tile (pipeline/vae_tiles.js), then RGBA bytes for the page.
 * @param {Float32Array} denoised  [1, H*W, C]
 * @param {TilePlan} tiles
 * @param {RunContext} context
 * @returns {Promise<Uint8ClampedArray>}
 */
async function decode(denoised, tiles, { models, meter, signal }) {
    const { latentHeight, latentWidth, tileHeight, tileWidth } = tiles;
    const latents = unpackLatents(denoised, LATENT_CHANNELS, latentHeight, latentWidth); // [1, H*W, C] -> [1, C, H, W]
    const vae = await models.session('vae_decoder', { meter, signal, pin: vaeDecoderPin(tileSize(tiles)) });
    const run = async (/** @type {Float32Array} */ data, /** @type {string} */ what) => {
        const outputs = await models.run(
            vae,
            { latents: { data, dims: [1, LATENT_CHANNELS, tileHeight, tileWidth] } },
            { meter, what },
        );
        return requireOutput(outputs, 'image', 'VAE decoder').data; // [1, 3, H, W] RGB in [0, 1]
    };
    const decoded =
        tiles.tiles.length === 1
            ? await run(latents, 'The VAE decoder')
            : await decodeTiles(
                  latents,
                  tiles,
                  (data, i) => run(data, `The VAE decoder (tile ${i + 1} of ${tiles.tiles.length})`),
                  signal,
              );
    checkImage(decoded);
    return toRgba(decoded, latentWidth * PATCH, latentHeight * PATCH);
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
        mark(this.meter, stage, started);
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
    const meter = newMeter();
    const started = meter.startedAt;
    const clock = new StageClock({ meter, signal, onEvent });
    /** @type {RunContext} */
    const context = { models, meter, signal };

    // 1. Check inputs
    const { checked, plan } = await clock.time('check', undefined, async () => ({
        checked: checkInputs(params),
        plan: await checkInputImages(params, signal),
    }));
    const { prompt, seed, steps, width, height } = checked;
    const noiseTokens = (height / PATCH) * (width / PATCH);
    const imageSeqLen = noiseTokens + plan.tokens;
    models.profiling = checked.profile === true;

    // 2. Load models (and start stage 3 as soon as the text encoder exists)
    const { notes, cached, encoding, imagesCached, previewMap, tiles } = await loadModels(checked, imageSeqLen, plan, {
        ...context,
        clock,
        onEvent,
    });

    // 3. Encode prompt
    const embedding = await clock.time(
        'encode',
        cached ? 'cached' : undefined,
        async () => cached ?? (await (encoding ?? (await startEncoding(prompt, context))).embedding),
    );

    // 4. Encode images (and inpainting's mask)
    const { conditioning, mask } =
        plan.mode === 'text'
            ? { conditioning: null, mask: null }
            : await clock.time(
                  'images',
                  `${plan.images.length} image(s), ${plan.tokens} tokens${imagesCached ? ', cached' : ''}`,
                  async () => ({
                      conditioning: await encodeImages(plan, context),
                      mask: plan.mask ? maskTokens(plan.mask, { width, height }) : null,
                  }),
              );

    // 5. Prepare latents
    const textSeqLen = embedding.dims[1];
    const latents = await clock.time('latents', undefined, () => prepareLatents(seed, { width, height, textSeqLen }));

    // 6. Prepare timesteps (mu from the noise tokens alone); inpainting starts part-way, from the image noised to
    // that step's sigma.
    const { schedule, inpainting } = await clock.time('timesteps', undefined, () => {
        const made = retrieveTimesteps(steps, noiseTokens);
        if (plan.mode !== 'inpaint' || !conditioning?.inpaintLatents || !mask)
            return { schedule: made, inpainting: null };
        const start = inpaintStart(steps, /** @type {number} */ (plan.strength));
        latents.latents = scaleNoise(conditioning.inpaintLatents, made.sigmas[start], latents.noise);
        return { schedule: made, inpainting: { start, imageLatents: conditioning.inpaintLatents, mask: mask.tokens } };
    });
    const runSteps = steps - (inpainting?.start ?? 0);

    // 7. Denoising loop
    const preview = previewMap
        ? new StepPreview(previewMap, {
              latentHeight: latents.latentHeight,
              latentWidth: latents.latentWidth,
              inpainting,
          })
        : null;
    const denoiseDetail =
        `${runSteps} steps, ${noiseTokens} image tokens` + (plan.tokens ? ` + ${plan.tokens} from input images` : '');
    // The VAE decoder's session is created while the GPU computes the first step, when it fits beside the others.
    const vaePin = vaeDecoderPin(tileSize(tiles));
    const duringFirstStep = async () => {
        if (models.fits('vae_decoder', vaePin)) await models.session('vae_decoder', { meter, signal, pin: vaePin });
    };
    const { denoised, stepMs } = await clock.time('denoise', denoiseDetail, () =>
        denoise(latents, embedding, schedule, conditioning, inpainting, imageSeqLen, preview, {
            ...context,
            onEvent,
            duringFirstStep,
        }),
    );

    // 8. Decode
    const rgba = await clock.time('decode', tiles.tiles.length > 1 ? describePlan(tiles) : undefined, () =>
        decode(denoised, tiles, context),
    );

    const { timings } = clock;
    timings.sessionRun = meter.runMs;
    timings.total = performance.now() - started;
    const graphs = models.describe(meter, { vae_decoder: describePlan(tiles) });
    // After the timings: ending the profiles and releasing the profiled sessions is not part of the run.
    const kernels = checked.profile ? kernelTimes(await models.endProfiling()) : undefined;
    await models.finishRun();
    return {
        width,
        height,
        rgba,
        params: checked,
        timings,
        stepMs,
        prompt: { tokens: embedding.tokens, droppedTokens: embedding.droppedTokens },
        graphs,
        device: models.deviceGrant(),
        memory: models.memory,
        preview: preview ? { map: preview.map.source, frames: preview.frames, ms: preview.ms } : null,
        notes,
        inputs: {
            mode: plan.mode,
            images: conditioning?.infos ?? [],
            mask: mask?.info ?? null,
            strength: plan.strength,
            steps: runSteps,
            referenceTokens: plan.tokens,
        },
        timeline: [...meter.timeline].sort((a, b) => a.startMs - b.startMs),
        ...(kernels ? { kernels } : {}),
    };
}
