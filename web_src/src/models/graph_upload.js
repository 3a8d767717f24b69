// @ts-check
/**
 * @file A WebGPU session's graph and weights from the store: the quantized weights streamed into GPU buffers of the
 * app's (runtime/gpu_weights.js), the graph rewritten to take them as inputs and to carry its other weights inline
 * (models/graph_weights.js). The tab then holds the graph's structure and a few chunks, never the whole graph
 * twice over (docs/machines.md "Memory and download").
 * @module models/graph_upload
 */

import { uploadWeights } from '../runtime/gpu_weights.js';
import { GPU_IO } from '../runtime/ort.js';
import { ModelFileError } from '../shared/errors.js';
import { graphFiles } from '../shared/model_repo.js';
import { planWeights, rewriteGraph } from './graph_weights.js';

/** @typedef {import('./graph_choice.js').Choice} Choice */
/** @typedef {import('../store/weights.js').WeightStore} WeightStore */
/** @typedef {import('../runtime/ort.js').GpuWeight} GpuWeight */
/** @typedef {import('../store/stored_file.js').StoredFile} StoredFile */
/** @typedef {import('./onnx_proto.js').WeightRef} WeightRef */

/**
 * Whether `choice`'s session takes its weights from the app's GPU buffers: on WebGPU, where onnxruntime binds the
 * app's buffers (runtime/ort.js GPU_IO). Elsewhere onnxruntime reads the external-data files itself.
 * @param {Choice} choice
 * @returns {boolean}
 */
export function uploadsWeights(choice) {
    return choice.ep === 'webgpu' && GPU_IO;
}

/**
 * The store files a session of `choice` needs in memory: only the graph when its weights are streamed, else the
 * graph and its external data.
 * @param {Choice} choice
 * @returns {string[]}
 */
export function filesToRead(choice) {
    const files = graphFiles(choice.graph);
    return uploadsWeights(choice) ? files.slice(0, 1) : files;
}

/**
 * @typedef {Object} SessionFiles  What onnxruntime creates a session from.
 * @property {Uint8Array} graph
 * @property {import('../runtime/ort.js').ExternalDataFile[]} externalData  Files onnxruntime reads weights from.
 * @property {GpuWeight[]} weights  Weights in the app's GPU buffers, fed to every run.
 * @property {number} streamedBytes  The bytes of `weights`.
 * @property {'handle' | 'file' | null} readBy  How the streamed weights were read from the store (store/stored_file.js);
 *   null when none were.
 */

/**
 * The stored files as onnxruntime reads them: the graph and its external-data files whole.
 * @param {Choice} choice
 * @param {Uint8Array} graph
 * @param {Uint8Array[]} data  The external-data files, in the graph's order.
 * @returns {SessionFiles}
 */
export function wholeFiles(choice, graph, data) {
    const externalData = data.map((bytes, i) => ({ path: choice.graph.externalData[i], data: bytes }));
    return { graph, externalData, weights: [], streamedBytes: 0, readBy: null };
}

/**
 * Upload `choice`'s quantized weights and rewrite its graph around them; a graph without any (the VAE's
 * convolutions) is read whole instead.
 * @param {WeightStore} store
 * @param {Choice} choice
 * @param {Uint8Array} graphBytes  The stored graph file.
 * @param {GPUDevice} device
 * @param {{signal?: AbortSignal}} [options]
 * @returns {Promise<SessionFiles>}
 */
export async function uploadGraph(store, choice, graphBytes, device, { signal } = {}) {
    const paths = graphFiles(choice.graph);
    const plan = planWeights(graphBytes, { forceCpuNodeNames: choice.forceCpuNodeNames });
    if (plan.lifted.length === 0) return wholeFiles(choice, graphBytes, await store.readFiles(paths.slice(1)));
    const files = storedWeights(store, choice);
    try {
        const graph = rewriteGraph(graphBytes, plan, await readSpans(await files.located(plan.inlined), files.read));
        const sources = await files.located(plan.lifted);
        // The buffers are kept only once the store has vouched for every byte they hold.
        const buffers = await uploadWeights(device, sources, files.readInto, { signal, verified: files.verified });
        const weights = plan.lifted.map((w) => ({
            name: w.name,
            buffer: /** @type {GPUBuffer} */ (buffers.get(w.name)),
            dataType: w.gpuType,
            dims: w.dims,
        }));
        return { graph, externalData: [], weights, streamedBytes: bytesOf(sources), readBy: await files.readBy() };
    } finally {
        files.close();
    }
}

/**
 * @param {{length: number}[]} sources
 * @returns {number}
 */
