// @ts-check
/**
 * @file Which sessions stay loaded: sessions are created one at a time from stored bytes, the graph and EP
 * models/model_source.js chose, and kept while everything loaded fits the request's memory budget.
 *
 * Memory policy (models/memory_mode.js): in fast mode a session stays loaded while everything loaded fits a
 * budget derived from the device's memory; when the next stage needs room, the least recently used sessions are
 * released first (the text encoder usually, since prompt embeddings are cached per prompt). In lean mode the
 * budget is zero: one session at a time, and none after the image (finishRun).
 *
 * Loading overlaps where memory allows: in fast mode the next session's files are read (by the store's helper
 * workers) while the current session is created (readAhead), and a run returns once its work is queued
 * (models/session_runs.js), so the next session is created while the GPU computes. Lean mode holds one
 * session's files at a time.
 * @module models/sessions
 */

import { runtimeError } from '../runtime/errors.js';
import { createSession, profileEvents, release } from '../runtime/ort.js';
import { graphFiles } from '../shared/model_repo.js';
import { filesToRead, uploadGraph, uploadsWeights, wholeFiles } from './graph_upload.js';
import { mark } from './meter.js';
import { describeChoices } from './model_report.js';
import { submitRun } from './session_runs.js';
import { createStepSession, dispatchCount, isStepSession, stepKernelsError, stepKernelsFor } from './step_session.js';

/** @typedef {import('../shared/model_repo.js').AnyComponent} AnyComponent */
/** @typedef {import('../runtime/gpu.js').Gpu} Gpu */
/** @typedef {import('../store/weights.js').WeightStore} WeightStore */
/** @typedef {import('./graph_choice.js').Choice} Choice */
/** @typedef {import('./graph_choice.js').Choices} Choices */
/** @typedef {import('./meter.js').Meter} Meter */
/** @typedef {import('./model_source.js').ModelSource} ModelSource */
/** @typedef {import('./memory_mode.js').MemoryBudget} MemoryBudget */
/** @typedef {import('./session_runs.js').HostInput} HostInput */
/** @typedef {import('../runtime/ort.js').HostTensor} HostTensor */
/** @typedef {import('../runtime/ort.js').Session} Session */
/** @typedef {import('./step_session.js').AnySession} AnySession */

/**
 * @typedef {Object} Loaded
 * @property {AnySession} session
 * @property {Choice} choice
 * @property {number} generation  Gpu.generation the session was created on.
 * @property {number} lastUsed
 * @property {string} dimsKey  How it was created: its static dims, capture, profiling.
 * @property {boolean} profiled  Created with onnxruntime's profiler on (Sessions.profiling).
 * @property {Promise<unknown>} downloading  Its last run's outputs on their way to the CPU (released after them).
 */

/**
 * @typedef {Object} ReadAhead  A session's files being read before the session is created.
 * @property {string} identity  Choice.identity of the graph they belong to.
 * @property {Promise<Uint8Array[]>} files  The graph, then the external-data files read whole (none when the
 *   session's weights are streamed to the GPU: models/graph_upload.js).
 */

/**
 * @typedef {Object} Pin  How a session is created for the runs it will do (see runtime/ort.js SessionOptions).
 * @property {Record<string, number>} dims  Symbolic input dims every run of it will have.
 * @property {boolean} capture  Capture its kernels on WebGPU (a graph run many times at these dims).
 */

