// @ts-check
/**
 * @file The input contract: the steps, sizes and seeds a generation accepts, checked by the page form before
 * anything is sent and again by the pipeline's checkInputs. The Python reference pipeline has a twin of this
 * table, and a test holds the two equal.
 * - steps: klein is distilled for 4; more than 50 only costs time.
 * - sizes: the VAE downsamples 8x and latents are packed in 2x2 patches, so one latent token is 16x16
 *   pixels; the converter splits attention for sides up to 2048 (builder/convert/attention.py MAX_IMAGE_SIDE).
 * - seeds: torch.Generator('cpu').manual_seed takes 32 bits, so seeds are in [0, seedMax).
 * - input images (editing, inpainting): Flux2ImageProcessor.check_image_input's minimum side and aspect ratio;
 *   larger than imageAreaMax they are resized to about that area; at most referencesMax references; files and
 *   decoded sizes beyond imageFileBytesMax / imagePixelsMax are refused before any work.
 * @module shared/limits
 */

export const LIMITS = Object.freeze({
    stepsMin: 1,
    stepsMax: 50,
    sizeMin: 64,
    sizeMax: 2048,
    sizeMultiple: 16,
    seedMax: 4294967296,
    referencesMax: 4,
    imageSideMin: 64,
    imageAspectMax: 8,
    imageAreaMax: 1048576,
    imageFileBytesMax: 67108864,
    imagePixelsMax: 67108864,
    /** Inpainting's share of the schedule when none is given (Flux2KleinInpaintPipeline's default). */
    strengthDefault: 0.8,
    /** Classifier-free guidance of base models: 1 runs none (diffusers guides only above 1). */
    guidanceMin: 1,
    guidanceMax: 30,
});

/**
 * The size an input image of width x height pixels is used at: scaled down to imageAreaMax when larger
 * (Flux2ImageProcessor._resize_to_target_area: truncation of the float64 products), then each side floored to
 * sizeMultiple. builder/pipeline/limits.py `input_image_size` is its twin.
 * @param {number} width
 * @param {number} height
 * @returns {{width: number, height: number, tokens: number}}  `tokens`: transformer tokens it adds to every step.
 */
export function inputImageSize(width, height) {
    let w = width;
    let h = height;
    if (w * h > LIMITS.imageAreaMax) {
        const scale = Math.sqrt(LIMITS.imageAreaMax / (w * h));
        w = Math.trunc(width * scale);
        h = Math.trunc(height * scale);
    }
    const m = LIMITS.sizeMultiple;
    const usedWidth = Math.floor(w / m) * m;
    const usedHeight = Math.floor(h / m) * m;
    return { width: usedWidth, height: usedHeight, tokens: (usedWidth / m) * (usedHeight / m) };
}

/**
 * Why an input image of width x height cannot be used (diffusers' check_image_input, plus our decoded-size cap),
 * or null when it can.
 * @param {number} width
 * @param {number} height
 * @param {string} name  How the message names the image (e.g. 'Reference 2 (cat.png)').
 * @returns {string | null}
 */
export function imageDimensionsProblem(width, height, name) {
    const { imagePixelsMax, imageSideMin, imageAspectMax } = LIMITS;
    if (width * height > imagePixelsMax) {
        return (
            `${name} is ${width}x${height} pixels, more than the ${imagePixelsMax / 2 ** 20} megapixels an input ` +
            'image may have; scale it down first.'
        );
    }
    if (width < imageSideMin || height < imageSideMin) {
        return `${name} is ${width}x${height}: both sides must be at least ${imageSideMin} pixels.`;
    }
    if (Math.max(width / height, height / width) > imageAspectMax) {
        return `${name} is ${width}x${height}, an aspect ratio beyond ${imageAspectMax}:1; crop it first.`;
    }
    return null;
}
