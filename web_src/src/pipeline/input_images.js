// @ts-check
/**
 * @file The input images of editing and inpainting, from the files the user gave to the pixels the VAE encoder
 * sees, as diffusers' image processors make them from what `load_image(file)` reads:
 * - checkImageParams: the request's `images` / `mask` / `strength` fields, before anything is decoded;
 * - decodeImage: file bytes -> RGB bytes (shared/decode_image.js: the pixels the CPU reference reads), its size
 *   checked (shared/limits.js) and its SHA-256; decodeRequest: the same for the protocol's `decode` request;
 * - referencePixels / inpaintPixels / inpaintReferencePixels / maskTokens: each mode's resizing and cropping,
 *   Pillow-exact (pipeline/resample.js);
 * - toPlanes: RGB bytes -> the encoder's [1, 3, H, W] float32 in [0, 1].
 * @module pipeline/input_images
 */

import { hex } from '../shared/bytes.js';
import { decodeImageFile } from '../shared/decode_image.js';
import { ImageRefusal, ImageTooLarge } from '../shared/image_file.js';
import { InputError } from '../shared/errors.js';
import { LIMITS, imageDimensionsProblem, inputImageSize } from '../shared/limits.js';
import { checkExtension, isExtended } from '../shared/outpaint.js';
import { crop, resizeLanczos, rgbToL } from './resample.js';

const f32 = Math.fround;

/** diffusers' inpainting strength default (Flux2KleinInpaintPipeline.__call__; shared/limits.js). */
export const DEFAULT_STRENGTH = LIMITS.strengthDefault;

/**
 * @typedef {Object} DecodedImage
 * @property {string} name    The file name the user gave.
 * @property {string} label   How messages name it, e.g. 'Reference 2 (cat.png)'.
 * @property {string} sha256  Hex digest of the file's bytes.
 * @property {number} width
 * @property {number} height
 * @property {Uint8Array} rgb  [H*W*3]
 */

/**
 * @typedef {Object} Pixels  An image at the size it is used.
 * @property {number} width
 * @property {number} height
 * @property {Uint8Array} rgb
 */

/**
 * How messages name input image `index` of a request.
 * @param {'edit' | 'inpaint'} mode
 * @param {number} index  Into `images`.
 * @param {string} name
 * @returns {string}
 */
export function imageLabel(mode, index, name) {
    if (mode === 'inpaint') return index === 0 ? `The image to inpaint (${name})` : `Reference ${index} (${name})`;
    return `Reference ${index + 1} (${name})`;
}

/**
 * @param {any} input
 * @param {string} field  e.g. '`images[1]`'
 * @returns {import('../protocol.js').ImageInput}
 */
function checkImageInput(input, field) {
    if (
        !input ||
        typeof input !== 'object' ||
        typeof input.name !== 'string' ||
        !(input.bytes instanceof ArrayBuffer)
    ) {
        throw new InputError(
            `${field} must be {name: string, bytes: ArrayBuffer} (the image file as the user gave it).`,
        );
    }
    const { imageFileBytesMax } = LIMITS;
    if (input.bytes.byteLength > imageFileBytesMax) {
        throw new InputError(
            `${field} (${input.name}) is a ${(input.bytes.byteLength / 2 ** 20).toFixed(1)} MiB file, more than the ` +
                `${imageFileBytesMax / 2 ** 20} MiB an input image may have; save it smaller first.`,
            { bytes: input.bytes.byteLength, limit: imageFileBytesMax },
        );
    }
    return { name: input.name, bytes: input.bytes };
}

/**
 * The mode a request asks for and its image fields checked (the files themselves are checked by decodeImage).
 * Inpainting is asked for by a mask, or by an extension that adds pixels (outpainting: the mask is optional).
 * @param {{images?: any, mask?: any, strength?: any, extend?: any}} params
 * @returns {{mode: 'text' | 'edit' | 'inpaint', images: import('../protocol.js').ImageInput[],
 *   mask: import('../protocol.js').ImageInput | null, strength: number | null,
 *   extension: import('../shared/outpaint.js').Extension | null}}
 */
export function checkImageParams({ images, mask, strength, extend }) {
    if (images !== undefined && images !== null && !Array.isArray(images)) {
        throw new InputError(`\`images\` must be a list of images, got ${typeof images}.`);
    }
    const list = (images ?? []).map((/** @type {any} */ image, /** @type {number} */ i) =>
        checkImageInput(image, `\`images[${i}]\``),
    );
    const given = extend === undefined || extend === null ? null : checkExtension(extend);
    const extension = isExtended(given) ? given : null;
    const noMask = mask === undefined || mask === null;
    if (noMask && !extension) {
        if (list.length === 0) return { mode: 'text', images: [], mask: null, strength: null, extension: null };
        if (list.length > LIMITS.referencesMax) {
            throw new InputError(
                `Editing takes at most ${LIMITS.referencesMax} reference images, got ${list.length}; leave some out.`,
                { images: list.length },
            );
        }
        return { mode: 'edit', images: list, mask: null, strength: null, extension: null };
    }
    if (list.length === 0) {
        throw new InputError('Inpainting needs the image to inpaint as `images[0]` besides the `mask`.');
    }
    if (list.length - 1 > LIMITS.referencesMax) {
        throw new InputError(
            `Inpainting takes the image to inpaint and at most ${LIMITS.referencesMax} references, got ` +
                `${list.length - 1} references; leave some out.`,
            { images: list.length },
        );
    }
    const value = strength ?? DEFAULT_STRENGTH;
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > 1) {
        throw new InputError(`\`strength\` must be a number from 0 to 1, got ${JSON.stringify(strength)}; try 0.8.`, {
            strength,
        });
    }
    return {
        mode: 'inpaint',
        images: list,
        mask: noMask ? null : checkImageInput(mask, '`mask`'),
        strength: value,
        extension,
    };
}

