// @ts-check
/**
 * @file Decoding the VAE in tiles, so that its peak GPU memory follows the tile's size rather than the image's
 * (lean memory mode, docs/machines.md). Pure: node tests it.
 * - planTiles: equal-size tiles over the latent grid (one session pinned to the tile's dims, its kernels
 *   captured, decodes them all); along each axis they start one stride (tile - overlap) apart and the last one is
 *   shifted back to end at the image's edge rather than shrunk. Each axis is cut into blend regions (where two
 *   tiles overlap, a linear ramp from one to the other) and regions one tile owns, so that every pixel's weights
 *   sum to 1 along each axis, and a tile's weight is the product of its two axes' weights.
 * - decodeTiles: slices each tile's latents, decodes it (a callback runs the session) and accumulates the weighted
 *   pixels.
 * An image no larger than one tile is one tile, decoded whole as without tiling.
 * Units: latent tokens (1 token = PATCH x PATCH pixels) for the plan, pixels for the weights.
 * @module pipeline/vae_tiles
 */

import { InputError } from '../shared/errors.js';
import { LIMITS } from '../shared/limits.js';
import { LATENT_CHANNELS, PATCH } from './latents.js';

/** The tile lean mode decodes in (pixels): 2 x 2 tiles at 1024^2, each a third of that image's area. */
export const LEAN_VAE_TILE = 576;
/** Pixels two neighbouring tiles share (at most half the tile): the ramp hides the tiles' edges. */
export const VAE_TILE_OVERLAP = 128;

/**
 * @typedef {Object} AxisPlan  The tiles along one axis.
 * @property {number} size  Every tile's size along this axis (tokens).
 * @property {number[]} starts  Each tile's first token, ascending.
 * @property {Float64Array[]} weights  Each tile's weight per pixel of its span (size * PATCH values).
 */

/**
 * @typedef {Object} TilePlan
 * @property {number} latentHeight  The whole latent grid (tokens).
 * @property {number} latentWidth
 * @property {number} tileHeight  Every tile's latent dims (tokens).
 * @property {number} tileWidth
 * @property {AxisPlan} rows
 * @property {AxisPlan} cols
 * @property {{row: number, col: number}[]} tiles  Row-major: indices into rows and cols.
 */

/**
 * @param {Record<string, unknown>} values
 * @param {number} min
 */
function checkIntegers(values, min) {
    for (const [name, value] of Object.entries(values)) {
        if (!Number.isInteger(value) || /** @type {number} */ (value) < min) {
            throw new InputError(`\`${name}\` must be an integer of at least ${min}, got ${String(value)}.`, {
                [name]: value,
            });
        }
    }
}

/**
 * The tiles along one axis of `length` tokens, `tile` long, neighbours sharing at least `overlap` tokens.
 * @param {number} length
 * @param {number} tile
 * @param {number} overlap
 * @returns {AxisPlan}
 */
function planAxis(length, tile, overlap) {
    if (length <= tile) return { size: length, starts: [0], weights: [new Float64Array(length * PATCH).fill(1)] };
    const starts = [];
    for (let start = 0; ; start += tile - overlap) {
        if (start + tile >= length) {
            starts.push(length - tile);
            break;
        }
        starts.push(start);
    }
    const ends = starts.map((start) => start + tile);
    // Blend region i (pixels) joins tile i to tile i+1: their overlap, less any part an earlier region holds
    // (the shifted-back last tile may reach into the tile before its neighbour).
    const blends = starts
        .slice(1)
        .map((next, i) => ({ from: Math.max(next, i > 0 ? ends[i - 1] : 0) * PATCH, to: ends[i] * PATCH }));
    /** The weight tile i+1 takes in blend region i at pixel p; tile i takes 1 minus it, so the two sum to 1. */
    const ramp = (/** @type {number} */ i, /** @type {number} */ p) =>
        (p - blends[i].from + 0.5) / (blends[i].to - blends[i].from);
    const weights = starts.map((start, i) => {
        const w = new Float64Array(tile * PATCH);
        for (let j = 0; j < w.length; j++) {
            const p = start * PATCH + j;
            if (i > 0 && p >= blends[i - 1].from && p < blends[i - 1].to) w[j] = ramp(i - 1, p);
            else if (i < blends.length && p >= blends[i].from) w[j] = 1 - ramp(i, p);
            else if (i > 0 && p < blends[i - 1].from)
                w[j] = 0; // an earlier tile's region
            else w[j] = 1;
        }
        return w;
    });
    return { size: tile, starts, weights };
}

