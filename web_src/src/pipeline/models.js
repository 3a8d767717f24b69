// @ts-check
/**
 * @file Models: the one object the pipeline asks for its model, sessions and caches. It joins the parts: the
 * chosen graphs and their store (pipeline/model_source.js), the sessions kept loaded (pipeline/sessions.js),
 * running them (pipeline/session_runs.js), what is kept of the model between runs (pipeline/model_caches.js),
 * and how the chosen graphs are described (pipeline/model_report.js). With those parts, the only pipeline
 * modules that touch the runtime and the store.
 * @module pipeline/models
 */

import { ModelCaches } from './model_caches.js';
import { describeChoices, summarizeChoices } from './model_report.js';
import { ModelSource } from './model_source.js';
import { submitRun } from './session_runs.js';
import { Sessions } from './sessions.js';

/** @typedef {import('../shared/model_repo.js').AnyComponent} AnyComponent */
/** @typedef {import('../runtime/gpu.js').Gpu} Gpu */
/** @typedef {import('../runtime/ort.js').Session} Session */
/** @typedef {import('../runtime/ort.js').HostTensor} HostTensor */
/** @typedef {import('./graph_choice.js').Choice} Choice */
/** @typedef {import('./graph_choice.js').Choices} Choices */
/** @typedef {import('./meter.js').Meter} Meter */
/** @typedef {import('./sessions.js').Pin} Pin */
/** @typedef {import('./session_runs.js').HostInput} HostInput */
/** @typedef {import('./model_caches.js').PromptEmbedding} PromptEmbedding */
/** @typedef {import('./model_caches.js').ImageLatents} ImageLatents */

export class Models {
    /**
     * @param {{gpu: Gpu}} options
     */
    constructor({ gpu }) {
        this.gpu = gpu;
        this.source = new ModelSource({ gpu });
        this.sessions = new Sessions({ gpu, source: this.source });
        this.caches = new ModelCaches((component) => this.source.encoderKey(component));
    }

    // --- The model: its store, its graphs, what is derived from them --------------------------------------------

    /**
     * Stage 2 (Load models), its `download` part: open the store of `modelBase`, read the manifest, choose the
     * graphs for this adapter, and download the files that are not complete in the store yet. With `encodeSizes`
     * (the sizes input images are encoded at) the VAE encoder is chosen too, and each size checked to fit it.
     * @param {import('./model_source.js').PrepareParams} params
     * @param {{signal?: AbortSignal, onProgress?: (p: import('../shared/types.js').DownloadProgress) => void}} options
     * @returns {Promise<{notes: string[], downloadedBytes: number}>}
     */
    async prepare(params, { signal, onProgress }) {
        this.sessions.readsAhead.clear();
        if (!this.source.serves(params.modelBase)) {
            // Another model source than the last one starts afresh.
            await this.sessions.releaseAll();
            this.caches.clear();
        }
        const plan = await this.source.choose(params, { signal });
        // A re-converted repository (other sizes or hashes) invalidates the loaded sessions and derived objects.
        await this.sessions.keepChosen(plan.choices);
        this.caches.deriveFrom(plan.tokenizerIdentity);
        const { downloadedBytes, fetched, restarted } = await this.source.download(plan, { signal, onProgress });
        await this.forgetReplaced(new Set(fetched), plan.tokenizerIdentity);
        return { notes: [...plan.notes, ...restarted], downloadedBytes };
    }

    /**
     * Files downloaded now replace other versions of them (equal sizes, so the identities could not tell):
     * sessions, the tokenizer and the embeddings made from the old bytes are stale.
     * @param {Set<string>} replaced  Repo paths downloaded.
     * @param {string} tokenizerIdentity
     */
    async forgetReplaced(replaced, tokenizerIdentity) {
        for (const component of await this.sessions.unloadReading(replaced)) {
            if (component === 'text_encoder') this.caches.prompts.clear();
            if (component === 'vae_encoder') this.caches.images.clear();
        }
        const manifest = /** @type {import('../shared/model_repo.js').Manifest} */ (this.manifest);
        if (this.source.tokenizerPaths(manifest).some((p) => replaced.has(p))) {
            this.caches.derived.clear();
            this.caches.deriveFrom(tokenizerIdentity);
            this.caches.prompts.clear();
        }
    }

    /** The weight store of the current model source (null before prepare()). */
    get store() {
        return this.source.store;
    }

    /** The current model's manifest (null before prepare()). */
    get manifest() {
        return this.source.manifest;
    }

    /** The current request's memory mode. */
    get memory() {
        return this.source.memory;
    }

    /** Why this worker runs lean from now on (a fast run ran out of memory), or null. */
    get leanAfterFailure() {
        return this.source.leanAfterFailure;
    }

    set leanAfterFailure(reason) {
        this.source.leanAfterFailure = reason;
    }

    /** @returns {Promise<import('./tokenizer_helper.js').TokenizerFiles>} */
    tokenizerFiles() {
        return this.source.tokenizerFiles();
    }

