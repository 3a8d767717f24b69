// @ts-check
/**
 * @file The model repository as the app reads it: the `Manifest` and `GraphEntry` shapes (builder/repo/manifest.py's
 * schema, camel-cased), its components and variants, and where a graph's and the tokenizer's files live.
 * store/ fetches and downloads these files; models/ chooses among the graphs; the stages read their graphs' outputs
 * by the names the contract gives them (requireOutput).
 * @module shared/model_repo
 */

import SCHEMA from '../../../builder/repo/manifest_schema.json' with { type: 'json' };
import { ModelFileError } from './errors.js';

/**
 * The schema of manifest.json, which the Python tool reads too (builder/repo/manifest.py): every field, its bounds,
 * and the names below. store/manifest.js checks manifests against it.
 */
export { SCHEMA };
const GRAPH_FIELDS = SCHEMA.$defs.graph.properties;

/** What manifest.json's `format` says, and the newest `format_version` this app reads. */
export const FORMAT = SCHEMA.properties.format.const;
export const FORMAT_VERSION = SCHEMA.properties.format_version.maximum;

/** The components text-to-image runs: every repository has them (the schema's graphs contain one of each). */
export const COMPONENTS = Object.freeze(
    SCHEMA.properties.graphs.allOf.map((part) => part.contains.properties.component.const),
);
/**
 * Components a repository may list besides those: the VAE encoder, for editing and inpainting. The manifest accepts
 * their graphs; text-to-image never chooses or downloads them.
 */
export const OPTIONAL_COMPONENTS = Object.freeze(GRAPH_FIELDS.component.enum.filter((c) => !COMPONENTS.includes(c)));
export const VARIANTS = Object.freeze([...GRAPH_FIELDS.variant.enum]);
/** The tokenizer files every repository has (the schema's files require them). */
export const TOKENIZER_FILES = Object.freeze([...SCHEMA.properties.files.required]);
export const CHAT_TEMPLATE_FILE = 'tokenizer/chat_template.jinja';
/**
 * The step previews' colour map, fitted to the repository's VAE by `klein-web convert` (builder/convert/preview_map.py
 * PREVIEW_MAP_FILE). Optional: without it the app uses the published FLUX.2 map (pipeline/preview.js).
 */
export const PREVIEW_MAP_FILE = 'vae_decoder/preview_map.json';

/** @typedef {string} Component  A component every repository has: one of COMPONENTS. */
/** @typedef {string} AnyComponent  One of COMPONENTS or OPTIONAL_COMPONENTS. */

/**
 * @typedef {Object} GraphEntry
 * @property {string} component             'text_encoder' | 'transformer' | 'vae_decoder' | 'vae_encoder'
 * @property {string} variant              'q4' | 'q4f16' | 'fp32' | 'fp16'
 * @property {string} path                 e.g. 'transformer/transformer_q4.onnx'
 * @property {string[]} externalData       Bare names, exactly the graph's TensorProto `location`s.
 * @property {string} precision            Human-readable.
 * @property {boolean} requiresF16         The WebGPU EP needs shader-f16 for some node.
 * @property {string[]} cpuNodesWithoutF16 Nodes to force onto the CPU when the adapter lacks shader-f16.
 * @property {number} attentionQueryBlocks Attention runs in this many query blocks (1 = one score matrix).
 * @property {number | null} attentionMaxTokens  The longest attention (image + text tokens) the converter sized
 *   this graph for; a transformer variant may have one graph per size class on the same weights. null: any size.
 * @property {number | null} attentionHeads  Heads of its attention score buffers (null: not recorded).
 * @property {number | null} largestWeightBytes  Its largest weight as stored, the largest buffer it binds for one
 *   tensor (the text encoder's token embedding); null: not recorded (the seed layout, older conversions).
 */

/**
 * @typedef {Object} Blocks  The SHA-256 of each `size`-byte block of a file, in order (the last may be shorter).
 * @property {number} size
 * @property {string[]} sha256
 */

