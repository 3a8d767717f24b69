// @ts-check
/** @file models/graph_choice: variant per adapter, size class per image, sizes refused. @module tests/js/test_graph_choice */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { checkDecodeFits, chooseGraphs, sizeClass } from '../../web_src/src/models/graph_choice.js';
import { LEAN_SCORE_BUFFER_BYTES } from '../../web_src/src/models/memory_mode.js';
import { OutOfMemoryError } from '../../web_src/src/shared/errors.js';

/**
 * A manifest like `convert --precision q4f16` writes for klein-4B: per transformer variant the main graph
 * (52 query blocks, every size) and its size-class graphs on the same weight files.
 * @returns {import('../../web_src/src/shared/model_repo.js').Manifest}
 */
function manifest() {
    /** @param {string} component @param {string} variant @param {string} path @param {number} blocks @param {number | null} maxTokens */
    const graph = (component, variant, path, blocks, maxTokens) => ({
        component,
        variant,
        path,
        externalData: [`${component}_${variant}.onnx_data`],
        precision: '',
        requiresF16: variant !== 'q4',
        cpuNodesWithoutF16: [],
        attentionQueryBlocks: blocks,
        attentionMaxTokens: maxTokens,
    });
    const graphs = [graph('text_encoder', 'q4', 'text_encoder/text_encoder_q4.onnx', 1, null)];
    for (const variant of ['q4', 'q4f16']) {
        const base = `transformer/transformer_${variant}`;
        graphs.push(
            graph('transformer', variant, `${base}.onnx`, 52, 17050),
            graph('transformer', variant, `${base}.qb17.onnx`, 17, 9728),
            graph('transformer', variant, `${base}.qb4.onnx`, 4, 4728),
            graph('transformer', variant, `${base}.qb1.onnx`, 1, 2364),
        );
    }
    graphs.push(graph('vae_decoder', 'fp32', 'vae_decoder/vae_decoder_fp32.onnx', 32, null));
    const files = Object.fromEntries(
        graphs
            .flatMap((g) => [g.path, `${g.path.split('/')[0]}/${g.externalData[0]}`])
            .map((p) => [p, { size: 1, sha256: null }]),
    );
    return { modelBase: 'https://example.org/', source: '', seedLayout: false, files, graphs, loras: [], raw: null };
}

/** Joint attention tokens at side x side px: one per 16x16 patch plus the 512 text tokens. @param {number} side */
const tokens = (side) => (side / 16) ** 2 + 512;

test('the least-split graph whose limit covers the image runs it', () => {
    const m = manifest();
    const main = m.graphs.find((g) => g.path === 'transformer/transformer_q4f16.onnx');
    assert.ok(main);
    for (const [side, path] of /** @type {const} */ ([
        [256, 'qb1'],
        [512, 'qb1'],
        [768, 'qb4'],
        [1024, 'qb4'],
        [1536, 'qb17'],
        [2048, 'onnx'],
    ])) {
        const chosen = sizeClass(m, main, tokens(side));
        assert.equal(chosen.variant, 'q4f16');
        assert.ok(
            chosen.path.endsWith(path === 'onnx' ? 'transformer_q4f16.onnx' : `.${path}.onnx`),
            `${side}: ${chosen.path}`,
        );
    }
    // Beyond every recorded limit the main graph is the answer (the size check elsewhere refuses such sizes).
    assert.equal(sizeClass(m, main, 10 ** 6), main);
});

test('chooseGraphs picks the variant for the adapter, then the size class, on the same weights', () => {
    const m = manifest();
    const small = chooseGraphs(m, { shaderF16: true }, undefined, tokens(512)).choices.transformer;
    const large = chooseGraphs(m, { shaderF16: true }, undefined, tokens(1024)).choices.transformer;
    const noF16 = chooseGraphs(m, { shaderF16: false }, undefined, tokens(512)).choices.transformer;
    assert.equal(small.graph.path, 'transformer/transformer_q4f16.qb1.onnx');
    assert.equal(large.graph.path, 'transformer/transformer_q4f16.qb4.onnx');
    assert.equal(noF16.graph.path, 'transformer/transformer_q4.qb1.onnx');
    // Another size class is another graph file but the same weights: only the small graph file differs.
    assert.notEqual(small.identity, large.identity);
    assert.deepEqual(small.graph.externalData, large.graph.externalData);
    // Without a token count (or for a seed repo without limits) the main graph runs.
    assert.equal(
        chooseGraphs(m, { shaderF16: true }, undefined).choices.transformer.graph.path,
        'transformer/transformer_q4f16.onnx',
    );
});

test('an adapter with smaller storage buffers gets a more-split graph; a size none fits is refused', () => {
    const m = manifest();
    for (const g of m.graphs) if (g.component === 'transformer') g.attentionHeads = 24;
    const main = m.graphs.find((g) => g.path === 'transformer/transformer_q4f16.onnx');
    assert.ok(main);
    // 512^2 unsplit: 24 x 1536 x 1536 x 4 B = 216 MiB of scores, over WebGPU's default 128 MiB limit.
    assert.ok(sizeClass(m, main, tokens(512), 2 ** 31).path.endsWith('.qb1.onnx'));
    assert.ok(sizeClass(m, main, tokens(512), 128 * 2 ** 20).path.endsWith('.qb4.onnx'));
    // 2048^2 in 52 blocks needs ~500 MiB: refused on a 128 MiB adapter, with the sizes in the message.
    assert.throws(
        () => sizeClass(m, main, tokens(2048), 128 * 2 ** 20),
        /needs a 527 MB attention buffer .* allows 134 MB/,
    );
});

