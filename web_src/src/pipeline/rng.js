// @ts-check
/**
 * @file `torchRandn(seed, shape)`: the initial noise, bit-exact with
 * `torch.randn(shape, generator=torch.Generator('cpu').manual_seed(seed))` (float32) on x86-64 CPU torch,
 * so a seed gives the same picture here as in diffusers.
 *
 * How torch draws it (aten/src/ATen/native/cpu/DistributionTemplates.h `normal_kernel`):
 *   - numel >= 16: ALL uniforms first, `u = (mt() & 0xFFFFFF) * 2^-24`, then Box-Muller in place on each
 *     block of 16 (`NormalFill16<float>`, AVX2: pairs (j, j+8)); when numel % 16 != 0, 16 FRESH uniforms
 *     are drawn and the last 16 slots are recomputed (overwriting already-transformed values).
 *     The AVX2 kernel is used on AVX512 machines too (`REGISTER_NO_AVX512_DISPATCH(normal_stub)`), and
 *     its log/sincos are the Cephes float polynomials of `avx_mathfun.h`, compiled with
 *     `-mfma -ffp-contract=fast`, so GCC turns mul+add pairs into FMAs: `fma32` reproduces them.
 *   - numel < 16: per element `at::normal_distribution<double>` (53-bit uniforms from two draws,
 *     `r = sqrt(-2 log1p(-u2))`, cos sample first, sin sample cached for the next element).
 * aarch64 builds (DEFAULT kernel, libm logf/sinf/cosf) give different last bits; we follow x86-64.
 * @module pipeline/rng
 */

import { InputError } from '../shared/errors.js';
import { LIMITS } from '../shared/limits.js';

const TWO_POW_32 = 2 ** 32;
const TWO_POW_M24 = 2 ** -24;
const TWO_POW_M52 = 2 ** -52;
const TWO_POW_M53 = 2 ** -53;

// The constants are exported for tests/test_twins.py, which holds them equal to builder/pipeline/rng.py's.

// ---------------------------------------------------------------------------------------------------
// MT19937 (aten/src/ATen/core/MT19937RNGEngine.h): the standard 32-bit Mersenne Twister.

export const MT_N = 624;
export const MT_M = 397;
export const MT_MATRIX_A = 0x9908b0df;

// Port of aten/src/ATen/core/MT19937RNGEngine.h (mt19937::init_with_uint32 + next/twist) @ torch 2.13
/**
 * Creates a MT19937 stream seeded like `torch.Generator().manual_seed(seed)`.
 * @param {number} seed Integer in [0, 2^32).
 * @returns {() => number} Next tempered 32-bit output as an unsigned number.
 */
function mt19937(seed) {
    const mt = new Uint32Array(MT_N);
    mt[0] = seed >>> 0;
    for (let i = 1; i < MT_N; i++) {
        const prev = mt[i - 1] ^ (mt[i - 1] >>> 30);
        mt[i] = Math.imul(1812433253, prev) + i;
    }
    let index = MT_N; // the first draw triggers a full twist

    function twist() {
        for (let i = 0; i < MT_N; i++) {
            const y = (mt[i] & 0x80000000) | (mt[(i + 1) % MT_N] & 0x7fffffff);
            mt[i] = mt[(i + MT_M) % MT_N] ^ (y >>> 1) ^ (y & 1 ? MT_MATRIX_A : 0);
        }
        index = 0;
    }

    return function next() {
        if (index >= MT_N) twist();
        let y = mt[index++];
        y ^= y >>> 11;
        y ^= (y << 7) & 0x9d2c5680;
        y ^= (y << 15) & 0xefc60000;
        y ^= y >>> 18;
        return y >>> 0;
    };
}

// ---------------------------------------------------------------------------------------------------
// Exact float32 arithmetic in JS doubles.

const f32 = Math.fround;

/**
 * Single-rounding float32 fused multiply-add `a*b + c` for float32 inputs.
 * The product of two float32 is exact in a double; the double sum `s` is then rounded once more to float32.
 * That second rounding can only be wrong when `s` lands exactly on a float32 midpoint while the exact sum
 * is not there (any other `s` is on the same side of every midpoint as the exact sum, midpoints being
 * doubles). In that case the TwoSum residual says which way the exact sum lies. That happens about once
 * in 2^28 operations, so tests/js/test_rng.mjs checks this function directly against exact arithmetic.
 * @param {number} a @param {number} b @param {number} c
 * @returns {number}
 */
export function fma32(a, b, c) {
    const p = a * b;
    const s = p + c;
    const r = f32(s);
    if (r === s) return r;
    const mirror = 2 * s - r; // the other float32 neighbour iff s is the midpoint between them
    if (f32(mirror) !== mirror) return r;
    const bb = s - p;
    const err = p - (s - bb) + (c - bb); // exact (p + c) - s
    if (err === 0) return r; // a true tie: round-half-even already done by fround
    // Move s off the midpoint toward the exact value, by far less than a float32 ulp.
    // |s| * 2^-52 is one or two double ulps: off the midpoint, far below half a float32 ulp.
    return f32(s + (err > 0 ? Math.abs(s) : -Math.abs(s)) * TWO_POW_M52);
}

