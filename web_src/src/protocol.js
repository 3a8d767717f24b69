// @ts-check
/**
 * @file The page <-> worker protocol: message shapes only (JSDoc types, WorkerApi pairing each request with its
 * result and events for shared/channel.js) plus the version constant.
 * Every request carries an `id`; the worker answers each request with exactly one `result` or
 * `error` carrying the same id, after any number of `progress` / `stage` / `step` events.
 *
 * Page -> worker:
 *   {type: 'probe', id}                       -> result: Capabilities (shared/types.js)
 *   {type: 'generate', id, params}            -> progress* stage* step* -> result: GenerateResult
 *   {type: 'load', id, params}                -> progress* stage* -> result: LoadResult
 *   {type: 'cancel', id, target}              -> result: {cancelled: boolean}   (target = generate or load id)
 *   {type: 'clearCache', id}                  -> result: {freedBytes: number}
 *   {type: 'decode', id, params: DecodeParams} -> result: DecodeResult
 *   {type: 'modelInfo', id, params: {modelBase}} -> result: ModelInfo
 *
 * Worker -> page:
 *   {type: 'progress', id, progress: DownloadProgress}   bytes of the model download (shared/types.js)
 *   {type: 'stage', id, stage: Stage, detail?: string}    a pipeline stage begins
 *   {type: 'step', id, step, steps, elapsedMs, etaMs, preview?}  a denoising step finished; with
 *                                                        GenerateParams.preview, what the image is becoming
 *                                                        (PreviewFrame, 1/8 of the image's size)
 *   {type: 'result', id, result}
 *   {type: 'error', id, error: SerializedError}           (see shared/errors.js)
 *
 * Modes of `generate` (GenerateParams): text-to-image (no images); editing (`images`: 1..4 references, the output
 * follows the prompt and draws on them, Flux2KleinPipeline(image=[...])); inpainting (`mask` set: `images[0]` is
 * the image to inpaint, white mask pixels are repainted, further images are its references, `strength` how much
 * of the schedule runs, Flux2KleinInpaintPipeline). Images travel as the encoded files the user gave (PNG, JPEG,
 * WebP); the worker decodes, checks and hashes them in the `check` stage (so a request with an unusable image, or
 * with more tokens than the model can hold, is refused before any download) and resizes and VAE-encodes them in
 * the `images` stage.
 *
 * Worker behaviour (worker/requests.js):
 *   - load creates and releases each session of one model without running it (pipeline/load_sessions.js): what
 *     each costs to create, and whether the browser can hold it, on adapters too slow to run the pipeline.
 *   - generate, load and clearCache run one at a time, in arrival order: a generate sent while another runs is
 *     queued (not refused), so "cancel, then generate" needs no waiting on the page.
 *   - cancel answers at once. A running generate stops before its next denoising step (or download chunk)
 *     and answers `error` with code 'cancelled'; its sessions are released (GPU memory freed; the next run
 *     reloads them from the local store). A queued generate is answered 'cancelled' immediately.
 *     `{cancelled: false}` means no running or queued request had that id.
 *   - modelInfo answers at once (no job): the model's kind and defaults from its manifest, fetched, else the copy
 *     the store kept (offline); nothing is stored. The page shows the fields that kind takes before any Generate.
 *   - decode answers at once (no job, no model): one input file read exactly as `generate` reads it (the
 *     decoding contract of docs/editing.md), for the tests that hold the worker to the CPU reference.
 *   - the probe result also carries `protocolVersion` (= PROTOCOL_VERSION), and for the page's capability decision
 *     (shared/browser_needs.js) `gpuApi`, `opfs` and `deviceMemory` (shared/types.js Capabilities).
 *   - every error code is one of shared/errors.js `ErrorCode`.
 * @module protocol
 */

export const PROTOCOL_VERSION = 3;

/**
 * Pipeline stages in order; `stage` events name one of these. pipeline/generate.js's numbered stages, with
 * stage 2 (Load models) in two parts: `download` (the store fetches missing files) and `load` (sessions).
 * `images` ("Encode images": resize and VAE-encode the input images, decoded and checked in `check`) runs only
 * when there are some.
 */
