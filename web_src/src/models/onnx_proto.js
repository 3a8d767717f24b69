// @ts-check
/**
 * @file Reading an ONNX model's protobuf directly: its fields, the graph, its nodes (op, name, inputs, outputs and
 * the attributes the app reads) and its initializers (name, type, dims, and where their bytes are: inline in the
 * graph file, or in an external-data file). Only the fields the app needs are decoded; models/graph_weights.js
 * rewrites a graph with these, models/step_graph.js reads the transformer's structure.
 * @module models/onnx_proto
 */

// Field numbers of onnx.proto.
export const MODEL_GRAPH = 7;
const MODEL_METADATA = 14;
export const GRAPH_NODE = 1;
export const GRAPH_INITIALIZER = 5;
export const GRAPH_INPUT = 11;
const NODE_INPUT = 1;
const NODE_OUTPUT = 2;
const NODE_NAME = 3;
const NODE_OP_TYPE = 4;
const NODE_ATTRIBUTE = 5;
const ATTRIBUTE_NAME = 1;
const ATTRIBUTE_F = 2;
const ATTRIBUTE_I = 3;
const ATTRIBUTE_T = 5;
export const TENSOR_DIMS = 1;
const TENSOR_DATA_TYPE = 2;
const TENSOR_FLOAT_DATA = 4;
const TENSOR_INT64_DATA = 7;
const TENSOR_NAME = 8;
export const TENSOR_RAW_DATA = 9;
export const TENSOR_EXTERNAL_DATA = 13;
export const TENSOR_DATA_LOCATION = 14;
const ENTRY_KEY = 1;
const ENTRY_VALUE = 2;
const EXTERNAL = 1;

export const VARINT = 0;
const FIXED64 = 1;
export const BYTES = 2;
const FIXED32 = 5;

/** ONNX TensorProto data types the app reads. */
export const DataType = Object.freeze({ FLOAT: 1, UINT8: 2, INT64: 7, FLOAT16: 10 });

/**
 * @typedef {Object} WeightRef  An external initializer: where its bytes are stored.
 * @property {string} name
 * @property {number} dataType  ONNX TensorProto data type.
 * @property {number[]} dims
 * @property {string} location  The external-data file's bare name, as the graph stores it.
 * @property {number} offset
 * @property {number | null} length  Null: to the end of the file.
 */

/**
 * @typedef {Object} Tensor  An initializer or a Constant's value.
 * @property {string} name
 * @property {number} dataType
 * @property {number[]} dims
 * @property {WeightRef | null} external  Where its bytes are when they are not in the graph file.
 * @property {Uint8Array | null} raw  Its bytes in the graph file (raw_data, or float_data / int64_data re-packed
 *   little-endian); null when external.
 */

/**
 * @typedef {Object} Node
 * @property {string} op
 * @property {string} name
 * @property {string[]} inputs
 * @property {string[]} outputs
 * @property {Map<string, number | Tensor>} attributes  Numbers (int and float attributes) and tensors (a
 *   Constant's value); other kinds are left out.
 */

/**
 * @typedef {Object} Field  One field of a protobuf message.
 * @property {number} number
 * @property {number} wire
 * @property {number} start  Where its tag starts.
 * @property {number} end  Where it ends.
 * @property {number} value  A varint's value, else where the payload starts.
 */

/**
 * The fields of a message in `bytes[from, to)`.
 * @param {Uint8Array} bytes
 * @param {number} [from]
 * @param {number} [to]
 * @returns {Generator<Field>}
 */
