// @ts-check
/**
 * @file The tokenizer's helper worker (a module Web Worker the inference worker starts; pipeline/tokenizer_helper.js
 * speaks to it). Building the prompt tokenizer (parsing tokenizer.json, setting up its BPE) takes the better part of
 * a second of CPU; here it runs while the inference worker's thread uploads weights and creates sessions, instead
 * of between the text encoder's creation and its run.
 *
 * Messages in: {type: 'build', files} (the tokenizer's files as Blobs, read here), then {type: 'encode', id, prompt,
 * maxLength}. Out: {type: 'encoded', id, encoded} (its arrays' buffers transferred) or {type: 'error', id, error}
 * (shared/errors.js serializeError); a failed build answers every encode with its error.
 * @module pipeline/tokenizer_worker
 */

import { serializeError } from '../shared/errors.js';
import { buildTokenizer } from './tokenizer_helper.js';

/** @type {Promise<import('./tokenizer.js').PromptTokenizer> | null} */
let tokenizer = null;

onmessage = async ({ data }) => {
    if (data.type === 'build') {
        tokenizer = buildTokenizer(data.files);
        tokenizer.catch(() => {}); // reported to each encode
        return;
    }
    try {
        if (!tokenizer) throw new Error('the tokenizer was not built');
        const encoded = (await tokenizer).encode(data.prompt, { maxLength: data.maxLength });
        postMessage({ type: 'encoded', id: data.id, encoded }, [encoded.inputIds.buffer, encoded.attentionMask.buffer]);
    } catch (err) {
        postMessage({ type: 'error', id: data.id, error: serializeError(err) });
    }
};
