// @ts-check
/** @file pipeline/vae_tiles: the tiles cover the image, their weights sum to 1, a local decoder is unchanged by tiling. @module tests/js/test_vae_tiles */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { LATENT_CHANNELS, PATCH } from '../../web_src/src/pipeline/latents.js';
import {
    LEAN_VAE_TILE,
    VAE_TILE_OVERLAP,
    decodePlan,
    decodeTiles,
    describePlan,
    planTiles,
    vaeTileFor,
    vaeTileProblem,
} from '../../web_src/src/pipeline/vae_tiles.js';

/** Grids and tiles (tokens) with one tile, even strides, a shifted-back last tile reaching into the tile before
 * its neighbour (57 = 32 + 24 + 1), no overlap, and lean mode's tile at 1024^2 and 1536x640. */
const CASES = [
    { latentHeight: 4, latentWidth: 4, tile: 8, overlap: 4 },
    { latentHeight: 16, latentWidth: 16, tile: 8, overlap: 4 },
    { latentHeight: 57, latentWidth: 33, tile: 32, overlap: 8 },
    { latentHeight: 20, latentWidth: 13, tile: 6, overlap: 0 },
    { latentHeight: 64, latentWidth: 64, tile: LEAN_VAE_TILE / PATCH, overlap: VAE_TILE_OVERLAP / PATCH },
    { latentHeight: 40, latentWidth: 96, tile: LEAN_VAE_TILE / PATCH, overlap: VAE_TILE_OVERLAP / PATCH },
];

/**
 * Every pixel's summed weight along one axis, and how many tiles give it a weight above 0.
 * @param {import('../../web_src/src/pipeline/vae_tiles.js').AxisPlan} axis
 * @param {number} length  Tokens.
 */
function axisSums(axis, length) {
    const sums = new Float64Array(length * PATCH);
    const weighted = new Int32Array(length * PATCH);
    for (const [i, start] of axis.starts.entries()) {
        assert.equal(axis.weights[i].length, axis.size * PATCH);
        for (let j = 0; j < axis.size * PATCH; j++) {
            sums[start * PATCH + j] += axis.weights[i][j];
            if (axis.weights[i][j] > 0) weighted[start * PATCH + j]++;
        }
    }
    return { sums, weighted };
}

test('tiles are all the same size, inside the image, the last one ending at its edge', () => {
    for (const c of CASES) {
        const plan = planTiles(c);
        for (const [axis, length] of /** @type {const} */ ([
            [plan.rows, c.latentHeight],
            [plan.cols, c.latentWidth],
        ])) {
            assert.equal(axis.size, Math.min(c.tile, length), JSON.stringify(c));
            assert.equal(axis.starts[0], 0);
            assert.equal(axis.starts.at(-1), length - axis.size, JSON.stringify(c));
            for (let i = 1; i < axis.starts.length; i++) {
                // Ascending, and each tile shares at least `overlap` tokens with the one before.
                assert.ok(axis.starts[i] > axis.starts[i - 1], JSON.stringify(c));
                assert.ok(axis.starts[i - 1] + axis.size - axis.starts[i] >= c.overlap, JSON.stringify(c));
            }
        }
        assert.equal(plan.tileHeight, plan.rows.size);
        assert.equal(plan.tileWidth, plan.cols.size);
        assert.equal(plan.tiles.length, plan.rows.starts.length * plan.cols.starts.length);
    }
    // Lean mode at 1024^2: 2 x 2 tiles of 576^2 sharing 128 px.
    const lean = decodePlan({ width: 1024, height: 1024 }, LEAN_VAE_TILE);
    assert.deepEqual([lean.rows.starts, lean.cols.starts, lean.tileWidth, lean.tileHeight], [[0, 28], [0, 28], 36, 36]);
    assert.equal(describePlan(lean), '4 tiles of 576×576');
});

