// @ts-check
/**
 * @file The transformer step of FLUX.2 [klein] on our WGSL kernels (kernels/), as one executor over the app's
 * GPUDevice: `noise_pred` from the same inputs as the ONNX graph's (hidden_states, encoder_hidden_states, timestep,
 * img_ids, txt_ids), computed as the graph computes it (builder/convert/export_transformer.py): the time embedding and
 * the modulations shared by every block, the two embedders, the double-stream blocks over the text and image
 * streams, the single-stream blocks over both, the final AdaLN and projection. docs/kernels.md says why the step is
 * one executor and not onnxruntime with our kernels between its segments.
 *
 * The executor owns the weights' GPU buffers it is given (the same ones onnxruntime's session would be fed: one of
 * the two exists at a time) and destroys them with itself. Each size is laid out once (step/step_plan.js); a step
 * writes its inputs, encodes the size's dispatches into one compute pass, and reads the output back.
 * @module step/step_executor
 */

import { StepKernels } from './step_kernels.js';
import { layOut, linearUses } from './step_plan.js';
import { ropeTable, timestepEmbedding } from './step_tables.js';

/** @typedef {import('./step_types.js').StepConfig} StepConfig */
/** @typedef {import('./step_types.js').StepLinear} StepLinear */
/** @typedef {import('./step_types.js').StepWeights} StepWeights */

/**
 * @typedef {Object} StepInputs  The graph's inputs.
 * @property {Float32Array} hidden  [imageTokens, inChannels]
 * @property {Float32Array} context  [textTokens, jointDim]
 * @property {number} timestep
 * @property {BigInt64Array} imgIds  [imageTokens, 4]
 * @property {BigInt64Array} txtIds  [textTokens, 4]
 */

/** A failure of our kernels while a step ran (a validation or internal error of the device). */
export class StepRunError extends Error {
    /** @param {string} message */
    constructor(message) {
        super(message);
        this.name = 'StepRunError';
    }
}

export class StepExecutor {
    /**
     * Compile the kernels and upload the norm weights; no size is laid out yet (prepare()).
     * @param {GPUDevice} device
     * @param {StepConfig} config
     * @param {StepWeights} weights  Owned by the executor from here on.
     * @param {{adapterInfo?: GPUAdapterInfo | null}} [options]
     * @returns {Promise<StepExecutor>}
     */
    static async create(device, config, weights, { adapterInfo = null } = {}) {
        const uses = linearUses(config).map((use) => ({
            linear: /** @type {StepLinear} */ (weights.linears.get(use.path)),
            epilogue: use.epilogue,
            oneRow: use.oneRow,
        }));
        const kernels = await StepKernels.compile(device, config, uses, { adapterInfo });
        return new StepExecutor(device, config, weights, kernels);
    }

    /**
     * @param {GPUDevice} device
     * @param {StepConfig} config
     * @param {StepWeights} weights
     * @param {StepKernels} kernels
     */
    constructor(device, config, weights, kernels) {
        this.device = device;
        this.config = config;
        this.weights = weights;
        this.kernels = kernels;
        const blockNorms = (/** @type {string[]} */ paths) => {
            const values = new Float32Array(4 * config.headDim);
            paths.forEach((path, i) =>
                values.set(/** @type {Float32Array} */ (weights.norms.get(path)), i * config.headDim),
            );
            return upload(device, 'step/qk-norms', values);
        };
        /** Per block, its q and k norm weights for the text tokens (A), then the image tokens (B). */
        this.normBuffers = [
            ...Array.from({ length: config.doubleBlocks }, (_, i) => {
                const at = `transformer_blocks.${i}.attn`;
                return blockNorms([`${at}.norm_added_q`, `${at}.norm_added_k`, `${at}.norm_q`, `${at}.norm_k`]);
            }),
            ...Array.from({ length: config.singleBlocks }, (_, i) => {
                const at = `single_transformer_blocks.${i}.attn`;
                return blockNorms([`${at}.norm_q`, `${at}.norm_k`, `${at}.norm_q`, `${at}.norm_k`]);
            }),
        ];
        /** @type {{key: string, plan: Awaited<ReturnType<typeof layOut>>} | null} */
        this.laidOut = null;
        /** @type {{context: Float32Array | null, imgIds: BigInt64Array | null, txtIds: BigInt64Array | null}} */
        this.written = { context: null, imgIds: null, txtIds: null };
        /** @type {GPUBuffer[]} Read-back buffers not in use. */
        this.readbacks = [];
    }

    /**
     * Lay out the step for a size (once; a new size replaces the last one).
     * @param {number} imageTokens
     * @param {number} textTokens
     */
    async prepare(imageTokens, textTokens) {
        const key = `${imageTokens}x${textTokens}`;
        if (this.laidOut?.key === key) return this.laidOut.plan;
        this.forgetSize();
        const plan = await layOut(this.device, this.kernels, this.weights, {
            normBuffers: this.normBuffers,
            imageTokens,
            textTokens,
        });
        this.laidOut = { key, plan };
        return plan;
    }

