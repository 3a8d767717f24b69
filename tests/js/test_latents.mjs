// @ts-check
/** @file pipeline/latents against Flux2KleinPipeline's helpers and scheduler.step (golden latents.json). @module tests/js/test_latents */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
    eulerStep,
    packLatents,
    prepareLatentIds,
    prepareTextIds,
    unpackLatents,
} from '../../web_src/src/pipeline/latents.js';
import { InputError } from '../../web_src/src/shared/errors.js';
import { assertSameFloat32, float32s, loadGolden } from './golden.mjs';

const golden = loadGolden('latents.json');

test('prepareLatentIds equals _prepare_latent_ids: int64 rows (0, y, x, 0) in raster order', () => {
    for (const { h, w, ids } of golden.latent_ids) {
        const got = prepareLatentIds(h, w);
        assert.ok(got instanceof BigInt64Array);
        assert.deepEqual(Array.from(got, Number), ids, `${h}x${w}`);
    }
});

test('prepareTextIds equals _prepare_text_ids: int64 rows (0, 0, 0, l)', () => {
    for (const { length, ids } of golden.text_ids) {
        const got = prepareTextIds(length);
        assert.ok(got instanceof BigInt64Array);
        assert.deepEqual(Array.from(got, Number), ids, `L=${length}`);
    }
});

test('packLatents equals _pack_latents and unpackLatents equals _unpack_latents_with_ids', () => {
    for (const { c, h, w, latents, packed } of golden.pack) {
        const what = `[1, ${c}, ${h}, ${w}]`;
        const noise = float32s(latents);
        const tokens = packLatents(noise, c, h, w);
        assertSameFloat32(tokens, float32s(packed), `${what} packed`);
        assertSameFloat32(unpackLatents(tokens, c, h, w), noise, `${what} unpacked`);
    }
});

test('eulerStep equals scheduler.step over whole schedules, in place', () => {
    for (const { sigmas, velocities, samples } of golden.euler) {
        const sigma = float32s(sigmas);
        const latents = float32s(samples[0]);
        for (let i = 0; i < velocities.length; i++) {
            const returned = eulerStep(latents, float32s(velocities[i]), sigma[i], sigma[i + 1]);
            assert.equal(returned, latents, 'updates in place');
            assertSameFloat32(latents, float32s(samples[i + 1]), `step ${i} of ${velocities.length}`);
        }
    }
});

test('latent helpers reject bad sizes and mismatched buffers with InputError naming the argument', () => {
    assert.throws(() => prepareLatentIds(0, 4), /`h` must be a positive integer, got 0/);
    assert.throws(() => prepareTextIds(1.5), /`length` must be a positive integer/);
    assert.throws(() => packLatents(new Float32Array(10), 2, 2, 2), /`latents` has 10 values but the shape needs 8/);
    assert.throws(() => unpackLatents(new Float32Array(8), 2, 2, 3), /`tokens` has 8 values but the shape needs 12/);
    assert.throws(() => eulerStep(new Float32Array(4), new Float32Array(3), 1, 0.5), InputError);
    assert.throws(() => eulerStep(new Float32Array(4), new Float32Array(4), Number.NaN, 0.5), InputError);
});
