// @ts-check
/**
 * @file Which graph runs each component on this adapter, and where: pure policy over the manifest and the
 * adapter's facts, so node tests it without onnxruntime or a GPU (models/sessions.js turns the choice into
 * sessions). The rules:
 * - text encoder and transformer: the variant `precision` forces, else the first the repository has in the order
 *   of shared/graph_needs.js variantOrder() for the device's features (the fastest kernels first), preferring a
 *   stored variant to one not downloaded yet;
 * - transformer: of that variant's size classes, the least-split graph sized for this image (sizeClass); in lean
 *   memory mode the least-split one whose attention score buffers stay within a smaller budget, since those
 *   buffers are most of the transformer's activations;
 * - VAE decoder, and the VAE encoder when input images need it: fp16 on WebGPU with shader-f16; else an fp32 graph
 *   on WebGPU; else fp16 on the wasm EP;
 * - a graph needing shader-f16 the adapter lacks runs on WebGPU with its fp16 nodes forced onto the CPU
 *   when the manifest names them, else wholly on the wasm EP (place);
 * - a size whose attention buffers cannot fit is refused before anything is downloaded.
 * @module models/graph_choice
 */

import { InputError, ModelFileError, OutOfMemoryError } from '../shared/errors.js';
import { formatBytes } from '../shared/format.js';
import { LIMITS } from '../shared/limits.js';
import { attentionScoreBytes, vaeAttentionTokens, variantOrder } from '../shared/graph_needs.js';
import { graphFiles } from '../shared/model_repo.js';

/** @typedef {import('../shared/model_repo.js').Component} Component */
/** @typedef {import('../shared/model_repo.js').AnyComponent} AnyComponent */
/** @typedef {Record<Component, Choice> & {vae_encoder?: Choice}} Choices  The encoder only for input images. */
/** @typedef {import('../shared/model_repo.js').GraphEntry} GraphEntry */
/** @typedef {import('../shared/model_repo.js').Manifest} Manifest */
/** @typedef {import('../shared/graph_needs.js').GpuFeatures} GpuFeatures */

/**
 * @typedef {Object} Choice  Which graph runs a component, and where.
 * @property {GraphEntry} graph
 * @property {'webgpu' | 'wasm'} ep
 * @property {string[]} forceCpuNodeNames
 * @property {number} bytes   Graph + external data, from the manifest (0 when unknown).
 * @property {string} identity  Paths, sizes and sha256s: changes when the repository is re-converted (sizes alone
 *   often do not).
 */

/** The VAE score buffer the CPU (wasm) path may hold. */
const WASM_BUFFER_LIMIT = 1024 ** 3;

/**
 * Choose variant and EP per component for this adapter (see the module doc for the rules).
 * @param {Manifest} manifest
 * @param {GpuFeatures & {maxStorageBufferBindingSize?: number}} gpu
 * @param {string | undefined} precision  A forced variant for the text encoder and the transformer.
 * @param {number} [attentionTokens]  The transformer's joint attention length (image + text tokens) of this
 *   generation: of a variant's graphs on the same weights, the least-split one sized for it runs.
 * @param {{encoder?: boolean, stored?: ReadonlySet<string>, scoreBudget?: number}} [options]  `encoder`: input
 *   images need the VAE encoder; a repository without one is refused here, before anything is downloaded.
 *   `stored`: the repository paths the store holds complete. `scoreBudget`: the bytes one attention score buffer
 *   should stay within (lean mode's), a preference the adapter's own limit overrides.
 * @returns {{choices: Choices, notes: string[]}}
 */
export function chooseGraphs(
    manifest,
    gpu,
    precision,
    attentionTokens,
    { encoder = false, stored, scoreBudget = Infinity } = {},
) {
    const { shaderF16, maxStorageBufferBindingSize } = gpu;
    /** @type {string[]} */
    const notes = [];
    const order = variantOrder(gpu);
    /** @param {string} component */
    const graphsOf = (component) => manifest.graphs.filter((g) => g.component === component);
    /** @param {string} component @param {readonly string[]} order */
    const pick = (component, order) => {
        const graphs = graphsOf(component);
        if (graphs.length === 0) {
            throw new ModelFileError(
                `The model repository ${manifest.modelBase} has no ${component} graph; check its manifest.json.`,
            );
        }
        for (const variant of order) {
            const graph = graphs.find((g) => g.variant === variant);
            if (graph) return graph;
        }
        return graphs[0];
    };
    /** @type {Partial<Record<Component, Choice>>} */
    const choices = {};
    for (const component of /** @type {const} */ (['text_encoder', 'transformer'])) {
        let graph;
        if (precision) {
            graph = graphsOf(component).find((g) => g.variant === precision);
            if (!graph) {
                const have =
                    graphsOf(component)
                        .map((g) => g.variant)
                        .join(', ') || 'none';
                throw new InputError(
                    `\`precision\` ${JSON.stringify(precision)} is not available for the ${component} of this model ` +
                        `(it has: ${have}); leave it empty for the best available.`,
                    { precision },
                );
            }
        } else {
            graph = pick(component, order);
            const kept = stored ? storedInstead(graph, graphsOf(component), order, stored) : null;
            if (kept) {
                notes.push(
                    `${component}: the ${graph.variant} graphs would run faster on this GPU, but ${kept.variant} is the one ` +
                        `stored; choose precision ${graph.variant} to download it (${formatBytes(graphBytes(graph, manifest))}).`,
                );
                graph = kept;
            }
        }
        if (attentionTokens !== undefined) {
            graph = sizeClass(manifest, graph, attentionTokens, maxStorageBufferBindingSize, scoreBudget);
        }
        choices[component] = place(graph, manifest, shaderF16, notes);
    }
    const vaeOrder = shaderF16 && precision !== 'fp32' ? ['fp16', 'fp32'] : ['fp32', 'fp16'];
    choices.vae_decoder = place(pick('vae_decoder', vaeOrder), manifest, shaderF16, notes);
    /** @type {Choices} */
    const chosen = /** @type {Record<Component, Choice>} */ (choices);
    if (encoder) {
        if (graphsOf('vae_encoder').length === 0) {
            throw new ModelFileError(
                `The model repository ${manifest.modelBase} has no VAE encoder (component vae_encoder), which editing ` +
                    'and inpainting need to read input images: use a repository converted by `klein-web convert` ' +
                    '(docs/editing.md), or generate without images.',
                { component: 'vae_encoder' },
            );
        }
        chosen.vae_encoder = place(pick('vae_encoder', vaeOrder), manifest, shaderF16, notes);
    }
    return { choices: chosen, notes };
}

