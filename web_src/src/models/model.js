// @ts-check
/**
 * @file Model: the parts of the model one worker keeps, made once and handed to the stages, which use each part
 * directly:
 * - `source` (models/model_source.js): the chosen graphs and their store, the objects made from the model's files;
 * - `sessions` (models/sessions.js): the sessions kept loaded, created from the stored files, and their runs;
 * - `prompts` and `images` (models/model_caches.js): prompt embeddings and input images' latents kept between runs;
 * - `memory` (models/memory_mode.js): the request's memory mode and the bytes of sessions it keeps loaded.
 * prepare() is stage 2's download, which keeps the parts in step with the graphs it chooses; reset() forgets the
 * model. With the modules named above, the only modules that touch the runtime and the store below the worker.
 * @module models/model
 */

import { EncoderCache, IMAGE_ENTRIES, PROMPT_ENTRIES } from './model_caches.js';
import { MemoryBudget } from './memory_mode.js';
import { ModelSource } from './model_source.js';
import { Sessions } from './sessions.js';

/** @typedef {import('../runtime/gpu.js').Gpu} Gpu */
/** @typedef {import('./model_caches.js').PromptEmbedding} PromptEmbedding */
/** @typedef {import('./model_caches.js').ImageLatents} ImageLatents */

export class Model {
    /**
     * @param {{gpu: Gpu, deviceMemory?: number}} options  `deviceMemory`: navigator.deviceMemory.
     */
    constructor({ gpu, deviceMemory }) {
        this.memory = new MemoryBudget(deviceMemory);
        this.source = new ModelSource({ gpu, memory: this.memory });
        this.sessions = new Sessions({ gpu, source: this.source, memory: this.memory });
        /** @type {EncoderCache<PromptEmbedding>} By prompt. */
        this.prompts = new EncoderCache(PROMPT_ENTRIES, () => this.source.encoderKey('text_encoder'));
        /** @type {EncoderCache<ImageLatents>} By the file's hash and how it was made into pixels. */
        this.images = new EncoderCache(IMAGE_ENTRIES, () => this.source.encoderKey('vae_encoder'));
    }

    /**
     * Stage 2 (Load models), its `download` part: open the store of `modelBase`, read the manifest, choose the
     * graphs for this adapter, and download the files that are not complete in the store yet. With `encodeSizes`
     * (the sizes input images are encoded at) the VAE encoder is chosen too, and each size checked to fit it.
     * @param {import('./model_source.js').PrepareParams} params
     * @param {{signal?: AbortSignal, onProgress?: (p: import('../shared/types.js').DownloadProgress) => void}} options
     * @returns {Promise<{notes: string[], downloadedBytes: number,
     *   pipeline: import('../shared/model_repo.js').PipelineDefaults}>}  `pipeline`: the model's kind and defaults.
     */
    async prepare(params, { signal, onProgress }) {
        this.sessions.readsAhead.clear();
        if (!this.source.serves(params.modelBase)) {
            // Another model source than the last one starts afresh.
            await this.sessions.releaseAll();
            this.source.dropDerived();
            this.prompts.clear();
            this.images.clear();
        }
        const plan = await this.source.choose(params, { signal });
        // A re-converted repository (other sizes or hashes) invalidates the loaded sessions and derived objects.
        await this.sessions.keepChosen(plan.choices);
        this.source.keepDerived(plan.tokenizerIdentity);
        const { downloadedBytes, fetched, restarted } = await this.source.download(plan, { signal, onProgress });
        await this.forgetReplaced(new Set(fetched), plan.tokenizerIdentity);
        return { notes: [...plan.notes, ...restarted], downloadedBytes, pipeline: plan.manifest.pipeline };
    }

    /**
     * Files downloaded now replace other versions of them (equal sizes, so the identities could not tell):
     * sessions, the tokenizer and the embeddings made from the old bytes are stale.
     * @param {Set<string>} replaced  Repo paths downloaded.
     * @param {string} tokenizerIdentity
     */
    async forgetReplaced(replaced, tokenizerIdentity) {
        for (const component of await this.sessions.unloadReading(replaced)) {
            if (component === 'text_encoder') this.prompts.clear();
            if (component === 'vae_encoder') this.images.clear();
        }
        const manifest = /** @type {import('../shared/model_repo.js').Manifest} */ (this.source.manifest);
        if (this.source.tokenizerPaths(manifest).some((p) => replaced.has(p))) {
            this.source.dropDerived();
            this.source.keepDerived(tokenizerIdentity);
            this.prompts.clear();
        }
    }

    /** Forget everything about the current model (after "clear cached model"): the next prepare() starts afresh. */
    async reset() {
        await this.sessions.releaseAll();
        this.source.close();
        this.prompts.clear();
        this.images.clear();
    }
}
