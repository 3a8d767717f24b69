// @ts-check
/**
 * @file generate(): one run of the browser's `Flux2KleinPipeline.__call__` (text-to-image, and editing with
 * reference images) or `Flux2KleinInpaintPipeline.__call__` (inpainting). Its numbered stages are those of
 * builder/pipeline/reference.py's generate() (the CPU reference this is tested against), in diffusers' order, with
 * the same names; each stage is one call to the module named after it, timed under the key in brackets:
 *   1. Check inputs (check)              check_inputs.js, encode_images.js checkInputImages
 *   2. Load models (download, load)      load_models.js
 *   3. Encode prompt (encode)            encode_prompt.js (a base model's guidance: guidance.js)
 *   4. Encode images (images)            encode_images.js
 *   5. Prepare latents (latents)         prepare_latents.js
 *   6. Prepare timesteps (timesteps)     prepare_latents.js
 *   7. Denoising loop (denoise)          denoise.js
 *   8. Decode (decode)                   decode.js
 * Input images are decoded and checked in stage 1, so a request whose images are unusable, or whose tokens no
 * graph can hold, is refused before anything is downloaded; stage 4 resizes them and runs the VAE encoder.
 * A session that does not fit the memory budget beside the others is created when its stage needs it; that
 * time is reported under `load`, not under the stage (stage_clock.js).
 * @module pipeline/generate
 */

import { checkInputs } from './check_inputs.js';
import { decode } from './decode.js';
import { denoise } from './denoise.js';
import { checkInputImages, encodeImages, maskTokens } from './encode_images.js';
import { encodePrompt } from './encode_prompt.js';
import { kernelTimes } from './kernel_times.js';
import { PATCH } from './latents.js';
import { loadModels } from './load_models.js';
import { newMeter } from '../models/meter.js';
import { prepareLatents, prepareTimesteps } from './prepare_latents.js';
import { StepPreview } from './preview.js';
import { vaeDecoderPin } from './session_pins.js';
import { StageClock } from './stage_clock.js';
import { describePlan, tileSize } from './vae_tiles.js';

/** @typedef {import('../protocol.js').GenerateParams} GenerateParams */
/** @typedef {import('../protocol.js').GenerateResult} GenerateResult */
/** @typedef {import('../models/model.js').Model} Model */
/** @typedef {import('./stage_clock.js').RunContext} RunContext */
/** @typedef {import('./stage_clock.js').GenerateEvent} GenerateEvent */

/**
 * Run the whole pipeline. Cancellable between stages and between denoising steps through `signal`.
 * @param {GenerateParams} params
 * @param {{model: Model, signal: AbortSignal, onEvent: (event: GenerateEvent) => void}} options
 * @returns {Promise<GenerateResult>}
 */
export async function generate(params, { model, signal, onEvent }) {
    const { sessions } = model;
    const meter = newMeter();
    const started = meter.startedAt;
    const clock = new StageClock({ meter, signal, onEvent });
    /** @type {RunContext} */
    const context = { model, meter, signal };

    // 1. Check inputs
    const { checked, plan } = await clock.time('check', undefined, async () => {
        const { params: checked, images } = checkInputs(params);
        return { checked, plan: await checkInputImages(images, checked, signal) };
    });
    const { prompt, seed, steps, width, height } = checked;
    const noiseTokens = (height / PATCH) * (width / PATCH);
    const imageSeqLen = noiseTokens + plan.tokens;
    sessions.profiling = checked.profile === true;
    sessions.stepKernels = checked.stepKernels !== false;

    // 2. Load models (and start stage 3 as soon as the text encoder exists)
    const { notes, cached, encoding, guidance, negative, imagesCached, previewMap, tiles } = await loadModels(
        checked,
        imageSeqLen,
        plan,
        { ...context, clock, onEvent },
    );

    // 3. Encode prompt (and a base model's negative prompt, the same way)
    const allCached = Boolean(cached) && (!negative || Boolean(negative.cached));
    const encodeDetail = guidance
        ? `prompt and negative prompt${allCached ? ', cached' : ''}`
        : allCached
          ? 'cached'
          : undefined;
    const { embedding, negativeEmbedding } = await clock.time('encode', encodeDetail, async () => ({
        embedding: await encodePrompt(prompt, { cached, encoding }, context),
        negativeEmbedding: guidance && negative ? await encodePrompt(guidance.negativePrompt, negative, context) : null,
    }));

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
    const { schedule, inpainting } = await clock.time('timesteps', undefined, () =>
        prepareTimesteps(steps, latents, plan, conditioning, mask),
    );
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
        `${runSteps} steps` +
        (guidance ? `, 2 transformer calls each (guidance ${guidance.scale})` : '') +
        `, ${noiseTokens} image tokens` +
        (plan.tokens ? ` + ${plan.tokens} from input images` : '');
    // The VAE decoder's session is created while the GPU computes the first step, when it fits beside the others.
    const vaePin = vaeDecoderPin(tileSize(tiles));
    const duringFirstStep = async () => {
        if (sessions.fits('vae_decoder', vaePin)) await sessions.session('vae_decoder', { meter, signal, pin: vaePin });
    };
    const { denoised, stepMs, transformerCalls, stepCheck } = await clock.time('denoise', denoiseDetail, () =>
        denoise(latents, embedding, schedule, conditioning, inpainting, imageSeqLen, preview, {
            ...context,
            onEvent,
            duringFirstStep,
            guidance: guidance && negativeEmbedding ? { scale: guidance.scale, negative: negativeEmbedding } : null,
            checkStep: checked.stepCheck === true,
        }),
    );

    // 8. Decode
    const rgba = await clock.time('decode', tiles.tiles.length > 1 ? describePlan(tiles) : undefined, () =>
        decode(denoised, tiles, context),
    );

    const { timings } = clock;
    timings.sessionRun = meter.runMs;
    timings.total = performance.now() - started;
    const graphs = sessions.describe(meter, { vae_decoder: describePlan(tiles) });
    // After the timings: ending the profiles and releasing the profiled sessions is not part of the run.
    const kernels = checked.profile ? kernelTimes(await sessions.endProfiling()) : undefined;
    await sessions.finishRun();
    return {
        width,
        height,
        rgba,
        params: checked,
        timings,
        stepMs,
        transformerCalls,
        prompt: { tokens: embedding.tokens, droppedTokens: embedding.droppedTokens },
        graphs,
        device: sessions.deviceGrant(),
        memory: model.memory.current,
        preview: preview ? { map: preview.map.source, frames: preview.frames, ms: preview.ms } : null,
        notes,
        inputs: {
            mode: plan.mode,
            images: conditioning?.infos ?? [],
            mask: plan.maskGiven ? (mask?.info ?? null) : null,
            strength: plan.strength,
            extension: plan.extension,
            steps: runSteps,
            referenceTokens: plan.tokens,
            guidance,
        },
        timeline: [...meter.timeline].sort((a, b) => a.startMs - b.startMs),
        ...(kernels ? { kernels } : {}),
        ...(stepCheck ? { stepCheck } : {}),
    };
}
