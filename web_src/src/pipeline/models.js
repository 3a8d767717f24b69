// @ts-check
/**
 * @file Models: the session cache. It opens the weight store of the model source, has pipeline/graph_choice.js
 * pick one graph and one execution provider per component for this adapter, makes sure the files are in the
 * store, creates sessions one at a time from stored bytes, and decides which sessions stay loaded. The only
 * pipeline module that touches the runtime and the store.
 *
 * Memory policy (pipeline/memory_mode.js): in fast mode a session stays loaded while everything loaded fits a
 * budget derived from the device's memory; when the next stage needs room, the least recently used sessions are
 * released first (the text encoder usually, since prompt embeddings are cached per prompt). In lean mode the
 * budget is zero: one session at a time, and none after the image (finishRun).
 *
 * Loading overlaps where memory allows: in fast mode the next session's files are read (by the store's helper
 * workers) while the current session is created (readAhead), and a run returns once its work is queued (submit),
 * so the next session is created while the GPU computes. Lean mode holds one session's files at a time.
 * @module pipeline/models
 */

import { runtimeError } from '../runtime/errors.js';
import { createSession, float32, int64, profileEvents, release, submit } from '../runtime/ort.js';
import { ModelFileError } from '../shared/errors.js';
import { formatBytes } from '../shared/format.js';
import { CHAT_TEMPLATE_FILE, TOKENIZER_FILES, graphFiles } from '../shared/model_repo.js';
import { WeightStore } from '../store/weights.js';
import { checkDecodeFits, chooseGraphs } from './graph_choice.js';
import { ModelCaches } from './model_caches.js';
import { chooseMemoryMode, LEAN_SCORE_BUFFER_BYTES, memoryBudget } from './memory_mode.js';

/** @typedef {import('../shared/model_repo.js').Component} Component */
/** @typedef {import('../shared/model_repo.js').AnyComponent} AnyComponent */
/** @typedef {import('./graph_choice.js').Choices} Choices */
/** @typedef {import('../shared/model_repo.js').Manifest} Manifest */
/** @typedef {import('../runtime/gpu.js').Gpu} Gpu */
/** @typedef {import('./graph_choice.js').Choice} Choice */
/** @typedef {import('../runtime/ort.js').HostTensor} HostTensor  A session output, on the CPU. */

/**
 * @typedef {Object} Meter  Per-job time accounting, filled in by load and run.
 * @property {number} loadMs
 * @property {number} runMs
 * @property {Partial<Record<AnyComponent, number>>} loadMsByComponent  Session creation (incl. shader compilation) this job.
 * @property {Partial<Record<AnyComponent, number>>} readMsByComponent  The part of it spent waiting for the graph's
 *   files from the store (files read ahead while another session was created cost only the wait that was left;
 *   the rest is onnxruntime: parsing, optimising, uploading the weights).
 * @property {number} startedAt  performance.now() when the job began.
 * @property {import('../protocol.js').TimelineEvent[]} timeline  What the job did when (reads, session creations,
 *   runs, stages), in milliseconds since `startedAt`.
 */

/** @returns {Meter} A meter for a job starting now. */
export function newMeter() {
    return {
        loadMs: 0,
        runMs: 0,
        loadMsByComponent: {},
        readMsByComponent: {},
        startedAt: performance.now(),
        timeline: [],
    };
}

/**
 * Record on the meter's timeline that `what` ran from `started` until now.
 * @param {Meter} meter
 * @param {string} what
 * @param {number} started  performance.now() when it began.
 */
export function mark(meter, what, started) {
    meter.timeline.push({ what, startMs: started - meter.startedAt, endMs: performance.now() - meter.startedAt });
}

/**
 * @typedef {Object} Loaded
 * @property {import('../runtime/ort.js').Session} session
 * @property {Choice} choice
 * @property {number} generation  Gpu.generation the session was created on.
 * @property {number} lastUsed
 * @property {string} dimsKey  How it was created: its static dims, capture, profiling.
 * @property {boolean} profiled  Created with onnxruntime's profiler on (Models.profiling).
 * @property {Promise<unknown>} downloading  Its last run's outputs on their way to the CPU (released after them).
 */

