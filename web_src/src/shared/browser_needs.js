// @ts-check
/**
 * @file What this browser can run, decided from its capabilities and never from its name: the worker's probe
 * (runtime/gpu.js `probe`, with the store's OPFS methods and the device memory beside it) goes in, and out comes
 * whether the app can run here, exactly what is missing when it cannot, which graph family and kernels run,
 * which image sizes fit the GPU's buffers, and what each missing optional feature costs. Pure, so node tests it
 * against recorded browser profiles (tests/js/test_browser_needs.mjs); the page renders it (page/ui/capabilities.js).
 *
 * The rules (docs/machines.md, "What the app needs"):
 * - required: WebGPU with an adapter in a dedicated worker; the Origin Private File System with sync access
 *   handles in workers (the multi-gigabyte model is stored and resumed there); buffers as large as the chosen
 *   graphs bind: the largest weight is the text encoder's 4-bit token embedding (the layout `klein-web convert`
 *   writes), one buffer on the GPU with or without shader-f16, and attention is split into query blocks sized to
 *   the limit, so a smaller limit means smaller images, not a refusal;
 * - optional, each only changing which graphs and kernels run and how fast: shader-f16 (the q4f16 graphs and the
 *   fp16 VAE), subgroups (the int8 DP4A kernels of the q4 graphs, and onnxruntime's other subgroup kernels),
 *   chromium-experimental-subgroup-matrix (matrix-unit kernels for the q4f16 graphs); FileSystemHandle.move and
 *   FileSystemFileHandle.createWritable (the store copies or writes through a sync access handle instead);
 * - memory: `navigator.deviceMemory` is coarse (at most 8, rounded down to a power of two) and only warns.
 * @module shared/browser_needs
 */

import { attentionScoreBytes, graphFamily, vaeAttentionTokens } from './graph_needs.js';
import { LIMITS } from './limits.js';

/** @typedef {import('./types.js').Capabilities} Capabilities */

/**
 * The FLUX.2 [klein] 4B text encoder's token embedding as `klein-web convert` stores it: 151,936 tokens x 2,560
 * values at 4 bits, the packed data GatherBlockQuantized binds as one buffer (its fp32 scales are a quarter of
 * that). A repository in the seed's layout binds its fp16 table instead (x 2 bytes, 742 MiB), with shader-f16
 * only: without it those nodes run on the CPU (models/graph_choice.js place).
 */
export const TOKEN_EMBEDDING_BYTES = (151936 * 2560) / 2;

/**
 * The converter's attention split (builder/convert/attention.py): every graph's largest score buffer stays within
 * BUDGET at the longest attention it is sized for, the transformer's joint attention has TEXT_TOKENS text tokens
 * beside the image's 16x16-px patches and its longest is a 1024^2 edit with four 1024^2 references or a 2048^2
 * image; the VAE's mid-block attention has one head over the 8x-downsampled grid. The most-split graph of each
 * is what runs when the adapter's limit is below the budget (models/graph_choice.js sizeClass, checkDecodeFits).
 */
const ATTENTION = Object.freeze({
    budget: 512 * 1024 * 1024,
    textTokens: 512,
    transformerHeads: 24,
    transformerMaxTokens:
        Math.max((LIMITS.sizeMax / 16) ** 2, (1024 / 16) ** 2 + LIMITS.referencesMax * (1024 / 16) ** 2) + 512,
    vaeMaxTokens: (LIMITS.sizeMax / 8) ** 2,
});

/**
 * Query blocks the converter splits an attention of `heads` x `tokens` into (builder/convert/attention.py
 * query_blocks_for, fp32 scores).
 * @param {number} heads
 * @param {number} tokens
 * @returns {number}
 */
function queryBlocksFor(heads, tokens) {
    const rowsThatFit = Math.floor(ATTENTION.budget / (heads * tokens * 4));
    return Math.max(1, Math.ceil(tokens / rowsThatFit));
}

/**
 * What the model asks of the GPU, by default the full-size model as `klein-web convert` writes it.
 * @typedef {Object} ModelNeeds
 * @property {number} tokenEmbeddingBytes  The largest single buffer the graphs bind.
 * @property {number} transformerHeads
 * @property {number} transformerQueryBlocks  Of the most-split transformer graph.
 * @property {number} vaeQueryBlocks          Of the VAE decoder's graph.
 */

