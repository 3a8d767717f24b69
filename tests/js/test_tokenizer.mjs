// @ts-check
/** @file pipeline/tokenizer against transformers' AutoTokenizer on the real Qwen3 tokenizer (golden tokens.json). @module tests/js/test_tokenizer */

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import { MAX_SEQUENCE_LENGTH, PromptTokenizer } from '../../web_src/src/pipeline/tokenizer.js';
import { InputError, ModelFileError } from '../../web_src/src/shared/errors.js';
import { loadGolden, REPO_ROOT } from './golden.mjs';

const golden = loadGolden('tokens.json');
const tokenizerDir = path.join(REPO_ROOT, golden.tokenizer_dir);
const tokenizerJson = JSON.parse(fs.readFileSync(path.join(tokenizerDir, 'tokenizer.json'), 'utf-8'));
const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(tokenizerDir, 'tokenizer_config.json'), 'utf-8'));
const tokenizer = PromptTokenizer.fromFiles({ tokenizerJson, tokenizerConfig });

/**
 * @param {PromptTokenizer} tok
 * @param {any} c golden case
 */
function assertMatches(tok, c) {
    const what = JSON.stringify(c.prompt.slice(0, 40));
    const encoded = tok.encode(c.prompt, { maxLength: c.max_length });
    assert.equal(encoded.text, c.text, `${what}: templated text`);
    assert.ok(encoded.inputIds instanceof BigInt64Array && encoded.attentionMask instanceof BigInt64Array);
    assert.deepEqual(Array.from(encoded.inputIds, Number), c.input_ids, `${what}: input_ids`);
    assert.deepEqual(Array.from(encoded.attentionMask, Number), c.attention_mask, `${what}: attention_mask`);
    assert.equal(
        encoded.tokens,
        c.attention_mask.reduce((/** @type {number} */ a, /** @type {number} */ b) => a + b, 0),
    );
    assert.equal(encoded.droppedTokens, c.dropped, `${what}: dropped tokens`);
}

test('encode equals apply_chat_template + tokenizer(padding="max_length", truncation=True) for every golden prompt', () => {
    assert.ok(golden.cases.filter((/** @type {any} */ c) => c.max_length === 512).length >= 20);
    for (const c of golden.cases) assertMatches(tokenizer, c);
});

test('the golden prompts include truncation and the default length is 512', () => {
    assert.equal(MAX_SEQUENCE_LENGTH, 512);
    const long = golden.cases.find((/** @type {any} */ c) => c.max_length === 512 && c.dropped > 0);
    assert.ok(long, 'a prompt longer than 512 tokens');
    const encoded = tokenizer.encode(long.prompt);
    assert.equal(encoded.inputIds.length, 512);
    assert.equal(encoded.tokens, 512);
    assert.ok(encoded.droppedTokens > 0);
});

test('a chat_template.jinja string takes precedence over tokenizer_config.chat_template', () => {
    const { chat_template: template, ...configWithout } = tokenizerConfig;
    const fromFile = PromptTokenizer.fromFiles({
        tokenizerJson,
        tokenizerConfig: configWithout,
        chatTemplate: template,
    });
    for (const c of golden.cases.slice(0, 5)) assertMatches(fromFile, c);
    const other = PromptTokenizer.fromFiles({
        tokenizerJson,
        tokenizerConfig,
        chatTemplate: 'X{{ messages[0].content }}',
    });
    assert.equal(other.encode('hi').text, 'Xhi');
});

test('a pad_token stored as an AddedToken object works like the plain string', () => {
    const config = { ...tokenizerConfig, pad_token: { content: tokenizerConfig.pad_token, special: true } };
    assertMatches(PromptTokenizer.fromFiles({ tokenizerJson, tokenizerConfig: config }), golden.cases[4]);
});

test('broken tokenizer files raise ModelFileError and bad arguments InputError', () => {
    const { chat_template: _template, ...noTemplate } = tokenizerConfig;
    assert.throws(() => PromptTokenizer.fromFiles({ tokenizerJson, tokenizerConfig: noTemplate }), ModelFileError);
    assert.throws(
        () =>
            PromptTokenizer.fromFiles({
                tokenizerJson,
                tokenizerConfig: { ...tokenizerConfig, pad_token: '<|nope|>' },
            }),
        (err) => err instanceof ModelFileError && /pad_token/.test(err.message),
    );
    assert.throws(() => PromptTokenizer.fromFiles({ tokenizerJson: {}, tokenizerConfig }), ModelFileError);
    assert.throws(() => tokenizer.encode(/** @type {any} */ (42)), InputError);
    assert.throws(() => tokenizer.encode('x', { maxLength: 0 }), /`maxLength` must be a positive integer, got 0/);
});