export const STAGES = Object.freeze(
    /** @type {const} */ ([
        'check',
        'download',
        'load',
        'encode',
        'images',
        'latents',
        'timesteps',
        'denoise',
        'decode',
    ]),
);

/** Graph variants `GenerateParams.precision` may force for the text encoder and the transformer. */
export const PRECISIONS = Object.freeze(['q4', 'q4f16', 'fp32']);

/** Memory modes `GenerateParams.memory` may ask for (models/memory_mode.js); absent: the worker chooses. */
export const MEMORY_MODES = Object.freeze(['fast', 'lean']);

/** @typedef {(typeof STAGES)[number]} Stage */

/**
 * @typedef {Object} GenerateParams
 * @property {string} prompt
 * @property {number} seed      Integer in [0, 2^32): torch.Generator('cpu').manual_seed(seed).
 * @property {number} steps     Denoising steps (klein is distilled for 4).
 * @property {number} width     Multiple of 16.
 * @property {number} height    Multiple of 16.
 * @property {string} modelBase Absolute URL of the model repository, ending in '/'.
 * @property {string} [precision] Force a graph variant ('q4', 'q4f16', 'fp32'); default: best available.
 * @property {ImageInput[]} [images]  Editing: up to LIMITS.referencesMax reference images. Inpainting (with
 *   `mask`): the image to inpaint first, then up to LIMITS.referencesMax references. In both modes width and
 *   height are the output size; inpainting's must equal the used size of images[0] (shared/limits.js
 *   inputImageSize).
 * @property {ImageInput} [mask]  Inpainting mask: white repaints, black keeps (grey is thresholded at 50%, as
 *   diffusers binarises); any size (resized to the image as diffusers does).
 * @property {number} [strength]  Inpainting: the share of the schedule that runs, in [0, 1] (diffusers' default
 *   0.8); ignored without a mask or an extension.
 * @property {{left?: number, right?: number, top?: number, bottom?: number}} [extend]  Outpainting: pixels
 *   (0..LIMITS.sizeMax) added on each side of images[0], which is then inpainted padded under a mask white on the
 *   new area (shared/outpaint.js); `mask` is optional then and, given, covers the original area at its decoded
 *   size. width and height are the padded image's used size.
 * @property {'fast' | 'lean'} [memory]  How many model sessions stay on the GPU (models/memory_mode.js): `fast`
 *   keeps them loaded between stages and images, `lean` holds one at a time; absent: the worker chooses from what
 *   the browser tells about the machine, and runs lean after a fast run ran out of memory.
 * @property {number} [vaeTile]  The side (pixels, a multiple of 16) of the tiles the VAE decodes the image in, so
 *   that its GPU memory follows the tile rather than the image (pipeline/vae_tiles.js); 0: the whole image at once.
 *   Absent: lean mode's tile (vae_tiles.js LEAN_VAE_TILE) in lean mode, the whole image in fast mode.
 * @property {boolean} [preview]  Send a preview of the image with every `step` event (pipeline/preview.js: the
 *   latents mapped to colours, no VAE); the image itself is the same with or without it.
 * @property {number} [guidanceScale]  Classifier-free guidance of a base model, in [LIMITS.guidanceMin,
 *   LIMITS.guidanceMax]: above 1, every step runs the transformer a second time, on the negative prompt
 *   (pipeline/guidance.js). Absent: the model's default for the mode (manifest.json `pipeline`). A distilled model
 *   ignores it and says so in the result's notes, as diffusers does.
 * @property {string} [negativePrompt]  What guidance steers away from (base models; absent: `""`, diffusers'
 *   default), encoded like the prompt; a distilled model ignores it.
 * @property {boolean} [profile]  Report where the GPU time went (GenerateResult.kernels): the run's sessions are
 *   created anew with onnxruntime's profiler on and without graph capture (so the run is slower than usual), and
 *   released after it; the transformer then runs on onnxruntime, whose profiler times it (our kernels are timed
 *   by the kernel lab, docs/kernels.md).
 * @property {boolean} [stepKernels]  false: run the transformer on onnxruntime even where our kernels could
 *   (step/; GenerateResult.graphs.transformer.step says which ran). Absent or true: our kernels where the device
 *   and the graph allow.
 * @property {boolean} [stepCheck]  After the first denoising step on our kernels, run onnxruntime's transformer on
 *   the same inputs and report how far the two predictions are apart (GenerateResult.stepCheck; both are then
 *   loaded at once for that step).
 */