/** @type {Readonly<ModelNeeds>} */
export const FULL_SIZE_MODEL = Object.freeze({
    tokenEmbeddingBytes: TOKEN_EMBEDDING_BYTES,
    transformerHeads: ATTENTION.transformerHeads,
    transformerQueryBlocks: queryBlocksFor(ATTENTION.transformerHeads, ATTENTION.transformerMaxTokens),
    vaeQueryBlocks: queryBlocksFor(1, ATTENTION.vaeMaxTokens),
});

/** @typedef {import('./types.js').OpfsSupport} OpfsSupport */

/**
 * A capability record: the probe's answer (shared/types.js Capabilities, with `gpuApi`, `opfs` and `deviceMemory`).
 * Fields the worker did not report (an older worker) count as present, so the decision never blocks on a missing
 * report.
 * @typedef {Capabilities} CapabilityRecord
 */

/**
 * Something the app needs that this browser does not give it.
 * @typedef {Object} Missing
 * @property {'webgpu' | 'adapter' | 'opfs' | 'sync-access-handle' | 'buffer-size'} need
 * @property {string} what  What is missing, with this browser's figures.
 */

/**
 * Something optional this browser lacks, and what that costs.
 * @typedef {Object} Lack
 * @property {'shader-f16' | 'subgroups' | 'subgroup-matrix' | 'buffer-size' | 'move' | 'create-writable' | 'memory' | 'software'} feature
 * @property {string} cost
 * @property {'warn' | 'info'} tone  `info`: only a different (equally fast, or slightly slower) path.
 */

/**
 * @typedef {Object} Decision
 * @property {boolean} canRun
 * @property {Missing[]} missing  Empty when canRun.
 * @property {'q4f16' | 'q4'} family  The graph variant the text encoder and the transformer run by default
 *   (shared/graph_needs.js graphFamily, the worker's first choice).
 * @property {string} kernels  Which kernels run that family's 4-bit layers, in words.
 * @property {number} bufferLimit  The largest buffer the graphs may bind: min(maxBufferSize, maxStorageBufferBindingSize).
 * @property {number} largestSide  The largest square image side (multiple of LIMITS.sizeMultiple) whose attention
 *   buffers fit bufferLimit; 0 when none does.
 * @property {Lack[]} lacks
 */

/**
 * Whether a width x height text-to-image fits `limit` per buffer: the transformer's most-split graph (fp32 scores)
 * and the VAE decoder's attention (fp16 scores on the fp16 VAE, which runs with shader-f16).
 * @param {number} width
 * @param {number} height
 * @param {number} limit
 * @param {boolean} shaderF16
 * @param {ModelNeeds} model
 * @returns {boolean}
 */
export function sizeFits(width, height, limit, shaderF16, model = FULL_SIZE_MODEL) {
    const transformerTokens = (width / 16) * (height / 16) + ATTENTION.textTokens;
    const vaeTokens = vaeAttentionTokens(width, height);
    return (
        attentionScoreBytes(model.transformerHeads, transformerTokens, model.transformerQueryBlocks, 4) <= limit &&
        attentionScoreBytes(1, vaeTokens, model.vaeQueryBlocks, shaderF16 ? 2 : 4) <= limit
    );
}

/**
 * Decide what this browser can run.
 * @param {CapabilityRecord} caps
 * @param {{model?: ModelNeeds}} [options]
 * @returns {Decision}
 */
