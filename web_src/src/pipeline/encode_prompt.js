// @ts-check
/**
 * @file Stage 3 of generate(), Encode prompt: chat template, tokenizer and text encoder, into the prompt_embeds
 * every denoising step sees. Stage 2 starts it (startEncoding) as soon as the text encoder's session exists;
 * encodePrompt finishes it. builder/pipeline/reference_stages.py encode_prompt is its twin.
 * @module pipeline/encode_prompt
 */

import { requireOutput } from '../shared/model_repo.js';
import { assertFinite } from './image.js';
import { TEXT_ENCODER_PIN } from './session_pins.js';
import { MAX_SEQUENCE_LENGTH } from './tokenizer.js';
import { TokenizerHelper } from './tokenizer_helper.js';

/** @typedef {import('../models/model_caches.js').PromptEmbedding} PromptEmbedding */
/** @typedef {import('./stage_clock.js').RunContext} RunContext */

/**
 * @typedef {Object} Encoding  Stage 3 under way: the text encoder's run is queued on the GPU.
 * @property {Promise<PromptEmbedding>} embedding
 */

/**
 * Stage 3, started: chat template + tokenizer, then the text encoder's run is queued; its prompt_embeds
 * [1, 512, joint_dim] come back through `embedding` once the GPU has computed them (the caller may create other
 * sessions meanwhile). Cached per prompt: a new seed with the same prompt skips the text encoder.
 * @param {string} prompt
 * @param {RunContext} context
 * @returns {Promise<Encoding>}
 */
export async function startEncoding(prompt, { model, meter, signal }) {
    const { sessions, prompts } = model;
    const encoded = await (await startTokenizer(model.source)).encode(prompt, { maxLength: MAX_SEQUENCE_LENGTH });
    const session = await sessions.session('text_encoder', { meter, signal, pin: TEXT_ENCODER_PIN });
    const { outputs } = await sessions.submit(
        session,
        {
            input_ids: { data: encoded.inputIds, dims: [1, encoded.inputIds.length] },
            attention_mask: { data: encoded.attentionMask, dims: [1, encoded.attentionMask.length] },
        },
        { meter, what: 'The text encoder' },
    );
    const embedding = outputs.then((outputs) => {
        const embeds = requireOutput(outputs, 'prompt_embeds', 'text encoder'); // [1, 512, joint_dim]
        assertFinite(embeds.data, 'prompt embeddings');
        /** @type {PromptEmbedding} */
        const made = { ...embeds, tokens: encoded.tokens, droppedTokens: encoded.droppedTokens };
        prompts.set(prompt, made);
        return made;
    });
    embedding.catch(() => {}); // awaited by stage 3; a failure before then is not unhandled
    return { embedding };
}
/**
 * The model's tokenizer, building in its helper worker (pipeline/tokenizer_helper.js) from the first call on: stage 2
 * calls this before it creates any session, so the tokenizer is ready when the text encoder is.
 * @param {import('../models/model_source.js').ModelSource} source  After Model.prepare(): the model's files.
 * @returns {Promise<TokenizerHelper>}
 */
export async function startTokenizer(source) {
    return source.derive('tokenizer', async () => TokenizerHelper.start(await source.tokenizerFiles()));
}

/**
 * Stage 3: the prompt's embedding, from an earlier run (`cached`), from stage 2's encoding under way, or encoded
 * here when stage 2 started none.
 * @param {string} prompt
 * @param {{cached: PromptEmbedding | undefined, encoding: Encoding | null}} loaded  What stage 2 returned.
 * @param {RunContext} context
 * @returns {Promise<PromptEmbedding>}
 */
export async function encodePrompt(prompt, { cached, encoding }, context) {
    return cached ?? (await (encoding ?? (await startEncoding(prompt, context))).embedding);
}
