// @ts-check
/**
 * @file loadSessions(): stage 2 of generate() (Load models) on its own, one session at a time, each created and
 * then released. It answers "can this browser hold this model, and what does each session cost to create?"
 * without running the pipeline: on a software adapter a full-size image takes hours, while creating every
 * session of the full-size model takes minutes. builder/check/bench/load.py drives it to catch memory
 * regressions at real size on machines without a GPU.
 *
 * Each session is created as generate() creates it for `width` x `height` (session_pins.js sessionPins): the
 * transformer's graph of that size class, pinned to the same dims (session_pins.js).
 * @module pipeline/load_sessions
 */

import { COMPONENTS, OPTIONAL_COMPONENTS } from '../shared/model_repo.js';
import { InputError } from '../shared/errors.js';
import { checkInputs } from './check_inputs.js';
import { newMeter } from '../models/meter.js';
import { sessionPins } from './session_pins.js';
import { PATCH } from './latents.js';
import { MAX_SEQUENCE_LENGTH } from './tokenizer.js';

/** @typedef {import('../models/model.js').Model} Model */
/** @typedef {import('../models/meter.js').Meter} Meter */
/** @typedef {import('../shared/model_repo.js').AnyComponent} Component */
/** @typedef {import('../protocol.js').LoadParams} LoadParams */
/** @typedef {import('../protocol.js').LoadResult} LoadResult */

/**
 * @param {any} params
 * @returns {LoadParams}
 */
export function checkLoadParams(params) {
    // The size, model and precision rules are generate()'s; prompt, seed and steps do not apply here.
    const { width, height, modelBase, precision } = checkInputs({ ...params, prompt: '', seed: 0, steps: 1 }).params;
    const components = params?.components ?? [...COMPONENTS];
    /** @type {string[]} */
    const known = [...COMPONENTS, ...OPTIONAL_COMPONENTS];
    if (!Array.isArray(components) || components.some((c) => !known.includes(c))) {
        throw new InputError(
            `\`components\` must be a list of ${known.join(', ')}, got ${JSON.stringify(components)}.`,
            { components },
        );
    }
    /** @type {LoadParams} */
    const checked = { width, height, modelBase, components };
    if (precision) checked.precision = precision;
    return checked;
}

/**
 * Download what the chosen graphs need (nothing when the store has it), then create and release each session
 * of `components`, in order, so only one is alive at a time.
 * @param {any} params  LoadParams, checked here.
 * @param {{model: Model, signal: AbortSignal, onEvent: (event: any) => void}} options
 * @returns {Promise<LoadResult>}
 */
export async function loadSessions(params, { model, signal, onEvent }) {
    const { sessions } = model;
    const checked = checkLoadParams(params);
    const { width, height } = checked;
    const imageSeqLen = (height / PATCH) * (width / PATCH);
    onEvent({ type: 'stage', stage: 'download' });
    const downloadStarted = performance.now();
    // The encoder, when asked for, is created for an input image of the same size.
    const encodeSizes = /** @type {string[]} */ (checked.components).includes('vae_encoder') ? [{ width, height }] : [];
    const { notes, downloadedBytes } = await model.prepare(
        { ...checked, attentionTokens: imageSeqLen + MAX_SEQUENCE_LENGTH, encodeSizes },
        { signal, onProgress: (progress) => onEvent({ type: 'progress', progress }) },
    );
    const downloadMs = performance.now() - downloadStarted;
    // Sessions of earlier requests would be counted in this request's memory peaks.
    await sessions.releaseAll();

    const meter = newMeter();
    /** @type {Partial<Record<Component, import('../models/sessions.js').Pin>>} */
    const pins = sessionPins(imageSeqLen, { width, height });
    for (const component of /** @type {Component[]} */ (checked.components)) {
        signal.throwIfAborted();
        onEvent({ type: 'stage', stage: 'load', detail: component });
        await sessions.session(component, { meter, signal, pin: pins[component] });
        await sessions.unload(component);
    }
    const described = sessions.describe(meter);
    const graphs = Object.fromEntries(
        /** @type {Component[]} */ (checked.components).map((c) => {
            const { bytes, graph } = model.source.requireChoice(c);
            return [c, { ...described[c], bytes, path: graph.path }];
        }),
    );
    return { params: checked, downloadedBytes, downloadMs, graphs, device: sessions.deviceGrant(), notes };
}
