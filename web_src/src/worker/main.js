// @ts-check
/**
 * @file The inference worker's entry point (a module Web Worker): it configures onnxruntime and the helper workers
 * from the build, makes the long-lived parts once (the shared GPU device, the model's parts, the store's lock)
 * and hands them to worker/requests.js, which answers the page's requests.
 *
 * An optional GPU feature that failed in this browser is remembered for its version (store/feature_memory.js), so
 * the device is made without it from then on (runtime/gpu.js); `?gpu-fault=FEATURE` on the worker's URL breaks one
 * on purpose (injectedFault).
 * @module worker/main
 */

import { Model } from '../models/model.js';
import { FALLIBLE, Gpu, probe } from '../runtime/gpu.js';
import { configureOrt, ortThreads } from '../runtime/ort.js';
import { configureTokenizerWorker } from '../pipeline/tokenizer_helper.js';
import { runtimeFiles } from '../runtime/wasm_parts.js';
import { opfsSupport } from '../store/backend.js';
import { featureMemory, precisionMemory } from '../store/feature_memory.js';
import { configureStoreWorkers } from '../store/store_workers.js';
import { clearingStore, onStoreCleared, whileUsingStore } from '../store/store_lock.js';
import { WeightStore, readManifest } from '../store/weights.js';
import { serveRequests } from './requests.js';

/**
 * The onnxruntime runtime files as absolute URLs. builder/site/bundle.py injects KLEIN_ORT_WASM (names relative to
 * this script's folder, the `.wasm` in parts: builder/site/runtime_files.py); a plain esbuild bundle has none and ORT
 * finds its .wasm itself.
 * @param {string} scriptUrl
 * @returns {import('../runtime/wasm_parts.js').RuntimeFiles | null}
 */
function ortRuntime(scriptUrl) {
    // KLEIN_ORT_WASM is an esbuild --define (declared in build_defines.d.ts), not a runtime global.
    return typeof KLEIN_ORT_WASM === 'undefined' ? null : runtimeFiles(KLEIN_ORT_WASM, scriptUrl);
}

/**
 * The store's helper worker script as an absolute URL (builder/site/bundle.py injects KLEIN_STORE_WORKER, relative
 * to this script's folder); without one the store does all its work on this thread.
 * @param {string} scriptUrl
 * @returns {string | null}
 */
function storeWorkerUrl(scriptUrl) {
    // KLEIN_STORE_WORKER is an esbuild --define (declared in build_defines.d.ts), not a runtime global.
    return typeof KLEIN_STORE_WORKER === 'undefined' ? null : new URL(KLEIN_STORE_WORKER, scriptUrl).href;
}

/**
 * The tokenizer's helper worker script as an absolute URL (KLEIN_TOKENIZER_WORKER, like KLEIN_STORE_WORKER); without
 * one the tokenizer is built and run on this thread.
 * @param {string} scriptUrl
 * @returns {string | null}
 */
function tokenizerWorkerUrl(scriptUrl) {
    return typeof KLEIN_TOKENIZER_WORKER === 'undefined' ? null : new URL(KLEIN_TOKENIZER_WORKER, scriptUrl).href;
}

/**
 * The optional GPU feature the worker's URL asks to break (`?gpu-fault=subgroups`): its shaders then fail to
 * compile, as in a browser that implements it wrongly, so tests and GPU runs can exercise the fallback;
 * `?gpu-fault=step-kernels` breaks the shaders of our own kernels (the transformer step then runs on onnxruntime).
 * @param {string} scriptUrl
 * @returns {string | null}
 */
function injectedFault(scriptUrl) {
    const fault = new URL(scriptUrl).searchParams.get('gpu-fault');
    if (fault === null) return null;
    if (!FALLIBLE.includes(fault)) {
        console.warn(`gpu-fault=${fault} ignored: it must be one of ${FALLIBLE.join(', ')}.`);
        return null;
    }
    return fault;
}

/**
 * What the probe adds to the GPU's answer for the page's capability decision (shared/browser_needs.js): whether
 * WebGPU exists here at all, the OPFS methods the store can use, and the device's memory.
 * @param {DedicatedWorkerGlobalScope} scope
 * @returns {{gpuApi: boolean, opfs: import('../shared/types.js').OpfsSupport, deviceMemory: number | null}}
 */
function storeAndMemory(scope) {
    const nav = /** @type {WorkerNavigator & {deviceMemory?: number}} */ (scope.navigator);
    return { gpuApi: Boolean(nav.gpu), opfs: opfsSupport(scope), deviceMemory: nav.deviceMemory ?? null };
}

/**
 * Make the worker's parts and answer the page's requests in a worker scope.
 * @param {DedicatedWorkerGlobalScope} scope
 */
export function startWorker(scope) {
    const threads = ortThreads();
    configureOrt({ runtime: ortRuntime(scope.location.href), threads });
    configureStoreWorkers(storeWorkerUrl(scope.location.href));
    configureTokenizerWorker(tokenizerWorkerUrl(scope.location.href));
    const gpu = new Gpu({ memory: featureMemory, fault: injectedFault(scope.location.href) });
    const { deviceMemory } = /** @type {WorkerNavigator & {deviceMemory?: number}} */ (scope.navigator);
    serveRequests(scope, {
        model: new Model({ gpu, deviceMemory }),
        gpu,
        probe: async () => ({ ...(await probe({ threads })), ...storeAndMemory(scope) }),
        store: {
            whileUsing: whileUsingStore,
            clearing: clearingStore,
            onCleared: onStoreCleared,
            clear: () => WeightStore.clear(),
        },
        modelInfo: async (modelBase) => modelInfo(await readManifest(modelBase)),
        precisions: precisionMemory,
    });
}

/**
 * What the page learns of a model before any download: its kind and defaults, and the graphs and file sizes its
 * capability decision weighs (shared/browser_needs.js modelNeeds).
 * @param {import('../shared/model_repo.js').Manifest} manifest
 * @returns {import('../protocol.js').ModelInfo}
 */
function modelInfo({ pipeline, seedLayout, graphs, files }) {
    /** @type {Record<string, {size: number | null}>} */
    const sizes = {};
    for (const [path, entry] of Object.entries(files)) sizes[path] = { size: entry.size };
    return { pipeline, repo: { seedLayout, graphs, files: sizes } };
}

startWorker(/** @type {DedicatedWorkerGlobalScope} */ (/** @type {unknown} */ (self)));
