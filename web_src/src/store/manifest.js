// @ts-check
/**
 * @file The model repository's table of contents: `manifest.json` (the schema builder/repo/manifest.py
 * writes), validated into a camel-cased `Manifest`; or, when the repository has none (the seed repo on
 * the Hub), the built-in seed layout with sizes still unknown (the weight store learns them from
 * Content-Length).
 * @module store/manifest
 */

import { InputError, ModelFileError, NetworkError } from '../shared/errors.js';
import {
    CHAT_TEMPLATE_FILE,
    DISTILLED,
    FORMAT_VERSION,
    SCHEMA,
    TOKENIZER_FILES,
    graphFiles,
    pipelineDefaults,
} from '../shared/model_repo.js';
import { SchemaProblem, check, typeOf } from './schema_check.js';

export const MANIFEST_NAME = 'manifest.json';

/** @typedef {import('../shared/model_repo.js').GraphEntry} GraphEntry */
/** @typedef {import('../shared/model_repo.js').Manifest} Manifest */

/**
 * `transformer`, `q4`, 2 -> the seed naming scheme (builder.manifest.graph_path / external_data_names).
 * @param {string} component
 * @param {string} variant
 * @param {number} count
 * @returns {{path: string, externalData: string[]}}
 */
function seedNames(component, variant, count) {
    const base = `${component}_${variant}.onnx_data`;
    return {
        path: `${component}/${component}_${variant}.onnx`,
        externalData: Array.from({ length: count }, (_, i) => (i === 0 ? base : `${base}_${i}`)),
    };
}

// Port of builder/repo/seed_layout.py SEED_GRAPHS / seed_graphs(): the layout of kny/FLUX.2-klein-4B-onnx-web.
const SEED_GRAPHS = Object.freeze([
    ['text_encoder', 'q4', 2, 'q4 MatMulNBits (block 32, symmetric, accuracy_level 4); token embedding fp16', true],
    ['transformer', 'q4', 2, 'q4 MatMulNBits (block 32, symmetric); modulation Gemms, norms, biases fp32', false],
    ['vae_decoder', 'fp16', 1, 'fp16 weights and compute, fp32 I/O', true],
]);

/**
 * The seed repository's layout, for a model base without manifest.json. Sizes are unknown (null).
 * @param {string} modelBase
 * @param {{chatTemplate?: boolean}} [options]  `chatTemplate`: the repo has tokenizer/chat_template.jinja
 *   (newer transformers save the template there instead of in tokenizer_config.json).
 * @returns {Manifest}
 */
export function seedManifest(modelBase, { chatTemplate = false } = {}) {
    /** @type {GraphEntry[]} */
    const graphs = SEED_GRAPHS.map(([component, variant, count, precision, requiresF16]) => ({
        component: String(component),
        variant: String(variant),
        ...seedNames(String(component), String(variant), Number(count)),
        precision: String(precision),
        requiresF16: Boolean(requiresF16),
        // The seed's token-embedding node names are not known here: without shader-f16 the whole text
        // encoder goes to the wasm EP instead (models/graph_choice.js).
        cpuNodesWithoutF16: [],
        attentionQueryBlocks: 1,
        attentionMaxTokens: null,
        attentionHeads: null,
        largestWeightBytes: null,
    }));
    /** @type {Manifest['files']} */
    const files = {};
    const tokenizerFiles = chatTemplate ? [...TOKENIZER_FILES, CHAT_TEMPLATE_FILE] : TOKENIZER_FILES;
    for (const path of [...graphs.flatMap(graphFiles), ...tokenizerFiles])
        files[path] = { size: null, sha256: null, blocks: null };
    return { modelBase, source: modelBase, seedLayout: true, files, graphs, loras: [], pipeline: DISTILLED, raw: null };
}

/**
 * The model base must be an absolute http(s) URL of a folder.
 * @param {unknown} modelBase
 * @returns {string}
 */
export function checkModelBase(modelBase) {
    let url = null;
    try {
        url = new URL(String(modelBase));
    } catch {
        url = null;
    }
    if (typeof modelBase !== 'string' || !url || !/^https?:$/.test(url.protocol) || !modelBase.endsWith('/')) {
        throw new InputError(
            `\`modelBase\` must be an absolute http(s) URL ending in '/', got ${JSON.stringify(modelBase)}; ` +
                "e.g. 'https://huggingface.co/kny/FLUX.2-klein-4B-onnx-web/resolve/main/'.",
            { modelBase },
        );
    }
    return modelBase;
}

