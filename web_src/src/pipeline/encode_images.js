// @ts-check
/**
 * @file The input images of editing and inpainting, as generate() runs them: decoded and checked in stage 1
 * (checkInputImages: before any download, so unusable files or too many tokens cost nothing), then in stage 4
 * prepared as diffusers' image processors prepare them and VAE-encoded into the tokens every step sees
 * (encodeImages, cached per session by file and use), with inpainting's mask as one weight per latent token
 * (maskTokens). imageJobs says what stage 4 encodes; stage 2 asks it whether the VAE encoder is needed at all.
 * @module pipeline/encode_images
 */

import { InputError } from '../shared/errors.js';
import { inputImageSize } from '../shared/limits.js';
import { requireOutput } from '../shared/model_repo.js';
import { extensionText, maskSizeProblem, padImage, padMask, paddedProblem, paddedSize } from '../shared/outpaint.js';
import { assertFinite } from './image.js';
import {
    binaryMask,
    checkGreyMask,
    decodeImage,
    imageLabel,
    inpaintPixels,
    inpaintReferencePixels,
    referencePixels,
    referenceSizes,
    toPlanes,
} from './input_images.js';
import { LATENT_CHANNELS, PATCH, interpolateBilinear, packLatents, prepareImageIds } from './latents.js';

/** @typedef {import('./input_images.js').DecodedImage} DecodedImage */
/** @typedef {import('./input_images.js').Pixels} Pixels */
/** @typedef {import('../protocol.js').InputImageInfo} InputImageInfo */
/** @typedef {import('./stage_clock.js').RunContext} RunContext */

/**
 * @typedef {Object} InputPlan  Stage 1's view of the input images.
 * @property {'text' | 'edit' | 'inpaint'} mode
 * @property {DecodedImage[]} images  In request order (inpainting: the image to inpaint first).
 * @property {{width: number, height: number}[]} used  The size each is used at.
 * @property {DecodedImage | null} mask  Inpainting's mask as the pipeline uses it (outpainting: padded).
 * @property {boolean} maskGiven  Whether the request had a mask file (outpainting may have none).
 * @property {import('../shared/outpaint.js').Extension | null} extension  Outpainting: the pixels added.
 * @property {number | null} strength
 * @property {number} tokens  Conditioning tokens the images add to every step.
 */

/**
 * @typedef {Object} Conditioning  Stage 4's output.
 * @property {Float32Array} tokens  [1, n, C] the packed latents of every image, one after the other.
 * @property {BigInt64Array} ids    [n, 4] their rows (10 * (k + 1), y, x, 0).
 * @property {InputImageInfo[]} infos
 * @property {Float32Array | null} inpaintLatents  Inpainting: the image to inpaint, packed [1, H*W, C].
 */

/**
 * Stage 1 for the input images: each decoded and checked in turn (cancellable between them), the size each is
 * used at and the tokens they add. Inpainting's output size must be the used size of the image to inpaint.
 * @param {import('./check_inputs.js').ImageParams} fields  The request's image fields, as checkInputs checked them.
 * @param {{width: number, height: number}} params  The output size, as checkInputs checked it.
 * @param {AbortSignal} signal
 * @returns {Promise<InputPlan>}
 */
export async function checkInputImages({ mode, images, mask, strength, extension }, params, signal) {
    const none = { mask: null, maskGiven: false, extension: null, strength: null };
    if (mode === 'text') return { mode, images: [], used: [], ...none, tokens: 0 };
    /** @type {DecodedImage[]} */
    const decoded = [];
    for (const [i, image] of images.entries()) {
        signal.throwIfAborted();
        decoded.push(await decodeImage(image, imageLabel(mode, i, image.name)));
    }
    const references = mode === 'inpaint' ? decoded.slice(1) : decoded;
    const used = referenceSizes(mode, references);
    let decodedMask = null;
    if (mode === 'inpaint') {
        const source = decoded[0];
        // Outpainting: the output size is the padded image's used size.
        const problem = extension ? paddedProblem(extension, source.width, source.height, source.label) : null;
        if (problem) throw new InputError(problem, { extend: extension });
        const canvas = extension ? paddedSize(extension, source.width, source.height) : source;
        const { width, height } = inputImageSize(canvas.width, canvas.height);
        if (params.width !== width || params.height !== height) {
            throw new InputError(
                `Inpainting keeps the size of the image to inpaint: ${source.label} is ${canvas.width}x${canvas.height}` +
                    `${extension ? ' extended' : ''} and is used at ${width}x${height}, so \`width\` and \`height\` ` +
                    `must be ${width} and ${height} (got ${params.width}x${params.height}).`,
                { width: params.width, height: params.height, expected: { width, height } },
            );
        }
        used.unshift({ width, height });
        if (mask) {
            signal.throwIfAborted();
            decodedMask = await decodeImage(mask, `The mask (${mask.name})`, { mask: true });
            checkGreyMask(decodedMask);
        }
        if (extension) [decoded[0], decodedMask] = outpaintInputs(source, decodedMask, extension);
    }
    const tokens = used.reduce((sum, size) => sum + (size.width / PATCH) * (size.height / PATCH), 0);
    return { mode, images: decoded, used, mask: decodedMask, maskGiven: !!mask, extension, strength, tokens };
}

/**
 * Outpainting: the image to inpaint and the mask padded by `extension` (shared/outpaint.js's rule), as diffusers'
 * inpaint pipeline is then given them; one InputError when the padded image is beyond the limits or a given mask
 * is not the image's size. builder/pipeline/reference_request.py `outpaint_inputs` is its twin.
 * @param {DecodedImage} source
 * @param {DecodedImage | null} mask
 * @param {import('../shared/outpaint.js').Extension} extension
 * @returns {[DecodedImage, DecodedImage]}
 */