/**
 * @typedef {Object} ModelInfo  What kind of model a model base holds (`modelInfo`).
 * @property {import('./shared/model_repo.js').PipelineDefaults} pipeline  Distilled or base, and the steps and
 *   guidance scales diffusers runs it with (manifest.json `pipeline`).
 * @property {import('./shared/browser_needs.js').RepoFacts} repo  Its graphs and file sizes, from which the page
 *   weighs this browser against the model's own sizes (shared/browser_needs.js modelNeeds).
 */

/**
 * @typedef {Object} ImageInput  One input image as the user gave it.
 * @property {string} name       File name (or e.g. 'painted mask'), for messages and metadata.
 * @property {ArrayBuffer} bytes  The encoded file (PNG, JPEG or WebP), at most LIMITS.imageFileBytesMax bytes.
 */

/**
 * @typedef {Object} DecodeParams
 * @property {ImageInput} image
 * @property {'image' | 'mask'} role  An image (editing reference or image to inpaint: its size is checked) or a
 *   mask (any size, greyscale only).
 */

/**
 * @typedef {Object} DecodeResult  The decoded, upright pixels, before any resizing.
 * @property {number} width
 * @property {number} height
 * @property {Uint8Array} rgb  width*height*3 bytes.
 * @property {string} sha256  Of the file's bytes.
 */

/**
 * @typedef {Object} InputImageInfo  What the worker made of one input image (GenerateResult.inputs).
 * @property {string} name
 * @property {string} sha256     Of the encoded file's bytes (recorded in the PNG's metadata).
 * @property {number} width      Decoded size.
 * @property {number} height
 * @property {number} usedWidth  The size it was used at (inputImageSize).
 * @property {number} usedHeight
 * @property {number} tokens     Transformer tokens it added to every step (0 for a mask).
 * @property {boolean} cached    Its latents came from an earlier run's encoding in this session.
 */

/**
 * @typedef {Object} StageTimings  Milliseconds per stage of one generation, as the worker measured them. A
 *   session created inside a later stage (one that did not fit the memory budget up front, or the VAE decoder's,
 *   created during the first denoising step) counts under `load`, and so does queuing the prompt's encoding, which
 *   starts as soon as the text encoder exists (`encode` is then the wait that is left).
 * @property {number} check
 * @property {number} download
 * @property {number} load
 * @property {number} encode
 * @property {number} images
 * @property {number} latents
 * @property {number} timesteps
 * @property {number} denoise
 * @property {number} decode
 * @property {number} total
 * @property {number} sessionRun   Time spent inside session.run() (for the orchestration overhead figure).
 */

