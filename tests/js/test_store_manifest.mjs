// Node tests of store/manifest.js: the seed layout used when a model repo has no manifest.json.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test } from 'node:test';

import { chooseGraphs } from '../../web_src/src/models/graph_choice.js';
import { CHAT_TEMPLATE_FILE, DISTILLED, TOKENIZER_FILES, graphFiles } from '../../web_src/src/shared/model_repo.js';
import { fetchManifest, parseManifest, seedManifest } from '../../web_src/src/store/manifest.js';

/** A tiny model server: `present` lists the repo-relative paths that exist; no manifest.json. */
async function serve(present) {
    const server = createServer((request, response) => {
        const path = decodeURIComponent(new URL(request.url, 'http://x').pathname).replace(/^\/repo\//, '');
        response.writeHead(present.includes(path) ? 200 : 404).end();
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
        for (const path of [g.path, `${g.component}/${g.external_data[0]}`]) files[path] = { size: 10, sha256: 'ab' };
    for (const path of TOKENIZER_FILES) files[path] = { size: 1, sha256: 'cd' };
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
        [{ size: 1 << 20, sha256: [digest, digest] }, digest, /blocks.sha256 must be a list of 3/],
        [{ size: 1024, sha256: [digest] }, digest, /blocks.size must be an integer/],
        [{ size: 1 << 20, sha256: [digest, digest, 'AB'.repeat(32)] }, digest, /blocks.sha256/],
        [[digest], digest, /blocks.size/],
        [{ size: 1 << 20, sha256: [digest, digest, digest] }, null, /needs the file's sha256/],
    ]) {
        const bad = convertedManifestJson();
        bad.files[path] = { size, sha256, blocks };
        assert.throws(() => parseManifest(bad, base), error);
    }
});

test("a base model's `pipeline` is read as builder/repo/manifest.py reads it; absent, the model is distilled klein", () => {
    const base = 'https://example.org/repo/';
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
    for (const [bad, field] of [
        [null, /"pipeline" must be an object/],
        [[], /"pipeline" must be an object/],
        [{ ...pipeline, extra: 1 }, /"pipeline" must be an object/],
        [{ steps: 50, guidance_scale: 4, inpaint_guidance_scale: 8 }, /"pipeline" must be an object/],
        [{ ...pipeline, is_distilled: 'no' }, /pipeline.is_distilled/],
        [{ ...pipeline, steps: 0 }, /pipeline.steps/],
        [{ ...pipeline, steps: 1001 }, /pipeline.steps/],
        [{ ...pipeline, steps: 2.5 }, /pipeline.steps/],
        [{ ...pipeline, guidance_scale: 0.5 }, /pipeline.guidance_scale/],
        [{ ...pipeline, inpaint_guidance_scale: '8' }, /pipeline.inpaint_guidance_scale/],
    ]) {
        assert.throws(() => parseManifest({ ...convertedManifestJson(), pipeline: bad }, base), field);
    }
});