/**
 * A graph to run instead of `best` because it is stored and `best` is not, so that a change of features (one
 * given up after it failed) does not download gigabytes of other graphs: the first stored one in `order`, or
 * null when `best` is stored or no other is.
 * @param {GraphEntry} best
 * @param {GraphEntry[]} graphs  The component's graphs.
 * @param {readonly string[]} order
 * @param {ReadonlySet<string>} stored
 * @returns {GraphEntry | null}
 */
function storedInstead(best, graphs, order, stored) {
    const isStored = (/** @type {GraphEntry} */ g) => graphFiles(g).every((path) => stored.has(path));
    if (isStored(best)) return null;
    for (const variant of order) {
        const graph = graphs.find((g) => g.variant === variant);
        if (graph && graph !== best && isStored(graph)) return graph;
    }
    return null;
}

/**
 * @param {GraphEntry} graph
 * @param {Manifest} manifest
 * @returns {number} The bytes of its graph and weight files.
 */
function graphBytes(graph, manifest) {
    return graphFiles(graph).reduce((sum, path) => sum + (manifest.files[path]?.size ?? 0), 0);
}

/**
 * Of the graphs of `graph`'s component and variant (one per size class, sharing the weight files), the one
 * whose attention is split into the fewest query blocks while its score buffers stay within the budget the
 * converter sized it for at `tokens`. Each query block costs kernels, so a small image runs much faster
 * unsplit than in the blocks a 2048^2 image needs. Graphs without a recorded limit serve every size. An
 * adapter whose storage buffers are smaller than the converter's budget gets a more-split graph; a size no
 * graph can run within that limit is refused before anything is downloaded. `preferredBytes` (lean mode) asks
 * for smaller score buffers than the adapter allows, trading kernels for memory: the least-split graph within
 * it, else the most-split graph that runs.
 * @param {Manifest} manifest
 * @param {GraphEntry} graph  The variant's main graph (listed first; it runs every size).
 * @param {number} tokens
 * @param {number} [bufferLimit]  The adapter's maxStorageBufferBindingSize (bytes).
 * @param {number} [preferredBytes]  The score buffer to stay within where a graph allows it (bytes).
 * @returns {GraphEntry}
 */
export function sizeClass(manifest, graph, tokens, bufferLimit = Infinity, preferredBytes = Infinity) {
    /** @param {GraphEntry} g */
    const scoreBytes = (g) => attentionScoreBytes(g.attentionHeads ?? 0, tokens, g.attentionQueryBlocks, 4);
    const siblings = manifest.graphs.filter((g) => g.component === graph.component && g.variant === graph.variant);
    const fitting = siblings.filter(
        (g) => (g.attentionMaxTokens === null || g.attentionMaxTokens >= tokens) && scoreBytes(g) <= bufferLimit,
    );
    fitting.sort((a, b) => a.attentionQueryBlocks - b.attentionQueryBlocks);
    if (fitting.length > 0) return fitting.find((g) => scoreBytes(g) <= preferredBytes) ?? fitting[fitting.length - 1];
    const mostSplit = siblings.reduce((a, b) => (b.attentionQueryBlocks > a.attentionQueryBlocks ? b : a), graph);
    if (mostSplit.attentionHeads !== null && scoreBytes(mostSplit) > bufferLimit) {
        throw new OutOfMemoryError(
            `At ${tokens} attention tokens (image + text) the transformer needs a ` +
                `${formatBytes(scoreBytes(mostSplit))} attention buffer but this GPU allows ` +
                `${formatBytes(bufferLimit)} per buffer. Choose a smaller size.`,
            { needed: scoreBytes(mostSplit), limit: bufferLimit, tokens },
        );
    }
    return mostSplit;
}

