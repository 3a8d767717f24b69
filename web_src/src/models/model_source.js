// @ts-check
/**
 * @file The model a request runs: the weight store of its model source, the manifest, the graph and execution
 * provider models/graph_choice.js chose per component for this adapter (within the memory mode
 * models/memory_mode.js chooses for the request), the files those need (downloaded into the store when missing),
 * and the objects made from the model's files (the tokenizer, the step previews' map), made once.
 * @module models/model_source
 */

import { CHAT_TEMPLATE_FILE, TOKENIZER_FILES, graphFiles } from '../shared/model_repo.js';
import { WeightStore } from '../store/weights.js';
import { checkDecodeFits, chooseGraphs } from './graph_choice.js';
import { LEAN_SCORE_BUFFER_BYTES } from './memory_mode.js';

/** @typedef {import('../shared/model_repo.js').AnyComponent} AnyComponent */
/** @typedef {import('../shared/model_repo.js').Manifest} Manifest */
/** @typedef {import('../runtime/gpu.js').Gpu} Gpu */
/** @typedef {import('./memory_mode.js').MemoryBudget} MemoryBudget */
/** @typedef {import('./graph_choice.js').Choice} Choice */
/** @typedef {import('./graph_choice.js').Choices} Choices */
/** @typedef {{tokenizerJson: Blob, tokenizerConfig: Blob, chatTemplate?: Blob}} TokenizerFiles  As stored. */

/**
 * @typedef {Object} Plan  What prepare() chose, before its files are downloaded.
 * @property {Manifest} manifest
 * @property {Choices} choices
 * @property {string[]} notes  For the user: why the run is slower or leaner than it could be.
 * @property {string} tokenizerIdentity  The tokenizer files' paths, sizes and hashes.
 */

/**
 * @typedef {Object} PrepareParams  `memory`: the request's mode; `encodeSizes`: the sizes input images are
 *   encoded at (the VAE encoder is chosen only with some).
 * @property {string} modelBase
 * @property {string} [precision]
 * @property {number} width
 * @property {number} height
 * @property {number} [attentionTokens]
 * @property {{width: number, height: number}[]} [encodeSizes]
 * @property {string} [memory]
 */

export class ModelSource {
    /**
     * @param {{gpu: Gpu, memory: MemoryBudget}} options  `memory`: chooses each request's mode.
     */
    constructor({ gpu, memory }) {
        this.gpu = gpu;
        this.memory = memory;
        /** @type {WeightStore | null} */
        this.store = null;
        /** @type {Manifest | null} */
        this.manifest = null;
        /** @type {Choices | null} */
        this.choices = null;
        /** @type {Map<string, any>} Objects made from the model's files, by key (derive()). */
        this.derived = new Map();
        /** The tokenizer files' paths, sizes and hashes the derived objects were made with. */
        this.derivedFrom = '';
    }

    /**
     * Whether the store open is `modelBase`'s (another model source starts afresh).
     * @param {string} modelBase
     * @returns {boolean}
     */
    serves(modelBase) {
        return this.store?.modelBase === modelBase;
    }

    /**
     * Open the store of `modelBase`, read the manifest and choose the graphs for this adapter; each of
     * `encodeSizes` is checked to fit the VAE encoder, and the image's size the decoder.
     * @param {PrepareParams} params
     * @param {{signal?: AbortSignal}} options
     * @returns {Promise<Plan>}
     */
    async choose({ modelBase, precision, width, height, attentionTokens, encodeSizes = [], memory }, { signal }) {
        if (!this.serves(modelBase)) {
            this.store?.close();
            this.store = await WeightStore.open(modelBase);
        }
        const store = /** @type {WeightStore} */ (this.store);
        await store.reopenIfRemoved(); // the browser's "clear site data" under this page
        const info = await this.gpu.getInfo();
        const manifest = await store.loadManifest({ signal });
        // Which graphs are already stored: a slower variant that is stored beats a faster one still to download.
        const stored = await store.completePaths(manifest.graphs.flatMap((g) => graphFiles(g)));
        const mode = this.memory.choose(memory, info);
        const { choices, notes } = chooseGraphs(manifest, info, precision, attentionTokens, {
            encoder: encodeSizes.length > 0,
            stored,
            scoreBudget: mode.mode === 'lean' ? LEAN_SCORE_BUFFER_BYTES : Infinity,
        });
        for (const { feature, reason, remembered } of this.gpu.grant?.off ?? []) {
            notes.push(
                `The GPU runs without ${feature}: ${remembered ? 'in an earlier visit, ' : ''}it failed in this browser ` +
                    `(${reason.slice(0, 200)}), so slower kernels run instead.` +
                    (remembered
                        ? ' A browser update tries it again.'
                        : ' This is remembered for this browser version.'),
            );
        }
        checkDecodeFits(choices.vae_decoder, { width, height }, info);
        // The encoder's mid-block attention is the decoder's, at the input image's size.
        if (choices.vae_encoder) for (const size of encodeSizes) checkDecodeFits(choices.vae_encoder, size, info);
        if (mode.mode === 'lean' && memory === undefined)
            notes.push(`The app runs in ${mode.why}: one model part at a time, reloaded for each image.`);
        if (info.software)
            notes.push(
                `The GPU adapter is a software renderer (${info.adapter.architecture || info.adapter.description || 'fallback'}): it works, but very slowly.`,
            );
        const tokenizerIdentity = this.tokenizerPaths(manifest)
            .map((p) => `${p}:${manifest.files[p]?.size}:${manifest.files[p]?.sha256}`)
            .join(',');
        return { manifest, choices, notes, tokenizerIdentity };
    }