test('every pixel is covered and its weights sum to 1 (exactly along each axis)', () => {
    for (const c of CASES) {
        const plan = planTiles(c);
        const rows = axisSums(plan.rows, c.latentHeight);
        const cols = axisSums(plan.cols, c.latentWidth);
        for (const { sums, weighted } of [rows, cols]) {
            assert.ok(
                sums.every((s) => s === 1),
                `${JSON.stringify(c)}: ${[...sums].find((s) => s !== 1)}`,
            );
            // At most two tiles blend any pixel, even where the last tile reaches back past its neighbour.
            assert.ok(
                weighted.every((n) => n === 1 || n === 2),
                JSON.stringify(c),
            );
        }
        // Two-dimensional weights (products) sum to 1 within float64 rounding.
        const width = c.latentWidth * PATCH;
        const total = new Float64Array(c.latentHeight * PATCH * width);
        for (const { row, col } of plan.tiles) {
            const wy = plan.rows.weights[row];
            const wx = plan.cols.weights[col];
            for (let y = 0; y < wy.length; y++) {
                for (let x = 0; x < wx.length; x++)
                    total[(plan.rows.starts[row] * PATCH + y) * width + plan.cols.starts[col] * PATCH + x] +=
                        wy[y] * wx[x];
            }
        }
        assert.ok(
            total.every((s) => Math.abs(s - 1) < 1e-12),
            JSON.stringify(c),
        );
    }
});

test('the image edges keep full weight and a tile edge inside the image fades out', () => {
    const { rows } = planTiles({ latentHeight: 16, latentWidth: 16, tile: 8, overlap: 4 });
    assert.deepEqual(rows.starts, [0, 4, 8]);
    const last = rows.weights.length - 1;
    assert.equal(rows.weights[0][0], 1);
    assert.equal(rows.weights[last][rows.size * PATCH - 1], 1);
    // Overlaps of 64 px: a linear ramp from 0.5/64 at the tile's inner edge.
    assert.equal(rows.weights[0][rows.size * PATCH - 1], 0.5 / 64);
    assert.equal(rows.weights[1][0], 0.5 / 64);
    const ramp = rows.weights[1].subarray(0, 64);
    for (let j = 1; j < ramp.length; j++) assert.ok(ramp[j] > ramp[j - 1]);
    // No overlap: tiles meet without blending.
    const cut = planTiles({ latentHeight: 12, latentWidth: 1, tile: 6, overlap: 0 }).rows;
    assert.ok(cut.weights.every((w) => w.every((v) => v === 1)));
});

test('an image no larger than one tile is one tile: the whole image', () => {
    for (const [size, tile] of /** @type {const} */ ([
        [{ width: 64, height: 64 }, LEAN_VAE_TILE],
        [{ width: 576, height: 576 }, LEAN_VAE_TILE],
        [{ width: 2048, height: 1024 }, 0],
    ])) {
        const plan = decodePlan(size, tile);
        assert.equal(plan.tiles.length, 1);
        assert.deepEqual([plan.tileWidth * PATCH, plan.tileHeight * PATCH], [size.width, size.height]);
        assert.equal(describePlan(plan), 'whole image');
    }
    // Larger on one side only: tiles along that side, the image's full height.
    const wide = decodePlan({ width: 1024, height: 512 }, LEAN_VAE_TILE);
    assert.deepEqual([wide.tiles.length, wide.tileWidth, wide.tileHeight], [2, 36, 32]);
});

test('lean mode tiles unless the request says otherwise; fast mode decodes whole', () => {
    assert.equal(vaeTileFor({ memory: 'lean' }), LEAN_VAE_TILE);
    assert.equal(vaeTileFor({ memory: 'fast' }), 0);
    assert.equal(vaeTileFor({ memory: 'lean', vaeTile: 0 }), 0);
    assert.equal(vaeTileFor({ memory: 'fast', vaeTile: 128 }), 128);
});

