// @ts-check
/**
 * @file Which of a graph's weights the app uploads to the GPU itself, and the graph rewritten to take them as
 * inputs.
 *
 * onnxruntime-web creates a session in one call that copies every external initializer into its own memory and
 * then into GPU buffers; the tab holds the stored files, those copies and the upload staging at once, about twice
 * the graph (docs/machines.md). The quantized matrices (MatMulNBits and GatherBlockQuantized inputs) are nearly all
 * of a graph's bytes and their kernels read them from GPU buffers like any input, so the app lifts them out: the
 * graph declares them as inputs, the app streams each one from the store into a GPU buffer of its own
 * (runtime/gpu_weights.js), and every run feeds those buffers. The other external initializers (norms, biases,
 * embeddings run on the CPU) are small and stay in the graph, inlined. The same repository files serve both paths:
 * nothing about the model on disk changes.
 *
 * This reads and writes the ONNX protobuf directly (ModelProto.graph, GraphProto.initializer/input/node): only the
 * few fields it needs are decoded; every other byte is copied as it is.
 * @module models/graph_weights
 */

import { concat } from '../shared/bytes.js';
import {
    BYTES,
    GRAPH_INITIALIZER,
    GRAPH_INPUT,
    GRAPH_NODE,
    MODEL_GRAPH,
    TENSOR_DATA_LOCATION,
    TENSOR_EXTERNAL_DATA,
    TENSOR_RAW_DATA,
    VARINT,
    fields,
    graphField,
    payload,
    readNode,
    readTensor,
} from './onnx_proto.js';

/** Operators whose weight inputs may be GPU buffers the app owns: onnxruntime's WebGPU kernels read them as inputs. */
export const LIFTABLE_OPS = new Set(['MatMulNBits', 'GatherBlockQuantized']);

/** ONNX TensorProto data types onnxruntime-web can wrap around a GPU buffer, by their names there. */
const GPU_TYPES = new Map([
    [1, 'float32'],
    [2, 'uint8'],
    [6, 'int32'],
    [7, 'int64'],
    [9, 'bool'],
    [10, 'float16'],
    [12, 'uint32'],
]);

/** @typedef {import('./onnx_proto.js').WeightRef} WeightRef */

/**
 * @typedef {WeightRef & {gpuType: string}} LiftedWeight  A weight the app uploads and feeds; `gpuType`: its
 *   onnxruntime-web data type.
 */

/**
 * @typedef {Object} WeightPlan
 * @property {LiftedWeight[]} lifted  Uploaded by the app, fed to every run.
 * @property {WeightRef[]} inlined  Kept in the graph, their bytes inlined.
 */

/**
 * Which external initializers of `graphBytes` the app uploads itself: those every consumer of which is a
 * LIFTABLE_OPS node that runs on the GPU, of a type a GPU buffer can hold. Every other external one is inlined.
 * @param {Uint8Array} graphBytes  A serialized ModelProto.
 * @param {{forceCpuNodeNames?: readonly string[]}} [options]  Nodes that run on the CPU: their inputs stay put.
 * @returns {WeightPlan}
 */
export function planWeights(graphBytes, { forceCpuNodeNames = [] } = {}) {
    const graph = graphField(graphBytes);
    const onCpu = new Set(forceCpuNodeNames);
    /** @type {Map<string, boolean>} Each tensor consumed: whether every consumer may read it from the app's buffer. */
    const liftable = new Map();
    /** @type {WeightRef[]} */
    const externals = [];
    for (const field of fields(graphBytes, graph.value, graph.end)) {
        if (field.number === GRAPH_NODE) {
            const { op, name, inputs } = readNode(payload(graphBytes, field));
            const ok = LIFTABLE_OPS.has(op) && !onCpu.has(name);
            for (const input of inputs) liftable.set(input, (liftable.get(input) ?? true) && ok);
        } else if (field.number === GRAPH_INITIALIZER) {
            const { external } = readTensor(payload(graphBytes, field));
            if (external) externals.push(external);
        }
    }
    /** @type {LiftedWeight[]} */
    const lifted = [];
    /** @type {WeightRef[]} */
    const inlined = [];
    for (const ref of externals) {
        const gpuType = GPU_TYPES.get(ref.dataType);
        if (gpuType && liftable.get(ref.name) === true) lifted.push({ ...ref, gpuType });
        else inlined.push(ref);
    }
    return { lifted, inlined };
}