/**
 * Equal-size tiles over a latent grid.
 * @param {{latentHeight: number, latentWidth: number, tile: number, overlap: number}} options  All in tokens;
 *   `overlap` below `tile`.
 * @returns {TilePlan}
 */
export function planTiles({ latentHeight, latentWidth, tile, overlap }) {
    checkIntegers({ latentHeight, latentWidth, tile }, 1);
    checkIntegers({ overlap }, 0);
    if (overlap >= tile) {
        throw new InputError(
            `The tiles' \`overlap\` (${overlap} tokens) must be smaller than the \`tile\` (${tile} tokens).`,
            { overlap, tile },
        );
    }
    const rows = planAxis(latentHeight, tile, overlap);
    const cols = planAxis(latentWidth, tile, overlap);
    const tiles = rows.starts.flatMap((_, row) => cols.starts.map((__, col) => ({ row, col })));
    return { latentHeight, latentWidth, tileHeight: rows.size, tileWidth: cols.size, rows, cols, tiles };
}

/**
 * The tile a run decodes in (pixels; 0: the whole image): the request's `vaeTile`, else lean mode's tile, else
 * none (fast mode decodes the whole image).
 * @param {{vaeTile?: number, memory: 'fast' | 'lean'}} options
 * @returns {number}
 */
export function vaeTileFor({ vaeTile, memory }) {
    if (vaeTile !== undefined) return vaeTile;
    return memory === 'lean' ? LEAN_VAE_TILE : 0;
}

/**
 * The tiles a width x height image decodes in with `tile`-pixel tiles (0: one tile, the whole image), the
 * neighbours sharing VAE_TILE_OVERLAP pixels or half a smaller tile.
 * @param {{width: number, height: number}} size  Multiples of PATCH.
 * @param {number} tile  Pixels: 0, or a multiple of PATCH.
 * @returns {TilePlan}
 */
export function decodePlan({ width, height }, tile) {
    const latentHeight = height / PATCH;
    const latentWidth = width / PATCH;
    if (tile === 0)
        return planTiles({ latentHeight, latentWidth, tile: Math.max(latentHeight, latentWidth), overlap: 0 });
    if (!Number.isInteger(tile / PATCH) || tile < 0) {
        throw new InputError(`The VAE tile must be 0 or a multiple of ${PATCH} pixels, got ${String(tile)}.`, { tile });
    }
    const tokens = tile / PATCH;
    return planTiles({
        latentHeight,
        latentWidth,
        tile: tokens,
        overlap: Math.min(VAE_TILE_OVERLAP / PATCH, Math.floor(tokens / 2)),
    });
}

/**
 * The pixel size the VAE decoder's session decodes at: one tile.
 * @param {TilePlan} plan
 * @returns {{width: number, height: number}}
 */
export function tileSize(plan) {
    return { width: plan.tileWidth * PATCH, height: plan.tileHeight * PATCH };
}

/**
 * How a plan decodes, for the timings panel: 'whole image' or e.g. '4 tiles of 576×576'.
 * @param {TilePlan} plan
 * @returns {string}
 */
export function describePlan(plan) {
    if (plan.tiles.length === 1) return 'whole image';
    return `${plan.tiles.length} tiles of ${plan.tileWidth * PATCH}×${plan.tileHeight * PATCH}`;
}