export function* fields(bytes, from = 0, to = bytes.length) {
    let pos = from;
    while (pos < to) {
        const start = pos;
        const [tag, afterTag] = readVarint(bytes, pos);
        const number = Math.floor(tag / 8);
        const wire = tag % 8;
        let value;
        if (wire === VARINT) [value, pos] = readVarint(bytes, afterTag);
        else if (wire === FIXED64) [value, pos] = [afterTag, afterTag + 8];
        else if (wire === FIXED32) [value, pos] = [afterTag, afterTag + 4];
        else if (wire === BYTES) {
            const [length, payload] = readVarint(bytes, afterTag);
            [value, pos] = [payload, payload + length];
        } else throw new Error(`The graph file is not an ONNX model (protobuf wire type ${wire} at byte ${start}).`);
        if (pos > to) throw new Error(`The graph file is cut short (a field at byte ${start} runs past its message).`);
        yield { number, wire, start, end: pos, value };
    }
}

/**
 * @param {Uint8Array} bytes
 * @param {number} pos
 * @returns {[number, number]}  The value (exact below 2^53) and the position after it.
 */
export function readVarint(bytes, pos) {
    let value = 0;
    let scale = 1;
    for (;;) {
        if (pos >= bytes.length) throw new Error('The graph file is cut short (in a protobuf varint).');
        const byte = bytes[pos++];
        value += (byte & 0x7f) * scale;
        if (byte < 0x80) return [value, pos];
        scale *= 128;
    }
}

/**
 * @param {Uint8Array} bytes
 * @param {Field} field  A length-delimited field.
 * @returns {string}
 */
export function text(bytes, field) {
    return new TextDecoder().decode(bytes.subarray(field.value, field.end));
}

/**
 * The payload of a length-delimited field.
 * @param {Uint8Array} bytes
 * @param {Field} field
 * @returns {Uint8Array}
 */
export function payload(bytes, field) {
    return bytes.subarray(field.value, field.end);
}

/**
 * The graph message of a ModelProto.
 * @param {Uint8Array} model
 * @returns {Field}
 */
export function graphField(model) {
    for (const field of fields(model)) if (field.number === MODEL_GRAPH && field.wire === BYTES) return field;
    throw new Error('The graph file has no graph (not an ONNX model).');
}

/**
 * A TensorProto: name, type, dims, and its bytes or where they are stored.
 * @param {Uint8Array} tensor  A TensorProto's bytes.
 * @returns {Tensor}
 */
