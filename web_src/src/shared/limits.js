// @ts-check
/**
 * @file The input contract: the steps, sizes and seeds a generation accepts, checked by the page form before
 * anything is sent and again by the pipeline's checkInputs. The Python reference pipeline has a twin of this
 * table, and a test holds the two equal.
 * - steps: klein is distilled for 4; more than 50 only costs time.
 * - sizes: the VAE downsamples 8x and latents are packed in 2x2 patches, so one latent token is 16x16
 *   pixels; the converter splits attention for sides up to 2048 (builder/repo/attention.py MAX_IMAGE_SIDE).
 * - seeds: torch.Generator('cpu').manual_seed takes 32 bits, so seeds are in [0, seedMax).
 * @module shared/limits
 */

export const LIMITS = Object.freeze({stepsMin: 1, stepsMax: 50, sizeMin: 64, sizeMax: 2048, sizeMultiple: 16, seedMax: 4294967296});
