// @ts-check
/**
 * @file Stage 7 of generate(), Denoising loop: the transformer once per step and the Euler update, with
 * inpainting's mask blend and the step previews. builder/pipeline/reference_stages.py denoise is its twin.
 * @module pipeline/denoise
 */

import { checkStep as checkOnOnnxruntime } from '../models/step_check.js';
import { requireOutput } from '../shared/model_repo.js';
import { guided } from './guidance.js';
import { assertFinite } from './image.js';
import { LATENT_CHANNELS, blendMask, eulerStep, scaleNoise } from './latents.js';
import { transformerPin } from './session_pins.js';

/** @typedef {import('../models/model_caches.js').PromptEmbedding} PromptEmbedding */
/** @typedef {import('./schedule.js').Schedule} Schedule */
/** @typedef {import('./encode_images.js').Conditioning} Conditioning */
/** @typedef {import('./prepare_latents.js').Latents} Latents */
/** @typedef {import('./prepare_latents.js').Inpainting} Inpainting */
/** @typedef {import('./preview.js').StepPreview} StepPreview */
/** @typedef {import('./stage_clock.js').RunContext} RunContext */
/** @typedef {import('./stage_clock.js').GenerateEvent} GenerateEvent */

/**
 * @typedef {Object} StepGuidance  A base model's classifier-free guidance (pipeline/guidance.js), as stage 7 runs it.
 * @property {number} scale
 * @property {PromptEmbedding} negative  The negative prompt's embedding (as long as the prompt's: both 512 tokens).
 */

/**
 * Stage 7: one transformer call per step on the noise tokens followed by the input images' tokens (with
 * `guidance`, a second on the negative prompt's embedding, the two predictions combined by guidance.js guided());
 * the prediction for the noise tokens takes a float32 Euler step,
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
 * @param {RunContext & {onEvent: (event: GenerateEvent) => void, duringFirstStep?: () => Promise<void>,
 *   guidance?: StepGuidance | null, checkStep?: boolean}} context  `duringFirstStep`: work done while the GPU
 *   computes the first step (creating the VAE decoder's session); `guidance`: a base model's, null or absent for one
 *   call a step; `checkStep`: the first step run on onnxruntime too, when our kernels ran it
 *   (GenerateParams.stepCheck).
 * @returns {Promise<{denoised: Float32Array, stepMs: number[], transformerCalls: number,
 *   stepCheck: import('../shared/types.js').StepCheck | null}>} The denoised tokens [1, H*W, C], the wall time of
 *   each step (the first one records the graph capture), the transformer's runs, and the check of the first step.
 */
export async function denoise(
    prepared,
    embedding,
    schedule,
    conditioning,
    inpainting,
    imageSeqLen,
    preview,
    { model, meter, signal, onEvent, duringFirstStep, guidance = null, checkStep = false },
) {
    const { sessions } = model;
    const { imgIds, txtIds, latentHeight, latentWidth, noise } = prepared;
    const noiseTokens = latentHeight * latentWidth;
    const extraTokens = conditioning ? conditioning.ids.length / 4 : 0;
    if (guidance && guidance.negative.dims[1] !== embedding.dims[1]) {
        throw new Error(
            `The negative prompt's embedding has ${guidance.negative.dims[1]} tokens, the prompt's ${embedding.dims[1]}.`,
        );
    }
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
    const pin = transformerPin(imageSeqLen);
    const transformer = await sessions.session('transformer', { meter, signal, pin });
    /** @type {number[]} */
    const stepMs = [];
    /** @type {import('../shared/types.js').StepCheck | null} */
    let stepCheck = null;
    const loopStart = performance.now();
    /** @type {(() => void) | null} A finished step's event, sent (with its preview) while the GPU runs the next. */
    let announce = null;
    let transformerCalls = 0;
    /**
     * One transformer run of step i on `text`'s embedding: resolves once queued, with its inputs and its whole
     * noise_pred [1, imageSeqLen, C] on the way to the CPU (`predicted`).
     * @param {number} i
     * @param {PromptEmbedding} text
     * @param {string} what
     */
    const predict = async (i, text, what) => {
        transformerCalls++;
        const inputs = {
            hidden_states: { data: hiddenStates, dims: [1, imageSeqLen, LATENT_CHANNELS] },
            encoder_hidden_states: { data: text.data, dims: text.dims },
            // float32(t / 1000), which is not always sigma itself (see schedule.js).
            timestep: { data: Float32Array.of(schedule.modelTimesteps[i]), dims: [1] },
            img_ids: { data: ids, dims: [imageSeqLen, 4] },
            txt_ids: { data: txtIds, dims: [textSeqLen, 4] },
        };
        const { outputs } = await sessions.submit(transformer, inputs, { meter, what });
        const predicted = outputs.then(
            (o) => /** @type {Float32Array} */ (requireOutput(o, 'noise_pred', 'transformer').data),
        );
        return { inputs, predicted };
    };
    for (let i = start; i < total; i++) {
        signal.throwIfAborted();
        const stepStart = performance.now();
        const what = `Denoising step ${i - start + 1}`;
        const { inputs, predicted } = await predict(i, embedding, what);
        // The previous step's preview is drawn on the CPU while the GPU runs this step, off the steps' critical path
        // (the latents it reads change only after this step's output arrives).
        announce?.();
        // While the GPU computes the first step: work that is not a step (its time is not the step's).
        const asideMs = i === start && duringFirstStep ? await timed(duringFirstStep) : 0;
        const noisePred = await predicted;
        // Only the noise tokens' prediction is a step (noise_pred[:, :latents.size(1)]).
        let velocity = noisePred.subarray(0, latents.length);
        // Each prediction, before the Euler step folds it into the latents: a half-precision overflow is caught at
        // the step that made it (and before the first step's check spends a second run on it).
        assertFinite(velocity, `transformer's prediction at ${what.toLowerCase()}`, 'transformer');
        let checkMs = 0;
        if (checkStep && i === start) {
            // Before the Euler step changes hiddenStates in place: onnxruntime gets the very same inputs.
            checkMs = await timed(async () => {
                stepCheck = await checkOnOnnxruntime(sessions, transformer, inputs, noisePred, { meter, signal, pin });
            });
        }
        if (guidance) {
            // Queued only once the first prediction is on the CPU: a captured session writes every run's output into
            // the same GPU buffer, which the second run would overwrite before the first one's download.
            const negativePred = await (await predict(i, guidance.negative, `${what}, negative prompt`)).predicted;
            const negative = negativePred.subarray(0, latents.length);
            assertFinite(negative, `transformer's prediction at ${what.toLowerCase()}, negative prompt`, 'transformer');
            velocity = guided(velocity, negative, guidance.scale);
        }
        eulerStep(latents, velocity, schedule.sigmas[i], schedule.sigmas[i + 1]);
        if (inpainting) {
            const proper =
                i < total - 1
                    ? scaleNoise(inpainting.imageLatents, schedule.sigmas[i + 1], noise)
                    : inpainting.imageLatents;
            blendMask(latents, proper, inpainting.mask, LATENT_CHANNELS);
        }
        stepMs.push(performance.now() - stepStart - asideMs - checkMs);
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
    assertFinite(latents, 'denoised latents', 'transformer');
    return { denoised: latents.slice(), stepMs, transformerCalls, stepCheck };
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