export function readTensor(tensor) {
    let name = '';
    let dataType = 0;
    /** @type {number[]} */
    const dims = [];
    let external = false;
    /** @type {Uint8Array | null} */
    let raw = null;
    /** @type {number[]} */
    const floats = [];
    /** @type {bigint[]} */
    const int64s = [];
    /** @type {Record<string, string>} */
    const entries = {};
    for (const field of fields(tensor)) {
        if (field.number === TENSOR_NAME) name = text(tensor, field);
        else if (field.number === TENSOR_DATA_TYPE) dataType = field.value;
        else if (field.number === TENSOR_DIMS) dims.push(...varints(tensor, field));
        else if (field.number === TENSOR_RAW_DATA) raw = payload(tensor, field);
        else if (field.number === TENSOR_FLOAT_DATA) floats.push(...fixed32s(tensor, field));
        else if (field.number === TENSOR_INT64_DATA) int64s.push(...varints(tensor, field).map((v) => BigInt(v)));
        else if (field.number === TENSOR_DATA_LOCATION) external = field.value === EXTERNAL;
        else if (field.number === TENSOR_EXTERNAL_DATA) {
            const entry = payload(tensor, field);
            let key = '';
            let value = '';
            for (const part of fields(entry)) {
                if (part.number === ENTRY_KEY) key = text(entry, part);
                else if (part.number === ENTRY_VALUE) value = text(entry, part);
            }
            entries[key] = value;
        }
    }
    if (!external) {
        if (!raw && floats.length > 0) raw = new Uint8Array(Float32Array.from(floats).buffer);
        if (!raw && int64s.length > 0) raw = new Uint8Array(BigInt64Array.from(int64s).buffer);
        return { name, dataType, dims, external: null, raw: raw ?? new Uint8Array(0) };
    }
    if (!entries.location) throw new Error(`The initializer ${name} is external but names no file.`);
    const ref = {
        name,
        dataType,
        dims,
        location: entries.location.replace(/^\.\//, ''),
        offset: Number(entries.offset ?? 0),
        length: entries.length === undefined ? null : Number(entries.length),
    };
    return { name, dataType, dims, external: ref, raw: null };
}

/**
 * A repeated varint field's values, packed or not.
 * @param {Uint8Array} bytes
 * @param {Field} field
 * @returns {number[]}
 */
function varints(bytes, field) {
    if (field.wire === VARINT) return [field.value];
    /** @type {number[]} */
    const out = [];
    for (let pos = field.value; pos < field.end;) {
        const [value, next] = readVarint(bytes, pos);
        out.push(value);
        pos = next;
    }
    return out;
}

/**
 * A repeated float field's values, packed or not.
 * @param {Uint8Array} bytes
 * @param {Field} field
 * @returns {number[]}
 */
function fixed32s(bytes, field) {
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (field.wire === FIXED32) return [view.getFloat32(field.value, true)];
    /** @type {number[]} */
    const out = [];
    for (let pos = field.value; pos + 4 <= field.end; pos += 4) out.push(view.getFloat32(pos, true));
    return out;
}

/**
 * A NodeProto.
 * @param {Uint8Array} node
 * @returns {Node}
 */
export function readNode(node) {
    /** @type {Node} */
    const out = { op: '', name: '', inputs: [], outputs: [], attributes: new Map() };
    for (const part of fields(node)) {
        if (part.number === NODE_OP_TYPE) out.op = text(node, part);
        else if (part.number === NODE_NAME) out.name = text(node, part);
        else if (part.number === NODE_INPUT) out.inputs.push(text(node, part));
        else if (part.number === NODE_OUTPUT) out.outputs.push(text(node, part));
        else if (part.number === NODE_ATTRIBUTE) {
            const attribute = payload(node, part);
            let name = '';
            /** @type {number | Tensor | null} */
            let value = null;
            const view = new DataView(attribute.buffer, attribute.byteOffset, attribute.byteLength);
            for (const field of fields(attribute)) {
                if (field.number === ATTRIBUTE_NAME) name = text(attribute, field);
                else if (field.number === ATTRIBUTE_F) value = view.getFloat32(field.value, true);
                else if (field.number === ATTRIBUTE_I) value = signed(field.value);
                else if (field.number === ATTRIBUTE_T) value = readTensor(payload(attribute, field));
            }
            if (value !== null) out.attributes.set(name, value);
        }
    }
    return out;
}

/**
 * A varint read as an int64: values of 2^63 and above are negative.
 * @param {number} value
 * @returns {number}
 */
function signed(value) {
    return value >= 2 ** 63 ? value - 2 ** 64 : value;
}

/**
 * The nodes and initializers of a serialized ModelProto, and its metadata.
 * @param {Uint8Array} model
 * @returns {{nodes: Node[], initializers: Map<string, Tensor>, metadata: Map<string, string>}}
 */
export function readGraph(model) {
    const graph = graphField(model);
    /** @type {Node[]} */
    const nodes = [];
    /** @type {Map<string, Tensor>} */
    const initializers = new Map();
    for (const field of fields(model, graph.value, graph.end)) {
        if (field.number === GRAPH_NODE) nodes.push(readNode(payload(model, field)));
        else if (field.number === GRAPH_INITIALIZER) {
            const tensor = readTensor(payload(model, field));
            initializers.set(tensor.name, tensor);
        }
    }
    /** @type {Map<string, string>} */
    const metadata = new Map();
    for (const field of fields(model)) {
        if (field.number !== MODEL_METADATA || field.wire !== BYTES) continue;
        const entry = payload(model, field);
        let key = '';
        let value = '';
        for (const part of fields(entry)) {
            if (part.number === ENTRY_KEY) key = text(entry, part);
            else if (part.number === ENTRY_VALUE) value = text(entry, part);
        }
        metadata.set(key, value);
    }
    return { nodes, initializers, metadata };
}
