// @ts-check
/**
 * @file What the pipeline keeps of one model between runs, beside its sessions (CPU memory): prompt embeddings and
 * encoded input images, a few of each with the least recently used dropped. An entry's key names the encoder that
 * made it (`encoderKey`: the model source, graph and EP), so a changed encoder never serves a stale one.
 * @module models/model_caches
 */

import { LruCache } from './lru.js';

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
export const PROMPT_ENTRIES = 4;
/** Encoded input images kept (8 MiB each for a 1024^2 image: [1, 128, 64, 64] float32), enough for a request's
 * four references and an image to inpaint. */
export const IMAGE_ENTRIES = 6;

/**
 * Outputs of one encoder, by what it encoded (a prompt; an image file's hash and how it was made into pixels).
 * @template T
 */
export class EncoderCache {
    /**
     * @param {number} entries  Kept at most.
     * @param {() => string} encoderKey  The encoder that makes the entries now: the model source, graph and EP.
     */
    constructor(entries, encoderKey) {
        this.encoderKey = encoderKey;
        /** @type {LruCache<T>} */
        this.entries = new LruCache(entries);
    }

    /**
     * @param {string} key  What was encoded.
     * @returns {T | undefined}  What the current encoder made of it.
     */
    get(key) {
        return this.entries.get(`${this.encoderKey()}|${key}`);
    }

    /**
     * @param {string} key
     * @param {T} value
     */
    set(key, value) {
        this.entries.set(`${this.encoderKey()}|${key}`, value);
    }

    clear() {
        this.entries.clear();
    }
}