test('bad tiles and grids are refused with a message that says what is wanted', () => {
    assert.throws(
        () => planTiles({ latentHeight: 16, latentWidth: 16, tile: 8, overlap: 8 }),
        /`overlap` \(8 tokens\) must be smaller than the `tile` \(8 tokens\)/,
    );
    assert.throws(
        () => planTiles({ latentHeight: 16, latentWidth: 16, tile: 0, overlap: 0 }),
        /`tile` must be an integer of at least 1/,
    );
    assert.throws(
        () => planTiles({ latentHeight: 0, latentWidth: 16, tile: 8, overlap: 2 }),
        /`latentHeight` must be an integer/,
    );
    assert.throws(
        () => planTiles({ latentHeight: 16, latentWidth: 16, tile: 8, overlap: -1 }),
        /`overlap` must be an integer of at least 0/,
    );
    assert.throws(
        () => planTiles({ latentHeight: 16, latentWidth: 2.5, tile: 8, overlap: 2 }),
        /`latentWidth` must be an integer/,
    );
    assert.throws(() => decodePlan({ width: 256, height: 256 }, 100), /multiple of 16/);
    for (const good of [0, 64, 128, LEAN_VAE_TILE, 2048]) assert.equal(vaeTileProblem(good), null);
    for (const bad of [100, 48, -16, 4096, 128.5, '128', null, true]) {
        assert.match(
            /** @type {string} */ (vaeTileProblem(bad)),
            /`vaeTile` must be 0 \(decode the whole image\) or a multiple of 16 from 64 to 2048/,
        );
    }
});

/**
 * A decoder in which each pixel depends only on its own token's latents and where in the token it lies, so
 * tiling cannot change its image: [1, C, h, w] -> [1, 3, 16h, 16w].
 * @param {Float32Array} latents
 * @param {number} h
 * @param {number} w
 */
function localDecoder(latents, h, w) {
    const out = new Float32Array(3 * h * PATCH * w * PATCH);
    const plane = h * PATCH * w * PATCH;
    for (let c = 0; c < 3; c++) {
        for (let y = 0; y < h * PATCH; y++) {
            for (let x = 0; x < w * PATCH; x++) {
                const token = Math.floor(y / PATCH) * w + Math.floor(x / PATCH);
                const v =
                    latents[c * h * w + token] +
                    0.25 * latents[(c + 3) * h * w + token] +
                    ((y % PATCH) * PATCH + (x % PATCH)) / 512;
                out[c * plane + y * w * PATCH + x] = 1 / (1 + Math.exp(-v));
            }
        }
    }
    return out;
}

/** @param {number} n */
function latentsOf(n) {
    const latents = new Float32Array(n);
    let s = 12345;
    for (let i = 0; i < n; i++) {
        s = (s * 1103515245 + 12345) % 2147483648;
        latents[i] = (s / 2147483648) * 4 - 2;
    }
    return latents;
}

test("decoding in tiles gives a local decoder's whole-image pixels, tile by tile", async () => {
    const [h, w] = [11, 7];
    const latents = latentsOf(LATENT_CHANNELS * h * w);
    const whole = localDecoder(latents, h, w);
    const plan = planTiles({ latentHeight: h, latentWidth: w, tile: 4, overlap: 2 });
    /** @type {number[]} */
    const seen = [];
    const tiled = await decodeTiles(latents, plan, async (tile, index) => {
        seen.push(index);
        assert.equal(tile.length, LATENT_CHANNELS * plan.tileHeight * plan.tileWidth);
        return localDecoder(tile, plan.tileHeight, plan.tileWidth);
    });
    assert.deepEqual(
        seen,
        plan.tiles.map((_, i) => i),
    );
    assert.equal(tiled.length, whole.length);
    let worst = 0;
    for (let i = 0; i < whole.length; i++) worst = Math.max(worst, Math.abs(tiled[i] - whole[i]));
    assert.ok(worst < 1e-6, `largest difference ${worst}`);
});

test('decoding in tiles stops between tiles when cancelled, and refuses a tile of the wrong size', async () => {
    const [h, w] = [8, 8];
    const latents = latentsOf(LATENT_CHANNELS * h * w);
    const plan = planTiles({ latentHeight: h, latentWidth: w, tile: 4, overlap: 2 });
    const controller = new AbortController();
    let calls = 0;
    await assert.rejects(
        decodeTiles(
            latents,
            plan,
            async (tile) => {
                calls++;
                controller.abort();
                return localDecoder(tile, plan.tileHeight, plan.tileWidth);
            },
            controller.signal,
        ),
        { name: 'AbortError' },
    );
    assert.equal(calls, 1);
    await assert.rejects(
        decodeTiles(latents, plan, async () => new Float32Array(10)),
        /gave 10 values for a 64x64 tile/,
    );
    await assert.rejects(
        decodeTiles(latents.subarray(1), plan, async (tile) => localDecoder(tile, 4, 4)),
        /`latents` has/,
    );
});