/**
 * @typedef {Object} ReadAhead  A session's files being read before the session is created.
 * @property {string} identity  Choice.identity of the graph they belong to.
 * @property {Promise<Uint8Array[]>} files  The graph, then its external-data files.
 */

/**
 * @typedef {Object} Pin  How a session is created for the runs it will do (see runtime/ort.js SessionOptions).
 * @property {Record<string, number>} dims  Symbolic input dims every run of it will have.
 * @property {boolean} capture  Capture its kernels on WebGPU (a graph run many times at these dims).
 */

/**
 * @typedef {Object} HostInput  A CPU tensor the pipeline hands to a session.
 * @property {Float32Array | BigInt64Array} data
 * @property {number[]} dims
 */

/** @typedef {import('./model_caches.js').PromptEmbedding} PromptEmbedding */
/** @typedef {import('./model_caches.js').ImageLatents} ImageLatents */

/**
 * An output by its contract name, or a ModelFileError naming what the graph has instead.
 * @param {Record<string, HostTensor>} outputs
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

export class Models {
    /**
     * @param {{gpu: Gpu}} options
     */
    constructor({ gpu }) {
        this.gpu = gpu;
        /** @type {WeightStore | null} */
        this.store = null;
        /** @type {Manifest | null} */
        this.manifest = null;
        /** @type {Choices | null} */
        this.choices = null;
        /** @type {Map<AnyComponent, Loaded>} */
        this.loaded = new Map();
        /** @type {Map<AnyComponent, ReadAhead>} */
        this.readsAhead = new Map();
        this.caches = new ModelCaches();
        /** The fast mode's budget. */
        this.fastBudget = memoryBudget(/** @type {Navigator & {deviceMemory?: number}} */ (navigator).deviceMemory);
        /** @type {import('./memory_mode.js').MemoryChoice} The current request's memory mode. */
        this.memory = { mode: 'fast', why: '' };
        /** @type {string | null} Why this worker runs lean from now on: a fast run ran out of memory. */
        this.leanAfterFailure = null;
        /** @type {Map<AnyComponent, string>} whether the last session of a component captured its kernels */
        this.captureState = new Map();
        /** Create sessions with onnxruntime's profiler on (a run asked for its kernels' GPU times: `profile`). */
        this.profiling = false;
    }

    // --- The model: its store, its graphs, what is derived from them --------------------------------------------

    /**
     * Stage 2 (Load models), its `download` part: open the store of `modelBase`, read the manifest, choose the
     * graphs for this adapter, and download the files that are not complete in the store yet. With `encodeSizes`
     * (the sizes input images are encoded at) the VAE encoder is chosen too, and each size checked to fit it.
     * @param {{modelBase: string, precision?: string, width: number, height: number, attentionTokens?: number,
     *   encodeSizes?: {width: number, height: number}[], memory?: string}} params  `memory`: the request's mode.
     * @param {{signal?: AbortSignal, onProgress?: (p: import('../shared/types.js').DownloadProgress) => void}} options
     * @returns {Promise<{notes: string[], downloadedBytes: number}>}
     */
    async prepare(
        { modelBase, precision, width, height, attentionTokens, encodeSizes = [], memory },
        { signal, onProgress },
    ) {
        this.readsAhead.clear();
        const store = await this.openStore(modelBase);
        const info = await this.gpu.getInfo();
        const manifest = await store.loadManifest({ signal });
        // Which graphs are already stored: a slower variant that is stored beats a faster one still to download.
        const stored = await store.completePaths(manifest.graphs.flatMap((g) => graphFiles(g)));
        this.memory = this.chooseMemory(memory, info);
        const { choices, notes } = chooseGraphs(manifest, info, precision, attentionTokens, {
            encoder: encodeSizes.length > 0,
            stored,
            scoreBudget: this.memory.mode === 'lean' ? LEAN_SCORE_BUFFER_BYTES : Infinity,
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
        if (this.memory.mode === 'lean' && memory === undefined)
            notes.push(`The app runs in ${this.memory.why}: one model part at a time, reloaded for each image.`);
        if (info.software)
            notes.push(
                `The GPU adapter is a software renderer (${info.adapter.architecture || info.adapter.description || 'fallback'}): it works, but very slowly.`,
            );
        // A re-converted repository (other sizes or hashes) invalidates the loaded sessions and derived objects.
        // A session of a component not chosen this time (the encoder of a text-to-image run) is released as well.
        for (const [component, loaded] of this.loaded) {
            const choice = choices[component];
            if (!choice || loaded.choice.identity !== choice.identity || loaded.choice.ep !== choice.ep) {
                await this.unload(component);
            }
        }
        const tokenizerIdentity = this.tokenizerPaths(manifest)
            .map((p) => `${p}:${manifest.files[p]?.size}:${manifest.files[p]?.sha256}`)
            .join(',');
        this.caches.deriveFrom(tokenizerIdentity);
        this.manifest = manifest;
        this.choices = choices;
        const paths = [...Object.values(choices).flatMap((c) => graphFiles(c.graph)), ...this.tokenizerPaths(manifest)];
        const files = paths.map((path) => ({
            path,
            size: manifest.files[path]?.size ?? null,
            sha256: manifest.files[path]?.sha256 ?? null,
        }));
        const { downloadedBytes, fetched } = await store.ensure(files, { signal, onProgress });
        await this.forgetReplaced(new Set(fetched), tokenizerIdentity);
        return { notes, downloadedBytes };
    }

    /**
     * The store of `modelBase`; another model source than the last one starts afresh.
     * @param {string} modelBase
     * @returns {Promise<WeightStore>}
     */
    async openStore(modelBase) {
        if (this.store && this.store.modelBase === modelBase) return this.store;
        await this.releaseAll();
        this.caches.clear();
        this.store?.close();
        this.store = await WeightStore.open(modelBase);
        return this.store;
    }

    /**
     * Files downloaded now replace other versions of them (equal sizes, so the identities could not tell):
     * sessions, the tokenizer and the embeddings made from the old bytes are stale.
     * @param {Set<string>} replaced  Repo paths downloaded.
     * @param {string} tokenizerIdentity
     */
    async forgetReplaced(replaced, tokenizerIdentity) {
        for (const [component, loaded] of this.loaded) {
            if (graphFiles(loaded.choice.graph).some((p) => replaced.has(p))) {
                await this.unload(component);
                if (component === 'text_encoder') this.caches.prompts.clear();
                if (component === 'vae_encoder') this.caches.images.clear();
            }
        }
        if (this.tokenizerPaths(/** @type {Manifest} */ (this.manifest)).some((p) => replaced.has(p))) {
            this.caches.derived.clear();
            this.caches.deriveFrom(tokenizerIdentity);
            this.caches.prompts.clear();
        }
    }

    /**
     * The memory mode of a request: the one it asks for, else lean once a fast run of this worker ran out of
     * memory, else the one the machine's facts suggest.
     * @param {string | undefined} requested
     * @param {import('../runtime/gpu.js').GpuInfo} info
     * @returns {import('./memory_mode.js').MemoryChoice}
     */
    chooseMemory(requested, info) {
        if (requested === undefined && this.leanAfterFailure)
            return { mode: 'lean', why: `lean mode: ${this.leanAfterFailure}` };
        const { deviceMemory } = /** @type {Navigator & {deviceMemory?: number}} */ (navigator);
        return chooseMemoryMode({
            requested,
            deviceMemory,
            maxBufferSize: info.maxBufferSize,
            software: info.software,
        });
    }

    /** How many bytes of sessions may stay loaded at once: none beside the one in use in lean mode. */
    get budget() {
        return this.memory.mode === 'lean' ? 0 : this.fastBudget;
    }

    /** The image is done: in lean mode nothing stays on the GPU between images; files read ahead are let go. */
    async finishRun() {
        this.readsAhead.clear();
        if (this.memory.mode === 'lean') await this.releaseAll();
    }

    /**
     * @param {Manifest} manifest
     * @returns {string[]}
     */
    tokenizerPaths(manifest) {
        return CHAT_TEMPLATE_FILE in manifest.files ? [...TOKENIZER_FILES, CHAT_TEMPLATE_FILE] : [...TOKENIZER_FILES];
    }

    /**
     * The variant and EP of each component, how it runs, and this job's session creation time, as the result
     * reports them.
     * @param {Meter} meter
     * @param {Partial<Record<AnyComponent, string>>} [how]  What the run did with a component beyond its graph
     *   (e.g. the VAE decoder's tiles).
     * @returns {Record<string, {variant: string, ep: string, detail: string, loadMs: number, readMs: number}>}
     */
    describe(meter, how = {}) {
        const choices = this.requireChoices();
        return Object.fromEntries(
            Object.entries(choices).map(([c, choice]) => {
                const blocks = choice.graph.attentionQueryBlocks;
                const detail = [];
                if (c !== 'text_encoder')
                    detail.push(blocks > 1 ? `attention in ${blocks} query blocks` : 'attention unsplit');
                const extra = how[/** @type {AnyComponent} */ (c)];
                if (extra) detail.push(extra);
                const capture = this.captureState.get(/** @type {AnyComponent} */ (c));
                if (capture) detail.push(capture);
                const loadMs = meter.loadMsByComponent[/** @type {AnyComponent} */ (c)] ?? 0;
                const readMs = meter.readMsByComponent[/** @type {AnyComponent} */ (c)] ?? 0;
                return [c, { variant: choice.graph.variant, ep: choice.ep, detail: detail.join(', '), loadMs, readMs }];
            }),
        );
    }

    /**
     * The features and limits the shared GPU device was given (null before a WebGPU session was created).
     * @returns {import('../runtime/gpu.js').DeviceGrant | null}
     */
    deviceGrant() {
        return this.gpu.grant;
    }

    /** @returns {Choices} */
    requireChoices() {
        if (!this.choices) throw new Error('Models.prepare() must run before sessions are used.');
        return this.choices;
    }

    /**
     * @param {AnyComponent} component
     * @returns {Choice}
     */
    requireChoice(component) {
        const choice = this.requireChoices()[component];
        if (!choice)
            throw new Error(`Models.prepare() did not choose a ${component} graph (no input images were announced).`);
        return choice;
    }

    /**
     * The tokenizer files, parsed: {tokenizerJson, tokenizerConfig, chatTemplate?}.
     * @returns {Promise<{tokenizerJson: any, tokenizerConfig: any, chatTemplate?: string}>}
     */
    async tokenizerFiles() {
        const store = /** @type {WeightStore} */ (this.store);
        const [tokenizerJson, tokenizerConfig] = await Promise.all(
            TOKENIZER_FILES.map(async (p) => JSON.parse(await store.readText(p))),
        );
        const manifest = /** @type {Manifest} */ (this.manifest);
        const chatTemplate =
            CHAT_TEMPLATE_FILE in manifest.files ? await store.readText(CHAT_TEMPLATE_FILE) : undefined;
        return chatTemplate === undefined
            ? { tokenizerJson, tokenizerConfig }
            : { tokenizerJson, tokenizerConfig, chatTemplate };
    }

    /**
     * A derived object of the current model, built once (e.g. the tokenizer).
     * @template T
     * @param {string} key
     * @param {() => Promise<T>} make
     * @returns {Promise<T>}
     */
    async memo(key, make) {
        return this.caches.derive(key, make);
    }

    /**
     * What a cached output of `component` is keyed by: the model source, and the graph and EP that made it.
     * @param {AnyComponent} component
     * @returns {string}
     */
    encoderKey(component) {
        const choice = this.requireChoice(component);
        return `${/** @type {WeightStore} */ (this.store).modelBase}|${choice.identity}|${choice.ep}`;
    }

    /**
     * @param {string} prompt
     * @returns {PromptEmbedding | undefined}
     */
    cachedPrompt(prompt) {
        return this.caches.prompts.get(`${this.encoderKey('text_encoder')}|${prompt}`);
    }

    /**
     * @param {string} prompt
     * @param {PromptEmbedding} embedding
     */
    cachePrompt(prompt, embedding) {
        this.caches.prompts.set(`${this.encoderKey('text_encoder')}|${prompt}`, embedding);
    }

    /**
     * The cache key of an input image's latents: the encoder, the file's hash, and how it was made into pixels
     * (`how`: the mode's preprocessing and the size it was used at).
     * @param {string} sha256
     * @param {string} how
     * @returns {string}
     */
    imageKey(sha256, how) {
        return `${this.encoderKey('vae_encoder')}|${sha256}|${how}`;
    }

    /**
     * @param {string} key  imageKey()
     * @returns {ImageLatents | undefined}
     */
    cachedImage(key) {
        return this.caches.images.get(key);
    }

    /**
     * @param {string} key  imageKey()
     * @param {ImageLatents} latents
     */
    cacheImage(key, latents) {
        this.caches.images.set(key, latents);
    }

    // --- Sessions ----------------------------------------------------------------------------------------------

    /**
     * Stage 2 (Load models), its `load` part: create the sessions in `components` order while they all fit the
     * memory budget; the first is always loaded, later ones that do not fit are loaded when their stage comes. In
     * fast mode each one's files are read while the one before it is created, through `next` (components created
     * later in the run) as well.
     * @param {AnyComponent[]} components
     * @param {{meter: Meter, signal?: AbortSignal, pins?: Partial<Record<AnyComponent, Pin>>, next?: AnyComponent[],
     *   onLoaded?: (component: AnyComponent) => Promise<void>}} options  `pins`: how each session will run (see
     *   session()); `onLoaded`: work to start as soon as a session exists, before the next one is created.
     */
    async preload(components, { meter, signal, pins = {}, next = [], onLoaded }) {
        const now = this.fitting(components);
        const reads = [...now, ...components.filter((c) => !now.includes(c)), ...next];
        for (const [i, component] of now.entries()) {
            if (this.budget > 0) this.readAhead(reads[i + 1], meter);
            await this.session(component, { meter, signal, pin: pins[component] });
            await onLoaded?.(component);
        }
    }

    /**
     * The first of `components`, and those after it while all of them fit the memory budget together.
     * @param {AnyComponent[]} components
     * @returns {AnyComponent[]}
     */
    fitting(components) {
        let planned = 0;
        /** @type {AnyComponent[]} */
        const fit = [];
        for (const [i, component] of components.entries()) {
            planned += this.requireChoice(component).bytes;
            if (i > 0 && planned > this.budget) break;
            fit.push(component);
        }
        return fit;
    }

    /**
     * Whether session(component, {pin}) would release no other session: it is loaded as `pin` asks, or it can be
     * created beside the others within the memory budget (one loaded with other dims is created anew).
     * @param {AnyComponent} component
     * @param {Pin} [pin]
     * @returns {boolean}
     */
    fits(component, pin) {
        const existing = this.loaded.get(component);
        if (existing?.dimsKey === this.dimsKey(pin)) return true;
        const others = [...this.loaded.entries()].filter(([c]) => c !== component);
        const used = others.reduce((sum, [, l]) => sum + l.choice.bytes, 0);
        return used + this.requireChoice(component).bytes <= this.budget;
    }

    /**
     * How a session is created, as a key: its pinned dims, capture, and the profiler (a session created otherwise
     * is created anew).
     * @param {Pin} [pin]
     * @returns {string}
     */
    dimsKey(pin) {
        return JSON.stringify([pin ? Object.entries(pin.dims).sort() : null, pin?.capture ?? false, this.profiling]);
    }

    /**
     * Start reading the files of `component`'s session, for session() to take (nothing when it is loaded or read
     * already). They are held in memory until then: fast mode only.
     * @param {AnyComponent | undefined} component
     * @param {Meter} meter
     */
    readAhead(component, meter) {
        const choice = component && this.choices?.[component];
        if (!component || !choice || this.loaded.get(component)?.choice.identity === choice.identity) return;
        if (this.readsAhead.get(component)?.identity === choice.identity) return;
        const started = performance.now();
        const files = /** @type {WeightStore} */ (this.store).readFiles(graphFiles(choice.graph));
        // A failed read is thrown by session(), which reads again.
        files.then(
            () => mark(meter, `read ${component} ahead`, started),
            () => {},
        );
        this.readsAhead.set(component, { identity: choice.identity, files });
    }

    /**
     * The session of `component`, created if needed (after releasing least recently used sessions
     * until it fits the budget).
     * @param {AnyComponent} component
     * @param {{meter: Meter, signal?: AbortSignal, pin?: Pin}} options  `pin`: the symbolic input dims every
     *   run of this session will have (the transformer's img_seq and txt_seq in a denoising loop), and whether it
     *   captures its kernels on WebGPU (runtime/ort.js). A session pinned otherwise is created anew.
     * @returns {Promise<import('../runtime/ort.js').Session>}
     */
    async session(component, { meter, signal, pin }) {
        const choice = this.requireChoice(component);
        const existing = this.loaded.get(component);
        const dimsKey = this.dimsKey(pin);
        if (
            existing &&
            existing.choice.ep === 'webgpu' &&
            (existing.generation !== this.gpu.generation || this.gpu.lost)
        ) {
            // Created on a device that has since been lost: its buffers are gone.
            await this.unload(component);
        } else if (existing && existing.dimsKey !== dimsKey) {
            // Pinned to other dims (another image size): its kernels were captured for those. Or profiled (or not)
            // otherwise than this run asks.
            await this.unload(component);
        } else if (existing) {
            existing.lastUsed = performance.now();
            return existing.session;
        }
        signal?.throwIfAborted();
        await this.makeRoom(choice.bytes, component);
        const what = `Loading the ${component} (${choice.graph.variant}, ${choice.ep})`;
        const started = performance.now();
        let session;
        try {
            const device = choice.ep === 'webgpu' ? await this.gpu.getDevice() : undefined;
            const [graphBytes, ...data] = await this.takeFiles(component, choice, meter);
            // Exactly the external-data entries the graph stores, by bare name, as bytes from the store.
            const externalData = data.map((bytes, i) => ({ path: choice.graph.externalData[i], data: bytes }));
            const creating = performance.now();
            session = await createSession(graphBytes, externalData, {
                ep: choice.ep,
                device,
                forceCpuNodeNames: choice.forceCpuNodeNames,
                staticDims: pin?.dims,
                capture: pin?.capture ?? false,
                profile: this.profiling,
            });
            mark(meter, `create ${component}`, creating);
        } catch (err) {
            throw runtimeError(err, this.gpu, what);
        } finally {
            const elapsed = performance.now() - started;
            meter.loadMs += elapsed;
            meter.loadMsByComponent[component] = (meter.loadMsByComponent[component] ?? 0) + elapsed;
        }
        this.loaded.set(component, {
            session,
            choice,
            generation: this.gpu.generation,
            lastUsed: performance.now(),
            dimsKey,
            profiled: this.profiling,
            downloading: Promise.resolve(),
        });
        if (session.capture) this.captureState.set(component, 'graph capture');
        else if (session.captureRefused)
            this.captureState.set(component, `no graph capture (${session.captureRefused.slice(0, 160)})`);
        else this.captureState.delete(component);
        return session;
    }

    /**
     * The files of `component`'s graph: those read ahead, else read now. The wait is the meter's read time.
     * @param {AnyComponent} component
     * @param {Choice} choice
     * @param {Meter} meter
     * @returns {Promise<Uint8Array[]>}
     */
    async takeFiles(component, choice, meter) {
        const started = performance.now();
        const ahead = this.readsAhead.get(component);
        this.readsAhead.delete(component);
        const files = ahead?.identity === choice.identity ? await ahead.files.catch(() => null) : null;
        const read = files ?? (await /** @type {WeightStore} */ (this.store).readFiles(graphFiles(choice.graph)));
        meter.readMsByComponent[component] = (meter.readMsByComponent[component] ?? 0) + performance.now() - started;
        mark(meter, `read ${component}${ahead ? ' (waiting for the read ahead)' : ''}`, started);
        return read;
    }

    /**
     * Release least recently used sessions until `bytes` more fit in the budget.
     * @param {number} bytes
     * @param {AnyComponent} keep
     */
    async makeRoom(bytes, keep) {
        const used = () => [...this.loaded.values()].reduce((sum, l) => sum + l.choice.bytes, 0);
        const byAge = [...this.loaded.entries()]
            .filter(([c]) => c !== keep)
            .sort((a, b) => a[1].lastUsed - b[1].lastUsed);
        for (const [component] of byAge) {
            if (used() + bytes <= this.budget) break;
            await this.unload(component);
        }
    }

    /**
     * Run a session on CPU tensors: resolves once its work is queued, with its outputs on their way to the CPU
     * (`outputs`); meanwhile other sessions may be created or run. Timed into the meter; failures are mapped to
     * user-facing errors.
     * @param {import('../runtime/ort.js').Session} session
     * @param {Record<string, HostInput>} inputs  By graph input name.
     * @param {{meter: Meter, what: string}} options
     * @returns {Promise<{outputs: Promise<Record<string, HostTensor>>}>}
     */
    async submit(session, inputs, { meter, what }) {
        /** @type {Record<string, import('../runtime/ort.js').Tensor>} */
        const feeds = {};
        for (const [name, input] of Object.entries(inputs)) {
            feeds[name] =
                input.data instanceof BigInt64Array ? int64(input.data, input.dims) : float32(input.data, input.dims);
        }
        const started = performance.now();
        const fail = (/** @type {unknown} */ err) => {
            throw runtimeError(err, this.gpu, what);
        };
        const queued = await submit(session, feeds).catch(fail);
        const outputs = queued.outputs
            .then((host) => {
                // Outputs read back from a device that died during the run cannot be trusted.
                if (this.gpu.lost) throw new Error(this.gpu.lostMessage ?? 'device lost');
                if (session.ep === 'webgpu') this.gpu.used = true;
                return host;
            })
            .catch(fail)
            .finally(() => {
                meter.runMs += performance.now() - started;
                mark(meter, what, started);
            });
        const loaded = [...this.loaded.values()].find((l) => l.session === session);
        if (loaded) loaded.downloading = outputs.catch(() => {});
        return { outputs };
    }

    /**
     * Run a session on CPU tensors and wait for its outputs (submit(), awaited).
     * @param {import('../runtime/ort.js').Session} session
     * @param {Record<string, HostInput>} inputs  By graph input name.
     * @param {{meter: Meter, what: string}} options
     * @returns {Promise<Record<string, HostTensor>>}
     */
    async run(session, inputs, options) {
        return (await this.submit(session, inputs, options)).outputs;
    }

    /**
     * End the profiling of every profiled session and release it (a session's profiler runs once; the next run
     * creates its sessions as it asks). A profiled session released earlier to make room took its events along.
     * @returns {Promise<Partial<Record<AnyComponent, import('../shared/types.js').ProfileEvent[]>>>}
     */
    async endProfiling() {
        /** @type {Partial<Record<AnyComponent, import('../shared/types.js').ProfileEvent[]>>} */
        const events = {};
        for (const [component, loaded] of [...this.loaded.entries()]) {
            if (!loaded.profiled) continue;
            try {
                events[component] = await profileEvents(loaded.session);
            } finally {
                await this.unload(component);
            }
        }
        return events;
    }

    /** @param {AnyComponent} component */
    async unload(component) {
        const loaded = this.loaded.get(component);
        if (!loaded) return;
        this.loaded.delete(component);
        // Its last outputs are read from its buffers: released after them.
        await loaded.downloading;
        // Releasing a session of a lost device may throw; its memory is gone either way.
        await release(loaded.session).catch(() => {});
    }

    /** Forget everything about the current model (after "clear cached model"): the next prepare() starts afresh. */
    async reset() {
        await this.releaseAll();
        this.store?.close();
        this.store = null;
        this.manifest = null;
        this.choices = null;
        this.caches.clear();
    }

    /** Release every session (cancel, model change): gives the GPU memory back, and the files read ahead. */
    async releaseAll() {
        this.readsAhead.clear();
        for (const component of [...this.loaded.keys()]) await this.unload(component);
    }

    /**
     * Human-readable sizes of the chosen graphs (for the load stage's detail line).
     * @returns {string}
     */
    summary() {
        const choices = this.requireChoices();
        return Object.entries(choices)
            .map(([c, choice]) => `${c} ${choice.graph.variant}/${choice.ep} ${formatBytes(choice.bytes)}`)
            .join(', ');
    }
}