/**
 * @param {ArrayBuffer} bytes
 * @returns {Promise<string>}
 */
async function sha256Hex(bytes) {
    return hex(await crypto.subtle.digest('SHA-256', bytes));
}

/**
 * Decode one input file to upright RGB bytes as the CPU reference reads it (shared/decode_image.js, the contract
 * of docs/editing.md), then check its size. A refused file is one InputError: the label and the reason.
 * @param {import('../protocol.js').ImageInput} input
 * @param {string} label
 * @param {{mask?: boolean}} [options]  A mask: any size of at least one pixel.
 * @returns {Promise<DecodedImage>}
 */
export async function decodeImage(input, label, { mask = false } = {}) {
    /** @type {import('../shared/image_file.js').Rgb} */
    let decoded;
    try {
        decoded = await decodeImageFile(input.bytes);
    } catch (err) {
        if (err instanceof ImageTooLarge) {
            const { width, height } = err;
            throw new InputError(imageDimensionsProblem(width, height, label) ?? label, {
                name: input.name,
                width,
                height,
            });
        }
        if (!(err instanceof ImageRefusal)) throw err;
        throw new InputError(`${label} ${err.message}`, { name: input.name, reason: err.reason, decoder: err.detail });
    }
    const { width, height, rgb } = decoded;
    // A mask may have any size (it is resized to the image), within the pixel limit.
    const problem =
        mask && width * height <= LIMITS.imagePixelsMax ? null : imageDimensionsProblem(width, height, label);
    if (problem) throw new InputError(problem, { name: input.name, width, height });
    return { name: input.name, label, sha256: await sha256Hex(input.bytes), width, height, rgb };
}

/**
 * One input file as `generate` reads it, for the protocol's `decode` request: an image (`role` 'image') or a mask
 * (`role` 'mask', greyscale only), decoded and checked, its RGB bytes returned.
 * @param {any} params  {image: ImageInput, role: 'image' | 'mask'}
 * @returns {Promise<import('../protocol.js').DecodeResult>}
 */
export async function decodeRequest(params) {
    const role = params?.role;
    if (role !== 'image' && role !== 'mask')
        throw new InputError(`\`role\` must be 'image' or 'mask', got ${JSON.stringify(role)}.`);
    const input = checkImageInput(params?.image, '`image`');
    const label = role === 'mask' ? `The mask (${input.name})` : `The image (${input.name})`;
    const image = await decodeImage(input, label, { mask: role === 'mask' });
    if (role === 'mask') checkGreyMask(image);
    return { width: image.width, height: image.height, rgb: image.rgb, sha256: image.sha256 };
}

/**
 * Refuse a coloured mask: diffusers reduces it to luma (convert('L')), which would repaint what the user did not
 * mean; greyscale files decode with equal R, G and B. The CPU reference (builder/pipeline/inputs.py) refuses it too.
 * @param {DecodedImage} mask
 */
export function checkGreyMask(mask) {
    const { rgb } = mask;
    for (let p = 0; p < rgb.length; p += 3) {
        if (rgb[p] !== rgb[p + 1] || rgb[p + 1] !== rgb[p + 2]) {
            throw new InputError(
                `${mask.label} has coloured pixels; a mask must be greyscale (white repaints, black keeps).`,
                {
                    name: mask.name,
                },
            );
        }
    }
}

// Port of diffusers.pipelines.flux2.image_processor.Flux2ImageProcessor._resize_if_exceeds_area @ 0.42.1
/**
 * An image larger than LIMITS.imageAreaMax scaled down to about that area (LANCZOS), else itself.
 * @param {Pixels} image
 * @returns {Pixels}
 */
function resizeIfExceedsArea({ width, height, rgb }) {
    if (width * height <= LIMITS.imageAreaMax) return { width, height, rgb };
    const scale = Math.sqrt(LIMITS.imageAreaMax / (width * height));
    const w = Math.trunc(width * scale);
    const h = Math.trunc(height * scale);
    return { width: w, height: h, rgb: resizeLanczos(rgb, width, height, w, h, 3) };
}

/** @param {number} side */
const floorToMultiple = (side) => Math.floor(side / LIMITS.sizeMultiple) * LIMITS.sizeMultiple;

