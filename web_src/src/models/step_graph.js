// @ts-check
/**
 * @file What the transformer step on our kernels (step/) needs from a transformer graph `klein-web convert` wrote:
 * the model's sizes, the constants of its time and RoPE embeddings, and each linear's and norm's weights by the
 * initializer names the graph gives them, found from the node names the exporter writes (`/m/<module path>/MatMul`,
 * `…/MatMul_Q4` once quantised, `…/norm_q/SimplifiedLayerNormalization`). A graph that does not read as FLUX.2
 * [klein]'s transformer in one of the forms the converter writes (q4, q4f16 and fp32; 4-bit blocks of 32 without
 * zero points, scales stored in float32 or float16, dense float32 matrices) is refused with the reason, and the
 * app runs it on onnxruntime.
 * @module models/step_graph
 */

import { DataType, readGraph } from './onnx_proto.js';

/** @typedef {import('./onnx_proto.js').Tensor} Tensor */
/** @typedef {import('./onnx_proto.js').Node} Node */

/**
 * @typedef {Object} StepLinearRef  One linear's weights in the graph.
 * @property {'q4' | 'f32'} format  MatMulNBits blocks, or a dense float32 MatMul B ([K, N]).
 * @property {number} n  Output features.
 * @property {number} k  Input features.
 * @property {Tensor} [packed]  q4: the `…_Q4` blocks, uint8 [N, K/32, 16].
 * @property {Tensor} [scales]  q4: the block scales, float32 or float16 (stored in float16 and cast up by the
 *   graph, or float16 in the graph: the kernels read either).
 * @property {Tensor} [matrix]  f32: the dense matrix.
 */

/**
 * @typedef {Object} StepGraph
 * @property {import('../step/step_types.js').StepConfig} config
 * @property {Map<string, StepLinearRef>} linears  By module path ('transformer_blocks.0.attn.to_q').
 * @property {Map<string, Tensor>} norms  The RMSNorm weights by module path ('transformer_blocks.0.attn.norm_q').
 */

export class UnsupportedGraph extends Error {
    /** @param {string} message */
    constructor(message) {
        super(message);
        this.name = 'UnsupportedGraph';
    }
}

/**
 * The module paths of klein's linears, in a graph of `double` double-stream and `single` single-stream blocks.
 * @param {number} double
 * @param {number} single
 * @returns {string[]}
 */
export function linearPaths(double, single) {
    const paths = [
        'time_guidance_embed.timestep_embedder.linear_1',
        'time_guidance_embed.timestep_embedder.linear_2',
        'double_stream_modulation_img.linear',
        'double_stream_modulation_txt.linear',
        'single_stream_modulation.linear',
        'x_embedder',
        'context_embedder',
        'norm_out.linear',
        'proj_out',
    ];
    for (let i = 0; i < double; i++) {
        const attn = ['to_q', 'to_k', 'to_v', 'add_q_proj', 'add_k_proj', 'add_v_proj', 'to_out.0', 'to_add_out'];
        paths.push(...attn.map((name) => `transformer_blocks.${i}.attn.${name}`));
        for (const ff of ['ff', 'ff_context'])
            paths.push(`transformer_blocks.${i}.${ff}.linear_in`, `transformer_blocks.${i}.${ff}.linear_out`);
    }
    for (let i = 0; i < single; i++)
        paths.push(`single_transformer_blocks.${i}.attn.to_qkv_mlp_proj`, `single_transformer_blocks.${i}.attn.to_out`);
    return paths;
}

/**
 * The module paths of the RMSNorm weights.
 * @param {number} double
 * @param {number} single
 * @returns {string[]}
 */
export function normPaths(double, single) {
    const paths = [];
    for (let i = 0; i < double; i++)
        for (const name of ['norm_q', 'norm_k', 'norm_added_q', 'norm_added_k'])
            paths.push(`transformer_blocks.${i}.attn.${name}`);
    for (let i = 0; i < single; i++)
        paths.push(`single_transformer_blocks.${i}.attn.norm_q`, `single_transformer_blocks.${i}.attn.norm_k`);
    return paths;
}

/** `/m/transformer_blocks.0/attn/to_q/MatMul` (or `…/MatMul_Q4`) → 'transformer_blocks.0.attn.to_q'. */
const LINEAR_NODE = /^\/m\/(.+)\/MatMul(?:_Q4)?$/;
const NORM_NODE = /^\/m\/(.+)\/SimplifiedLayerNormalization$/;

/**
 * Read a transformer graph for the step executor.
 * @param {Uint8Array} graphBytes
 * @returns {StepGraph}
 * @throws {UnsupportedGraph} when it is not a graph the executor runs.
 */
