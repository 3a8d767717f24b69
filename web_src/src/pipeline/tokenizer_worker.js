// @ts-check
/**
 * @file The tokenizer's helper worker (a module Web Worker the inference worker starts; pipeline/tokenizer_helper.js
 * speaks to it). Building the prompt tokenizer (parsing tokenizer.json, setting up its BPE) takes the better part of
 * a second of CPU; here it runs while the inference worker's thread uploads weights and creates sessions, instead
 * of between the text encoder's creation and its run.
 *
 * It answers pipeline/tokenizer_helper.js TokenizerApi through shared/channel.js: `build` (the tokenizer's files as
 * Blobs, read here), then `encode` (its arrays' buffers moved to the asker); a failed build fails every encode.
 * @module pipeline/tokenizer_worker
 */

import { serve } from '../shared/channel.js';
import { buildTokenizer } from './tokenizer_helper.js';

/** @type {Promise<import('./tokenizer.js').PromptTokenizer> | null} */
let tokenizer = null;

/** @type {import('../shared/channel.js').Handlers<import('./tokenizer_helper.js').TokenizerApi>} */
const handlers = {
    build: async ({ files }) => {
        tokenizer = buildTokenizer(files);
        await tokenizer;
        return null;
    },
    encode: async ({ prompt, maxLength }, reply) => {
        if (!tokenizer) throw new Error('the tokenizer was not built');
        const encoded = (await tokenizer).encode(prompt, { maxLength });
        reply.transfer(encoded.inputIds.buffer, encoded.attentionMask.buffer);
        return encoded;
    },
};

serve(/** @type {any} */ (self), handlers);
