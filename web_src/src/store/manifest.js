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
    COMPONENTS,
    DISTILLED,
    OPTIONAL_COMPONENTS,
    TOKENIZER_FILES,
    VARIANTS,
    graphFiles,
} from '../shared/model_repo.js';

export const MANIFEST_NAME = 'manifest.json';
export const FORMAT = 'klein-web-model-repo';
export const FORMAT_VERSION = 1;

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

/** Bounds of a block's size (builder/repo/manifest.py MIN_BLOCK_SIZE, MAX_BLOCK_SIZE). */
const MIN_BLOCK_SIZE = 1 << 20;
const MAX_BLOCK_SIZE = 1 << 30;

/**
 * A file entry's `blocks` (optional, only beside a sha256): one SHA-256 per block of `size` bytes.
 * @param {any} entry
 * @param {string | null} sha256
 * @param {string} where
 * @param {(what: string) => never} bad
 * @returns {import('../shared/model_repo.js').Blocks | null}
 */
function parseBlocks(entry, sha256, where, bad) {
    const blocks = entry.blocks;
    if (blocks === undefined || blocks === null) return null;
    if (sha256 === null) bad(`${where}.blocks needs the file's sha256 beside it`);
    const size = blocks?.size;
    if (!Number.isSafeInteger(size) || size < MIN_BLOCK_SIZE || size > MAX_BLOCK_SIZE)
        bad(`${where}.blocks.size must be an integer from ${MIN_BLOCK_SIZE} to ${MAX_BLOCK_SIZE}`);
    const count = Math.ceil(entry.size / size);
    const digests = blocks.sha256;
    if (
        !Array.isArray(digests) ||
        digests.length !== count ||
        digests.some((/** @type {any} */ d) => typeof d !== 'string' || !/^[0-9a-f]{64}$/.test(d))
    )
        bad(`${where}.blocks.sha256 must be a list of ${count} SHA-256 digests, one per block`);
    return { size, sha256: digests };
}

/** The most steps a manifest's `pipeline.steps` may say (builder/repo/manifest.py `_pipeline`). */
const PIPELINE_STEPS_MAX = 1000;

/**
 * manifest.json's optional `pipeline` (builder/repo/manifest.py `_pipeline`, the same rules): absent, the model is
 * distilled klein (4 steps, no guidance).
 * @param {any} value
 * @param {(what: string) => never} bad
 * @returns {import('../shared/model_repo.js').PipelineDefaults}
 */
export function parsePipeline(value, bad) {
    if (value === undefined) return DISTILLED;
    const keys = ['guidance_scale', 'inpaint_guidance_scale', 'is_distilled', 'steps'];
    if (!value || typeof value !== 'object' || Array.isArray(value) || Object.keys(value).sort().join() !== keys.join())
        bad('"pipeline" must be an object {is_distilled, steps, guidance_scale, inpaint_guidance_scale}');
    if (typeof value.is_distilled !== 'boolean') bad('"pipeline.is_distilled" must be true or false');
    const { steps } = value;
    if (!Number.isSafeInteger(steps) || steps < 1 || steps > PIPELINE_STEPS_MAX)
        bad(`"pipeline.steps" must be a positive integer, got ${JSON.stringify(steps)}`);
    /** @param {string} key @returns {number | null} */
    const scale = (key) => {
        const given = value[key];
        if (given === null) return null;
        if (typeof given !== 'number' || !Number.isFinite(given) || given < 1)
            bad(`"pipeline.${key}" must be a finite number of at least 1, or null, got ${JSON.stringify(given)}`);
        return given;
    };
    return {
        isDistilled: value.is_distilled,
        steps,
        guidanceScale: scale('guidance_scale'),
        inpaintGuidanceScale: scale('inpaint_guidance_scale'),
    };
}

/**
 * Validate a manifest.json object (the schema of builder/repo/manifest.py) and camel-case it.
 * @param {any} json
 * @param {string} modelBase
 * @returns {Manifest}
 */
