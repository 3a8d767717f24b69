// @ts-check
/**
 * @file The prompt -> `input_ids` / `attention_mask` of `Flux2KleinPipeline._get_qwen3_prompt_embeds`: the
 * Qwen3 chat template (one user turn, `add_generation_prompt=True, enable_thinking=False`) rendered with
 * `@huggingface/jinja`, tokenized with `@huggingface/tokenizers` (byte-level BPE from the repo's
 * tokenizer.json), then like transformers' `tokenizer(text, padding="max_length", truncation=True,
 * max_length=512)`: the first 512 ids kept, right-padded with the pad token, mask 1 for real tokens.
 * @module pipeline/tokenizer
 */

import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';

import { InputError, ModelFileError } from '../shared/errors.js';

/** `Flux2KleinPipeline.tokenizer_max_length` / `max_sequence_length` default. */
export const MAX_SEQUENCE_LENGTH = 512;

/**
 * @typedef {Object} EncodedPrompt
 * @property {BigInt64Array} inputIds       [maxLength] int64, right-padded with the pad id.
 * @property {BigInt64Array} attentionMask  [maxLength] int64, 1 for real tokens, 0 for padding.
 * @property {number} tokens                Real tokens kept (template included), <= maxLength.
 * @property {number} droppedTokens         Tokens cut off by truncation (the prompt was too long).
 * @property {string} text                  The templated text that was tokenized.
 */

/**
 * A special-token entry of tokenizer_config.json: a string, or an AddedToken object `{content: ...}`.
 * @param {unknown} entry
 * @returns {string | undefined}
 */
function tokenContent(entry) {
    if (typeof entry === 'string') return entry;
    if (entry && typeof entry === 'object' && 'content' in entry && typeof entry.content === 'string') {
        return entry.content;
    }
    return undefined;
}

/**
 * The chat template string: tokenizer/chat_template.jinja when the repo has it, else tokenizer_config's
 * `chat_template` (a string, or a list of `{name, template}` where transformers uses "default").
 * @param {Record<string, any>} tokenizerConfig
 * @param {string | undefined} chatTemplate
 * @returns {string}
 */
function resolveChatTemplate(tokenizerConfig, chatTemplate) {
    if (typeof chatTemplate === 'string' && chatTemplate.length > 0) return chatTemplate;
    const fromConfig = tokenizerConfig.chat_template;
    if (typeof fromConfig === 'string' && fromConfig.length > 0) return fromConfig;
    if (Array.isArray(fromConfig)) {
        const named = fromConfig.find((t) => t && t.name === 'default');
        if (named && typeof named.template === 'string') return named.template;
    }
    throw new ModelFileError(
        'The tokenizer has no chat template: neither tokenizer/chat_template.jinja nor a `chat_template` in ' +
            'tokenizer/tokenizer_config.json. Re-download or re-convert the model repository.',
    );
}

export class PromptTokenizer {
    /**
     * Use `PromptTokenizer.fromFiles`.
     * @param {Tokenizer} tokenizer
     * @param {Template} template
     * @param {Record<string, string>} specialTokens bos/eos/pad/unk token strings passed to the template.
     * @param {number} padId
     */
    constructor(tokenizer, template, specialTokens, padId) {
        this.tokenizer = tokenizer;
        this.template = template;
        this.specialTokens = specialTokens;
        this.padId = padId;
    }

    /**
     * @param {{tokenizerJson: Record<string, any>, tokenizerConfig: Record<string, any>, chatTemplate?: string}} files
     *   Parsed tokenizer/tokenizer.json and tokenizer/tokenizer_config.json, and the text of
     *   tokenizer/chat_template.jinja when the repository has one.
     * @returns {PromptTokenizer}
     */
    static fromFiles({ tokenizerJson, tokenizerConfig, chatTemplate }) {
        if (!tokenizerJson || typeof tokenizerJson !== 'object' || !tokenizerJson.model) {
            throw new ModelFileError('tokenizer/tokenizer.json is not a tokenizer definition (no `model`).');
        }
        if (!tokenizerConfig || typeof tokenizerConfig !== 'object') {
            throw new ModelFileError('tokenizer/tokenizer_config.json is missing or not a JSON object.');
        }
        const template = new Template(resolveChatTemplate(tokenizerConfig, chatTemplate));
        const tokenizer = new Tokenizer(tokenizerJson, tokenizerConfig);

        // transformers renders the template with its special-tokens map (only the ones that are set).
        /** @type {Record<string, string>} */
        const specialTokens = {};
        for (const name of ['bos_token', 'eos_token', 'unk_token', 'pad_token']) {
            const content = tokenContent(tokenizerConfig[name]);
            if (content !== undefined) specialTokens[name] = content;
        }
        const padToken = specialTokens.pad_token;
        const padId = padToken === undefined ? undefined : tokenizer.token_to_id(padToken);
        if (padId === undefined) {
            throw new ModelFileError(
                `tokenizer/tokenizer_config.json has no usable \`pad_token\` (got ${JSON.stringify(padToken)}); ` +
                    'the prompt must be right-padded to 512 tokens with it. Re-download the tokenizer files.',
            );
        }
        return new PromptTokenizer(tokenizer, template, specialTokens, padId);
    }

    /**
     * The chat-templated text for one user prompt.
     * @param {string} prompt
     * @returns {string}
     */
    applyChatTemplate(prompt) {
        return this.template.render({
            ...this.specialTokens,
            messages: [{ role: 'user', content: prompt }],
            add_generation_prompt: true,
            enable_thinking: false,
        });
    }

    // Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline._get_qwen3_prompt_embeds @ 0.42.1
    // (the apply_chat_template + tokenizer calls; the text encoder runs elsewhere)
    /**
     * @param {string} prompt The user's prompt (may be empty).
     * @param {{maxLength?: number}} [options]
     * @returns {EncodedPrompt}
     */
    encode(prompt, { maxLength = MAX_SEQUENCE_LENGTH } = {}) {
        if (typeof prompt !== 'string') {
            throw new InputError(`\`prompt\` must be a string, got ${typeof prompt}.`, { prompt });
        }
        if (!Number.isInteger(maxLength) || maxLength < 1) {
            throw new InputError(`\`maxLength\` must be a positive integer, got ${String(maxLength)}.`, { maxLength });
        }
        const text = this.applyChatTemplate(prompt);
        // The template already wrote every special token; the Qwen2 tokenizer adds none of its own.
        const { ids } = this.tokenizer.encode(text, { add_special_tokens: false });

        const tokens = Math.min(ids.length, maxLength); // truncation=True keeps the first maxLength ids
        const inputIds = new BigInt64Array(maxLength).fill(BigInt(this.padId));
        const attentionMask = new BigInt64Array(maxLength); // 0 = padding
        for (let i = 0; i < tokens; i++) {
            inputIds[i] = BigInt(ids[i]);
            attentionMask[i] = 1n;
        }
        return { inputIds, attentionMask, tokens, droppedTokens: ids.length - tokens, text };
    }
}