    /**
     * Make `plan` the current model and download the files of its graphs and tokenizer that are not complete in
     * the store yet.
     * @param {Plan} plan
     * @param {{signal?: AbortSignal, onProgress?: (p: import('../shared/types.js').DownloadProgress) => void}} options
     * @returns {Promise<{downloadedBytes: number, fetched: string[], restarted: string[]}>}  `fetched`: the repo paths
     *   downloaded; `restarted`: a line for each file downloaded again from its start (store/weights.js ensure).
     */
    async download({ manifest, choices }, { signal, onProgress }) {
        this.manifest = manifest;
        this.choices = choices;
        const paths = [...Object.values(choices).flatMap((c) => graphFiles(c.graph)), ...this.tokenizerPaths(manifest)];
        const files = paths.map((path) => ({
            path,
            size: manifest.files[path]?.size ?? null,
            sha256: manifest.files[path]?.sha256 ?? null,
            blocks: manifest.files[path]?.blocks ?? null,
        }));
        return /** @type {WeightStore} */ (this.store).ensure(files, { signal, onProgress });
    }

    /**
     * @param {Manifest} manifest
     * @returns {string[]}
     */
    tokenizerPaths(manifest) {
        return CHAT_TEMPLATE_FILE in manifest.files ? [...TOKENIZER_FILES, CHAT_TEMPLATE_FILE] : [...TOKENIZER_FILES];
    }

    /**
     * The tokenizer files as stored (disk-backed Files): {tokenizerJson, tokenizerConfig, chatTemplate?}.
     * @returns {Promise<TokenizerFiles>}
     */
    async tokenizerFiles() {
        const store = /** @type {WeightStore} */ (this.store);
        const [tokenizerJson, tokenizerConfig] = await Promise.all(TOKENIZER_FILES.map((p) => store.file(p)));
        const manifest = /** @type {Manifest} */ (this.manifest);
        return CHAT_TEMPLATE_FILE in manifest.files
            ? { tokenizerJson, tokenizerConfig, chatTemplate: await store.file(CHAT_TEMPLATE_FILE) }
            : { tokenizerJson, tokenizerConfig };
    }

    /**
     * What an output of `component` is keyed by in a cache: the model source, and the graph and EP that made it.
     * @param {AnyComponent} component
     * @returns {string}
     */
    encoderKey(component) {
        const choice = this.requireChoice(component);
        return `${/** @type {WeightStore} */ (this.store).modelBase}|${choice.identity}|${choice.ep}`;
    }

    /** @returns {Choices} */
    requireChoices() {
        if (!this.choices) throw new Error('Model.prepare() must run before sessions are used.');
        return this.choices;
    }

    /**
     * @param {AnyComponent} component
     * @returns {Choice}
     */
    requireChoice(component) {
        const choice = this.requireChoices()[component];
        if (!choice)
            throw new Error(`Model.prepare() did not choose a ${component} graph (no input images were announced).`);
        return choice;
    }

    /**
     * An object made from the model's files, made once (the tokenizer, in its helper worker; the step previews'
     * map): kept while the tokenizer files stay the same (keepDerived), and for a file of its own, under a key
     * naming that file's version.
     * @template T
     * @param {string} key
     * @param {() => Promise<T>} make
     * @returns {Promise<T>}
     */
    async derive(key, make) {
        if (!this.derived.has(key)) this.derived.set(key, await make());
        return this.derived.get(key);
    }

    /**
     * Keep the derived objects only while the tokenizer files they come from stay the same (`identity`: their
     * paths, sizes and hashes); else forget them, ending those that hold something (the tokenizer's helper worker).
     * @param {string} identity
     */
    keepDerived(identity) {
        if (this.derivedFrom === identity) return;
        this.dropDerived();
        this.derivedFrom = identity;
    }

    /** Forget the derived objects, ending those that hold something (the tokenizer's helper worker). */
    dropDerived() {
        for (const value of this.derived.values()) value?.close?.();
        this.derived.clear();
        this.derivedFrom = '';
    }

    /** Forget the model and close its store: the next prepare() starts afresh. */
    close() {
        this.store?.close();
        this.store = null;
        this.manifest = null;
        this.choices = null;
        this.dropDerived();
    }
}