export function parseManifest(json, modelBase) {
    const where = modelBase + MANIFEST_NAME;
    /** @param {string} what @returns {never} */
    const bad = (what) => {
        throw new ModelFileError(
            `${where} is malformed: ${what}. Re-create it with \`klein-web fetch\` or \`klein-web convert\`.`,
            {
                url: where,
            },
        );
    };
    if (!json || typeof json !== 'object') bad('not a JSON object');
    if (json.format !== FORMAT) bad(`"format" is ${JSON.stringify(json.format)}, expected ${JSON.stringify(FORMAT)}`);
    if (!Number.isInteger(json.format_version) || json.format_version > FORMAT_VERSION) {
        bad(
            `"format_version" ${JSON.stringify(json.format_version)} is newer than this app reads (${FORMAT_VERSION}); reload the app`,
        );
    }
    if (!json.files || typeof json.files !== 'object') bad('"files" must be an object of {path: {size, sha256}}');
    /** @type {Manifest['files']} */
    const files = {};
    for (const [path, entry] of Object.entries(json.files)) {
        if (!entry || !Number.isSafeInteger(entry.size) || entry.size < 0)
            bad(`files[${JSON.stringify(path)}].size must be a non-negative integer`);
        const sha256 = typeof entry.sha256 === 'string' ? entry.sha256 : null;
        files[path] = {
            size: entry.size,
            sha256,
            blocks: parseBlocks(entry, sha256, `files[${JSON.stringify(path)}]`, bad),
        };
    }
    if (!Array.isArray(json.graphs) || json.graphs.length === 0) bad('"graphs" must be a non-empty list');
    const known = [...COMPONENTS, ...OPTIONAL_COMPONENTS];
    /** @type {GraphEntry[]} */
    const graphs = json.graphs.map((/** @type {any} */ g, /** @type {number} */ i) => {
        if (!g || !known.includes(g.component)) bad(`graphs[${i}].component must be one of ${known.join(', ')}`);
        if (!VARIANTS.includes(g.variant)) bad(`graphs[${i}].variant must be one of ${VARIANTS.join(', ')}`);
        if (typeof g.path !== 'string' || !g.path.endsWith('.onnx')) bad(`graphs[${i}].path must name an .onnx file`);
        if (
            !Array.isArray(g.external_data) ||
            g.external_data.some((/** @type {any} */ n) => typeof n !== 'string' || n.includes('/'))
        ) {
            bad(`graphs[${i}].external_data must be a list of bare file names`);
        }
        /**
         * An optional count field: `fallback` when absent (or null where `nullable`), else a positive integer.
         * @template T
         * @param {string} key @param {T} fallback @param {boolean} nullable
         * @returns {number | T}
         */
        const count = (key, fallback, nullable) => {
            if (g[key] === undefined || (nullable && g[key] === null)) return fallback;
            if (!Number.isSafeInteger(g[key]) || g[key] < 1)
                bad(`graphs[${i}].${key} must be a positive integer${nullable ? ' or null' : ''}`);
            return g[key];
        };
        const entry = {
            component: g.component,
            variant: g.variant,
            path: g.path,
            externalData: [...g.external_data],
            precision: String(g.precision ?? ''),
            requiresF16: Boolean(g.requires_f16),
            cpuNodesWithoutF16: Array.isArray(g.cpu_nodes_without_f16) ? g.cpu_nodes_without_f16.map(String) : [],
            attentionQueryBlocks: count('attention_query_blocks', 1, false),
            attentionMaxTokens: count('attention_max_tokens', null, true),
            attentionHeads: count('attention_heads', null, true),
        };
        for (const path of graphFiles(entry)) if (!(path in files)) bad(`graph file ${path} is not listed in "files"`);
        return entry;
    });
    for (const path of TOKENIZER_FILES) if (!(path in files)) bad(`${path} is not listed in "files"`);
    // Optional (builder/repo/manifest.py `loras`): what the transformer's weights have merged in.
    const loras = json.loras ?? [];
    if (!Array.isArray(loras)) bad('"loras" must be a list of {file, sha256, scale}');
    /** @type {import('../shared/model_repo.js').LoraEntry[]} */
    const loraEntries = loras.map((/** @type {any} */ l, /** @type {number} */ i) => {
        if (!l || typeof l.file !== 'string' || typeof l.sha256 !== 'string' || !Number.isFinite(l.scale)) {
            bad(`loras[${i}] must be an object {file, sha256, scale}`);
        }
        return { file: l.file, sha256: l.sha256, scale: l.scale };
    });
    return {
        modelBase,
        source: String(json.source ?? modelBase),
        seedLayout: false,
        files,
        graphs,
        loras: loraEntries,
        pipeline: parsePipeline(json.pipeline, bad),
        raw: json,
    };
}