export function decide(caps, { model = FULL_SIZE_MODEL } = {}) {
    /** @type {Missing[]} */
    const missing = [];
    /** @type {Lack[]} */
    const lacks = [];
    const gpu = caps.webgpu && caps.adapter !== null;
    if (!gpu) {
        if (
            caps.gpuApi === false ||
            (caps.gpuApi === undefined && /navigator\.gpu is missing/.test(caps.error ?? ''))
        ) {
            missing.push({ need: 'webgpu', what: 'WebGPU in a worker (navigator.gpu is missing there)' });
        } else {
            missing.push({
                need: 'adapter',
                what: 'a WebGPU adapter (navigator.gpu is there, but requestAdapter() gave none)',
            });
        }
    }
    const opfs = caps.opfs;
    if (opfs && !opfs.directory) {
        missing.push({
            need: 'opfs',
            what: 'the Origin Private File System (navigator.storage.getDirectory), where the model is stored',
        });
    } else if (opfs && !opfs.syncAccessHandle) {
        missing.push({
            need: 'sync-access-handle',
            what: 'sync access handles in workers (FileSystemFileHandle.createSyncAccessHandle), which write the download in place',
        });
    }
    const bufferLimit = Math.min(caps.maxBufferSize, caps.maxStorageBufferBindingSize);
    if (gpu && bufferLimit < model.tokenEmbeddingBytes) {
        missing.push({
            need: 'buffer-size',
            what:
                `GPU buffers of ${mib(model.tokenEmbeddingBytes)} (the text encoder's token embedding is one); this GPU ` +
                `allows ${mib(bufferLimit)} per buffer`,
        });
    }
    const { family, kernels } = graphFamily(caps);
    let largestSide = 0;
    if (gpu) {
        for (let side = LIMITS.sizeMax; side >= LIMITS.sizeMin; side -= LIMITS.sizeMultiple) {
            if (sizeFits(side, side, bufferLimit, caps.shaderF16, model)) {
                largestSide = side;
                break;
            }
        }
    }
    if (gpu) {
        if (caps.software) {
            lacks.push({
                feature: 'software',
                cost: 'The adapter is a software rasteriser, not a GPU: an image takes many minutes.',
                tone: 'warn',
            });
        }
        if (!caps.shaderF16) {
            lacks.push({
                feature: 'shader-f16',
                cost:
                    'No fp16 shaders: the q4 graphs run with fp32 activations and the VAE in fp32 (a seed-layout ' +
                    "repository's fp16 token embedding on the CPU); slower, and within rounding of the fp16 result.",
                tone: 'warn',
            });
        }
        if (!caps.subgroups) {
            lacks.push({
                feature: 'subgroups',
                cost: caps.shaderF16
                    ? "No subgroups: the fp16 graphs run on plain kernels, without the runtime's subgroup kernels; slower per step."
                    : "No subgroups: the q4 graphs' 4-bit layers run on plain fp32 kernels instead of int8 dot products (DP4A); slower per step.",
                tone: 'warn',
            });
        }
        if (caps.shaderF16 && !caps.subgroupMatrix) {
            lacks.push({
                feature: 'subgroup-matrix',
                cost:
                    family === 'q4'
                        ? 'No matrix units for fp16 (chromium-experimental-subgroup-matrix): the q4 graphs run on int8 dot products instead.'
                        : 'No matrix units for fp16 (chromium-experimental-subgroup-matrix): the fp16 kernels run without them.',
                tone: 'info',
            });
        }
        if (largestSide < LIMITS.sizeMax) {
            lacks.push({
                feature: 'buffer-size',
                cost:
                    largestSide > 0
                        ? `This GPU allows ${mib(bufferLimit)} per buffer: images up to about ${largestSide}x${largestSide} fit.`
                        : `This GPU allows ${mib(bufferLimit)} per buffer: no image size fits.`,
                tone: 'warn',
            });
        }
    }
    if (opfs && opfs.syncAccessHandle) {
        if (!opfs.move) {
            lacks.push({
                feature: 'move',
                cost: 'No FileSystemHandle.move(): each downloaded file is copied into place once (more disk writes, same result).',
                tone: 'info',
            });
        }
        if (!opfs.createWritable) {
            lacks.push({
                feature: 'create-writable',
                cost: 'No createWritable(): small files are written through sync access handles (same result).',
                tone: 'info',
            });
        }
    }
    const memory = caps.deviceMemory;
    if (typeof memory === 'number' && memory > 0 && memory <= 4) {
        lacks.push({
            feature: 'memory',
            cost:
                `This device reports ${memory} GB of memory; the app runs in lean mode, which takes about 2 GB in ` +
                'the tab and 3.2 GB of GPU memory at 512x512, so the browser may close the tab: close other tabs ' +
                'and use small sizes.',
            tone: 'warn',
        });
    }
    if (largestSide === 0 && gpu && !missing.some((m) => m.need === 'buffer-size')) {
        missing.push({
            need: 'buffer-size',
            what: `GPU buffers large enough for the smallest image (this GPU allows ${mib(bufferLimit)})`,
        });
    }
    return { canRun: missing.length === 0, missing, family, kernels, bufferLimit, largestSide, lacks };
}

/**
 * @param {number} bytes
 * @returns {string}  e.g. "742 MiB", "2 GiB", "256 KiB"
 */
function mib(bytes) {
    if (bytes >= 2 ** 30 && bytes % 2 ** 30 === 0) return `${bytes / 2 ** 30} GiB`;
    if (bytes >= 2 ** 30) return `${(bytes / 2 ** 30).toFixed(2)} GiB`;
    if (bytes >= 2 ** 20) return `${Math.round(bytes / 2 ** 20)} MiB`;
    return `${Math.round(bytes / 2 ** 10)} KiB`;
}