test('lean mode runs the least-split graph within its score budget, else the most-split one that runs', () => {
    const m = manifest();
    for (const g of m.graphs) if (g.component === 'transformer') g.attentionHeads = 24;
    const lean = { scoreBudget: LEAN_SCORE_BUFFER_BYTES };
    const path = (/** @type {number} */ side, /** @type {any} */ options) =>
        chooseGraphs(m, { shaderF16: true, maxStorageBufferBindingSize: 2 ** 31 }, undefined, tokens(side), options)
            .choices.transformer.graph.path;
    // 512^2: 216 MiB of scores unsplit, 54 MiB in four blocks; 1024^2: 486 MiB in four, 115 MiB in seventeen.
    assert.equal(path(512), 'transformer/transformer_q4f16.qb1.onnx');
    assert.equal(path(512, lean), 'transformer/transformer_q4f16.qb4.onnx');
    assert.equal(path(1024), 'transformer/transformer_q4f16.qb4.onnx');
    assert.equal(path(1024, lean), 'transformer/transformer_q4f16.qb17.onnx');
    // No graph within the budget at 2048^2: the most-split graph, which the adapter's limit allows, runs.
    assert.equal(path(2048, lean), 'transformer/transformer_q4f16.onnx');
    // The budget is a preference: an adapter limit below it still decides (128 MiB refuses 2048^2 either way).
    assert.throws(
        () => chooseGraphs(m, { shaderF16: true, maxStorageBufferBindingSize: 2 ** 27 }, undefined, tokens(2048), lean),
        OutOfMemoryError,
    );
});

test('a VAE decode whose attention buffer cannot fit is refused with the largest square that fits', () => {
    const m = manifest();
    const vae = chooseGraphs(m, { shaderF16: true }, undefined).choices.vae_decoder;
    const unsplit = {
        ...vae,
        ep: /** @type {const} */ ('webgpu'),
        graph: { ...vae.graph, variant: 'fp16', attentionQueryBlocks: 1 },
    };
    const gpu = { maxStorageBufferBindingSize: 128 * 2 ** 20 };
    // 1024^2: 16384 latent tokens, a 16384 x 16384 fp16 score matrix = 512 MiB.
    assert.throws(
        () => checkDecodeFits(unsplit, { width: 1024, height: 1024 }, gpu),
        (err) => {
            assert.ok(err instanceof OutOfMemoryError);
            assert.match(err.message, /needs a 537 MB attention buffer .* allows 134 MB .*\(at most about 720x720\)/);
            assert.deepEqual(err.detail, { needed: 2 ** 29, limit: 2 ** 27, width: 1024, height: 1024 });
            return true;
        },
    );
    checkDecodeFits(unsplit, { width: 720, height: 720 }, gpu);
    // Split into 32 query blocks, the same size needs 16 MiB.
    checkDecodeFits(
        { ...unsplit, graph: { ...unsplit.graph, attentionQueryBlocks: 32 } },
        { width: 1024, height: 1024 },
        gpu,
    );
});

test('the variant follows the features the device has (shared/graph_needs.js variantOrder)', () => {
    const nvidia = { vendor: 'nvidia' };
    const m = manifest();
    const pick = (/** @type {any} */ gpu) =>
        chooseGraphs(m, gpu, undefined, tokens(512)).choices.transformer.graph.variant;
    assert.equal(pick({ shaderF16: true, subgroups: true, subgroupMatrix: true, adapter: nvidia }), 'q4f16');
    assert.equal(pick({ shaderF16: true, subgroups: true, subgroupMatrix: false, adapter: nvidia }), 'q4');
    // A forced precision wins over the table.
    assert.equal(
        chooseGraphs(m, { shaderF16: true, subgroupMatrix: true }, 'q4', tokens(512)).choices.transformer.graph.variant,
        'q4',
    );
});

test('a stored variant is kept over a faster one not downloaded, with a note saying how to get the faster one', () => {
    const m = manifest();
    const gpu = { shaderF16: true, subgroups: true, subgroupMatrix: false, adapter: { vendor: 'nvidia' } };
    const q4f16 = m.graphs.filter((g) => g.variant === 'q4f16' && g.component === 'transformer');
    const storedQ4f16 = new Set(q4f16.flatMap((g) => [g.path, `transformer/${g.externalData[0]}`]));
    const kept = chooseGraphs(m, gpu, undefined, tokens(512), { stored: storedQ4f16 });
    assert.equal(kept.choices.transformer.graph.path, 'transformer/transformer_q4f16.qb1.onnx');
    assert.ok(
        kept.notes.some((n) => /q4 graphs would run faster .* choose precision q4 to download it/.test(n)),
        kept.notes.join('\n'),
    );
    // Nothing stored (a first visit): the fastest variant, no note.
    const fresh = chooseGraphs(m, gpu, undefined, tokens(512), { stored: new Set() });
    assert.equal(fresh.choices.transformer.graph.variant, 'q4');
    assert.ok(!fresh.notes.some((n) => /would run faster/.test(n)));
    // The fastest one stored as well: it runs.
    const both = new Set([
        ...storedQ4f16,
        ...m.graphs
            .filter((g) => g.component === 'transformer')
            .flatMap((g) => [g.path, `transformer/${g.externalData[0]}`]),
    ]);
    assert.equal(
        chooseGraphs(m, gpu, undefined, tokens(512), { stored: both }).choices.transformer.graph.variant,
        'q4',
    );
});
