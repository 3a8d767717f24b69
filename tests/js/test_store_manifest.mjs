// Node tests of store/manifest.js: manifest.json checked against its schema (the corpus tests/test_manifest_schema.py
// runs through the Python loader), and the seed layout used when a model repo has no manifest.json.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test } from 'node:test';

import { chooseGraphs } from '../../web_src/src/models/graph_choice.js';
import { ModelFileError } from '../../web_src/src/shared/errors.js';
import {
    CHAT_TEMPLATE_FILE,
    COMPONENTS,
    DISTILLED,
    FORMAT,
    FORMAT_VERSION,
    OPTIONAL_COMPONENTS,
    TOKENIZER_FILES,
    VARIANTS,
    graphFiles,
} from '../../web_src/src/shared/model_repo.js';
import { fetchManifest, parseManifest, seedManifest } from '../../web_src/src/store/manifest.js';
import { BASE, CORPUS, changed, parseCase } from './manifest_corpus.mjs';

/**
 * A tiny model server: `present` lists the repo-relative paths that exist, `files` what some of them hold.
 * @param {string[]} present
 * @param {Record<string, string>} [files]
 */
async function serve(present, files = {}) {
    const server = createServer((request, response) => {
        const path = decodeURIComponent(new URL(request.url, 'http://x').pathname).replace(/^\/repo\//, '');
        if (path in files) response.writeHead(200, { 'Content-Type': 'application/json' }).end(files[path]);
        else response.writeHead(present.includes(path) ? 200 : 404).end();
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { base: `http://127.0.0.1:${server.address().port}/repo/`, close: () => server.close() };
}

test('seed layout: the graphs of the seed repo with bare external-data names', () => {
    const manifest = seedManifest('https://example.org/repo/');
    assert.deepEqual(
        manifest.graphs.map((g) => [g.path, g.externalData]),
        [
            ['text_encoder/text_encoder_q4.onnx', ['text_encoder_q4.onnx_data', 'text_encoder_q4.onnx_data_1']],
            ['transformer/transformer_q4.onnx', ['transformer_q4.onnx_data', 'transformer_q4.onnx_data_1']],
            ['vae_decoder/vae_decoder_fp16.onnx', ['vae_decoder_fp16.onnx_data']],
        ],
    );
    for (const path of TOKENIZER_FILES) assert.ok(path in manifest.files);
    assert.ok(!(CHAT_TEMPLATE_FILE in manifest.files));
});

test('a repo without manifest.json but with tokenizer/chat_template.jinja gets the template file', async () => {
    const server = await serve([CHAT_TEMPLATE_FILE]);
    try {
        const manifest = await fetchManifest(server.base);
        assert.equal(manifest.seedLayout, true);
        assert.ok(CHAT_TEMPLATE_FILE in manifest.files);
    } finally {
        server.close();
    }
});

test('a repo without manifest.json and without chat_template.jinja uses tokenizer_config.json alone', async () => {
    const server = await serve([]);
    try {
        const manifest = await fetchManifest(server.base);
        assert.equal(manifest.seedLayout, true);
        assert.ok(!(CHAT_TEMPLATE_FILE in manifest.files));
    } finally {
        server.close();
    }
});

const SHA = 'ab'.repeat(32);

/** manifest.json as `klein-web convert --precision q4` writes it: the text-to-image graphs plus the VAE encoder's. */
function convertedManifestJson() {
    const graphs = [
        ['text_encoder', 'q4'],
        ['transformer', 'q4'],
        ['vae_decoder', 'fp16'],
        ['vae_decoder', 'fp32'],
        ['vae_encoder', 'fp32'],
        ['vae_encoder', 'fp16'],
    ].map(([component, variant]) => ({
        component,
        variant,
        path: `${component}/${component}_${variant}.onnx`,
        external_data: [`${component}_${variant}.onnx_data`],
        precision: '',
        inputs: [],
        outputs: [],
        requires_f16: variant === 'fp16',
        cpu_nodes_without_f16: [],
        attention_query_blocks: component.startsWith('vae') ? 32 : 1,
        attention_max_tokens: null,
        attention_heads: null,
    }));
    const files = {};
    for (const g of graphs)
        for (const path of [g.path, `${g.component}/${g.external_data[0]}`]) files[path] = { size: 10, sha256: SHA };
    for (const path of TOKENIZER_FILES) files[path] = { size: 1, sha256: SHA };
    return { format: 'klein-web-model-repo', format_version: 1, source: 'tiny', converter: 'klein-web', files, graphs };
}

test('a repo with VAE encoder graphs loads, and text-to-image neither chooses nor downloads them', () => {
    const manifest = parseManifest(convertedManifestJson(), 'https://example.org/repo/');
    assert.deepEqual(
        manifest.graphs.filter((g) => g.component === 'vae_encoder').map((g) => g.variant),
        ['fp32', 'fp16'],
    );
    for (const shaderF16 of [true, false]) {
        const { choices } = chooseGraphs(manifest, { shaderF16 }, undefined, 16 + 512);
        assert.deepEqual(Object.keys(choices).sort(), ['text_encoder', 'transformer', 'vae_decoder']);
        // What models/model_source.js downloads: the chosen graphs' files (plus the tokenizer).
        const paths = Object.values(choices).flatMap((c) => graphFiles(c.graph));
        assert.ok(paths.length > 0 && !paths.some((p) => p.startsWith('vae_encoder/')), paths.join(', '));
    }
});

test('an unknown component is still refused', () => {
    const json = convertedManifestJson();
    json.graphs[4].component = 'vae_encoderr';
    assert.throws(() => parseManifest(json, 'https://example.org/repo/'), /component must be one of .*vae_encoder/);
});

test('the LoRAs a converted repo lists are read; a repo without them has none', () => {
    assert.deepEqual(parseManifest(convertedManifestJson(), 'https://example.org/repo/').loras, []);
    const json = convertedManifestJson();
    json.loras = [{ file: 'style.safetensors', sha256: 'ab'.repeat(32), scale: 0.8 }];
    assert.deepEqual(parseManifest(json, 'https://example.org/repo/').loras, json.loras);
    for (const loras of [{}, [{ file: 'a', sha256: 'ab' }], [{ file: 'a', sha256: 'ab', scale: '1' }], ['a']]) {
        assert.throws(() => parseManifest({ ...json, loras }, 'https://example.org/repo/'), /loras/);
    }
});

test('block hashes are read where a file lists them, and malformed ones are refused', () => {
    const base = 'https://example.org/repo/';
    const path = 'transformer/transformer_q4.onnx_data';
    const digest = 'ab'.repeat(32);
    const json = convertedManifestJson();
    const size = 2 * (1 << 20) + 5;
    json.files[path] = { size, sha256: digest, blocks: { size: 1 << 20, sha256: [digest, digest, digest] } };
    const manifest = parseManifest(json, base);
    assert.deepEqual(manifest.files[path].blocks, { size: 1 << 20, sha256: [digest, digest, digest] });
    assert.equal(manifest.files['transformer/transformer_q4.onnx'].blocks, null);
    for (const [blocks, sha256, error] of [
        [{ size: 1 << 20, sha256: [digest, digest] }, digest, /blocks.sha256 must hold 3 digest/],
        [{ size: 1024, sha256: [digest] }, digest, /blocks.size must be from 1048576/],
        [{ size: 1 << 20, sha256: [digest, digest, 'AB'.repeat(32)] }, digest, /blocks.sha256/],
        [[digest], digest, /blocks must be an object/],
        [
            { size: 1 << 20, sha256: [digest, digest, digest] },
            null,
            /sha256 must be a string \(the file lists blocks\)/,
        ],
    ]) {
        const bad = convertedManifestJson();
        bad.files[path] = { size, sha256, blocks };
        assert.throws(() => parseManifest(bad, base), error);
    }
});

test('the names come from the schema the Python tool reads', () => {
    assert.equal(FORMAT, 'klein-web-model-repo');
    assert.equal(FORMAT_VERSION, 1);
    assert.deepEqual(COMPONENTS, ['text_encoder', 'transformer', 'vae_decoder']);
    assert.deepEqual(OPTIONAL_COMPONENTS, ['vae_encoder']);
    assert.deepEqual(VARIANTS, ['q4', 'q4f16', 'fp32', 'fp16']);
    assert.deepEqual(TOKENIZER_FILES, ['tokenizer/tokenizer.json', 'tokenizer/tokenizer_config.json']);
});

test("every good manifest of the corpus loads, with the schema's defaults for what it leaves out", () => {
    assert.ok(CORPUS.good.length >= 9);
    for (const item of CORPUS.good) parseCase(item);
    const graph = parseManifest(
        changed(CORPUS.good.find((c) => c.name === 'optional-graph-fields-left-out').change),
        BASE,
    ).graphs[0];
    assert.deepEqual(
        [
            graph.requiresF16,
            graph.cpuNodesWithoutF16,
            graph.attentionQueryBlocks,
            graph.attentionMaxTokens,
            graph.attentionHeads,
        ],
        [false, [], 1, null, null],
    );
});

test('every bad manifest of the corpus is one ModelFileError naming the field', () => {
    assert.ok(CORPUS.bad.length >= 100);
    for (const item of CORPUS.bad) {
        assert.throws(
            () => parseCase(item),
            (err) =>
                item.text !== undefined
                    ? err instanceof SyntaxError // fetchManifest turns it into a ModelFileError (the next test)
                    : err instanceof ModelFileError && err.message.includes(item.error) && err.message.includes(BASE),
            item.name,
        );
    }
});

test('a manifest that is no JSON, or of a newer format, is refused through fetch', async () => {
    const newer = JSON.stringify({ ...CORPUS.valid, format_version: 99 });
    const server = await serve([], { 'bad/manifest.json': '{"format": ', 'newer/manifest.json': newer });
    try {
        await assert.rejects(
            fetchManifest(`${server.base}bad/`),
            (err) => err instanceof ModelFileError && /is not JSON/.test(err.message),
        );
        await assert.rejects(
            fetchManifest(`${server.base}newer/`),
            (err) => err instanceof ModelFileError && /format version 99; this app reads up to 1/.test(err.message),
        );
    } finally {
        server.close();
    }
});

test("a base model's `pipeline` is read as builder/repo/manifest.py reads it; absent, the model is distilled klein", () => {
    const base = 'https://example.org/repo/';
    // The schema's default: distilled klein's 4 steps, no guidance.
    assert.deepEqual(DISTILLED, { isDistilled: true, steps: 4, guidanceScale: null, inpaintGuidanceScale: null });
    assert.deepEqual(parseManifest(convertedManifestJson(), base).pipeline, DISTILLED);
    assert.deepEqual(seedManifest(base).pipeline, DISTILLED);
    const pipeline = { is_distilled: false, steps: 50, guidance_scale: 4.0, inpaint_guidance_scale: 8.0 };
    assert.deepEqual(parseManifest({ ...convertedManifestJson(), pipeline }, base).pipeline, {
        isDistilled: false,
        steps: 50,
        guidanceScale: 4,
        inpaintGuidanceScale: 8,
    });
    const none = { ...pipeline, guidance_scale: null, inpaint_guidance_scale: null };
    assert.equal(parseManifest({ ...convertedManifestJson(), pipeline: none }, base).pipeline.guidanceScale, null);
    // Malformed ones are the corpus's pipeline-* cases (every bad manifest of the corpus, above).
    assert.ok(CORPUS.bad.filter((c) => c.name.startsWith('pipeline-')).length >= 15);
});