// Port of diffusers.pipelines.flux2.image_processor.Flux2ImageProcessor._resize_and_crop @ 0.42.1
/**
 * The centre `width` x `height` of an image (zero-filled where the image is smaller, as PIL's crop does).
 * @param {Pixels} image
 * @param {number} width
 * @param {number} height
 * @returns {Pixels}
 */
function centreCrop(image, width, height) {
    const left = Math.floor((image.width - width) / 2);
    const top = Math.floor((image.height - height) / 2);
    return { width, height, rgb: crop(image.rgb, image.width, image.height, { left, top, width, height }, 3) };
}

// Port of diffusers.pipelines.flux2.pipeline_flux2_klein.Flux2KleinPipeline.__call__ "4. process images" @ 0.42.1
/**
 * An editing reference as Flux2KleinPipeline uses it: scaled down to the area limit when larger, then the centre
 * cut to multiples of 16 (its size is inputImageSize's).
 * @param {DecodedImage} image
 * @returns {Pixels}
 */
export function referencePixels(image) {
    const fitted = resizeIfExceedsArea(image);
    return centreCrop(fitted, floorToMultiple(fitted.width), floorToMultiple(fitted.height));
}

// Port of diffusers.pipelines.flux2.pipeline_flux2_klein_inpaint.Flux2KleinInpaintPipeline.__call__ "2. Preprocess image" @ 0.42.1
/**
 * The image to inpaint: scaled down to the area limit when larger, then resized (not cropped) to multiples of 16
 * with LANCZOS (image_processor.preprocess, resize_mode 'default'; no change when it already is).
 * @param {DecodedImage} image
 * @returns {Pixels}
 */
export function inpaintPixels(image) {
    const fitted = resizeIfExceedsArea(image);
    const width = floorToMultiple(fitted.width);
    const height = floorToMultiple(fitted.height);
    if (width === fitted.width && height === fitted.height) return fitted;
    return { width, height, rgb: resizeLanczos(fitted.rgb, fitted.width, fitted.height, width, height, 3) };
}

// Port of diffusers.pipelines.flux2.pipeline_flux2_klein_inpaint.Flux2KleinInpaintPipeline.__call__ "2.2 Preprocess reference image" @ 0.42.1
/**
 * The references of an inpainting request. One reference is used as in editing. Several go through
 * image_processor.preprocess as one batch: its size is the first reference's, floored to multiples of 16
 * (the area limit's resize does not apply to a list there), and every reference is the centre cut of that size
 * (zero-filled where a reference is smaller).
 * @param {DecodedImage[]} references
 * @returns {Pixels[]}
 */
export function inpaintReferencePixels(references) {
    if (references.length <= 1) return references.map(referencePixels);
    const width = floorToMultiple(references[0].width);
    const height = floorToMultiple(references[0].height);
    return references.map((image) => centreCrop(image, width, height));
}

/**
 * The used size of each reference of a request (for the token count before anything is encoded).
 * @param {'edit' | 'inpaint'} mode
 * @param {{width: number, height: number}[]} references  Decoded sizes, without inpainting's image to inpaint.
 * @returns {{width: number, height: number}[]}
 */
export function referenceSizes(mode, references) {
    if (mode === 'inpaint' && references.length > 1) {
        const width = floorToMultiple(references[0].width);
        const height = floorToMultiple(references[0].height);
        return references.map(() => ({ width, height }));
    }
    return references.map((r) => inputImageSize(r.width, r.height));
}

// Port of diffusers.image_processor.VaeImageProcessor.preprocess (mask_processor: resize, convert('L'), binarize) @ 0.42.1
/**
 * The inpainting mask at the output size, binarised: resized (LANCZOS, in RGB as it was loaded) when its size
 * differs, converted to L, then 1 where L/255 >= 0.5 (L >= 128), else 0.
 * @param {DecodedImage} mask
 * @param {number} width  The output size.
 * @param {number} height
 * @returns {Float32Array} [H*W] of 0 and 1.
 */
export function binaryMask(mask, width, height) {
    const rgb =
        mask.width === width && mask.height === height
            ? mask.rgb
            : resizeLanczos(mask.rgb, mask.width, mask.height, width, height, 3);
    const grey = rgbToL(rgb);
    const out = new Float32Array(grey.length);
    // pil_to_numpy's float32 L/255, then binarize's `< 0.5`.
    for (let i = 0; i < grey.length; i++) out[i] = f32(grey[i] / 255) < 0.5 ? 0 : 1;
    return out;
}

// Port of diffusers.image_processor.VaeImageProcessor.pil_to_numpy + numpy_to_pt @ 0.42.1
/**
 * RGB bytes -> [1, 3, H, W] float32 planes of byte/255 (the encoder graph does the 2x - 1 itself).
 * @param {Pixels} image
 * @returns {Float32Array}
 */
export function toPlanes({ width, height, rgb }) {
    const plane = width * height;
    const out = new Float32Array(3 * plane);
    for (let p = 0; p < plane; p++) {
        for (let c = 0; c < 3; c++) out[c * plane + p] = f32(rgb[p * 3 + c] / 255);
    }
    return out;
}
