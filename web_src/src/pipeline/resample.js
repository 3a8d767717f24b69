// @ts-check
/**
 * @file Pillow's 8-bit image resizing and greyscale conversion, byte for byte, so the images the worker encodes
 * are the ones diffusers' image processors hand to the VAE: `Image.resize(size, LANCZOS)` on RGB and L images and
 * `Image.convert('L')` of an RGB image. Pure functions on interleaved bytes (RGB: 3 per pixel, L: 1).
 * Each pass rounds to 8 bits, so the order of the two passes matters: Pillow 13.0.0 runs the vertical one first
 * when the height shrinks by more than twice as many pixels as the width (tests/test_resample.py holds both orders
 * to Pillow's bytes).
 * @module pipeline/resample
 */

import { InputError } from '../shared/errors.js';

/**
 * 8 bits for the result, two for overflow and the sign of negative lobes (Resample.c PRECISION_BITS): the
 * coefficients are fixed-point with this many fraction bits.
 */
const PRECISION_BITS = 32 - 8 - 2;
const LANCZOS_SUPPORT = 3.0;

// Port of Pillow src/libImaging/Resample.c sinc_filter / lanczos_filter @ 13.0.0
/** @param {number} x */
function sinc(x) {
    if (x === 0.0) return 1.0;
    const px = x * Math.PI;
    return Math.sin(px) / px;
}

/** @param {number} x */
function lanczos(x) {
    // The truncated sinc.
    if (-3.0 <= x && x < 3.0) return sinc(x) * sinc(x / 3);
    return 0.0;
}

/**
 * @typedef {Object} Coefficients  Per output pixel: the first input pixel it reads, how many, and their weights.
 * @property {Int32Array} bounds  [outSize * 2]: xmin, count.
 * @property {Int32Array} kk      [outSize * ksize] fixed-point weights (normalize_coeffs_8bpc).
 * @property {number} ksize
 */

// Port of Pillow src/libImaging/Resample.c precompute_coeffs + normalize_coeffs_8bpc @ 13.0.0
/**
 * The filter weights of a 1-D resize of `inSize` pixels (the box [0, inSize]) to `outSize`. Double arithmetic
 * in C's order; C's (int) casts are truncations toward zero.
 * @param {number} inSize
 * @param {number} outSize
 * @returns {Coefficients}
 */
