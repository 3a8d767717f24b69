// @ts-check
/**
 * @file Stage 8 of generate(), Decode: the denoised tokens through the VAE decoder into the page's RGBA bytes.
 * builder/pipeline/reference_stages.py decode is its twin.
 * @module pipeline/decode
 */

import { checkImage, toRgba } from './image.js';
import { requireOutput } from '../shared/model_repo.js';
import { LATENT_CHANNELS, PATCH, unpackLatents } from './latents.js';
import { vaeDecoderPin } from './session_pins.js';
import { decodeTiles, tileSize } from './vae_tiles.js';

/** @typedef {import('./stage_clock.js').RunContext} RunContext */
/** @typedef {import('./vae_tiles.js').TilePlan} TilePlan */

/**
 * Stage 8: unpack the tokens, then the VAE decoder (its graph holds the BN de-normalisation, the unpatchify
 * and (x/2+0.5).clamp), on the whole image or tile by tile (pipeline/vae_tiles.js), then RGBA bytes for the page.
 * @param {Float32Array} denoised  [1, H*W, C]
 * @param {TilePlan} tiles
 * @param {RunContext} context
 * @returns {Promise<Uint8ClampedArray>}
 */
export async function decode(denoised, tiles, { model, meter, signal }) {
    const { sessions } = model;
    const { latentHeight, latentWidth, tileHeight, tileWidth } = tiles;
    const latents = unpackLatents(denoised, LATENT_CHANNELS, latentHeight, latentWidth); // [1, H*W, C] -> [1, C, H, W]
    const vae = await sessions.session('vae_decoder', { meter, signal, pin: vaeDecoderPin(tileSize(tiles)) });
    const run = async (/** @type {Float32Array} */ data, /** @type {string} */ what) => {
        const outputs = await sessions.run(
            vae,
            { latents: { data, dims: [1, LATENT_CHANNELS, tileHeight, tileWidth] } },
            { meter, what },
        );
        return requireOutput(outputs, 'image', 'VAE decoder').data; // [1, 3, H, W] RGB in [0, 1]
    };
    const decoded =
        tiles.tiles.length === 1
            ? await run(latents, 'The VAE decoder')
            : await decodeTiles(
                  latents,
                  tiles,
                  (data, i) => run(data, `The VAE decoder (tile ${i + 1} of ${tiles.tiles.length})`),
                  signal,
              );
    checkImage(decoded);
    return toRgba(decoded, latentWidth * PATCH, latentHeight * PATCH);
}
