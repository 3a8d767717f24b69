// @ts-check
/**
 * @file The compiled kernels of one transformer on one device: the linears (one per weight shape, format and
 * epilogue), AdaLN, the q/k norm and RoPE, and flash attention per size. Each kernel takes the best variant the
 * device offers and, when its shader fails to compile (a feature this browser implements wrongly), the next one:
 * only when every variant of a kernel fails is the executor given up (the caller then runs the step on
 * onnxruntime).
 *
 * The linears over whole token sequences take the fastest path (kernels/linear_paths.js); the few over one row
 * (the time embedding, the modulations, the final norm's) take the float32 `simple` path: they read each weight
 * once whatever the path, and stay exact in float32 where the int8 paths would quantise the modulation vectors
 * every block reads. Dense float32 weights (the fp32 graphs, for exact tests at small sizes) take `simple` too.
 * @module step/step_kernels
 */

import { createAdaLN } from '../kernels/adaln.js';
import { UNVERIFIED_VARIANTS, attentionVariants, createFlashAttention } from '../kernels/flash_attention.js';
import { createLinear, probeInt8Unit } from '../kernels/linear.js';
import { linearPaths } from '../kernels/linear_paths.js';
import { createQkNormRope } from '../kernels/qk_norm_rope.js';

/** @typedef {import('../kernels/linear.js').Linear} Linear */
/** @typedef {import('../kernels/linear.js').LinearPath} LinearPath */
/** @typedef {import('../kernels/linear_epilogue.js').EpilogueKind} EpilogueKind */
/** @typedef {import('../kernels/flash_attention.js').AttentionVariant} AttentionVariant */
/** @typedef {import('../kernels/flash_attention.js').AttentionOutput} AttentionOutput */
/** @typedef {import('./step_types.js').StepConfig} StepConfig */
/** @typedef {import('./step_types.js').StepLinear} StepLinear */
/** @typedef {Awaited<ReturnType<typeof createFlashAttention>>} Attention */

/** The activations' type: float32 throughout (the residual stream is float32 in every graph). */
const ACT = 'f32';

/**
 * @param {unknown} err
 * @returns {string}
 */
function message(err) {
    return err instanceof Error ? err.message : String(err);
}

export class StepKernels {
    /**
     * Compile what every size shares: AdaLN, the q/k norm, and one linear per weight shape and epilogue the step
     * uses (`uses`), each on the first path that compiles.
     * @param {GPUDevice} device
     * @param {StepConfig} config
     * @param {{linear: StepLinear, epilogue: EpilogueKind, oneRow: boolean}[]} uses
     * @param {{adapterInfo?: GPUAdapterInfo | null}} [options]
     * @returns {Promise<StepKernels>}
     */
    static async compile(device, config, uses, { adapterInfo = null } = {}) {
        const kernels = new StepKernels(device, config, adapterInfo);
        // Compiled side by side: the browser compiles asynchronous pipelines in parallel where it can.
        const [adaln, qkNormRope] = await Promise.all([
            createAdaLN(device, { width: config.inner, eps: config.eps, activation: ACT }),
            createQkNormRope(device, {
                heads: config.heads,
                headDim: config.headDim,
                eps: config.normEps,
                activation: ACT,
            }),
            ...uses.map((use) => kernels.linear(use.linear, use.epilogue, use.oneRow)),
        ]);
        kernels.adaln = adaln;
        kernels.qkNormRope = qkNormRope;
        return kernels;
    }

