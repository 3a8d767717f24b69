// @ts-check
/**
 * @file What every linear kernel does with an output value once its dot product is summed (the fused epilogue),
 * the uniform parameters they share, and the WGSL of both.
 *
 * Output column j of a linear reads weight row `rowA + j`; the epilogues:
 * - `store`: out = y (+ bias);
 * - `gate_residual`: out += gate · y, in place on the residual stream (a transformer block's `h += gate · f(h)`,
 *   the AdaLN gate read from the modulation vector of the row's batch item);
 * - `swiglu`: out = silu(y_a) · y_b with y_b the dot product with weight row `rowB + j` (klein's MLP:
 *   `linear_out(silu(a) · b)` with `[a, b] = linear_in(x)`), so the 2·H-wide projection is never written;
 * - `silu`: out = silu(y) (the time embedding's activation, and the silu every modulation reads it through).
 * `bias` adds bias[weight row] to each dot product first. Results land at `out[m · outStride + outOffset + j]`,
 * so a kernel can write one slice of a wider buffer (the single blocks' concatenated attention and MLP halves).
 * @module kernels/linear_epilogue
 */

/** @typedef {'store' | 'gate_residual' | 'swiglu' | 'silu'} EpilogueKind */
/** @typedef {'f32' | 'f16'} FloatType */

/**
 * @typedef {Object} Epilogue
 * @property {EpilogueKind} kind
 * @property {boolean} [bias]  A bias vector indexed by weight row.
 */

/** The uniform block's fields, in order (u32 each). */
export const PARAM_FIELDS = Object.freeze([
    'm',
    'n',
    'k',
    'k_blocks',
    'row_a',
    'row_b',
    'out_stride',
    'out_offset',
    'rows_per_batch',
    'gate_stride',
    'gate_offset',
    'w_stride',
]);

/** Binding numbers every path shares; a path's own inputs take 1 and from 7 on. */
export const BINDING = Object.freeze({ params: 0, packed: 2, scales: 3, out: 4, bias: 5, gate: 6 });

export const EPILOGUE_KINDS = Object.freeze(['store', 'gate_residual', 'swiglu', 'silu']);

/**
 * @param {Epilogue} epilogue
 * @returns {Epilogue}  The same, checked.
 */
export function checkEpilogue(epilogue) {
    if (!EPILOGUE_KINDS.includes(epilogue?.kind))
        throw new Error(`Unknown linear epilogue ${JSON.stringify(epilogue?.kind)}: use one of ${EPILOGUE_KINDS}.`);
    return { kind: epilogue.kind, bias: Boolean(epilogue.bias) };
}

/** WGSL: the uniform block. */
export const PARAMS_WGSL = /* wgsl */ `
struct Params { ${PARAM_FIELDS.map((f) => `${f}: u32`).join(', ')} }
@group(0) @binding(${BINDING.params}) var<uniform> params: Params;
`;

/**
 * WGSL: the output, bias and gate bindings and `finish(m, j, a, b)`, which takes output (row m, column j)'s dot
 * products with weight rows rowA + j (`a`) and, for swiglu, rowB + j (`b`), applies the epilogue in float32 and
 * stores the value. Rows and columns past the output are ignored, so callers may finish whole tiles.
 * @param {{epilogue: Epilogue, activation: FloatType, output: FloatType}} options  `activation`: the bias's and
 *   gate's type (the activations'); `output`: the output's.
 * @returns {string}
 */
export function epilogueWgsl({ epilogue, activation, output }) {
    const { kind, bias } = epilogue;
    const lines = ['var v = a;'];
    if (bias) lines.push('v += f32(bias[params.row_a + j]);');
    if (kind === 'swiglu') {
        lines.push('var u = b;');
        if (bias) lines.push('u += f32(bias[params.row_b + j]);');
        // silu(v) = v · sigmoid(v), written so a large -v gives exp(-v) = inf and v / inf = -0, never NaN.
        lines.push('v = v / (1.0 + exp(-v)) * u;');
    }
    if (kind === 'silu') lines.push('v = v / (1.0 + exp(-v));');
    lines.push('let at = m * params.out_stride + params.out_offset + j;');
    if (kind === 'gate_residual')
        lines.push(
            'let g = f32(gate[(m / params.rows_per_batch) * params.gate_stride + params.gate_offset + j]);',
            'v = f32(out[at]) + g * v;',
        );
    lines.push(`out[at] = ${output}(v);`);
    const bindings = [
        `@group(0) @binding(${BINDING.out}) var<storage, read_write> out: array<${output}>;`,
        bias ? `@group(0) @binding(${BINDING.bias}) var<storage, read> bias: array<${activation}>;` : '',
        kind === 'gate_residual'
            ? `@group(0) @binding(${BINDING.gate}) var<storage, read> gate: array<${activation}>;`
            : '',
    ];
    return /* wgsl */ `
${bindings.filter(Boolean).join('\n')}

fn finish(m: u32, j: u32, a: f32, b: f32) {
    if (m >= params.m || j >= params.n) { return; }
    ${lines.join('\n    ')}
}
`;
}