// ---------------------------------------------------------------------------------------------------
// Cephes float polynomials of torch's avx_mathfun.h, with GCC's FMA contractions.

export const SQRTHF = f32(0.707106781186547524);
export const LOG_P = Object.freeze(
    [
        7.0376836292e-2, -1.151461031e-1, 1.167699874e-1, -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1,
        2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1,
    ].map(f32),
);
export const LOG_Q1 = f32(-2.1219444e-4);
export const LOG_Q2 = f32(0.693359375);

export const MINUS_DP1 = f32(-0.78515625);
export const MINUS_DP2 = f32(-2.4187564849853515625e-4);
export const MINUS_DP3 = f32(-3.77489497744594108e-8);
export const SINCOF_P0 = f32(-1.9515295891e-4);
export const SINCOF_P1 = f32(8.3321608736e-3);
export const SINCOF_P2 = f32(-1.6666654611e-1);
export const COSCOF_P0 = f32(2.443315711809948e-5);
export const COSCOF_P1 = f32(-1.388731625493765e-3);
export const COSCOF_P2 = f32(4.166664568298827e-2);
export const FOPI = f32(1.27323954473516); // 4 / pi
export const TWO_PI = f32(2 * Math.PI); // _mm256_set1_ps(2.0f * c10::pi<double>)

/**
 * Per-call scratch: a float32 slot viewed as its bits (the log takes the float apart), plus sin/cos out.
 * @typedef {{float: Float32Array, bits: Uint32Array, sincos: Float32Array}} Scratch
 * @returns {Scratch}
 */
function makeScratch() {
    const buffer = new ArrayBuffer(4);
    return { float: new Float32Array(buffer), bits: new Uint32Array(buffer), sincos: new Float32Array(2) };
}

// Port of aten/src/ATen/native/cpu/avx_mathfun.h log256_ps @ torch 2.13, with GCC's -ffp-contract=fast FMAs
/**
 * `log256_ps` for one lane; `x` is in (0, 1] here (u1 = 1 - u), so the NaN/denormal masks never fire.
 * @param {number} x float32
 * @param {Scratch} scratch
 * @returns {number} float32
 */
function logCephes(x, scratch) {
    scratch.float[0] = x;
    const bits = scratch.bits[0];
    let e = f32((bits >>> 23) - 0x7f + 1);
    scratch.bits[0] = (bits & ~0x7f800000) | 0x3f000000; // keep the mantissa, exponent of 0.5
    x = scratch.float[0];
    // if (x < SQRTHF) { e -= 1; x = x + x - 1 } else { x = x - 1 }
    const below = x < SQRTHF;
    const tmp = below ? x : 0;
    x = f32(x - 1);
    e = f32(e - (below ? 1 : 0));
    x = f32(x + tmp);

    const z = f32(x * x);
    let y = LOG_P[0];
    for (let k = 1; k < 9; k++) y = fma32(y, x, LOG_P[k]);
    y = f32(y * x);
    y = fma32(y, z, f32(e * LOG_Q1));
    y = fma32(z, -0.5, y);
    x = f32(x + y);
    return fma32(e, LOG_Q2, x);
}

// Port of aten/src/ATen/native/cpu/avx_mathfun.h sincos256_ps @ torch 2.13, with GCC's -ffp-contract=fast FMAs
/**
 * `sincos256_ps` for one lane (theta = 2*pi*u2 is in [0, 2*pi)).
 * @param {number} xIn float32
 * @param {Float32Array} out out[0] = sin, out[1] = cos
 */
function sincosCephes(xIn, out) {
    const signSin = xIn < 0 || Object.is(xIn, -0);
    let x = Math.abs(xIn);
    let j = Math.trunc(f32(x * FOPI)); // _mm256_cvttps_epi32
    j = (j + 1) & ~1;
    const y = j; // small integer: exact in float32
    const swapSignSin = (j & 4) !== 0;
    const polyMask = (j & 2) === 0;
    const signCos = (~(j - 2) & 4) !== 0;

    // "Extended precision modular arithmetic": x = ((x - y*DP1) - y*DP2) - y*DP3, contracted to FMAs.
    x = fma32(y, MINUS_DP1, x);
    x = fma32(y, MINUS_DP2, x);
    x = fma32(y, MINUS_DP3, x);

    const z = f32(x * x);
    let yc = fma32(fma32(COSCOF_P0, z, COSCOF_P1), z, COSCOF_P2);
    yc = f32(yc * z);
    yc = fma32(yc, z, -f32(z * 0.5));
    yc = f32(yc + 1);

    let ys = fma32(fma32(SINCOF_P0, z, SINCOF_P1), z, SINCOF_P2);
    ys = f32(ys * z);
    ys = fma32(ys, x, x);

    // Blend exactly like the and/andnot/sub/add sequence (it turns -0 into +0).
    const ysin2 = polyMask ? ys : 0;
    const ysin1 = polyMask ? 0 : yc;
    const sinv = f32(ysin1 + ysin2);
    const cosv = f32(f32(yc - ysin1) + f32(ys - ysin2));
    out[0] = signSin !== swapSignSin ? -sinv : sinv;
    out[1] = signCos ? -cosv : cosv;
}

