// @ts-check
/**
 * @file shared/graph_needs: the variant family the features run fastest, and the bytes of an attention score buffer,
 * which the page's capability decision and the worker's graph choice both use.
 * @module tests/js/test_graph_needs
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
    attentionScoreBytes,
    graphFamily,
    vaeAttentionTokens,
    variantOrder,
} from '../../web_src/src/shared/graph_needs.js';

const MiB = 2 ** 20;
const nvidia = { vendor: 'nvidia' };

test('the variant follows the features the device has: DP4A q4 beats q4f16 without matrix units', () => {
    const first = (/** @type {any} */ gpu) => variantOrder(gpu)[0];
    assert.equal(first({ shaderF16: true, subgroups: true, subgroupMatrix: true, adapter: nvidia }), 'q4f16');
    assert.equal(first({ shaderF16: true, subgroups: true, subgroupMatrix: false, adapter: nvidia }), 'q4');
    assert.equal(first({ shaderF16: true, subgroups: false, adapter: nvidia }), 'q4f16');
    // Apple GPUs get no DP4A kernels from onnxruntime: q4 would run on fp32 kernels there.
    assert.equal(first({ shaderF16: true, subgroups: true, adapter: { vendor: 'apple' } }), 'q4f16');
    assert.equal(first({ shaderF16: false, subgroups: true, adapter: nvidia }), 'q4');
    assert.equal(first({ shaderF16: false }), 'q4');
    // Every order names every variant once.
    assert.deepEqual([...variantOrder({ shaderF16: true })].sort(), ['fp16', 'fp32', 'q4', 'q4f16']);
});

test('the family is the first variant, and the kernels say what runs its 4-bit layers', () => {
    /** @type {[any, string, RegExp][]} */
    const cases = [
        [{ shaderF16: true, subgroups: true, subgroupMatrix: true, adapter: nvidia }, 'q4f16', /matrix-unit/],
        [{ shaderF16: true, subgroups: true, subgroupMatrix: false, adapter: nvidia }, 'q4', /DP4A.*faster/],
        [
            { shaderF16: true, subgroups: true, subgroupMatrix: false, adapter: { vendor: 'Apple' } },
            'q4f16',
            /plain fp16/,
        ],
        [{ shaderF16: false, subgroups: true, adapter: nvidia }, 'q4', /DP4A.*fp32 activations/],
        [{ shaderF16: false, subgroups: false, adapter: null }, 'q4', /plain fp32/],
    ];
    for (const [gpu, family, kernels] of cases) {
        const found = graphFamily(gpu);
        assert.equal(found.family, family, JSON.stringify(gpu));
        assert.equal(found.family, variantOrder(gpu)[0]);
        assert.match(found.kernels, kernels, JSON.stringify(gpu));
    }
});

test("a score buffer is heads x its block's query rows x every key, at the scores' width", () => {
    // The transformer at 512^2 (1024 image + 512 text tokens), 24 heads, unsplit: 216 MiB of fp32 scores; in four
    // query blocks, a quarter of the rows.
    assert.equal(attentionScoreBytes(24, 1536, 1, 4), 216 * MiB);
    assert.equal(attentionScoreBytes(24, 1536, 4, 4), 54 * MiB);
    // Rows round up: 1536 tokens in 5 blocks hold 308 rows each.
    assert.equal(attentionScoreBytes(1, 1536, 5, 4), 308 * 1536 * 4);
    // The VAE's one head over its 8x-downsampled grid: 16384 tokens at 1024^2, 512 MiB of fp16 scores unsplit.
    assert.equal(vaeAttentionTokens(1024, 1024), 16384);
    assert.equal(attentionScoreBytes(1, vaeAttentionTokens(1024, 1024), 1, 2), 512 * MiB);
});