export function readStepGraph(graphBytes) {
    const { nodes, initializers } = readGraph(graphBytes);
    /** @type {Map<string, Node>} */
    const producers = new Map();
    for (const node of nodes) for (const output of node.outputs) producers.set(output, node);
    /** The initializer a node input reads: directly, or through one Cast (weights stored in float16). */
    const weight = (/** @type {string} */ name) => {
        const direct = initializers.get(name);
        if (direct) return direct;
        const cast = producers.get(name);
        return cast?.op === 'Cast' ? initializers.get(cast.inputs[0]) : undefined;
    };
    /** A constant's value: a Constant node's, or an initializer's in the graph file. */
    const constant = (/** @type {string} */ name) => {
        const node = producers.get(name);
        const value = node?.op === 'Constant' ? node.attributes.get('value') : initializers.get(name);
        if (!value || typeof value === 'number' || !value.raw)
            throw new UnsupportedGraph(`${name} is not a constant in the graph file.`);
        return value;
    };
    const byName = new Map(nodes.map((node) => [node.name, node]));
    const nodeNamed = (/** @type {string} */ name) => {
        const node = byName.get(name);
        if (!node) throw new UnsupportedGraph(`the graph has no node ${name}.`);
        return node;
    };

    /** @type {Map<string, StepLinearRef>} */
    const linears = new Map();
    /** @type {Map<string, Tensor>} */
    const norms = new Map();
    for (const node of nodes) {
        const linear = LINEAR_NODE.exec(node.name);
        if (linear && (node.op === 'MatMul' || node.op === 'MatMulNBits')) {
            const ref = linearRef(node, weight);
            // The attention's MatMuls multiply two activations: no weight.
            if (ref) linears.set(linear[1].replaceAll('/', '.'), ref);
        }
        const norm = NORM_NODE.exec(node.name);
        if (norm && node.op === 'SimplifiedLayerNormalization') {
            const tensor = weight(node.inputs[1]);
            if (!tensor) throw new UnsupportedGraph(`${node.name} reads no stored weight.`);
            norms.set(norm[1].replaceAll('/', '.'), tensor);
        }
    }
    const count = (/** @type {RegExp} */ pattern) =>
        new Set([...linears.keys()].map((path) => pattern.exec(path)?.[1]).filter(Boolean)).size;
    const doubleBlocks = count(/^transformer_blocks\.(\d+)\./);
    const singleBlocks = count(/^single_transformer_blocks\.(\d+)\./);
    const expected = linearPaths(doubleBlocks, singleBlocks);
    const missing = expected.filter((path) => !linears.has(path));
    if (missing.length > 0) throw new UnsupportedGraph(`no linear ${missing.slice(0, 3).join(', ')}.`);
    const extra = [...linears.keys()].filter((path) => !expected.includes(path));
    if (extra.length > 0) throw new UnsupportedGraph(`linears the executor does not know: ${extra.join(', ')}.`);
    const missingNorms = normPaths(doubleBlocks, singleBlocks).filter((path) => !norms.has(path));
    if (missingNorms.length > 0) throw new UnsupportedGraph(`no RMSNorm ${missingNorms.slice(0, 3).join(', ')}.`);

    const get = (/** @type {string} */ path) => /** @type {StepLinearRef} */ (linears.get(path));
    const inner = get('x_embedder').n;
    const headDim = norms.get(normPaths(doubleBlocks, singleBlocks)[0])?.dims[0] ?? 0;
    const mlp = doubleBlocks > 0 ? get('transformer_blocks.0.ff.linear_in').n / 2 : 0;
    const timeChannels = get('time_guidance_embed.timestep_embedder.linear_1').k;
    const layerNorm = nodes.find((node) => node.op === 'LayerNormalization');
    const rmsNorm = nodes.find((node) => node.op === 'SimplifiedLayerNormalization');
    const ropeAxes = int32s(constant(nodeNamed('/m/pos_embed/Gather').inputs[1]));
    const ropeFreqs = float32s(constant(nodeNamed('/m/pos_embed/Mul').inputs[1]));
    const timeFreqs = float32s(constant(nodeNamed('/m/time_guidance_embed/time_proj/Mul').inputs[1]));
    const timeScale = float32s(constant(nodeNamed('/m/Mul').inputs[1]))[0];
    const config = {
        inner,
        heads: inner / headDim,
        headDim,
        mlp,
        inChannels: get('x_embedder').k,
        outChannels: get('proj_out').n,
        jointDim: get('context_embedder').k,
        timeChannels,
        doubleBlocks,
        singleBlocks,
        eps: Number(layerNorm?.attributes.get('epsilon') ?? NaN),
        normEps: Number(rmsNorm?.attributes.get('epsilon') ?? NaN),
        timeFreqs,
        timeScale,
        ropeAxes,
        ropeFreqs,
    };
    checkShapes(config, linears);
    return { config, linears, norms };
}

/**
 * The weights of a MatMul or MatMulNBits node, or null when it multiplies two activations.
 * @param {Node} node
 * @param {(name: string) => Tensor | undefined} weight
 * @returns {StepLinearRef | null}
 */
