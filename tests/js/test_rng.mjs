// @ts-check
/** @file pipeline/rng against torch.randn (golden randn.json). @module tests/js/test_rng */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { torchRandn } from '../../web_src/src/pipeline/rng.js';
import { InputError } from '../../web_src/src/shared/errors.js';
import { assertSameFloat32, float32s, loadGolden } from './golden.mjs';

const golden = loadGolden('randn.json');
// The JS port follows torch's x86-64 kernel (AVX2, also used on AVX512); aarch64 torch differs in the last bits.
const x86 = ['AVX2', 'AVX512'].includes(golden.cpu_capability);

test(
    'torchRandn equals torch.randn bit for bit (every golden seed and shape)',
    { skip: !x86 && `golden made on ${golden.cpu_capability}` },
    () => {
        assert.ok(golden.cases.length >= 7 * 4);
        for (const { seed, shape, data } of golden.cases) {
            assertSameFloat32(torchRandn(seed, shape), float32s(data), `seed ${seed} shape [${shape}]`);
        }
    },
);

test('torchRandn covers the three code paths the golden shapes exercise', () => {
    const sizes = new Set(golden.cases.map((/** @type {{shape: number[]}} */ c) => c.shape.reduce((a, b) => a * b, 1)));
    assert.ok(
        [...sizes].some((n) => n < 16),
        'a numel < 16 case (per-element double path)',
    );
    assert.ok(
        [...sizes].some((n) => n >= 16 && n % 16 === 0),
        'a multiple of 16',
    );
    assert.ok(
        [...sizes].some((n) => n > 16 && n % 16 !== 0),
        'a tail redraw case',
    );
});

test('torchRandn is deterministic and seeds differ', () => {
    assert.deepEqual(torchRandn(7, [1, 128, 2, 2]), torchRandn(7, [1, 128, 2, 2]));
    assert.notDeepEqual(torchRandn(7, [64]), torchRandn(8, [64]));
    assert.equal(torchRandn(0, [0]).length, 0);
});

test('torchRandn rejects seeds outside [0, 2^32) and bad shapes with InputError', () => {
    for (const seed of [-1, 2 ** 32, 1.5, Number.NaN, Infinity, '42', undefined]) {
        assert.throws(
            () => torchRandn(/** @type {any} */ (seed), [4]),
            (err) => {
                assert.ok(err instanceof InputError);
                assert.match(err.message, /`seed` must be an integer in \[0, 2\^32\)/);
                return true;
            },
        );
    }
    for (const shape of [[-1], [2.5], 'abc', [Number.NaN]]) {
        assert.throws(() => torchRandn(1, /** @type {any} */ (shape)), InputError);
    }
});

test('torchRandn draws a 1024x1024 latent ([1,128,64,64]) in about 100 ms', () => {
    torchRandn(1, [1, 128, 8, 8]); // warm up the JIT
    let best = Infinity;
    for (let i = 0; i < 3; i++) {
        const start = performance.now();
        torchRandn(42 + i, [1, 128, 64, 64]);
        best = Math.min(best, performance.now() - start);
    }
    // Generous bound: CI machines are shared; the target is ~100 ms (about 50 ms measured on one core).
    assert.ok(best < 200, `best of 3: ${best.toFixed(1)} ms`);
});