export class Sessions {
    /**
     * @param {{gpu: Gpu, source: ModelSource, memory: MemoryBudget}} options  `source`: the chosen graphs and their
     *   store; `memory`: how many bytes of sessions stay loaded.
     */
    constructor({ gpu, source, memory }) {
        this.gpu = gpu;
        this.source = source;
        this.memory = memory;
        /** @type {Map<AnyComponent, Loaded>} */
        this.loaded = new Map();
        /** @type {Map<AnyComponent, ReadAhead>} */
        this.readsAhead = new Map();
        /** @type {Map<AnyComponent, string>} whether the last session of a component captured its kernels */
        this.captureState = new Map();
        /** @type {Map<AnyComponent, number>} the weight bytes the last session of a component streamed to the GPU */
        this.streamed = new Map();
        /** Create sessions with onnxruntime's profiler on (a run asked for its kernels' GPU times: `profile`). */
        this.profiling = false;
        /** Run the transformer on our kernels where they can (models/step_session.js); false: on onnxruntime. */
        this.stepKernels = true;
        /** @type {Map<AnyComponent, import('../shared/types.js').StepRunner>} What ran the transformer's steps. */
        this.runners = new Map();
    }

    /**
     * Create the sessions in `components` order while they all fit the memory budget; the first is always
     * loaded, later ones that do not fit are loaded when their stage comes. In fast mode each one's files are
     * read while the one before it is created, through `next` (components created later in the run) as well.
     * @param {AnyComponent[]} components
     * @param {{meter: Meter, signal?: AbortSignal, pins?: Partial<Record<AnyComponent, Pin>>, next?: AnyComponent[],
     *   onLoaded?: (component: AnyComponent) => Promise<void>}} options  `pins`: how each session will run (see
     *   session()); `onLoaded`: work to start as soon as a session exists, before the next one is created.
     */
    async preload(components, { meter, signal, pins = {}, next = [], onLoaded }) {
        const now = this.fitting(components);
        const reads = [...now, ...components.filter((c) => !now.includes(c)), ...next];
        for (const [i, component] of now.entries()) {
            if (this.memory.bytes > 0) this.readAhead(reads[i + 1], meter);
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
            planned += this.source.requireChoice(component).bytes;
            if (i > 0 && planned > this.memory.bytes) break;
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
        const others = this.usedBytes() - (existing?.choice.bytes ?? 0);
        return others + this.source.requireChoice(component).bytes <= this.memory.bytes;
    }

    /**
     * How a session is created, as a key: its pinned dims, capture, the profiler, and whether our kernels may run
     * it (a session created otherwise is created anew).
     * @param {Pin} [pin]
     * @returns {string}
     */
    dimsKey(pin) {
        return JSON.stringify([
            pin ? Object.entries(pin.dims).sort() : null,
            pin?.capture ?? false,
            this.profiling,
            this.stepKernels,
        ]);
    }

    /** @returns {number} The bytes of the loaded sessions' graphs. */
    usedBytes() {
        return [...this.loaded.values()].reduce((sum, l) => sum + l.choice.bytes, 0);
    }

    /**
     * Start reading the files of `component`'s session, for session() to take (nothing when it is loaded or read
     * already). They are held in memory until then: fast mode only.
     * @param {AnyComponent | undefined} component
     * @param {Meter} meter
     */
    readAhead(component, meter) {
        const choice = component && this.source.choices?.[component];
        if (!component || !choice || this.loaded.get(component)?.choice.identity === choice.identity) return;
        if (this.readsAhead.get(component)?.identity === choice.identity) return;
        const started = performance.now();
        const files = /** @type {WeightStore} */ (this.source.store).readFiles(filesToRead(choice));
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
     * @returns {Promise<AnySession>}
     */
    async session(component, { meter, signal, pin }) {
        const choice = this.source.requireChoice(component);
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
        /** @type {AnySession} */
        let session;
        try {
            const device = choice.ep === 'webgpu' ? await this.gpu.getDevice() : undefined;
            const [graphBytes, ...data] = await this.takeFiles(component, choice, meter);
            const loading = performance.now();
            const store = /** @type {WeightStore} */ (this.source.store);
            const step =
                component === 'transformer'
                    ? stepKernelsFor(choice, graphBytes, {
                          gpu: this.gpu,
                          wanted: this.stepKernels,
                          profiling: this.profiling,
                      })
                    : null;
            /** @type {import('../shared/types.js').StepRunner | null} */
            let runner = null;
            if (step && 'graph' in step && device) {
                const tokens = pin && { image: pin.dims.img_seq, text: pin.dims.txt_seq };
                const adapterInfo = this.gpu.adapter?.info ?? null;
                // A failure of our kernels gives them up: the job runs again on onnxruntime (worker/recovery.js).
                const made = await createStepSession(store, choice, step.graph, device, {
                    signal,
                    adapterInfo,
                    tokens,
                }).catch((err) => {
                    throw stepKernelsError(err, this.gpu, what, signal);
                });
                session = made;
                this.streamed.set(component, made.streamedBytes);
                runner = { runner: 'kernels', kernels: made.executor.describe() };
                mark(meter, `upload ${component} weights and compile our kernels`, loading);
            } else {
                session = await this.createOrt(component, choice, { graphBytes, data, device, signal, pin, meter });
                if (step) runner = { runner: 'onnxruntime', why: 'why' in step ? step.why : '' };
            }
            if (runner) this.runners.set(component, { ...runner, ...dispatchCount(session, graphBytes, pin) });
            else this.runners.delete(component);
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
            profiled: this.profiling && !isStepSession(session),
            downloading: Promise.resolve(),
        });
        if (session.capture) this.captureState.set(component, 'graph capture');
        else if (session.captureRefused)
            this.captureState.set(component, `no graph capture (${session.captureRefused.slice(0, 160)})`);
        else this.captureState.delete(component);
        return session;
    }

    /**
     * An onnxruntime session of `choice`: its quantized weights streamed to the GPU where onnxruntime takes them
     * from the app's buffers, else read whole.
     * @param {AnyComponent} component
     * @param {Choice} choice
     * @param {{graphBytes: Uint8Array, data: Uint8Array[], device: GPUDevice | undefined, signal?: AbortSignal,
     *   pin?: Pin, meter: Meter}} options
     * @returns {Promise<Session>}
     */
    async createOrt(component, choice, { graphBytes, data, device, signal, pin, meter }) {
        const loading = performance.now();
        const store = /** @type {WeightStore} */ (this.source.store);
        const { graph, externalData, weights, streamedBytes, readBy } =
            uploadsWeights(choice) && device
                ? await uploadGraph(store, choice, graphBytes, device, { signal })
                : wholeFiles(choice, graphBytes, data);
        this.streamed.set(component, streamedBytes);
        if (streamedBytes > 0) {
            const how = readBy === 'handle' ? 'read-only file handles' : 'File reads';
            mark(meter, `upload ${component} weights (${(streamedBytes / 1e9).toFixed(2)} GB, ${how})`, loading);
        }
        const creating = performance.now();
        const session = await createSession(graph, externalData, {
            ep: choice.ep,
            device,
            forceCpuNodeNames: choice.forceCpuNodeNames,
            staticDims: pin?.dims,
            capture: pin?.capture ?? false,
            profile: this.profiling,
            weights,
        });
        mark(meter, `create ${component}`, creating);
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
        const store = /** @type {WeightStore} */ (this.source.store);
        const read = files ?? (await store.readFiles(filesToRead(choice)));
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
        const byAge = [...this.loaded.entries()]
            .filter(([c]) => c !== keep)
            .sort((a, b) => a[1].lastUsed - b[1].lastUsed);
        for (const [component] of byAge) {
            if (this.usedBytes() + bytes <= this.memory.bytes) break;
            await this.unload(component);
        }
    }

    /**
     * Hold `session`'s buffers until its outputs are on the CPU: unload() waits for them.
     * @param {AnySession} session
     * @param {Promise<unknown>} outputs
     */
    downloading(session, outputs) {
        const loaded = [...this.loaded.values()].find((l) => l.session === session);
        if (loaded) loaded.downloading = outputs.catch(() => {});
    }

    /**
     * Run a session on CPU tensors: resolves once its work is queued, with its outputs on their way to the CPU
     * (`outputs`); meanwhile other sessions may be created or run, and the session is released only after them.
     * @param {AnySession} session
     * @param {Record<string, HostInput>} inputs  By graph input name.
     * @param {{meter: Meter, what: string}} options  `what`: how errors name the run.
     * @returns {Promise<{outputs: Promise<Record<string, HostTensor>>}>}
     */
    async submit(session, inputs, options) {
        const queued = await submitRun(this.gpu, session, inputs, options);
        this.downloading(session, queued.outputs);
        return queued;
    }

    /**
     * Run a session on CPU tensors and wait for its outputs (submit(), awaited).
     * @param {AnySession} session
     * @param {Record<string, HostInput>} inputs
     * @param {{meter: Meter, what: string}} options
     * @returns {Promise<Record<string, HostTensor>>}
     */
    async run(session, inputs, options) {
        return (await this.submit(session, inputs, options)).outputs;
    }

    /**
     * How each chosen graph ran in this job (models/model_report.js describeChoices).
     * @param {Meter} meter
     * @param {Partial<Record<AnyComponent, string>>} [how]  What the run did with a component beyond its graph.
     * @returns {ReturnType<typeof describeChoices>}
     */
    describe(meter, how = {}) {
        return describeChoices(
            this.source.requireChoices(),
            this.captureState,
            meter,
            how,
            this.streamed,
            this.runners,
        );
    }

    /**
     * The features and limits the sessions' GPU device was given (null before a WebGPU session was created).
     * @returns {import('../runtime/gpu.js').DeviceGrant | null}
     */
    deviceGrant() {
        return this.gpu.grant;
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
            if (!loaded.profiled || isStepSession(loaded.session)) continue;
            try {
                events[component] = await profileEvents(loaded.session);
            } finally {
                await this.unload(component);
            }
        }
        return events;
    }

