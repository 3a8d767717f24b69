// Node tests of store/manifest.js: the seed layout used when a model repo has no manifest.json.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test } from 'node:test';

import { CHAT_TEMPLATE_FILE, TOKENIZER_FILES } from '../../web_src/src/shared/model_repo.js';
import { fetchManifest, seedManifest } from '../../web_src/src/store/manifest.js';

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