    /**
     * A derived object of the current model, built once (e.g. the tokenizer).
     * @template T
     * @param {string} key
     * @param {() => Promise<T>} make
     * @returns {Promise<T>}
     */
    async memo(key, make) {
        return this.caches.derive(key, make);
    }

    /**
     * @param {string} prompt
     * @returns {PromptEmbedding | undefined}
     */
    cachedPrompt(prompt) {
        return this.caches.cachedPrompt(prompt);
    }

    /**
     * @param {string} prompt
     * @param {PromptEmbedding} embedding
     */
    cachePrompt(prompt, embedding) {
        this.caches.cachePrompt(prompt, embedding);
    }

    /**
     * @param {string} sha256
     * @param {string} how  The mode's preprocessing and the size the image was used at.
     * @returns {string}
     */
    imageKey(sha256, how) {
        return this.caches.imageKey(sha256, how);
    }

    /**
     * @param {string} key  imageKey()
     * @returns {ImageLatents | undefined}
     */
    cachedImage(key) {
        return this.caches.images.get(key);
    }

    /**
     * @param {string} key  imageKey()
     * @param {ImageLatents} latents
     */
    cacheImage(key, latents) {
        this.caches.images.set(key, latents);
    }

    // --- Sessions ----------------------------------------------------------------------------------------------

    /** Create sessions with onnxruntime's profiler on (a run asked for its kernels' GPU times: `profile`). */
    get profiling() {
        return this.sessions.profiling;
    }

    set profiling(on) {
        this.sessions.profiling = on;
    }

    /**
     * Stage 2 (Load models), its `load` part: Sessions.preload().
     * @param {AnyComponent[]} components
     * @param {Parameters<Sessions['preload']>[1]} options
     */
    preload(components, options) {
        return this.sessions.preload(components, options);
    }

    /**
     * @param {AnyComponent} component
     * @param {Pin} [pin]
     * @returns {boolean}  Whether session(component, {pin}) would release no other session (Sessions.fits()).
     */
    fits(component, pin) {
        return this.sessions.fits(component, pin);
    }

    /**
     * The session of `component`, created if needed: Sessions.session().
     * @param {AnyComponent} component
     * @param {{meter: Meter, signal?: AbortSignal, pin?: Pin}} options
     * @returns {Promise<Session>}
     */
    session(component, options) {
        return this.sessions.session(component, options);
    }

    /** @param {AnyComponent} component */
    unload(component) {
        return this.sessions.unload(component);
    }

    /** The image is done: Sessions.finishRun(). */
    finishRun() {
        return this.sessions.finishRun();
    }

    /** Release every session (cancel, model change), and the files read ahead. */
    releaseAll() {
        return this.sessions.releaseAll();
    }

    /** Forget everything about the current model (after "clear cached model"): the next prepare() starts afresh. */
    async reset() {
        await this.sessions.releaseAll();
        this.source.close();
        this.caches.clear();
    }

    /**
     * Run a session on CPU tensors: resolves once its work is queued, with its outputs on their way to the CPU
     * (`outputs`); meanwhile other sessions may be created or run, and the session is released only after them.
     * @param {Session} session
     * @param {Record<string, HostInput>} inputs  By graph input name.
     * @param {{meter: Meter, what: string}} options
     * @returns {Promise<{outputs: Promise<Record<string, HostTensor>>}>}
     */
    async submit(session, inputs, options) {
        const queued = await submitRun(this.gpu, session, inputs, options);
        this.sessions.downloading(session, queued.outputs);
        return queued;
    }

    /**
     * Run a session on CPU tensors and wait for its outputs (submit(), awaited).
     * @param {Session} session
     * @param {Record<string, HostInput>} inputs  By graph input name.
     * @param {{meter: Meter, what: string}} options
     * @returns {Promise<Record<string, HostTensor>>}
     */
    async run(session, inputs, options) {
        return (await this.submit(session, inputs, options)).outputs;
    }

    /** @returns {ReturnType<Sessions['endProfiling']>}  Sessions.endProfiling(). */
    endProfiling() {
        return this.sessions.endProfiling();
    }

    // --- Describing the chosen graphs ---------------------------------------------------------------------------

    /**
     * @param {Meter} meter
     * @param {Partial<Record<AnyComponent, string>>} [how]  What the run did with a component beyond its graph.
     * @returns {ReturnType<typeof describeChoices>}  model_report.js describeChoices().
     */
    describe(meter, how = {}) {
        return describeChoices(this.requireChoices(), this.sessions.captureState, meter, how, this.sessions.streamed);
    }

    /** @returns {string}  Human-readable sizes of the chosen graphs (for the load stage's detail line). */
    summary() {
        return summarizeChoices(this.requireChoices());
    }

    /**
     * The features and limits the shared GPU device was given (null before a WebGPU session was created).
     * @returns {import('../runtime/gpu.js').DeviceGrant | null}
     */
    deviceGrant() {
        return this.gpu.grant;
    }

    /** @returns {Choices} */
    requireChoices() {
        return this.source.requireChoices();
    }

    /**
     * @param {AnyComponent} component
     * @returns {Choice}
     */
    requireChoice(component) {
        return this.source.requireChoice(component);
    }
}