function precomputeCoeffs(inSize, outSize) {
    // The box comes in as C floats; integer sizes are exact in them.
    const in0 = 0;
    const in1 = inSize;
    const scale = (in1 - in0) / outSize;
    const filterscale = scale < 1.0 ? 1.0 : scale;
    const support = LANCZOS_SUPPORT * filterscale;
    const ksize = Math.ceil(support) * 2 + 1;
    const prekk = new Float64Array(outSize * ksize);
    const bounds = new Int32Array(outSize * 2);
    const invFilterscale = 1.0 / filterscale;
    for (let xx = 0; xx < outSize; xx++) {
        const center = in0 + (xx + 0.5) * scale;
        let ww = 0.0;
        let xmin = Math.trunc(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        let xmax = Math.trunc(center + support + 0.5);
        if (xmax > inSize) xmax = inSize;
        xmax -= xmin;
        const base = xx * ksize;
        for (let x = 0; x < xmax; x++) {
            const w = lanczos((x + xmin - center + 0.5) * invFilterscale);
            prekk[base + x] = w;
            ww += w;
        }
        if (ww !== 0.0) {
            for (let x = 0; x < xmax; x++) prekk[base + x] /= ww;
        }
        bounds[xx * 2] = xmin;
        bounds[xx * 2 + 1] = xmax;
    }
    const kk = new Int32Array(outSize * ksize);
    const one = 2 ** PRECISION_BITS;
    for (let i = 0; i < kk.length; i++) {
        const v = prekk[i];
        kk[i] = v < 0 ? Math.trunc(-0.5 + v * one) : Math.trunc(0.5 + v * one);
    }
    return { bounds, kk, ksize };
}

/**
 * clip8: the fixed-point sum back to a byte (an arithmetic shift, then Resample.c's lookup table, which clamps).
 * @param {number} sum  An int32 accumulator.
 * @returns {number}
 */
function clip8(sum) {
    const v = sum >> PRECISION_BITS;
    return v < 0 ? 0 : v > 255 ? 255 : v;
}

/**
 * @param {Uint8Array | Uint8ClampedArray} pixels
 * @param {number} width
 * @param {number} height
 * @param {number} channels
 */
function checkPixels(pixels, width, height, channels) {
    for (const [name, value] of Object.entries({ width, height })) {
        if (!Number.isInteger(value) || value < 1) {
            throw new InputError(`\`${name}\` must be a positive integer, got ${String(value)}.`, { [name]: value });
        }
    }
    if (pixels.length !== width * height * channels) {
        throw new InputError(
            `An image of ${width}x${height} with ${channels} channel(s) has ${width * height * channels} bytes, got ` +
                `${pixels.length}.`,
        );
    }
}

// Port of Pillow src/libImaging/Resample.c ImagingResampleInner + _ImagingResample{Horizontal,Vertical}_8bpc @ 13.0.0
/**
 * `Image.resize((outWidth, outHeight), Image.LANCZOS)` of an 8-bit image with 1 (L) or 3 (RGB) channels: a
 * horizontal pass over the rows the vertical pass reads, then the vertical pass (or the vertical pass first, when
 * the height shrinks by more than twice as many pixels as the width); a pass whose size is unchanged is skipped,
 * and an unchanged size is a copy.
 * @param {Uint8Array | Uint8ClampedArray} pixels  Interleaved, row-major.
 * @param {number} width
 * @param {number} height
 * @param {number} outWidth
 * @param {number} outHeight
 * @param {1 | 3} channels
 * @returns {Uint8Array}
 */
export function resizeLanczos(pixels, width, height, outWidth, outHeight, channels) {
    checkPixels(pixels, width, height, channels);
    checkPixels(new Uint8Array(outWidth * outHeight * channels), outWidth, outHeight, channels);
    const needHorizontal = outWidth !== width;
    const needVertical = outHeight !== height;
    /** @type {Uint8Array} */
    let src = Uint8Array.from(pixels);
    if (!needHorizontal && !needVertical) return src;
    const vert = precomputeCoeffs(height, outHeight);
    // Resample.c: "If height is being scaled down more than twice the amount the width is, run the vertical pass
    // first, to make the horizontal pass faster".
    const horizontalFirst = !(height - outHeight > 0 && height - outHeight > (width - outWidth) * 2);
    if (!horizontalFirst) {
        if (needVertical) src = verticalPass(src, width, outHeight, 0, vert, channels);
        if (needHorizontal)
            src = horizontalPass(src, width, outWidth, 0, outHeight, precomputeCoeffs(width, outWidth), channels);
        return src;
    }
    // The source rows the vertical pass reads: the horizontal pass only makes those.
    const yFirst = vert.bounds[0];
    const yLast = vert.bounds[outHeight * 2 - 2] + vert.bounds[outHeight * 2 - 1];
    let rowOffset = 0;
    if (needHorizontal) {
        src = horizontalPass(src, width, outWidth, yFirst, yLast - yFirst, precomputeCoeffs(width, outWidth), channels);
        // The vertical bounds now count from the first row made.
        rowOffset = yFirst;
    }
    if (!needVertical) return src;
    return verticalPass(src, needHorizontal ? outWidth : width, outHeight, rowOffset, vert, channels);
}

/** Rounding half of the fixed-point one, added before the shift (Resample.c's `1 << (PRECISION_BITS - 1)`). */
const HALF = 2 ** (PRECISION_BITS - 1);

// Port of Pillow src/libImaging/Resample.c _ImagingResampleHorizontal_8bpc @ 13.0.0
/**
 * Rows `firstRow .. firstRow + rows` of `src` (width `width`) resampled to width `outWidth`.
 * @param {Uint8Array} src
 * @param {number} width
 * @param {number} outWidth
 * @param {number} firstRow
 * @param {number} rows
 * @param {{bounds: Int32Array | number[], kk: Int32Array | number[], ksize: number}} coeffs
 * @param {number} channels
 * @returns {Uint8Array}
 */
function horizontalPass(src, width, outWidth, firstRow, rows, { bounds, kk, ksize }, channels) {
    const out = new Uint8Array(outWidth * rows * channels);
    for (let yy = 0; yy < rows; yy++) {
        const inRow = (yy + firstRow) * width * channels;
        const outRow = yy * outWidth * channels;
        for (let xx = 0; xx < outWidth; xx++) {
            const xmin = bounds[xx * 2];
            const count = bounds[xx * 2 + 1];
            const k = xx * ksize;
            for (let c = 0; c < channels; c++) {
                let ss = HALF;
                for (let x = 0; x < count; x++) ss += src[inRow + (x + xmin) * channels + c] * kk[k + x];
                out[outRow + xx * channels + c] = clip8(ss);
            }
        }
    }
    return out;
}

// Port of Pillow src/libImaging/Resample.c _ImagingResampleVertical_8bpc @ 13.0.0
/**
 * `src` (width `width`, its first row being source row `rowOffset`) resampled to height `outHeight`.
 * @param {Uint8Array} src
 * @param {number} width
 * @param {number} outHeight
 * @param {number} rowOffset
 * @param {{bounds: Int32Array | number[], kk: Int32Array | number[], ksize: number}} coeffs
 * @param {number} channels
 * @returns {Uint8Array}
 */
function verticalPass(src, width, outHeight, rowOffset, { bounds, kk, ksize }, channels) {
    const stride = width * channels;
    const out = new Uint8Array(stride * outHeight);
    for (let yy = 0; yy < outHeight; yy++) {
        const ymin = bounds[yy * 2] - rowOffset;
        const count = bounds[yy * 2 + 1];
        const k = yy * ksize;
        const outRow = yy * stride;
        for (let i = 0; i < stride; i++) {
            let ss = HALF;
            for (let y = 0; y < count; y++) ss += src[(y + ymin) * stride + i] * kk[k + y];
            out[outRow + i] = clip8(ss);
        }
    }
    return out;
}

// Port of Pillow src/libImaging/Convert.c rgb2l (L24) @ 13.0.0
/**
 * `Image.convert('L')` of an RGB image: ITU-R 601-2 luma in 16-bit fixed point, rounded.
 * @param {Uint8Array | Uint8ClampedArray} rgb  [H*W*3]
 * @returns {Uint8Array} [H*W]
 */
export function rgbToL(rgb) {
    if (rgb.length % 3 !== 0) throw new InputError(`RGB bytes come in threes, got ${rgb.length}.`);
    const out = new Uint8Array(rgb.length / 3);
    for (let p = 0; p < out.length; p++) {
        out[p] = (rgb[p * 3] * 19595 + rgb[p * 3 + 1] * 38470 + rgb[p * 3 + 2] * 7471 + 0x8000) >> 16;
    }
    return out;
}

/**
 * `Image.crop((left, top, left + outWidth, top + outHeight))`: pixels outside the image are zero (black), as
 * Pillow fills them.
 * @param {Uint8Array} pixels
 * @param {number} width
 * @param {number} height
 * @param {{left: number, top: number, width: number, height: number}} box
 * @param {1 | 3} channels
 * @returns {Uint8Array}
 */
export function crop(pixels, width, height, box, channels) {
    checkPixels(pixels, width, height, channels);
    const out = new Uint8Array(box.width * box.height * channels);
    for (let y = 0; y < box.height; y++) {
        const sy = y + box.top;
        if (sy < 0 || sy >= height) continue;
        for (let x = 0; x < box.width; x++) {
            const sx = x + box.left;
            if (sx < 0 || sx >= width) continue;
            for (let c = 0; c < channels; c++)
                out[(y * box.width + x) * channels + c] = pixels[(sy * width + sx) * channels + c];
        }
    }
    return out;
}
