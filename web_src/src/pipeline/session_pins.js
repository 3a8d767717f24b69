// @ts-check
/**
 * @file How each session of a run is created (sessions.js Pin): every graph pinned to the dims it will run at, so
 * onnxruntime folds the shape arithmetic at creation; the transformer and the VAE decoder also capture their
 * kernels. generate() and loadSessions() create their sessions alike through these.
 * @module pipeline/session_pins
 */

import { PATCH } from './latents.js';
import { MAX_SEQUENCE_LENGTH } from './tokenizer.js';

/** @typedef {import('../models/sessions.js').Pin} Pin */

/** @type {Pin} The text encoder's one shape: a prompt padded to MAX_SEQUENCE_LENGTH. */
export const TEXT_ENCODER_PIN = Object.freeze({
    dims: Object.freeze({ batch: 1, seq: MAX_SEQUENCE_LENGTH }),
    capture: false,
});

/**
 * The transformer, run once per step at one shape: pinned to it and capturing its kernels.
 * @param {number} imageSeqLen
 * @returns {Pin}
 */
export function transformerPin(imageSeqLen) {
    return { dims: { img_seq: imageSeqLen, txt_seq: MAX_SEQUENCE_LENGTH }, capture: true };
}

/**
 * The VAE decoder, run at the size it decodes (the image, or each of its tiles: pipeline/vae_tiles.js): pinned
 * and capturing, so every later tile or image of that size replays its kernels. Uncaptured, onnxruntime's per-node host work (buffers of over 160 MB are
 * created anew on each run) takes longer than the GPU work at 1024^2 (docs/performance.md).
 * @param {{width: number, height: number}} size
 * @returns {Pin}
 */
export function vaeDecoderPin({ width, height }) {
    return { dims: { batch: 1, latent_h: height / PATCH, latent_w: width / PATCH }, capture: true };
}

/**
 * How the sessions of one run are created: every graph pinned to the dims it will run at (onnxruntime folds
 * the shape arithmetic at creation); the transformer and the VAE decoder also capture their kernels. The text
 * encoder always sees one prompt padded to MAX_SEQUENCE_LENGTH tokens.
 * @param {number} imageSeqLen
 * @param {{width: number, height: number}} size  What the VAE decoder decodes: the image, or one of its tiles.
 * @returns {{text_encoder: Pin, transformer: Pin, vae_decoder: Pin}}
 */
export function sessionPins(imageSeqLen, size) {
    return {
        text_encoder: TEXT_ENCODER_PIN,
        transformer: transformerPin(imageSeqLen),
        vae_decoder: vaeDecoderPin(size),
    };
}