/**
 * The EP for one graph: WebGPU, unless it needs shader-f16 the adapter lacks; then WebGPU with the
 * fp16 nodes forced onto the CPU when the manifest names them, else the whole graph on the wasm EP.
 * @param {GraphEntry} graph
 * @param {Manifest} manifest
 * @param {boolean} shaderF16
 * @param {string[]} notes
 * @returns {Choice}
 */
function place(graph, manifest, shaderF16, notes) {
    const files = graphFiles(graph);
    const bytes = graphBytes(graph, manifest);
    const identity = files
        .map((path) => `${path}:${manifest.files[path]?.size ?? '?'}:${manifest.files[path]?.sha256 ?? '?'}`)
        .join(',');
    const name = `${graph.component} (${graph.variant})`;
    if (!graph.requiresF16 || shaderF16) return { graph, ep: 'webgpu', forceCpuNodeNames: [], bytes, identity };
    if (graph.cpuNodesWithoutF16.length > 0) {
        notes.push(
            `${name}: this GPU has no shader-f16, so ${graph.cpuNodesWithoutF16.length} fp16 node(s) run on the CPU; ` +
                'the rest runs on WebGPU.',
        );
        return { graph, ep: 'webgpu', forceCpuNodeNames: [...graph.cpuNodesWithoutF16], bytes, identity };
    }
    notes.push(
        `${name} runs on the CPU (wasm), which is slower: this GPU has no shader-f16 and the model has no fp32 ` +
            'variant of it.',
    );
    return { graph, ep: 'wasm', forceCpuNodeNames: [], bytes, identity };
}

/**
 * Refuse a size whose VAE decode cannot fit before anything is downloaded or run. The VAE mid-block
 * attention materialises a [rows x tokens] score matrix (tokens = (H/8)(W/8); Softmax + MatMul in the
 * graph, no fused kernel), which must fit one storage buffer on WebGPU and the 4 GB wasm32 heap on the
 * CPU. The converter splits the queries into `attentionQueryBlocks` blocks (builder/convert/attention.py), so
 * rows = ceil(tokens / blocks); an unsplit graph (the seed's) has rows = tokens (16384^2 x 2 B = 512 MiB
 * at 1024^2 in fp16).
 * @param {Choice} vae
 * @param {{width: number, height: number}} size
 * @param {{maxStorageBufferBindingSize: number}} gpu
 */
export function checkDecodeFits(vae, { width, height }, gpu) {
    const bytesPerValue = vae.graph.variant === 'fp16' && vae.ep === 'webgpu' ? 2 : 4;
    const limit = vae.ep === 'webgpu' ? gpu.maxStorageBufferBindingSize : WASM_BUFFER_LIMIT;
    const blocks = vae.graph.attentionQueryBlocks ?? 1;
    /** @param {number} w @param {number} h */
    const scoreBytes = (w, h) => attentionScoreBytes(1, vaeAttentionTokens(w, h), blocks, bytesPerValue);
    const needed = scoreBytes(width, height);
    if (needed <= limit) return;
    // The largest square of a valid size whose score block fits.
    const step = LIMITS.sizeMultiple;
    let side = step;
    while (scoreBytes(side + step, side + step) <= limit) side += step;
    const what = vae.graph.component === 'vae_encoder' ? 'VAE encoder' : 'VAE decoder';
    throw new OutOfMemoryError(
        `At ${width}x${height} the ${what} needs a ${formatBytes(needed)} attention buffer but this ` +
            `${vae.ep === 'webgpu' ? 'GPU allows' : 'CPU path allows'} ${formatBytes(limit)} per buffer. ` +
            `Choose a smaller size (at most about ${side}x${side}).`,
        { needed, limit, width, height },
    );
}

/** Each variant with half-precision activations, and its sibling on the same 4-bit weights with fp32 activations. */
const FP32_ACTIVATIONS = Object.freeze({ q4f16: 'q4', fp16: 'fp32' });

/**
 * The graphs to run instead when the chosen text encoder or transformer overflowed half precision: the variant
 * with fp32 activations of the one chosen (q4f16 -> q4, fp16 -> fp32), where the repository has it for both (a
 * precision forces both). `from` is the chosen variant; `to` is null when it has no such sibling here.
 * @param {Manifest} manifest
 * @param {Choices} choices  The chosen graphs (only the text encoder's and the transformer's are read).
 * @returns {{from: string, to: string | null} | null}  null when the chosen graphs compute in fp32 already.
 */
export function activationFallback(manifest, choices) {
    const from = [choices.transformer, choices.text_encoder]
        .map((c) => c.graph.variant)
        .find((v) => Object.hasOwn(FP32_ACTIVATIONS, v));
    if (!from) return null;
    const to = FP32_ACTIVATIONS[/** @type {keyof typeof FP32_ACTIVATIONS} */ (from)];
    const has = (/** @type {string} */ component) =>
        manifest.graphs.some((g) => g.component === component && g.variant === to);
    return { from, to: has('text_encoder') && has('transformer') ? to : null };
}