/**
 * @typedef {Object} FileEntry  One file of a repository, as its manifest lists it.
 * @property {number | null} size  null: not known yet (the seed layout without a manifest).
 * @property {string | null} sha256
 * @property {Blocks | null} blocks  Its blocks' hashes, when the manifest lists them (store/block_check.js).
 */

/**
 * @typedef {Object} Manifest
 * @property {string} modelBase
 * @property {string} source
 * @property {boolean} seedLayout  True when the repo had no manifest.json and the seed layout is assumed.
 * @property {Record<string, FileEntry>} files
 * @property {GraphEntry[]} graphs
 * @property {LoraEntry[]} loras  LoRAs `klein-web convert --lora` merged into the transformer's weights, in order.
 * @property {PipelineDefaults} pipeline  The model's kind and the defaults diffusers runs it with (DISTILLED when
 *   the manifest has no `pipeline`, and for the seed layout).
 * @property {any} raw  The manifest.json object as fetched (null for the seed layout), kept for offline use.
 */

/**
 * @typedef {Object} LoraEntry
 * @property {string} file  The LoRA file's bare name.
 * @property {string} sha256
 * @property {number} scale
 */

/**
 * @typedef {Object} PipelineDefaults  What kind of FLUX.2 [klein] model a repository holds, and the defaults diffusers
 *   runs it with (builder/repo/manifest.py PipelineDefaults, manifest.json `pipeline`). Distilled models (klein-4B,
 *   klein-9B) run one transformer call a step and ignore any guidance scale; base models run classifier-free guidance
 *   when the scale is above 1: a second call a step, on the negative prompt's embeddings (pipeline/guidance.js).
 * @property {boolean} isDistilled
 * @property {number} steps  The model card's 4 for distilled models; Flux2KleinPipeline's 50 for base models.
 * @property {number | null} guidanceScale  Text and editing (Flux2KleinPipeline); null: no guidance.
 * @property {number | null} inpaintGuidanceScale  Inpainting (Flux2KleinInpaintPipeline); null: no guidance.
 */

/**
 * manifest.json's `pipeline`, which the schema checked, camel-cased.
 * @param {{is_distilled: boolean, steps: number, guidance_scale: number | null, inpaint_guidance_scale: number | null}} value
 * @returns {Readonly<PipelineDefaults>}
 */
export function pipelineDefaults(value) {
    return Object.freeze({
        isDistilled: value.is_distilled,
        steps: value.steps,
        guidanceScale: value.guidance_scale,
        inpaintGuidanceScale: value.inpaint_guidance_scale,
    });
}

/** A manifest without `pipeline` (the seed repository, older conversions) holds distilled klein: the schema's default. */
export const DISTILLED = pipelineDefaults(SCHEMA.properties.pipeline.default);

/**
 * Repo-relative paths of a graph and its external-data files (same folder).
 * @param {GraphEntry} graph
 * @returns {string[]}
 */
export function graphFiles(graph) {
    const folder = graph.path.slice(0, graph.path.lastIndexOf('/') + 1);
    return [graph.path, ...graph.externalData.map((name) => folder + name)];
}

/**
 * An output by its contract name, or a ModelFileError naming what the graph has instead.
 * @param {Record<string, {data: unknown, dims: number[]}>} outputs  A session's outputs, on the CPU.
 * @param {string} name
 * @param {string} graph
 * @returns {{data: Float32Array, dims: number[]}}
 */
export function requireOutput(outputs, name, graph) {
    const tensor = outputs[name];
    if (!tensor || !(tensor.data instanceof Float32Array)) {
        throw new ModelFileError(
            `The ${graph} graph has no float32 output \`${name}\` (it has: ${Object.keys(outputs).join(', ')}); ` +
                'the model does not follow the klein-web contract.',
        );
    }
    return { data: tensor.data, dims: tensor.dims };
}