    /**
     * Release the sessions whose graph or EP is not `choices`' (a re-converted repository, or a component not
     * chosen this time).
     * @param {Choices} choices
     * @returns {Promise<AnyComponent[]>}  The components released.
     */
    keepChosen(choices) {
        return this.unloadWhere((component, loaded) => {
            const choice = choices[component];
            return !choice || loaded.choice.identity !== choice.identity || loaded.choice.ep !== choice.ep;
        });
    }

    /**
     * Release the sessions made from any of `paths` (files downloaded again, so their bytes are stale).
     * @param {Set<string>} paths  Repo paths.
     * @returns {Promise<AnyComponent[]>}  The components released.
     */
    unloadReading(paths) {
        return this.unloadWhere((_, loaded) => graphFiles(loaded.choice.graph).some((p) => paths.has(p)));
    }

    /**
     * @param {(component: AnyComponent, loaded: Loaded) => boolean} stale
     * @returns {Promise<AnyComponent[]>}  The components released.
     */
    async unloadWhere(stale) {
        /** @type {AnyComponent[]} */
        const released = [];
        for (const [component, loaded] of this.loaded) {
            if (!stale(component, loaded)) continue;
            await this.unload(component);
            released.push(component);
        }
        return released;
    }

    /** @param {AnyComponent} component */
    async unload(component) {
        const loaded = this.loaded.get(component);
        if (!loaded) return;
        this.loaded.delete(component);
        // Its last outputs are read from its buffers: released after them.
        await loaded.downloading;
        // Releasing a session of a lost device may throw; its memory is gone either way.
        const { session } = loaded;
        if (isStepSession(session)) session.executor.destroy();
        else await release(session).catch(() => {});
    }

    /** The image is done: in lean mode nothing stays on the GPU between images; files read ahead are let go. */
    async finishRun() {
        this.readsAhead.clear();
        if (this.memory.current.mode === 'lean') await this.releaseAll();
    }

    /** Release every session (cancel, model change): gives the GPU memory back, and the files read ahead. */
    async releaseAll() {
        this.readsAhead.clear();
        for (const component of [...this.loaded.keys()]) await this.unload(component);
    }
}
