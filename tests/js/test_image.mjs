// @ts-check
/** @file pipeline/image against diffusers' numpy_to_pil rounding (golden image.json) and the degenerate-output checks. @module tests/js/test_image */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { assertFinite, checkImage, toRgba } from '../../web_src/src/pipeline/image.js';
import { DegenerateOutputError, InputError } from '../../web_src/src/shared/errors.js';
import { bytes, float32s, loadGolden } from './golden.mjs';

const golden = loadGolden('image.json');

test('toRgba equals image_processor.postprocess(..., "pil") including exact .5 ties (half to even)', () => {
    const { width, height } = golden;
    assert.ok(golden.ties >= 200, 'the golden image plants exact ties');
    const rgba = toRgba(float32s(golden.image), width, height);
    assert.ok(rgba instanceof Uint8ClampedArray);
    assert.equal(rgba.length, width * height * 4);
    const rgb = bytes(golden.rgb); // [H, W, 3]
    for (let p = 0; p < width * height; p++) {
        for (let ch = 0; ch < 3; ch++) {
            assert.equal(rgba[p * 4 + ch], rgb[p * 3 + ch], `pixel ${p} channel ${ch}`);
        }
        assert.equal(rgba[p * 4 + 3], 255, `alpha of pixel ${p}`);
    }
});

test('toRgba saturates out-of-range values and rejects a buffer of the wrong size', () => {
    assert.deepEqual(Array.from(toRgba(new Float32Array([-0.5, 1.5, 0.5]), 1, 1)), [0, 255, 128, 255]);
    assert.throws(
        () => toRgba(new Float32Array(5), 1, 2),
        (err) => {
            assert.ok(err instanceof InputError);
            assert.match(err.message, /`image` has 5 values but a \[1, 3, 2, 1\] image needs 6/);
            return true;
        },
    );
    assert.throws(() => toRgba(new Float32Array(3), 0, 1), /`width` must be a positive integer/);
});

test('checkImage accepts a real image', () => {
    assert.doesNotThrow(() => checkImage(float32s(golden.image)));
});

test('checkImage refuses NaN, infinities and flat images (black square) with DegenerateOutputError', () => {
    const bad = {
        nan: Float32Array.from([0.1, Number.NaN, 0.3, 0.9, 0.2, 0.4]),
        inf: Float32Array.from([0.1, Infinity, 0.3, 0.9, 0.2, -Infinity]),
        black: new Float32Array(3 * 16),
        grey: new Float32Array(3 * 16).fill(0.5),
        nearlyFlat: Float32Array.from({ length: 48 }, (_, i) => 0.2 + (i % 2) * 0.002),
    };
    for (const [name, image] of Object.entries(bad)) {
        assert.throws(
            () => checkImage(image),
            (err) => {
                assert.ok(err instanceof DegenerateOutputError, name);
                assert.equal(err.code, 'degenerate-output');
                assert.match(err.message, /Try another seed/, `${name}: says what to try`);
                return true;
            },
        );
    }
    assert.throws(() => checkImage(bad.black), /single flat colour .*about 0\/255/);
});

test('assertFinite names what it checked and counts the bad values', () => {
    assert.doesNotThrow(() => assertFinite(new Float32Array([0, -1e30, 1e30]), 'latents'));
    assert.throws(
        () => assertFinite(Float32Array.from([1, Number.NaN, Number.NaN, Infinity]), 'latents after step 2'),
        /Found 2 NaN and 1 infinite value\(s\) in the latents after step 2 \(out of 4, first at index 1\)/,
    );
});
