// @ts-check
/**
 * @file Stage 2 of generate(), Load models: the model files downloaded into the store, then the sessions
 * created, with stage 3 started as soon as the text encoder exists. builder/pipeline/reference_models.py
 * load_models is its twin; load_sessions.js runs this stage's session creation alone (for `load-bench`).
 * @module pipeline/load_models
 */

import { summarizeChoices } from '../models/model_report.js';
import { imageJobs, latentsKey } from './encode_images.js';
import { startEncoding, startTokenizer } from './encode_prompt.js';
import { resolveGuidance } from './guidance.js';
import { loadPreviewMap } from './preview.js';
import { sessionPins } from './session_pins.js';
import { MAX_SEQUENCE_LENGTH } from './tokenizer.js';
import { decodePlan, tileSize, vaeTileFor } from './vae_tiles.js';

/** @typedef {import('../protocol.js').GenerateParams} GenerateParams */
/** @typedef {import('../models/model_caches.js').PromptEmbedding} PromptEmbedding */
/** @typedef {import('./encode_images.js').InputPlan} InputPlan */
/** @typedef {import('./encode_prompt.js').Encoding} Encoding */
/** @typedef {import('./guidance.js').Guidance} Guidance */
/** @typedef {import('./stage_clock.js').RunContext} RunContext */
/** @typedef {import('./stage_clock.js').GenerateEvent} GenerateEvent */
/** @typedef {import('./stage_clock.js').StageClock} StageClock */
/** @typedef {import('./vae_tiles.js').TilePlan} TilePlan */

/**
 * @typedef {Object} PromptEncoding  One text's embedding as stage 2 leaves it for stage 3.
 * @property {PromptEmbedding | undefined} cached  From an earlier run.
 * @property {Encoding | null} encoding  Under way (the text encoder's run is queued), or null: stage 3 encodes it.
 */

/**
 * Stage 2: the model files the store lacks are downloaded (none on a second visit, timed as `download`), then
 * the sessions are created in order while they fit the memory budget together (`load`). The text encoder is
 * left out when an earlier run already encoded this prompt; otherwise it comes first and stage 3 starts as soon
 * as it exists, so the GPU encodes the prompt while the next sessions are created. The VAE decoder comes last,
 * during the first denoising step (stage 7), or at stage 8 when it does not fit beside the others. The
 * transformer's graph is chosen for this attention length (graph_choice.sizeClass) and pinned to these dims, so
 * it captures its kernels on the first step and replays them.
 * Once the manifest is read, the model's kind decides the guidance (pipeline/guidance.js): a base model's negative
 * prompt is encoded beside the prompt, through the same path and cache.
 * Input images add the VAE encoder (refused here, before any download, when the repository has none), created
 * after the text encoder unless every image's latents are cached.
 * With `preview`, the step previews' colour map comes with the download (pipeline/preview.js).
 * The VAE decoder is pinned to the tile it decodes in, which the memory mode chooses (pipeline/vae_tiles.js).
 * @param {GenerateParams} params
 * @param {number} imageSeqLen  Image tokens the transformer sees: the noise's and the input images'.
 * @param {InputPlan} plan
 * @param {RunContext & {clock: StageClock, onEvent: (event: GenerateEvent) => void}} context
 * @returns {Promise<{notes: string[], cached: PromptEmbedding | undefined, encoding: Encoding | null,
 *   guidance: Guidance | null, negative: PromptEncoding | null, imagesCached: boolean,
 *   previewMap: import('./preview.js').PreviewMap | null, tiles: TilePlan}>}  `cached`: the prompt's embedding from
 *   an earlier run; `encoding`: stage 3 under way; `guidance`: what runs (null: one transformer call a step) and
 *   `negative` its negative prompt's encoding; `imagesCached`: every input image's latents are (none to encode);
 *   `tiles`: how stage 8 decodes.
 */
export async function loadModels(params, imageSeqLen, plan, { model, meter, signal, clock, onEvent }) {
    const { notes, previewMap, pipeline } = await clock.time('download', undefined, async () => {
        const prepared = await model.prepare(
            { ...params, attentionTokens: imageSeqLen + MAX_SEQUENCE_LENGTH, encodeSizes: plan.used },
            { signal, onProgress: (progress) => onEvent({ type: 'progress', progress }) },
        );
        const { pipeline } = prepared;
        if (!params.preview) return { notes: prepared.notes, previewMap: null, pipeline };
        const { map, note } = await loadPreviewMap(model.source, signal);
        return { notes: note ? [...prepared.notes, note] : prepared.notes, previewMap: map, pipeline };
    });
    const { guidance, notes: guidanceNotes } = resolveGuidance(pipeline, {
        mode: plan.mode,
        scale: params.guidanceScale,
        negativePrompt: params.negativePrompt,
    });
    // The caches are keyed by the encoders chosen above.
    const cached = model.prompts.get(params.prompt);
    const negativeCached = guidance ? model.prompts.get(guidance.negativePrompt) : undefined;
    const encodeText = !cached || (guidance !== null && !negativeCached);
    // Built in a helper worker while the sessions below are created.
    if (encodeText) await startTokenizer(model.source);
    const encodeImages = imageJobs(plan).some((job) => !model.images.get(latentsKey(job)));
    /** @type {import('../shared/model_repo.js').AnyComponent[]} */
    const order = [
        ...(encodeText ? /** @type {const} */ (['text_encoder']) : []),
        ...(encodeImages ? /** @type {const} */ (['vae_encoder']) : []),
        'transformer',
    ];
    const tiles = decodePlan(params, vaeTileFor({ vaeTile: params.vaeTile, memory: model.memory.current.mode }));
    const pins = sessionPins(imageSeqLen, tileSize(tiles));
    /** @type {Encoding | null} */
    let encoding = null;
    /** @type {Encoding | null} */
    let negativeEncoding = null;
    /** @param {import('../shared/model_repo.js').AnyComponent} component */
    const onLoaded = async (component) => {
        if (component !== 'text_encoder') return;
        if (!cached) encoding = await startEncoding(params.prompt, { model, meter, signal });
        if (guidance && !negativeCached) {
            negativeEncoding =
                guidance.negativePrompt === params.prompt && encoding
                    ? encoding
                    : await startEncoding(guidance.negativePrompt, { model, meter, signal });
        }
    };
    await clock.time('load', summarizeChoices(model.source.requireChoices()), () =>
        model.sessions.preload(order, { meter, signal, pins, next: ['vae_decoder'], onLoaded }),
    );
    return {
        notes: [...notes, ...guidanceNotes],
        cached,
        encoding,
        guidance,
        negative: guidance ? { cached: negativeCached, encoding: negativeEncoding } : null,
        imagesCached: !encodeImages,
        previewMap,
        tiles,
    };
}
