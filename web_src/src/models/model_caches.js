// @ts-check
/**
 * @file What the pipeline keeps of one model between runs, beside its sessions (CPU memory): prompt embeddings and
 * encoded input images, a few of each with the least recently used dropped, and objects derived from the model's
 * files (the tokenizer, in its helper worker). An entry's key names the encoder that made it (`encoderKey`: the
 * model source, graph and EP), so a changed encoder never serves a stale one.
 * @module models/model_caches
 */

import { LruCache } from './lru.js';

/** @typedef {import('../shared/model_repo.js').AnyComponent} AnyComponent */

/**
 * @typedef {Object} PromptEmbedding
 * @property {Float32Array} data
 * @property {number[]} dims
 * @property {number} tokens
 * @property {number} droppedTokens
 */

/**
 * @typedef {Object} ImageLatents  The VAE encoder's output for one input image.
 * @property {Float32Array} data  [1, 128, H/16, W/16]
 * @property {number[]} dims
 */

/** Prompt embeddings kept (15.7 MB each for klein-4B: [1, 512, 7680] float32). */
const PROMPT_ENTRIES = 4;
/** Encoded input images kept (8 MiB each for a 1024^2 image: [1, 128, 64, 64] float32), enough for a request's
 * four references and an image to inpaint. */
const IMAGE_ENTRIES = 6;

export class ModelCaches {
    /**
     * @param {(component: AnyComponent) => string} encoderKey  What an output of `component` is keyed by.
     */
    constructor(encoderKey) {
        this.encoderKey = encoderKey;
        /** @type {LruCache<PromptEmbedding>} By encoder key and prompt. */
        this.prompts = new LruCache(PROMPT_ENTRIES);
        /** @type {LruCache<ImageLatents>} By encoder key, the file's hash and how it was made into pixels. */
        this.images = new LruCache(IMAGE_ENTRIES);
        /** @type {Map<string, any>} Objects derived from the model's files, and the files' identity under 'identity'. */
        this.derived = new Map();
    }

    /** Forget everything (another model, or the store was cleared). */
    clear() {
        this.prompts.clear();
        this.images.clear();
        this.dropDerived();
    }

    /** Forget the derived objects, ending those that hold something (the tokenizer's helper worker). */
    dropDerived() {
        for (const value of this.derived.values()) value?.close?.();
        this.derived.clear();
    }

    /**
     * Keep the derived objects only while `identity` (of the files they come from) stays the same.
     * @param {string} identity
     */
    deriveFrom(identity) {
        if (this.derived.get('identity') === identity) return;
        this.dropDerived();
        this.derived.set('identity', identity);
    }

    /**
     * A derived object, made once (e.g. the tokenizer).
     * @template T
     * @param {string} key
     * @param {() => Promise<T>} make
     * @returns {Promise<T>}
     */
    async derive(key, make) {
        if (!this.derived.has(key)) this.derived.set(key, await make());
        return this.derived.get(key);
    }

    /**
     * @param {string} prompt
     * @returns {PromptEmbedding | undefined}
     */
    cachedPrompt(prompt) {
        return this.prompts.get(`${this.encoderKey('text_encoder')}|${prompt}`);
    }

    /**
     * @param {string} prompt
     * @param {PromptEmbedding} embedding
     */
    cachePrompt(prompt, embedding) {
        this.prompts.set(`${this.encoderKey('text_encoder')}|${prompt}`, embedding);
    }

    /**
     * The cache key of an input image's latents: the encoder, the file's hash, and how it was made into pixels
     * (`how`: the mode's preprocessing and the size it was used at).
     * @param {string} sha256
     * @param {string} how
     * @returns {string}
     */
    imageKey(sha256, how) {
        return `${this.encoderKey('vae_encoder')}|${sha256}|${how}`;
    }
}