/**
 * Fetch `manifest.json` from the model base; the seed layout when it is absent (HTTP 404).
 * @param {string} modelBase
 * @param {{signal?: AbortSignal}} [options]
 * @returns {Promise<Manifest>}
 */
export async function fetchManifest(modelBase, { signal } = {}) {
    const url = checkModelBase(modelBase) + MANIFEST_NAME;
    let response;
    try {
        // no-cache: revalidate, so a re-converted repo is noticed (stale sizes -> re-download).
        response = await fetch(url, { cache: 'no-cache', signal });
    } catch (err) {
        if (signal?.aborted) throw signal.reason;
        throw new NetworkError(`Could not reach the model server for ${url} (${String(err)}). Check the connection.`, {
            url,
        });
    }
    if (response.status === 404) {
        return seedManifest(modelBase, { chatTemplate: await exists(modelBase + CHAT_TEMPLATE_FILE, signal) });
    }
    if (!response.ok) {
        throw new NetworkError(`The model server answered HTTP ${response.status} for ${url}. Check the model URL.`, {
            url,
            status: response.status,
        });
    }
    let json;
    try {
        json = await response.json();
    } catch (err) {
        throw new ModelFileError(
            `${url} is not JSON (${String(err)}); the model repository is broken or the URL is wrong.`,
            { url },
        );
    }
    return parseManifest(json, modelBase);
}

/**
 * Whether the server has a file (HEAD answered 2xx). An unreachable server counts as "no": the caller's
 * own download of the required files reports the network problem.
 * @param {string} url
 * @param {AbortSignal | undefined} signal
 * @returns {Promise<boolean>}
 */
async function exists(url, signal) {
    try {
        const response = await fetch(url, { method: 'HEAD', cache: 'no-cache', signal });
        return response.ok;
    } catch (err) {
        if (signal?.aborted) throw signal.reason;
        return false;
    }
}

const GRAPH_FIELDS = SCHEMA.$defs.graph.properties;

/**
 * A graph field of the manifest, or the schema's default where the manifest leaves it out.
 * @param {Record<string, any>} graph
 * @param {keyof GRAPH_FIELDS} key
 */
function graphField(graph, key) {
    return Object.hasOwn(graph, key) ? graph[key] : /** @type {any} */ (GRAPH_FIELDS[key]).default;
}

/**
 * Validate a manifest.json object against the schema (builder/repo/manifest_schema.json) and camel-case it.
 * @param {any} json
 * @param {string} modelBase
 * @returns {Manifest}
 */
export function parseManifest(json, modelBase) {
    const where = modelBase + MANIFEST_NAME;
    const version = json?.format_version;
    if (typeOf(version) === 'integer' && version > FORMAT_VERSION) {
        throw new ModelFileError(
            `${where} is format version ${version}; this app reads up to ${FORMAT_VERSION}. Reload the app.`,
            { url: where },
        );
    }
    try {
        check(SCHEMA, json);
    } catch (err) {
        if (!(err instanceof SchemaProblem)) throw err;
        throw new ModelFileError(
            `${where} is malformed: ${err.message}. Re-create it with \`klein-web fetch\` or \`klein-web convert\`.`,
            { url: where },
        );
    }
    /** @type {Manifest['files']} */
    const files = {};
    for (const [path, entry] of Object.entries(/** @type {Record<string, any>} */ (json.files))) {
        const blocks = entry.blocks ?? null;
        files[path] = {
            size: entry.size,
            sha256: entry.sha256 ?? null,
            blocks: blocks === null ? null : { size: blocks.size, sha256: [...blocks.sha256] },
        };
    }
    /** @type {GraphEntry[]} */
    const graphs = json.graphs.map((/** @type {any} */ g) => ({
        component: g.component,
        variant: g.variant,
        path: g.path,
        externalData: [...g.external_data],
        precision: g.precision,
        requiresF16: graphField(g, 'requires_f16'),
        cpuNodesWithoutF16: [...graphField(g, 'cpu_nodes_without_f16')],
        attentionQueryBlocks: graphField(g, 'attention_query_blocks'),
        attentionMaxTokens: graphField(g, 'attention_max_tokens'),
        attentionHeads: graphField(g, 'attention_heads'),
        largestWeightBytes: graphField(g, 'largest_weight_bytes'),
    }));
    const loras = json.loras ?? SCHEMA.properties.loras.default;
    return {
        modelBase,
        source: json.source,
        seedLayout: false,
        files,
        graphs,
        loras: loras.map((/** @type {any} */ l) => ({ file: l.file, sha256: l.sha256, scale: l.scale })),
        pipeline: json.pipeline === undefined ? DISTILLED : pipelineDefaults(json.pipeline),
        raw: json,
    };
}