function linearRef(node, weight) {
    if (node.op === 'MatMul') {
        const matrix = weight(node.inputs[1]);
        if (!matrix) return null;
        if (matrix.dataType !== DataType.FLOAT || matrix.dims.length !== 2)
            throw new UnsupportedGraph(`${node.name}: a ${matrix.dims.length}-D weight of type ${matrix.dataType}.`);
        return { format: 'f32', k: matrix.dims[0], n: matrix.dims[1], matrix };
    }
    const attr = (/** @type {string} */ name) => node.attributes.get(name);
    if (attr('bits') !== 4 || attr('block_size') !== 32)
        throw new UnsupportedGraph(`${node.name}: ${attr('bits')}-bit blocks of ${attr('block_size')}.`);
    if (node.inputs.length > 3 && node.inputs.slice(3).some(Boolean))
        throw new UnsupportedGraph(`${node.name} has zero points or a bias.`);
    const packed = weight(node.inputs[1]);
    const scales = weight(node.inputs[2]);
    if (!packed || !scales || packed.dataType !== DataType.UINT8)
        throw new UnsupportedGraph(`${node.name}: its blocks or scales are not stored weights.`);
    if (scales.dataType !== DataType.FLOAT && scales.dataType !== DataType.FLOAT16)
        throw new UnsupportedGraph(`${node.name}: scales of type ${scales.dataType}.`);
    return { format: 'q4', n: Number(attr('N')), k: Number(attr('K')), packed, scales };
}

/**
 * The sizes the kernels need, and the relations klein's blocks have.
 * @param {import('../step/step_types.js').StepConfig} c
 * @param {Map<string, StepLinearRef>} linears
 */
function checkShapes(c, linears) {
    const fail = (/** @type {string} */ why) => {
        throw new UnsupportedGraph(why);
    };
    if (!Number.isInteger(c.heads) || c.heads < 1) fail(`inner width ${c.inner} is not whole heads of ${c.headDim}.`);
    if (!(c.eps > 0 && c.normEps > 0)) fail('no LayerNorm or RMSNorm epsilon.');
    if (c.ropeFreqs.length !== c.headDim / 2 || c.ropeAxes.length !== c.headDim / 2)
        fail(`RoPE tables of ${c.ropeFreqs.length} pairs for heads of ${c.headDim}.`);
    if (c.timeFreqs.length * 2 !== c.timeChannels)
        fail(`${c.timeFreqs.length} time frequencies for ${c.timeChannels}.`);
    for (const [path, ref] of linears) if (ref.k % 32) fail(`${path} has ${ref.k} input features (not blocks of 32).`);
    const want = (/** @type {string} */ path, /** @type {number} */ n, /** @type {number} */ k) => {
        const ref = /** @type {StepLinearRef} */ (linears.get(path));
        if (ref.n !== n || ref.k !== k) fail(`${path} is ${ref.n}×${ref.k}, expected ${n}×${k}.`);
    };
    const { inner: h, mlp: f } = c;
    want('double_stream_modulation_img.linear', 6 * h, h);
    want('double_stream_modulation_txt.linear', 6 * h, h);
    want('single_stream_modulation.linear', 3 * h, h);
    want('norm_out.linear', 2 * h, h);
    for (let i = 0; i < c.doubleBlocks; i++) {
        for (const name of ['to_q', 'to_k', 'to_v', 'add_q_proj', 'add_k_proj', 'add_v_proj', 'to_out.0', 'to_add_out'])
            want(`transformer_blocks.${i}.attn.${name}`, h, h);
        for (const ff of ['ff', 'ff_context']) {
            want(`transformer_blocks.${i}.${ff}.linear_in`, 2 * f, h);
            want(`transformer_blocks.${i}.${ff}.linear_out`, h, f);
        }
    }
    for (let i = 0; i < c.singleBlocks; i++) {
        want(`single_transformer_blocks.${i}.attn.to_qkv_mlp_proj`, 3 * h + 2 * f, h);
        want(`single_transformer_blocks.${i}.attn.to_out`, h, h + f);
    }
}

/**
 * @param {Tensor} tensor
 * @returns {Float32Array}
 */
function float32s(tensor) {
    if (tensor.dataType !== DataType.FLOAT) throw new UnsupportedGraph(`${tensor.name} is not float32.`);
    const raw = /** @type {Uint8Array} */ (tensor.raw);
    return new Float32Array(raw.slice().buffer, 0, raw.byteLength / 4);
}

/**
 * @param {Tensor} tensor  An int64 constant of small values.
 * @returns {Int32Array}
 */
function int32s(tensor) {
    if (tensor.dataType !== DataType.INT64) throw new UnsupportedGraph(`${tensor.name} is not int64.`);
    const raw = /** @type {Uint8Array} */ (tensor.raw);
    return Int32Array.from(new BigInt64Array(raw.slice().buffer, 0, raw.byteLength / 8), (v) => Number(v));
}
