// @ts-check
/** @file The pure pipeline modules load under node with no DOM and export the names the worker imports. @module tests/js/test_imports */

import assert from 'node:assert/strict';
import { test } from 'node:test';

/** Module path -> names other modules of the app import from it. */
const EXPORTS = {
    '../../web_src/src/pipeline/rng.js': ['torchRandn'],
    '../../web_src/src/pipeline/schedule.js': ['computeEmpiricalMu', 'retrieveTimesteps', 'timeShift'],
    '../../web_src/src/pipeline/latents.js': [
        'prepareLatentIds',
        'prepareTextIds',
        'packLatents',
        'unpackLatents',
        'eulerStep',
    ],
    '../../web_src/src/pipeline/tokenizer.js': ['PromptTokenizer'],
    '../../web_src/src/pipeline/image.js': ['toRgba', 'assertFinite', 'checkImage'],
    '../../web_src/src/models/graph_choice.js': ['chooseGraphs', 'sizeClass', 'checkDecodeFits'],
    '../../web_src/src/models/meter.js': ['newMeter', 'mark'],
    '../../web_src/src/models/model_report.js': ['describeChoices', 'summarizeChoices'],
    '../../web_src/src/shared/png_text.js': ['addTextChunks', 'readTextChunks'],
    '../../web_src/src/shared/graph_needs.js': [
        'variantOrder',
        'graphFamily',
        'attentionScoreBytes',
        'vaeAttentionTokens',
    ],
    '../../web_src/src/shared/channel.js': ['Channel', 'serve'],
};

test('there is no DOM in this process', () => {
    for (const name of ['window', 'document', 'navigator.gpu', 'HTMLCanvasElement', 'ImageData']) {
        const value = name.split('.').reduce((/** @type {any} */ obj, key) => obj?.[key], globalThis);
        assert.equal(value, undefined, `${name} must not exist for this test to mean anything`);
    }
});

for (const [specifier, names] of Object.entries(EXPORTS)) {
    test(`${specifier.replace('../../web_src/src/', '')} imports without a DOM and exports ${names.join(', ')}`, async () => {
        const module = await import(specifier);
        for (const name of names) assert.equal(typeof module[name], 'function', name);
    });
}
