// @ts-check
/**
 * @file The lab's inputs, generated from a seed so that numpy reproduces them bit for bit
 * (builder/check/kernel_lab/prng.py): value i of a tensor is a 32-bit integer hash of (i + seed·0x9E3779B9). A
 * float input keeps the hash's top 10 bits as (k − 512) / 512 · scale + offset: a multiple of 2⁻⁹·scale, exact in
 * fp16 and fp32 for power-of-two scales, so both sides start from the same numbers whatever the dtype.
 * @module lab/prng
 */

/**
 * @param {number} x  A 32-bit unsigned integer.
 * @returns {number}
 */
export function hash32(x) {
    x = (x ^ (x >>> 16)) >>> 0;
    x = Math.imul(x, 0x7feb352d) >>> 0;
    x = (x ^ (x >>> 15)) >>> 0;
    x = Math.imul(x, 0x846ca68b) >>> 0;
    return (x ^ (x >>> 16)) >>> 0;
}

/**
 * `count` raw 32-bit words.
 * @param {number} seed
 * @param {number} count
 * @returns {Uint32Array}
 */
export function randomWords(seed, count) {
    const out = new Uint32Array(count);
    const base = Math.imul(seed >>> 0, 0x9e3779b9) >>> 0;
    for (let i = 0; i < count; i++) out[i] = hash32((base + i) >>> 0);
    return out;
}

/**
 * `count` floats on the grid described above.
 * @param {number} seed
 * @param {number} count
 * @param {{scale?: number, offset?: number}} [options]
 * @returns {Float32Array}
 */
export function randomFloats(seed, count, { scale = 1, offset = 0 } = {}) {
    const out = new Float32Array(count);
    const base = Math.imul(seed >>> 0, 0x9e3779b9) >>> 0;
    const step = scale / 512;
    for (let i = 0; i < count; i++) out[i] = ((hash32((base + i) >>> 0) >>> 22) - 512) * step + offset;
    return out;
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/**
 * IEEE half-precision bits of each value, rounded to nearest even (the lab's inputs are exact in fp16).
 * @param {Float32Array} values
 * @returns {Uint16Array}
 */
export function toHalfBits(values) {
    const out = new Uint16Array(values.length);
    for (let i = 0; i < values.length; i++) {
        f32[0] = values[i];
        const x = u32[0];
        const sign = (x >>> 16) & 0x8000;
        const exponent = (x >>> 23) & 0xff;
        let mantissa = x & 0x7fffff;
        if (exponent === 0xff) {
            out[i] = sign | 0x7c00 | (mantissa ? 0x200 : 0);
            continue;
        }
        let e = exponent - 127 + 15;
        if (e >= 0x1f) {
            out[i] = sign | 0x7c00;
            continue;
        }
        if (e <= 0) {
            if (e < -10) {
                out[i] = sign;
                continue;
            }
            mantissa |= 0x800000;
            const shift = 14 - e;
            let half = mantissa >>> shift;
            const rest = mantissa & ((1 << shift) - 1);
            const halfway = 1 << (shift - 1);
            if (rest > halfway || (rest === halfway && half & 1)) half += 1;
            out[i] = sign | half;
            continue;
        }
        let half = (e << 10) | (mantissa >>> 13);
        const rest = mantissa & 0x1fff;
        if (rest > 0x1000 || (rest === 0x1000 && half & 1)) half += 1;
        out[i] = sign | half;
    }
    return out;
}
