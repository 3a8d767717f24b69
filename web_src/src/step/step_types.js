// @ts-check
/**
 * @file What the transformer step on our kernels is given: the model's sizes and constants, and its weights in GPU
 * buffers (models/step_session.js makes both from the graph).
 * @module step/step_types
 */

/**
 * @typedef {Object} StepConfig  The transformer's sizes and the constants its graph holds.
 * @property {number} inner  Hidden width H (heads · headDim).
 * @property {number} heads
 * @property {number} headDim
 * @property {number} mlp  The MLP's hidden width F (SwiGLU: its input projection is 2F wide).
 * @property {number} inChannels
 * @property {number} outChannels
 * @property {number} jointDim  The text embedding's width.
 * @property {number} timeChannels  The timestep embedding's width.
 * @property {number} doubleBlocks
 * @property {number} singleBlocks
 * @property {number} eps  LayerNorm's epsilon.
 * @property {number} normEps  The q/k RMSNorms' epsilon.
 * @property {Float32Array} timeFreqs  The timestep embedding's frequencies (timeChannels / 2).
 * @property {number} timeScale  What the graph multiplies its timestep input by (1000).
 * @property {Int32Array} ropeAxes  Each rotated pair's position axis (headDim / 2).
 * @property {Float32Array} ropeFreqs  Each rotated pair's frequency.
 */

/**
 * @typedef {Object} StepLinear  One linear's weights in GPU buffers.
 * @property {'q4' | 'f32'} format
 * @property {number} n
 * @property {number} k
 * @property {'f32' | 'f16'} scales  The 4-bit scales' type ('f32' for dense weights, unused).
 * @property {import('../kernels/q4_weights.js').Q4Weight | import('../kernels/linear.js').DenseWeight} buffers
 */

/**
 * @typedef {Object} StepWeights
 * @property {Map<string, StepLinear>} linears  By module path (models/step_graph.js linearPaths).
 * @property {Map<string, Float32Array>} norms  The q/k RMSNorm weights by module path.
 */

// Makes this file a module, so that other modules can import the types above.
export {};