function outpaintInputs(source, mask, extension) {
    const { width, height } = source;
    const problem =
        paddedProblem(extension, width, height, source.label) ??
        (mask ? maskSizeProblem(width, height, mask.width, mask.height, mask.label) : null);
    if (problem) throw new InputError(problem, { extend: extension });
    const padded = padImage(source, extension);
    const paddedMask = padMask(mask?.rgb ?? null, width, height, extension);
    return [
        { ...source, ...padded },
        {
            name: mask?.name ?? 'outpaint mask',
            label: 'The outpainting mask',
            sha256: mask?.sha256 ?? '',
            ...paddedMask,
        },
    ];
}

/**
 * @typedef {Object} ImageJob  One input image to encode, and how its pixels are made.
 * @property {DecodedImage} image
 * @property {string} how  The preprocessing and the used size (part of the latents' cache key).
 * @property {() => Pixels} pixels
 */

/**
 * What an image's latents are cached under (Model.images): the file, and how it was made into pixels.
 * @param {ImageJob} job
 * @returns {string}
 */
export function latentsKey({ image, how }) {
    return `${image.sha256}|${how}`;
}

/**
 * What stage 4 encodes, in token order: editing's references; inpainting's image to inpaint, then its
 * references (several of them as one batch, see input_images.js inpaintReferencePixels).
 * @param {InputPlan} plan
 * @returns {ImageJob[]}
 */
export function imageJobs(plan) {
    const size = (/** @type {number} */ i) => `${plan.used[i].width}x${plan.used[i].height}`;
    if (plan.mode === 'edit') {
        return plan.images.map((image, i) => ({ image, how: `crop ${size(i)}`, pixels: () => referencePixels(image) }));
    }
    if (plan.mode !== 'inpaint') return [];
    const [source, ...references] = plan.images;
    const batch = references.length > 1 ? 'batch crop' : 'crop';
    /** @type {Pixels[] | null} */
    let prepared = null;
    return [
        {
            image: source,
            // The padded image keeps its file's hash: the extension is part of how its pixels were made.
            how: `resize ${size(0)}` + (plan.extension ? ` outpaint ${extensionText(plan.extension)}` : ''),
            pixels: () => inpaintPixels(source),
        },
        ...references.map((image, k) => ({
            image,
            how: `${batch} ${size(k + 1)}`,
            pixels: () => (prepared ??= inpaintReferencePixels(references))[k],
        })),
    ];
}

/**
 * Stage 4: each input image's pixels as diffusers' image processor makes them, then the VAE encoder ->
 * [1, 128, h, w] latents (cached per session by file hash and use), packed into tokens one image after the other.
 * Cancellable between images.
 * @param {InputPlan} plan
 * @param {RunContext} context
 * @returns {Promise<Conditioning>}
 */
export async function encodeImages(plan, { model, meter, signal }) {
    const { sessions, images } = model;
    const jobs = imageJobs(plan);
    /** @type {Float32Array[]} */
    const packed = [];
    /** @type {{height: number, width: number}[]} */
    const grids = [];
    /** @type {InputImageInfo[]} */
    const infos = [];
    for (const [i, job] of jobs.entries()) {
        signal.throwIfAborted();
        const { image, pixels } = job;
        const { width, height } = plan.used[i];
        let latents = images.get(latentsKey(job));
        const cached = latents !== undefined;
        if (!latents) {
            const made = pixels();
            const session = await sessions.session('vae_encoder', { meter, signal });
            const outputs = await sessions.run(
                session,
                { image: { data: toPlanes(made), dims: [1, 3, made.height, made.width] } },
                { meter, what: `The VAE encoder (${image.label})` },
            );
            latents = requireOutput(outputs, 'image_latents', 'VAE encoder'); // [1, 128, h, w]
            assertFinite(latents.data, `latents of ${image.label}`, 'vae_encoder');
            images.set(latentsKey(job), latents);
        }
        const grid = { height: height / PATCH, width: width / PATCH };
        packed.push(packLatents(latents.data, LATENT_CHANNELS, grid.height, grid.width));
        grids.push(grid);
        infos.push({
            name: image.name,
            sha256: image.sha256,
            width: image.width,
            height: image.height,
            usedWidth: width,
            usedHeight: height,
            tokens: grid.height * grid.width,
            cached,
        });
    }
    const tokens = new Float32Array(packed.reduce((sum, p) => sum + p.length, 0));
    let offset = 0;
    for (const p of packed) {
        tokens.set(p, offset);
        offset += p.length;
    }
    return { tokens, ids: prepareImageIds(grids), infos, inpaintLatents: plan.mode === 'inpaint' ? packed[0] : null };
}

/**
 * Inpainting's mask as one weight per latent token (Flux2KleinInpaintPipeline.prepare_mask_latents): binarised at
 * the output size, then bilinearly resized to the latent grid.
 * @param {DecodedImage} mask
 * @param {{width: number, height: number}} size  The output size.
 * @returns {{tokens: Float32Array, info: InputImageInfo}}  `tokens`: [H/16 * W/16], packed [1, seq, 1].
 */
export function maskTokens(mask, { width, height }) {
    const binary = binaryMask(mask, width, height);
    const tokens = interpolateBilinear(binary, height, width, height / PATCH, width / PATCH);
    return {
        tokens,
        info: {
            name: mask.name,
            sha256: mask.sha256,
            width: mask.width,
            height: mask.height,
            usedWidth: width,
            usedHeight: height,
            tokens: 0,
            cached: false,
        },
    };
}
