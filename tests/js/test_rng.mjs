// @ts-check
/** @file pipeline/rng against torch.randn (golden randn.json). @module tests/js/test_rng */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { fma32, torchRandn } from '../../web_src/src/pipeline/rng.js';
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

test('torchRandn draws a 1024x1024 latent ([1,128,64,64]) in about 100 ms of CPU', () => {
    torchRandn(1, [1, 128, 8, 8]); // warm up the JIT
    let best = Infinity;
    let wall = Infinity;
    for (let i = 0; i < 3; i++) {
        const cpu = process.cpuUsage();
        const start = performance.now();
        torchRandn(42 + i, [1, 128, 64, 64]);
        wall = Math.min(wall, performance.now() - start);
        const used = process.cpuUsage(cpu);
        best = Math.min(best, (used.user + used.system) / 1000);
    }
    // CPU time, not wall time: CI machines are shared. About 50 ms measured on one x86-64 core.
    assert.ok(best < 150, `best of 3: ${best.toFixed(1)} ms CPU (${wall.toFixed(1)} ms wall)`);
});

/**
 * A finite float32 value as an exact rational mantissa * 2^exponent (BigInt mantissa).
 * @param {number} x
 * @returns {{m: bigint, e: number}}
 */
function exact(x) {
    if (x === 0) return { m: 0n, e: 0 };
    let e = 0;
    let m = x;
    while (!Number.isInteger(m)) {
        m *= 2;
        e--;
    }
    return { m: BigInt(m), e };
}

/**
 * Rounds the exact rational m * 2^e to the nearest float32, ties to even (normal range only).
 * @param {bigint} m
 * @param {number} e
 * @returns {number}
 */
function roundToFloat32(m, e) {
    if (m === 0n) return 0;
    const negative = m < 0n;
    let mag = negative ? -m : m;
    const bits = mag.toString(2).length;
    if (bits > 24) {
        const shift = BigInt(bits - 24);
        const kept = mag >> shift;
        const rest = mag - (kept << shift);
        const half = 1n << (shift - 1n);
        mag = rest > half || (rest === half && (kept & 1n) === 1n) ? kept + 1n : kept;
        e += bits - 24;
    }
    const value = Number(mag) * 2 ** e;
    return negative ? -value : value;
}

/** @param {number} a @param {number} b @param {number} c */
function exactFma32(a, b, c) {
    const x = exact(a);
    const y = exact(b);
    const z = exact(c);
    const pe = x.e + y.e;
    const e = Math.min(pe, z.e);
    const sum = ((x.m * y.m) << BigInt(pe - e)) + (z.m << BigInt(z.e - e));
    return roundToFloat32(sum, e);
}

test('fma32 rounds a*b + c once, even where the double sum lands on a float32 midpoint', () => {
    const f32 = Math.fround;
    // a*b = -2^-24 (1 - 2^-46): the double sum is the midpoint 1 + 2^-24, the exact sum is just above it.
    const up = [-f32(1 + 2 ** -23), f32(2 ** -24 * (1 - 2 ** -23)), f32(1 + 2 ** -23)];
    assert.equal(fma32(up[0], up[1], up[2]), f32(1 + 2 ** -23));
    assert.notEqual(f32(up[0] * up[1] + up[2]), fma32(up[0], up[1], up[2]), 'double-then-float32 is wrong here');
    // a*b = 2^-24 (1 - 2^-46): double sum is the midpoint 1 + 3*2^-24, the exact sum is just below it.
    const down = [f32(1 + 2 ** -23), f32(2 ** -24 * (1 - 2 ** -23)), f32(1 + 2 ** -23)];
    assert.equal(fma32(down[0], down[1], down[2]), f32(1 + 2 ** -23));
    assert.equal(fma32(down[0], down[1], down[2]), exactFma32(down[0], down[1], down[2]));
    // A true tie stays round-half-even.
    assert.equal(fma32(1, 2 ** -24, 1), 1);
    assert.equal(fma32(1, 2 ** -24, f32(1 + 2 ** -23)), f32(1 + 2 ** -22));

    // Random operands in the ranges the Cephes polynomials use.
    let state = 12345;
    const rand = () => {
        state = (Math.imul(state, 1103515245) + 12345) >>> 0;
        return state / 2 ** 32;
    };
    for (let i = 0; i < 20000; i++) {
        const a = f32((rand() - 0.5) * 8);
        const b = f32((rand() - 0.5) * 2 ** (rand() * 20 - 10));
        const c = f32((rand() - 0.5) * 4);
        assert.equal(fma32(a, b, c), exactFma32(a, b, c), `fma32(${a}, ${b}, ${c})`);
    }
});