    /** Free the last size's buffers and bindings. */
    forgetSize() {
        this.laidOut?.plan.destroy();
        this.laidOut = null;
        this.written = { context: null, imgIds: null, txtIds: null };
        for (const buffer of this.readbacks) buffer.destroy();
        this.readbacks = [];
    }

    /**
     * @param {number} imageTokens
     * @param {number} textTokens
     * @returns {number | null}  Dispatches a step of that size encodes (null before it is laid out).
     */
    dispatches(imageTokens, textTokens) {
        if (this.laidOut?.key !== `${imageTokens}x${textTokens}`) return null;
        // Counted by encoding the step into a pass that only counts (an int8 linear is two: quantiser and product).
        let count = 0;
        const counter = /** @type {GPUComputePassEncoder} */ (
            /** @type {unknown} */ ({
                setPipeline() {},
                setBindGroup() {},
                dispatchWorkgroups() {
                    count += 1;
                },
            })
        );
        for (const dispatch of this.laidOut.plan.dispatches) dispatch(counter);
        return count;
    }

    /** @returns {string} The kernels' paths and variants, e.g. 'int8-dp4a, flash-attention-subgroups'. */
    describe() {
        return this.kernels.describe();
    }

    /**
     * Queue one step: resolves once its work is submitted, with the output on its way back.
     * @param {StepInputs} inputs
     * @returns {Promise<{outputs: Promise<Float32Array>}>}
     */
    async submit(inputs) {
        const { inChannels, jointDim, outChannels } = this.config;
        const imageTokens = inputs.hidden.length / inChannels;
        const textTokens = inputs.context.length / jointDim;
        const plan = await this.prepare(imageTokens, textTokens);
        const { buffers } = plan;
        const queue = this.device.queue;
        queue.writeBuffer(buffers.hidden, 0, inputs.hidden.buffer, inputs.hidden.byteOffset, inputs.hidden.byteLength);
        const time = timestepEmbedding(inputs.timestep, this.config);
        queue.writeBuffer(buffers.time, 0, time.buffer, 0, time.byteLength);
        // The prompt and the positions stay the same through a denoising loop: written when they change.
        if (this.written.context !== inputs.context) {
            const { context } = inputs;
            queue.writeBuffer(buffers.context, 0, context.buffer, context.byteOffset, context.byteLength);
            this.written.context = context;
        }
        if (this.written.imgIds !== inputs.imgIds || this.written.txtIds !== inputs.txtIds) {
            const table = ropeTable(inputs.txtIds, inputs.imgIds, this.config);
            queue.writeBuffer(buffers.rope, 0, table.buffer, 0, table.byteLength);
            this.written.imgIds = inputs.imgIds;
            this.written.txtIds = inputs.txtIds;
        }
        const bytes = imageTokens * outChannels * 4;
        const readback =
            this.readbacks.pop() ??
            this.device.createBuffer({
                label: 'step/readback',
                size: buffers.out.size,
                usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
            });
        this.device.pushErrorScope('validation');
        this.device.pushErrorScope('internal');
        const encoder = this.device.createCommandEncoder({ label: 'step' });
        const pass = encoder.beginComputePass({ label: 'step' });
        for (const dispatch of plan.dispatches) dispatch(pass);
        pass.end();
        encoder.copyBufferToBuffer(buffers.out, 0, readback, 0, buffers.out.size);
        queue.submit([encoder.finish()]);
        const errors = Promise.all([this.device.popErrorScope(), this.device.popErrorScope()]);
        const outputs = (async () => {
            const failed = (await errors).find(Boolean);
            if (failed) {
                readback.destroy();
                throw new StepRunError(`The transformer step on our kernels failed: ${failed.message}`);
            }
            await readback.mapAsync(GPUMapMode.READ);
            const out = new Float32Array(readback.getMappedRange(0, bytes).slice(0));
            readback.unmap();
            if (this.laidOut?.plan === plan) this.readbacks.push(readback);
            else readback.destroy();
            return out;
        })();
        return { outputs };
    }

    /** Free everything: the sizes' buffers, the norms and the weights. */
    destroy() {
        this.forgetSize();
        for (const buffer of this.normBuffers) buffer.destroy();
        for (const linear of this.weights.linears.values())
            for (const buffer of Object.values(linear.buffers)) buffer.destroy();
    }
}

/**
 * @param {GPUDevice} device
 * @param {string} label
 * @param {Float32Array} values
 * @returns {GPUBuffer}
 */
function upload(device, label, values) {
    const buffer = device.createBuffer({
        label,
        size: Math.max(16, Math.ceil(values.byteLength / 16) * 16),
        usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST,
    });
    device.queue.writeBuffer(buffer, 0, values.buffer, values.byteOffset, values.byteLength);
    return buffer;
}