// Port of aten/src/ATen/native/cpu/DistributionTemplates.h NormalFill16<float> (AVX2) @ torch 2.13
/**
 * `NormalFill16<float>` (AVX2): Box-Muller in place on data[off .. off+16), pairs (j, j+8).
 * @param {Float32Array} data
 * @param {number} off
 * @param {Scratch} scratch
 */
function normalFill16(data, off, scratch) {
    const sc = scratch.sincos;
    for (let j = 0; j < 8; j++) {
        const u1 = f32(1 - data[off + j]);
        const u2 = data[off + j + 8];
        const radius = f32(Math.sqrt(f32(-2 * logCephes(u1, scratch))));
        const theta = f32(TWO_PI * u2);
        sincosCephes(theta, sc);
        // _mm256_fmadd_ps(n, std = 1, mean = 0): n + 0, which only turns -0 into +0.
        data[off + j] = f32(radius * sc[1]) + 0;
        data[off + j + 8] = f32(radius * sc[0]) + 0;
    }
}

// Port of aten/src/ATen/core/DistributionsHelper.h normal_distribution<double> @ torch 2.13 (numel < 16 path)
/**
 * numel < 16: `at::normal_distribution<double>` per element, cast to float32.
 * @param {() => number} next
 * @param {number} numel
 * @returns {Float32Array}
 */
function normalDoublePath(next, numel) {
    const out = new Float32Array(numel);
    /** @type {number | null} */
    let cached = null;
    const uniform53 = () => {
        // random64() = (first << 32) | second, masked to 53 bits.
        const hi = next() & 0x1fffff;
        const lo = next();
        return (hi * TWO_POW_32 + lo) * TWO_POW_M53;
    };
    for (let i = 0; i < numel; i++) {
        if (cached !== null) {
            out[i] = cached + 0; // transformation::normal: sample * std + mean, std 1, mean 0
            cached = null;
            continue;
        }
        const u1 = uniform53();
        const u2 = uniform53();
        const r = Math.sqrt(-2 * Math.log1p(-u2));
        const theta = 2 * Math.PI * u1;
        cached = r * Math.sin(theta);
        out[i] = r * Math.cos(theta) + 0;
    }
    return out;
}

// Port of torch.randn(shape, generator=torch.Generator('cpu').manual_seed(seed)): aten normal_kernel @ torch 2.13
/**
 * Standard normal float32 noise, bit-exact with x86-64 CPU torch:
 * `torch.randn(shape, generator=torch.Generator('cpu').manual_seed(seed), dtype=torch.float32)`.
 * @param {number} seed Integer in [0, 2^32) (what the UI offers).
 * @param {number[]} shape Non-negative integer dimensions, e.g. [1, 128, H/16, W/16].
 * @returns {Float32Array} numel = product of shape, in row-major (C) order.
 */
export function torchRandn(seed, shape) {
    if (!Number.isInteger(seed) || seed < 0 || seed >= LIMITS.seedMax) {
        throw new InputError(
            `\`seed\` must be an integer in [0, 2^32) (0 to ${LIMITS.seedMax - 1}), got ${String(seed)}. ` +
                'Pick a whole number in that range (the Random button does).',
            { seed },
        );
    }
    if (!Array.isArray(shape) || !shape.every((d) => Number.isInteger(d) && d >= 0)) {
        throw new InputError(`\`shape\` must be an array of non-negative integers, got ${JSON.stringify(shape)}.`, {
            shape,
        });
    }
    const numel = shape.reduce((a, b) => a * b, 1);
    const next = mt19937(seed);
    if (numel < 16) return normalDoublePath(next, numel);

    const data = new Float32Array(numel);
    const scratch = makeScratch();
    for (let i = 0; i < numel; i++) data[i] = (next() & 0xffffff) * TWO_POW_M24;
    for (let i = 0; i + 16 <= numel; i += 16) normalFill16(data, i, scratch);
    if (numel % 16 !== 0) {
        // torch redraws 16 fresh uniforms for the tail and recomputes the last 16 slots.
        const off = numel - 16;
        for (let i = 0; i < 16; i++) data[off + i] = (next() & 0xffffff) * TWO_POW_M24;
        normalFill16(data, off, scratch);
    }
    return data;
}