/**
 * @typedef {Object} GenerateResult
 * @property {number} width
 * @property {number} height
 * @property {Uint8ClampedArray} rgba   width*height*4 bytes.
 * @property {GenerateParams} params
 * @property {StageTimings} timings
 * @property {{tokens: number, droppedTokens: number}} prompt
 * @property {number[]} stepMs  Wall time of each denoising step.
 * @property {number} transformerCalls  The transformer's runs: one a step, two with a base model's guidance.
 * @property {Record<string, import('./shared/types.js').GraphReport>} graphs
 *   Which variant and EP ran each component, and how (`detail`: e.g. "attention unsplit, graph capture";
 *   `streamedBytes`: the weights the app streamed into its own GPU buffers, models/graph_upload.js; `step`: what
 *   ran the transformer's steps, our kernels or onnxruntime, and their dispatches per step).
 * @property {import('./shared/types.js').DeviceGrant | null} device  The features and limits the shared GPU device
 *   was given (onnxruntime's kernels choose their paths from them), and the optional features it was made without
 *   because they failed in this browser; null when nothing ran on WebGPU.
 * @property {{mode: 'fast' | 'lean', why: string}} memory  The memory mode the run used, and why.
 * @property {{map: string, frames: number, ms: number} | null} preview  With GenerateParams.preview: which colour
 *   map made the step previews ('repository' or 'published FLUX.2'), how many, and the milliseconds they took
 *   (inside the denoising steps); null without.
 * @property {string[]} notes   Things the user should know (e.g. "VAE ran on the CPU: no shader-f16").
 * @property {{mode: 'text' | 'edit' | 'inpaint', images: InputImageInfo[], mask: InputImageInfo | null,
 *   strength: number | null, extension: import('./shared/outpaint.js').Extension | null, steps: number,
 *   referenceTokens: number,
 *   guidance: {scale: number, negativePrompt: string} | null}} inputs  The mode that ran (`mask`: the mask file
 *   given, null when an outpainting run had none; `extension`: outpainting's pixels added); `steps`: the
 *   denoising steps that ran (inpainting's strength runs the last ones); `referenceTokens`: tokens the images
 *   added to every step; `guidance`: the classifier-free guidance that ran (a base model's; null: none).
 * @property {Record<string, import('./shared/types.js').ComponentKernels>} [kernels]  With `profile`: per
 *   component that ran, its GPU time per kernel program (pipeline/kernel_times.js makes it).
 * @property {TimelineEvent[]} timeline  What the run did when: its stages, each session's files read and the session
 *   created, each run from its start to its outputs on the CPU (overlapping where loading overlaps).
 * @property {import('./shared/types.js').StepCheck} [stepCheck]  With GenerateParams.stepCheck, when our kernels ran
 *   the step: their first step's prediction against onnxruntime's on the same inputs.
 */

/**
 * @typedef {Object} TimelineEvent
 * @property {string} what     E.g. 'download', 'read transformer ahead', 'create transformer', 'Denoising step 1'.
 * @property {number} startMs  Since the request began.
 * @property {number} endMs
 */

/**
 * @typedef {Object} PreviewFrame  What the image is becoming after a denoising step (`step` event, pipeline/preview.js).
 * @property {number} width   2 x the latent grid's width: 1/8 of the image's.
 * @property {number} height
 * @property {Uint8ClampedArray} rgba  width*height*4 bytes.
 */

/**
 * @typedef {Object} LoadParams
 * @property {number} width     The image size the transformer's session is created for (its size class and dims).
 * @property {number} height
 * @property {string} modelBase
 * @property {string} [precision]
 * @property {string[]} [components]  Default: all three, in pipeline order; 'vae_encoder' may be named too (its
 *   session created for a width x height input image).
 */

/**
 * @typedef {Object} LoadResult
 * @property {LoadParams} params
 * @property {number} downloadedBytes  Fetched by this request (0 when the store held every file).
 * @property {number} downloadMs
 * @property {Record<string, {variant: string, ep: string, detail: string, loadMs: number, readMs: number, streamedBytes: number, bytes: number, path: string}>} graphs
 *   Each session created (and released): its creation time, the part of it spent reading the files from the
 *   store, the weights it streamed to the GPU, and the bytes of its files.
 * @property {import('./shared/types.js').DeviceGrant | null} device  As in GenerateResult.
 * @property {string[]} notes
 */

/**
 * @typedef {{type: 'progress', progress: import('./shared/types.js').DownloadProgress}
 *   | {type: 'stage', stage: Stage, detail?: string}
 *   | {type: 'step', step: number, steps: number, elapsedMs: number, etaMs: number, preview?: PreviewFrame}}
 *   JobEvent  What a generate or load reports before its result (the wire adds the request's id).
 */

/**
 * @typedef {{
 *   probe: {request: {}, result: import('./shared/types.js').Capabilities & {protocolVersion: number}},
 *   generate: {request: {params: GenerateParams}, result: GenerateResult, event: JobEvent},
 *   load: {request: {params: LoadParams}, result: LoadResult, event: JobEvent},
 *   cancel: {request: {target: string}, result: {cancelled: boolean}},
 *   clearCache: {request: {}, result: {freedBytes: number}},
 *   decode: {request: {params: DecodeParams}, result: DecodeResult},
 *   modelInfo: {request: {params: {modelBase: string}}, result: ModelInfo},
 * }} WorkerApi  Each request of the page to the worker, with its result and events (shared/channel.js).
 */
