// @ts-check
/**
 * @file pipeline/preview: the packed-token layout against diffusers' _unpatchify_latents (golden preview.json), the
 * published FLUX.2 map's form, reading a repository's map, and what a step's preview is made of.
 * @module tests/js/test_preview
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { LATENT_CHANNELS } from '../../web_src/src/pipeline/latents.js';
import {
    StepPreview,
    parsePreviewMap,
    perChannelMap,
    publishedMap,
    tokensToRgba,
} from '../../web_src/src/pipeline/preview.js';
import { float32s, float64s, loadGolden } from './golden.mjs';

const golden = loadGolden('preview.json');

/**
 * @param {number} value  A colour in [0, 1].
 * @returns {number} Its byte, as Uint8ClampedArray stores it.
 */
const byte = (value) => Math.min(255, Math.max(0, Math.round(value * 255)));

test("a per-channel map on packed tokens colours each pixel as on diffusers' unpatchified latents", () => {
    for (const { h, w, packed, factors, bias, rgb } of golden.cases) {
        const rows = Array.from({ length: 32 }, (_, c) => factors.slice(c * 3, c * 3 + 3));
        const frame = tokensToRgba(perChannelMap(rows, bias, 'test'), float32s(packed), h, w);
        assert.equal(frame.width, 2 * w);
        assert.equal(frame.height, 2 * h);
        const expected = float64s(rgb); // [3, 2h, 2w]
        const plane = frame.width * frame.height;
        for (let p = 0; p < plane; p++) {
            for (let k = 0; k < 3; k++) {
                // float32 sums against float64 ones: at most one step of rounding apart.
                assert.ok(
                    Math.abs(frame.rgba[p * 4 + k] - byte(expected[k * plane + p])) <= 1,
                    `${h}x${w} pixel ${p} colour ${k}`,
                );
            }
            assert.equal(frame.rgba[p * 4 + 3], 255);
        }
    }
});

test('the published FLUX.2 map feeds each pixel of a token only from its own channels, output in [0, 1]', () => {
    const map = publishedMap();
    assert.equal(map.source, 'published FLUX.2');
    assert.equal(map.weights.length, LATENT_CHANNELS * 12);
    for (let c = 0; c < LATENT_CHANNELS; c++) {
        for (let o = 0; o < 12; o++) {
            if (Math.floor(o / 3) !== c % 4) assert.equal(map.weights[c * 12 + o], 0, `channel ${c} output ${o}`);
        }
    }
    // Zero latents show the bias: ComfyUI's (b + 1) / 2, a mid grey, the same for all four pixels.
    const frame = tokensToRgba(map, new Float32Array(LATENT_CHANNELS), 1, 1);
    assert.deepEqual(
        Array.from(frame.rgba),
        [123, 118, 117, 255, 123, 118, 117, 255, 123, 118, 117, 255, 123, 118, 117, 255],
    );
});

/** @returns {any} A preview map file as builder/convert/preview_map.py writes it, weights[o][c] = o + c / 1000. */
function mapFile() {
    return {
        format: 'klein-web-preview-map',
        format_version: 1,
        weights: Array.from({ length: 12 }, (_, o) => Array.from({ length: LATENT_CHANNELS }, (_, c) => o + c / 1000)),
        bias: Array.from({ length: 12 }, (_, o) => o / 100),
        fit: {},
    };
}

test("a repository's map file is read into the channel-major layout", () => {
    const map = parsePreviewMap(mapFile());
    assert.equal(map.source, 'repository');
    assert.equal(map.weights[5 * 12 + 7], Math.fround(7 + 5 / 1000));
    assert.equal(map.bias[11], Math.fround(0.11));
});

test('a map file that is not one is refused', () => {
    const broken = [
        { ...mapFile(), format: 'something-else' },
        { ...mapFile(), weights: mapFile().weights.slice(1) },
        { ...mapFile(), bias: [0, 1] },
        {
            ...mapFile(),
            weights: mapFile().weights.map((/** @type {number[]} */ row, /** @type {number} */ o) =>
                o === 3 ? [...row.slice(1), 'x'] : row,
            ),
        },
        null,
    ];
    for (const json of broken) assert.throws(() => parsePreviewMap(json), /not a klein-web-preview-map/);
});

/** A map whose pixel (0, 0) shows packed channels 0, 1, 2 as R, G, B; the other pixels black. */
function firstChannelsMap() {
    const weights = new Float32Array(LATENT_CHANNELS * 12);
    for (let k = 0; k < 3; k++) weights[k * 12 + k] = 1;
    return { weights, bias: new Float32Array(12), source: 'test' };
}

test("a step's preview shows x0 = x - sigma_next * v and leaves the latents as they were", () => {
    const tokens = 2;
    const latents = Float32Array.from({ length: tokens * LATENT_CHANNELS }, (_, i) => (i % 7) / 10);
    const velocity = Float32Array.from({ length: tokens * LATENT_CHANNELS }, (_, i) => (i % 5) / 10 - 0.3);
    const before = latents.slice();
    const preview = new StepPreview(firstChannelsMap(), { latentHeight: 1, latentWidth: tokens, inpainting: null });
    const frame = preview.frame(latents, velocity, 0.5);
    assert.deepEqual(latents, before);
    for (let t = 0; t < tokens; t++) {
        for (let k = 0; k < 3; k++) {
            const i = t * LATENT_CHANNELS + k;
            assert.equal(frame.rgba[t * 2 * 4 + k], byte(latents[i] - 0.5 * velocity[i]), `token ${t} colour ${k}`);
        }
    }
    // After the last step (sigma 0) the preview is the final latents' own.
    assert.deepEqual(
        preview.frame(latents, velocity, 0).rgba,
        tokensToRgba(firstChannelsMap(), latents, 1, tokens).rgba,
    );
    assert.equal(preview.frames, 2);
    assert.ok(preview.ms >= 0);
});

test("inpainting's preview shows the image where the mask keeps it", () => {
    const latents = new Float32Array(2 * LATENT_CHANNELS).fill(0.2);
    const imageLatents = new Float32Array(2 * LATENT_CHANNELS).fill(0.8);
    const inpainting = { imageLatents, mask: Float32Array.of(1, 0) }; // token 0 repainted, token 1 kept
    const preview = new StepPreview(firstChannelsMap(), { latentHeight: 1, latentWidth: 2, inpainting });
    const frame = preview.frame(latents, new Float32Array(latents.length), 0.3);
    assert.equal(frame.rgba[0], byte(0.2));
    assert.equal(frame.rgba[2 * 4], byte(0.8));
});