/**
 * `graphBytes` with the plan's lifted weights turned into graph inputs and its inlined ones carrying their bytes.
 * @param {Uint8Array} graphBytes
 * @param {WeightPlan} plan
 * @param {Map<string, Uint8Array>} inlineData  The bytes of each of `plan.inlined`, by name.
 * @returns {Uint8Array}
 */
export function rewriteGraph(graphBytes, plan, inlineData) {
    const graph = graphField(graphBytes);
    const lifted = new Set(plan.lifted.map((w) => w.name));
    /** @type {Uint8Array[]} */
    const graphParts = [];
    for (const field of fields(graphBytes, graph.value, graph.end)) {
        const whole = graphBytes.subarray(field.start, field.end);
        if (field.number !== GRAPH_INITIALIZER) {
            graphParts.push(whole);
            continue;
        }
        const tensor = payload(graphBytes, field);
        const { name, external } = readTensor(tensor);
        if (!external) graphParts.push(whole);
        else if (lifted.has(name)) continue;
        else {
            const data = inlineData.get(name);
            if (!data) throw new Error(`rewriteGraph: no bytes for the inlined initializer ${name}.`);
            /** @type {Uint8Array[]} */
            const kept = [];
            for (const part of fields(tensor)) {
                if (part.number !== TENSOR_EXTERNAL_DATA && part.number !== TENSOR_DATA_LOCATION)
                    kept.push(tensor.subarray(part.start, part.end));
            }
            kept.push(...message(TENSOR_RAW_DATA, [data]));
            graphParts.push(...message(GRAPH_INITIALIZER, kept));
        }
    }
    for (const weight of plan.lifted) graphParts.push(...message(GRAPH_INPUT, [valueInfo(weight)]));
    /** @type {Uint8Array[]} */
    const modelParts = [];
    for (const field of fields(graphBytes)) {
        if (field.start === graph.start) modelParts.push(...message(MODEL_GRAPH, graphParts));
        else modelParts.push(graphBytes.subarray(field.start, field.end));
    }
    return concat(modelParts);
}

/**
 * A length-delimited field holding `parts`, as parts (no copy of them).
 * @param {number} number
 * @param {Uint8Array[]} parts
 * @returns {Uint8Array[]}
 */
function message(number, parts) {
    const length = parts.reduce((sum, p) => sum + p.length, 0);
    return [Uint8Array.from([...varint(number * 8 + BYTES), ...varint(length)]), ...parts];
}

/**
 * A ValueInfoProto declaring `weight` as a tensor input of fixed dims.
 * @param {WeightRef} weight
 * @returns {Uint8Array}
 */
function valueInfo(weight) {
    const dims = weight.dims.flatMap((d) => message(1, [Uint8Array.from([...varint(1 * 8 + VARINT), ...varint(d)])]));
    const elemType = Uint8Array.from([...varint(1 * 8 + VARINT), ...varint(weight.dataType)]);
    const tensorType = message(1, [elemType, ...message(2, dims)]);
    const name = new TextEncoder().encode(weight.name);
    return concat([...message(1, [name]), ...message(2, tensorType)]);
}

/**
 * A varint's bytes.
 * @param {number} value  A non-negative integer below 2^53.
 * @returns {number[]}
 */
function varint(value) {
    const out = [];
    while (value >= 0x80) {
        out.push((value % 128) | 0x80);
        value = Math.floor(value / 128);
    }
    out.push(value);
    return out;
}
