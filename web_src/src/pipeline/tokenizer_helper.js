// @ts-check
/**
 * @file TokenizerHelper: the prompt tokenizer (pipeline/tokenizer.js), built and run in a helper worker
 * (pipeline/tokenizer_worker.js) so that building it, the better part of a second of CPU, overlaps the inference
 * worker's uploads and session creation instead of delaying the text encoder's run. start() hands the tokenizer's
 * files to the helper at once; encode() answers once the helper has built it. The two speak shared/channel.js, typed
 * by TokenizerApi.
 *
 * Where no helper runs (no worker URL configured: node, a plain esbuild bundle; a helper that fails to start), the
 * tokenizer is built and run on the calling thread, behind the same interface.
 * @module pipeline/tokenizer_helper
 */

import { Channel } from '../shared/channel.js';
import { KleinError } from '../shared/errors.js';
import { MAX_SEQUENCE_LENGTH, PromptTokenizer } from './tokenizer.js';

/** @typedef {import('./tokenizer.js').EncodedPrompt} EncodedPrompt */
/** @typedef {import('../models/model_source.js').TokenizerFiles} TokenizerFiles */

/**
 * @typedef {{
 *   build: {request: {files: TokenizerFiles}, result: null},
 *   encode: {request: {prompt: string, maxLength: number}, result: EncodedPrompt},
 * }} TokenizerApi  What the inference worker asks of the tokenizer's helper (pipeline/tokenizer_worker.js): build the
 *   tokenizer from its stored files (answered once built), then encode prompts with it.
 */

/** @type {string | null} The helper's script (worker/main.js sets it from the build). */
let workerUrl = null;

/**
 * Where the tokenizer's helper script is (null: the tokenizer runs on the calling thread).
 * @param {string | null} url
 */
export function configureTokenizerWorker(url) {
    workerUrl = url;
}

/**
 * The tokenizer, built from its stored files.
 * @param {TokenizerFiles} files
 * @returns {Promise<PromptTokenizer>}
 */
export async function buildTokenizer({ tokenizerJson, tokenizerConfig, chatTemplate }) {
    const [json, config, template] = await Promise.all([
        tokenizerJson.text(),
        tokenizerConfig.text(),
        chatTemplate?.text(),
    ]);
    return PromptTokenizer.fromFiles({
        tokenizerJson: JSON.parse(json),
        tokenizerConfig: JSON.parse(config),
        ...(template === undefined ? {} : { chatTemplate: template }),
    });
}

export class TokenizerHelper {
    /**
     * Use TokenizerHelper.start.
     * @param {Worker | null} worker
     * @param {TokenizerFiles} files
     */
    constructor(worker, files) {
        this.worker = worker;
        this.files = files;
        /** @type {Promise<PromptTokenizer> | null} Built on this thread, once needed, where no helper runs. */
        this.local = null;
        /** @type {Channel<TokenizerApi> | null} */
        this.channel = null;
        if (!worker) return;
        /** @type {Channel<TokenizerApi>} */
        const channel = new Channel(worker);
        this.channel = channel;
        worker.onmessage = ({ data }) => channel.receive(data);
        worker.onerror = (event) => {
            event.preventDefault();
            this.fail(new KleinError(`The tokenizer's helper worker failed (${event.message || 'it did not start'}).`));
        };
        // A failed build is reported to each encode.
        channel.request('build', { files }).catch(() => {});
    }

    /**
     * Start building the tokenizer from its stored files: in a helper where one runs.
     * @param {TokenizerFiles} files
     * @returns {TokenizerHelper}
     */
    static start(files) {
        /** @type {Worker | null} */
        let worker = null;
        if (workerUrl !== null && typeof Worker !== 'undefined') {
            try {
                worker = new Worker(workerUrl, { type: 'module', name: 'klein-tokenizer' });
            } catch {
                worker = null;
            }
        }
        return new TokenizerHelper(worker, files);
    }

    /**
     * The prompt's input_ids and attention_mask (pipeline/tokenizer.js PromptTokenizer.encode).
     * @param {string} prompt
     * @param {{maxLength?: number}} [options]
     * @returns {Promise<EncodedPrompt>}
     */
    async encode(prompt, { maxLength = MAX_SEQUENCE_LENGTH } = {}) {
        if (!this.channel) {
            this.local ??= buildTokenizer(this.files);
            return (await this.local).encode(prompt, { maxLength });
        }
        return this.channel.request('encode', { prompt, maxLength });
    }

    /**
     * The helper failed: what waits for it fails, and later prompts are tokenized on this thread.
     * @param {Error} err
     */
    fail(err) {
        this.channel?.failAll(err);
        this.close();
    }

    /** End the helper. */
    close() {
        this.worker?.terminate();
        this.worker = null;
        this.channel = null;
    }
}