/**
 * Why `vaeTile` (GenerateParams) is not a tile size, or null when it is.
 * @param {unknown} vaeTile
 * @returns {string | null}
 */
export function vaeTileProblem(vaeTile) {
    const { sizeMin, sizeMax, sizeMultiple } = LIMITS;
    if (vaeTile === 0) return null;
    if (
        Number.isInteger(vaeTile) &&
        /** @type {number} */ (vaeTile) % sizeMultiple === 0 &&
        /** @type {number} */ (vaeTile) >= sizeMin &&
        /** @type {number} */ (vaeTile) <= sizeMax
    )
        return null;
    return (
        `\`vaeTile\` must be 0 (decode the whole image) or a multiple of ${sizeMultiple} from ${sizeMin} to ${sizeMax} ` +
        `(the VAE tile's side in pixels), got ${JSON.stringify(vaeTile)}.`
    );
}

/**
 * Decode a latent grid tile by tile: each tile's latents are sliced out, decoded by `decodeTile`, and its pixels
 * added to the image with the plan's weights. Cancellable between tiles.
 * @param {Float32Array} latents  [1, LATENT_CHANNELS, latentHeight, latentWidth]
 * @param {TilePlan} plan  Of more than one tile (one tile is the whole image: decode it directly).
 * @param {(tileLatents: Float32Array, index: number) => Promise<Float32Array>} decodeTile  Latents
 *   [1, LATENT_CHANNELS, tileHeight, tileWidth] -> image [1, 3, tileHeight * PATCH, tileWidth * PATCH].
 * @param {AbortSignal} [signal]
 * @returns {Promise<Float32Array>}  [1, 3, latentHeight * PATCH, latentWidth * PATCH]
 */
export async function decodeTiles(latents, plan, decodeTile, signal) {
    const { latentHeight, latentWidth, tileHeight, tileWidth, rows, cols } = plan;
    if (latents.length !== LATENT_CHANNELS * latentHeight * latentWidth) {
        throw new InputError(
            `\`latents\` has ${latents.length} values but the plan's grid needs ${LATENT_CHANNELS * latentHeight * latentWidth}.`,
        );
    }
    const width = latentWidth * PATCH;
    const plane = latentHeight * PATCH * width;
    const image = new Float32Array(3 * plane);
    const tileLatents = new Float32Array(LATENT_CHANNELS * tileHeight * tileWidth);
    const pixelsHigh = tileHeight * PATCH;
    const pixelsWide = tileWidth * PATCH;
    const tilePlane = pixelsHigh * pixelsWide;
    for (const [index, { row, col }] of plan.tiles.entries()) {
        signal?.throwIfAborted();
        const top = rows.starts[row];
        const left = cols.starts[col];
        for (let c = 0; c < LATENT_CHANNELS; c++) {
            for (let y = 0; y < tileHeight; y++) {
                const from = (c * latentHeight + top + y) * latentWidth + left;
                tileLatents.set(latents.subarray(from, from + tileWidth), (c * tileHeight + y) * tileWidth);
            }
        }
        const pixels = await decodeTile(tileLatents, index);
        if (pixels.length !== 3 * tilePlane) {
            throw new Error(
                `The VAE decoder gave ${pixels.length} values for a ${pixelsWide}x${pixelsHigh} tile (${3 * tilePlane} expected).`,
            );
        }
        const wy = rows.weights[row];
        const wx = cols.weights[col];
        for (let y = 0; y < pixelsHigh; y++) {
            if (wy[y] === 0) continue;
            for (let c = 0; c < 3; c++) {
                const out = c * plane + (top * PATCH + y) * width + left * PATCH;
                const src = c * tilePlane + y * pixelsWide;
                for (let x = 0; x < pixelsWide; x++) image[out + x] += wy[y] * wx[x] * pixels[src + x];
            }
        }
    }
    return image;
}