    /**
     * @param {GPUDevice} device
     * @param {StepConfig} config
     * @param {GPUAdapterInfo | null} adapterInfo
     */
    constructor(device, config, adapterInfo) {
        this.device = device;
        this.config = config;
        this.adapterInfo = adapterInfo;
        /** @type {Awaited<ReturnType<typeof createAdaLN>> | null} */
        this.adaln = null;
        /** @type {Awaited<ReturnType<typeof createQkNormRope>> | null} */
        this.qkNormRope = null;
        /** @type {Map<string, Promise<Linear>>} */
        this.linears = new Map();
        /** @type {LinearPath[]} The paths left for the linears over tokens, fastest first; failed ones drop off. */
        this.paths = linearPaths(device, { activation: ACT }, adapterInfo);
        /** @type {AttentionVariant[]} Likewise for flash attention: the verified variants only (the matrix ones still
         * give wrong outputs on GPUs, docs/kernels.md). */
        this.attentionVariants = attentionVariants(device, ACT, adapterInfo).filter((v) => !UNVERIFIED_VARIANTS.has(v));
        /** @type {Set<string>} The paths and variants the step's kernels run on. */
        this.used = new Set();
        /** @type {string[]} Variants that failed to compile here, and why. */
        this.failures = [];
        /** @type {import('../kernels/linear_matrix.js').OffsetUnit | null | undefined} */
        this.int8Unit = undefined;
    }

    /**
     * The compiled linear for `linear`'s weights with `epilogue` (one per shape, format and epilogue).
     * @param {StepLinear} linear
     * @param {EpilogueKind} epilogue
     * @param {boolean} oneRow  Applied to one row (the time and modulation linears): the float32 path.
     * @returns {Promise<Linear>}
     */
    linear(linear, epilogue, oneRow) {
        const key = [linear.format, linear.scales, linear.n, linear.k, epilogue, oneRow].join('/');
        let made = this.linears.get(key);
        if (!made) {
            made = this.compileLinear(linear, epilogue, oneRow);
            this.linears.set(key, made);
        }
        return made;
    }

    /**
     * @param {StepLinear} linear
     * @param {EpilogueKind} epilogue
     * @param {boolean} oneRow
     * @returns {Promise<Linear>}
     */
    async compileLinear(linear, epilogue, oneRow) {
        const dense = linear.format === 'f32';
        for (;;) {
            const path = oneRow || dense ? 'simple' : this.paths[0];
            if (!path) throw new Error(`no linear path compiles on this device (${this.failures.join('; ')})`);
            try {
                if (path === 'int8-matrix' && this.int8Unit === undefined)
                    this.int8Unit = await probeInt8Unit(this.device, { adapterInfo: this.adapterInfo });
                if (path === 'int8-matrix' && !this.int8Unit)
                    throw new Error('the int8 matrix units give wrong products on this device');
                const made = await createLinear(this.device, {
                    n: linear.n,
                    k: linear.k,
                    weights: linear.format,
                    scales: linear.scales,
                    activation: ACT,
                    epilogue: { kind: epilogue },
                    path,
                    adapterInfo: this.adapterInfo,
                    ...(this.int8Unit ? { int8Unit: this.int8Unit } : {}),
                });
                if (!oneRow) this.used.add(path);
                return made;
            } catch (err) {
                this.failures.push(`linear ${path}: ${message(err)}`);
                if (path === 'simple' || path === 'tiled') throw err;
                this.paths = this.paths.filter((p) => p !== path);
            }
        }
    }

    /**
     * Flash attention over `tokens` tokens writing token-major rows, on the first variant that compiles.
     * @param {number} tokens
     * @param {AttentionOutput} output
     * @returns {Promise<Attention>}
     */
    async attention(tokens, output) {
        const { heads, headDim } = this.config;
        for (;;) {
            const variant = this.attentionVariants[0];
            if (!variant) throw new Error(`no flash attention variant compiles (${this.failures.join('; ')})`);
            try {
                const made = await createFlashAttention(
                    this.device,
                    { heads, tokens, headDim, dtype: ACT, variant, output },
                    { adapterInfo: this.adapterInfo },
                );
                this.used.add(`flash-attention-${variant}`);
                return made;
            } catch (err) {
                this.failures.push(`flash attention ${variant}: ${message(err)}`);
                this.attentionVariants = this.attentionVariants.slice(1);
            }
        }
    }

    /** @returns {string} The paths and variants in use, e.g. 'int8-dp4a, flash-attention-subgroups'. */
    describe() {
        return [...this.used].join(', ');
    }
}