export function bytesOf(sources) {
    return sources.reduce((sum, s) => sum + s.length, 0);
}

/**
 * @typedef {Object} StoredWeights  A graph's external-data files in the store, opened as its weights are read.
 * @property {(location: string, offset: number, into: Uint8Array) => Promise<void>} readInto  Fill `into` from
 *   byte `offset` of the file the graph names `location`.
 * @property {(location: string, offset: number, length: number) => Promise<Uint8Array>} read
 * @property {(refs: WeightRef[]) => Promise<{name: string, location: string, offset: number, length: number}[]>}
 *   located  Where each weight's bytes are (a length the graph leaves out runs to the end of its file).
 * @property {() => Promise<'handle' | 'file'>} readBy  How the files were read (store/stored_file.js).
 * @property {() => Promise<void>} verified  Wait for the store's check of every file opened so far: a
 *   StoredFileError when one is no longer the file that was downloaded (the caller then drops what it read).
 * @property {() => void} close  Close the files opened (call when done: an open file cannot be removed).
 */

/**
 * `choice`'s external-data files, opened from the store when a weight is first read from each.
 * @param {WeightStore} store
 * @param {Choice} choice
 * @returns {StoredWeights}
 */
export function storedWeights(store, choice) {
    const paths = graphFiles(choice.graph);
    const pathOf = new Map(choice.graph.externalData.map((name, i) => [name, paths[i + 1]]));
    /** @type {Map<string, Promise<StoredFile>>} */
    const opened = new Map();
    const file = (/** @type {string} */ location) => {
        const path = pathOf.get(location);
        if (!path)
            throw new ModelFileError(
                `${choice.graph.path} keeps weights in ${location}, which the manifest does not list for it; ` +
                    'convert the model again or add the file to the manifest.',
                { path: choice.graph.path },
            );
        if (!opened.has(location)) opened.set(location, store.openFile(path));
        return /** @type {Promise<StoredFile>} */ (opened.get(location));
    };
    const readInto = async (
        /** @type {string} */ location,
        /** @type {number} */ offset,
        /** @type {Uint8Array} */ into,
    ) => {
        const n = await (await file(location)).readInto(into, offset);
        if (n !== into.byteLength)
            throw new ModelFileError(
                `${pathOf.get(location)} is shorter than its graph says (${offset + n} < ${offset + into.byteLength} ` +
                    'bytes); delete the model from the cache and download it again.',
                { path: pathOf.get(location) },
            );
    };
    return {
        readInto,
        async read(location, offset, length) {
            const bytes = new Uint8Array(length);
            await readInto(location, offset, bytes);
            return bytes;
        },
        located: (refs) =>
            Promise.all(
                refs.map(async (ref) => ({
                    name: ref.name,
                    location: ref.location,
                    offset: ref.offset,
                    length: ref.length ?? (await file(ref.location)).size - ref.offset,
                })),
            ),
        async readBy() {
            return (await Promise.all(opened.values())).some((f) => f.via === 'file') ? 'file' : 'handle';
        },
        // The store checks each opened file's blocks beside the reads (store/stored_check.js).
        verified: () => store.verify([...opened.keys()].map((location) => pathOf.get(location) ?? location)),
        close() {
            for (const opening of opened.values())
                opening.then(
                    (f) => f.close(),
                    () => {},
                );
        },
    };
}

/** Inlined weights closer than this in their file are read in one go (thousands of small reads cost seconds). */
const SPAN_GAP_BYTES = 1024 * 1024;

/**
 * The bytes of each span, read with as few reads as the gaps between them allow.
 * @param {{name: string, location: string, offset: number, length: number}[]} spans
 * @param {(location: string, offset: number, length: number) => Promise<Uint8Array>} read
 * @returns {Promise<Map<string, Uint8Array>>}
 */
export async function readSpans(spans, read) {
    const sorted = [...spans].sort((a, b) => a.location.localeCompare(b.location) || a.offset - b.offset);
    /** @type {Map<string, Uint8Array>} */
    const out = new Map();
    let i = 0;
    while (i < sorted.length) {
        const first = sorted[i];
        let end = first.offset + first.length;
        let j = i + 1;
        while (j < sorted.length && sorted[j].location === first.location && sorted[j].offset <= end + SPAN_GAP_BYTES) {
            end = Math.max(end, sorted[j].offset + sorted[j].length);
            j++;
        }
        const bytes = await read(first.location, first.offset, end - first.offset);
        for (const span of sorted.slice(i, j))
            out.set(span.name, bytes.subarray(span.offset - first.offset, span.offset - first.offset + span.length));
        i = j;
    }
    return out;
}
