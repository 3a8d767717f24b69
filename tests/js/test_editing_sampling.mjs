// @ts-check
/**
 * @file The sampling helpers of editing and inpainting (pipeline/latents.js, shared/inpaint.js) against torch and
 * diffusers 0.42.1, bit for bit (golden editing.json): reference-image ids, scale_noise, the mask blend, the mask's
 * bilinear resize to the latent grid, and the step inpainting starts from.
 * @module tests/js/test_editing_sampling
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { blendMask, interpolateBilinear, prepareImageIds, scaleNoise } from '../../web_src/src/pipeline/latents.js';
import { inpaintStart } from '../../web_src/src/shared/inpaint.js';
import { assertSameFloat32, bytes, float32s, loadGolden } from './golden.mjs';

const golden = loadGolden('editing.json');

test('prepareImageIds equals _prepare_image_ids: (10 * (k + 1), y, x, 0) per reference image k', () => {
    assert.deepEqual(Array.from(prepareImageIds(golden.grids), Number), golden.ids);
});

test('scaleNoise equals sigma * noise + (1 - sigma) * sample in float32', () => {
    assertSameFloat32(
        scaleNoise(float32s(golden.sample), golden.sigma, float32s(golden.noise)),
        float32s(golden.scaled),
        'scaled',
    );
});

test('blendMask equals (1 - m) * proper + m * latents per token, in place', () => {
    const latents = float32s(golden.latents);
    const blended = blendMask(latents, float32s(golden.proper), float32s(golden.mask), golden.channels);
    assert.equal(blended, latents);
    assertSameFloat32(blended, float32s(golden.blended), 'blended');
});

test('interpolateBilinear equals torch interpolate(mode="bilinear") on binary masks down to the latent grid', () => {
    assert.ok(golden.planes.length >= 4);
    for (const { height, width, out_height: outHeight, out_width: outWidth, plane, resized } of golden.planes) {
        const resizedHere = interpolateBilinear(Float32Array.from(bytes(plane)), height, width, outHeight, outWidth);
        assertSameFloat32(resizedHere, float32s(resized), `${height}x${width} -> ${outHeight}x${outWidth}`);
    }
});

test('inpaintStart equals get_timesteps, and refuses where diffusers runs fewer than 1 step', () => {
    assert.ok(golden.starts.some((/** @type {{start: number | null}} */ c) => c.start === null));
    for (const { steps, strength, start } of golden.starts) {
        if (start === null) assert.throws(() => inpaintStart(steps, strength), /leaves no denoising step/);
        else assert.equal(inpaintStart(steps, strength), start, `${steps} steps, strength ${strength}`);
    }
});
