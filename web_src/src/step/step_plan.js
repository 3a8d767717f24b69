// @ts-check
/**
 * @file One size's step, laid out once: the activation buffers, every kernel bound to its buffers, and the list of
 * dispatches a step encodes, in order. WebGPU cannot replay a command buffer (a GPUCommandBuffer is submitted once,
 * and render bundles hold no compute work), so what is recorded once is everything else: pipelines, bind groups and
 * uniform blocks. A step then encodes the list into one compute pass, three calls a dispatch and no allocation.
 *
 * Layout (float32): the joint token stream x [S, H] holds the text tokens first (rows 0..T) and the image tokens
 * after them (rows T..S), so the single blocks' concatenation of the two streams is the buffer itself and a double
 * block addresses each stream as a range of rows. The modulation vectors of the step sit in one buffer:
 * image double-block (6H), text double-block (6H), single-block (3H), final norm (2H).
 * @module step/step_plan
 */

/** @typedef {import('./step_kernels.js').StepKernels} StepKernels */
/** @typedef {import('./step_types.js').StepWeights} StepWeights */
/** @typedef {import('../kernels/linear.js').LinearBuffers} LinearBuffers */
/** @typedef {import('../kernels/linear_epilogue.js').EpilogueKind} EpilogueKind */

/**
 * @typedef {Object} StepBuffers  The buffers a step's inputs are written into and its output read from.
 * @property {GPUBuffer} hidden  [I, inChannels]
 * @property {GPUBuffer} context  [T, jointDim]
 * @property {GPUBuffer} time  [timeChannels]: the timestep embedding.
 * @property {GPUBuffer} rope  [S, headDim / 2, 2]
 * @property {GPUBuffer} out  [I, outChannels]
 */

/**
 * A double block stream's six modulation rows, in the order the modulation linear writes them.
 * @param {number} base  The stream's first row offset.
 * @param {number} h  The hidden size.
 */
function doubleStream(base, h) {
    return {
        shift: base,
        scale: base + h,
        gate: base + 2 * h,
        mlpShift: base + 3 * h,
        mlpScale: base + 4 * h,
        mlpGate: base + 5 * h,
    };
}
/**
 * Where each modulation vector starts in the step's modulation buffer, in elements (H: the inner width).
 * diffusers' Flux2Modulation.split: (shift, scale, gate) for attention, then for the MLP; the final norm's
 * AdaLayerNormContinuous chunks (scale, shift), scale first.
 * @param {number} h
 */
export function modulationOffsets(h) {
    const img = 0;
    const txt = 6 * h;
    const single = 12 * h;
    const out = 15 * h;
    return {
        img: doubleStream(img, h),
        txt: doubleStream(txt, h),
        single: { shift: single, scale: single + h, gate: single + 2 * h },
        out: { scale: out, shift: out + h },
        total: 17 * h,
    };
}

/**
 * The linears of a step, by module path, with the epilogue each use takes and whether it runs on one row: what the
 * kernels compile (StepKernels.compile) before any size is laid out.
 * @param {import('./step_types.js').StepConfig} config
 * @returns {{path: string, epilogue: EpilogueKind, oneRow: boolean}[]}
 */
export function linearUses(config) {
    /** @type {{path: string, epilogue: EpilogueKind, oneRow: boolean}[]} */
    const uses = [
        { path: 'time_guidance_embed.timestep_embedder.linear_1', epilogue: 'silu', oneRow: true },
        { path: 'time_guidance_embed.timestep_embedder.linear_2', epilogue: 'silu', oneRow: true },
        ...['double_stream_modulation_img', 'double_stream_modulation_txt', 'single_stream_modulation', 'norm_out'].map(
            (name) => ({ path: `${name}.linear`, epilogue: /** @type {EpilogueKind} */ ('store'), oneRow: true }),
        ),
        { path: 'x_embedder', epilogue: 'store', oneRow: false },
        { path: 'context_embedder', epilogue: 'store', oneRow: false },
        { path: 'proj_out', epilogue: 'store', oneRow: false },
    ];
    const blockUse = (/** @type {string} */ path, /** @type {EpilogueKind} */ epilogue) =>
        uses.push({ path, epilogue, oneRow: false });
    for (let i = 0; i < config.doubleBlocks; i++) {
        const at = `transformer_blocks.${i}`;
        for (const name of ['to_q', 'to_k', 'to_v', 'add_q_proj', 'add_k_proj', 'add_v_proj'])
            blockUse(`${at}.attn.${name}`, 'store');
        blockUse(`${at}.attn.to_out.0`, 'gate_residual');
        blockUse(`${at}.attn.to_add_out`, 'gate_residual');
        for (const ff of ['ff', 'ff_context']) {
            blockUse(`${at}.${ff}.linear_in`, 'swiglu');
            blockUse(`${at}.${ff}.linear_out`, 'gate_residual');
        }
    }
    for (let i = 0; i < config.singleBlocks; i++) {
        const at = `single_transformer_blocks.${i}.attn`;
        blockUse(`${at}.to_qkv_mlp_proj`, 'store');
        blockUse(`${at}.to_qkv_mlp_proj`, 'swiglu');
        blockUse(`${at}.to_out`, 'gate_residual');
    }
    return uses;
}

/**
 * Lay out one size: allocate the activations, bind every kernel, list the dispatches.
 * @param {GPUDevice} device
 * @param {StepKernels} kernels
 * @param {StepWeights} weights
 * @param {{normBuffers: GPUBuffer[], imageTokens: number, textTokens: number}} size  `normBuffers`: per block
 *   (double blocks, then single blocks), its q/k norm weights as AdaLN A then B (kernels/qk_norm_rope.js).
 * @returns {Promise<{buffers: StepBuffers, dispatches: ((pass: GPUComputePassEncoder) => void)[],
 *   destroy: () => void}>}
 */
export async function layOut(device, kernels, weights, { normBuffers, imageTokens: I, textTokens: T }) {
    const c = kernels.config;
    const { inner: H, mlp: F, headDim: D } = c;
    const S = T + I;
    const mods = modulationOffsets(H);
    const align = device.limits.minStorageBufferOffsetAlignment;
    for (const width of [H, F])
        if ((T * width * 4) % align)
            throw new Error(
                `${T} text tokens of ${width} floats do not start the image rows on a ${align}-byte boundary.`,
            );
    /** @type {GPUBuffer[]} */
    const owned = [];
    /** @type {{destroy: () => void}[]} */
    const bindings = [];
    device.pushErrorScope('out-of-memory');
    const buffer = (/** @type {string} */ label, /** @type {number} */ floats, copyDst = false, copySrc = false) => {
        const made = device.createBuffer({
            label: `step/${label}`,
            size: Math.max(16, Math.ceil((floats * 4) / 16) * 16),
            usage:
                GPUBufferUsage.STORAGE |
                (copyDst ? GPUBufferUsage.COPY_DST : 0) |
                (copySrc ? GPUBufferUsage.COPY_SRC : 0),
        });
        owned.push(made);
        return made;
    };
    /** @type {StepBuffers} */
    const io = {
        hidden: buffer('hidden', I * c.inChannels, true),
        context: buffer('context', T * c.jointDim, true),
        time: buffer('time', c.timeChannels, true),
        rope: buffer('rope', S * D, true),
        out: buffer('out', I * c.outChannels, false, true),
    };
    const e1 = buffer('time-hidden', H);
    const ts = buffer('time-silu', H);
    const modBuffer = buffer('modulations', mods.total);
    const x = buffer('x', S * H);
    const n = buffer('normed', S * H);
    const qkv = buffer('qkv', S * 3 * H);
    const [qh, kh, vh] = ['q', 'k', 'v'].map((name) => buffer(`${name}-heads`, S * H));
    const cat = buffer('attention-mlp', S * (H + F));
    const oom = await device.popErrorScope();
    if (oom) {
        for (const made of owned) made.destroy();
        throw new Error(`Out of memory allocating the step's activations: ${oom.message}`);
    }

    /** @type {((pass: GPUComputePassEncoder) => void)[]} */
    const dispatches = [];
    /** @type {{use: Promise<import('../kernels/linear.js').Linear>, buffers: Omit<LinearBuffers, 'weight'> & {path: string}}[]} */
    const pendingLinears = [];
    const linear = (
        /** @type {string} */ path,
        /** @type {EpilogueKind} */ epilogue,
        /** @type {Omit<LinearBuffers, 'weight'>} */ buffers,
    ) => {
        const weight = /** @type {import('./step_types.js').StepLinear} */ (weights.linears.get(path));
        const oneRow = buffers.m === 1;
        const index = dispatches.length;
        dispatches.push(() => {});
        pendingLinears.push({ use: kernels.linear(weight, epilogue, oneRow), buffers: { ...buffers, path } });
        return index;
    };
    /** @type {number[]} */
    const linearSlots = [];
    const addLinear = (
        /** @type {string} */ path,
        /** @type {EpilogueKind} */ epilogue,
        /** @type {Omit<LinearBuffers, 'weight'>} */ buffers,
    ) => linearSlots.push(linear(path, epilogue, buffers));
    const bound = (/** @type {{dispatch: (pass: GPUComputePassEncoder) => void, destroy: () => void}} */ b) => {
        bindings.push(b);
        dispatches.push(b.dispatch);
    };
    const adaln = /** @type {NonNullable<StepKernels['adaln']>} */ (kernels.adaln);
    const qk = /** @type {NonNullable<StepKernels['qkNormRope']>} */ (kernels.qkNormRope);

    // The time embedding and the modulations: one row each.
    addLinear('time_guidance_embed.timestep_embedder.linear_1', 'silu', { m: 1, x: io.time, out: e1 });
    addLinear('time_guidance_embed.timestep_embedder.linear_2', 'silu', { m: 1, x: e1, out: ts });
    addLinear('double_stream_modulation_img.linear', 'store', {
        m: 1,
        x: ts,
        out: modBuffer,
        outOffset: mods.img.shift,
    });
    addLinear('double_stream_modulation_txt.linear', 'store', {
        m: 1,
        x: ts,
        out: modBuffer,
        outOffset: mods.txt.shift,
    });
    addLinear('single_stream_modulation.linear', 'store', {
        m: 1,
        x: ts,
        out: modBuffer,
        outOffset: mods.single.shift,
    });
    addLinear('norm_out.linear', 'store', { m: 1, x: ts, out: modBuffer, outOffset: mods.out.scale });
    // The two streams embedded into the joint rows.
    addLinear('x_embedder', 'store', { m: I, x: io.hidden, out: x, outOffset: T * H });
    addLinear('context_embedder', 'store', { m: T, x: io.context, out: x });

    const attention = await kernels.attention(S, { rowStride: H });
    const singleAttention = await kernels.attention(S, { rowStride: H + F });
    // x's image rows, or the text rows (its first rows), as a linear's input.
    const imageRows = (/** @type {GPUBuffer} */ of, /** @type {number} */ width) => ({ x: of, xOffset: T * width * 4 });
    for (let i = 0; i < c.doubleBlocks; i++) {
        const at = `transformer_blocks.${i}`;
        bound(
            adaln.bind({ rows: S, x, out: n, split: T, a: modOf(modBuffer, mods.txt), b: modOf(modBuffer, mods.img) }),
        );
        ['to_q', 'to_k', 'to_v'].forEach((name, j) =>
            addLinear(`${at}.attn.${name}`, 'store', {
                m: I,
                ...imageRows(n, H),
                out: qkv,
                outStride: 3 * H,
                outOffset: T * 3 * H + j * H,
                quantised: j > 0,
            }),
        );
        ['add_q_proj', 'add_k_proj', 'add_v_proj'].forEach((name, j) =>
            addLinear(`${at}.attn.${name}`, 'store', {
                m: T,
                x: n,
                out: qkv,
                outStride: 3 * H,
                outOffset: j * H,
                quantised: j > 0,
            }),
        );
        bound(
            qk.bind({
                tokens: S,
                qkv,
                rowStride: 3 * H,
                columns: { q: 0, k: H, v: 2 * H },
                norms: normBuffers[i],
                split: T,
                rope: io.rope,
                q: qh,
                k: kh,
                v: vh,
            }),
        );
        dispatches.push((pass) => attention.dispatch(pass, { q: qh, k: kh, v: vh, out: n }));
        addLinear(`${at}.attn.to_out.0`, 'gate_residual', {
            m: I,
            ...imageRows(n, H),
            out: x,
            outOffset: T * H,
            gate: modBuffer,
            gateOffset: mods.img.gate,
        });
        addLinear(`${at}.attn.to_add_out`, 'gate_residual', {
            m: T,
            x: n,
            out: x,
            gate: modBuffer,
            gateOffset: mods.txt.gate,
        });
        const mlpMods = (/** @type {typeof mods.img} */ m) => ({
            buffer: modBuffer,
            shift: m.mlpShift,
            scale: m.mlpScale,
        });
        bound(adaln.bind({ rows: S, x, out: n, split: T, a: mlpMods(mods.txt), b: mlpMods(mods.img) }));
        addLinear(`${at}.ff.linear_in`, 'swiglu', { m: I, ...imageRows(n, H), out: cat, outOffset: T * F });
        addLinear(`${at}.ff_context.linear_in`, 'swiglu', { m: T, x: n, out: cat });
        addLinear(`${at}.ff.linear_out`, 'gate_residual', {
            m: I,
            ...imageRows(cat, F),
            out: x,
            outOffset: T * H,
            gate: modBuffer,
            gateOffset: mods.img.mlpGate,
        });
        addLinear(`${at}.ff_context.linear_out`, 'gate_residual', {
            m: T,
            x: cat,
            out: x,
            gate: modBuffer,
            gateOffset: mods.txt.mlpGate,
        });
    }
    for (let i = 0; i < c.singleBlocks; i++) {
        const at = `single_transformer_blocks.${i}.attn`;
        bound(adaln.bind({ rows: S, x, out: n, a: modOf(modBuffer, mods.single) }));
        addLinear(`${at}.to_qkv_mlp_proj`, 'store', { m: S, x: n, out: qkv, columns: 3 * H });
        addLinear(`${at}.to_qkv_mlp_proj`, 'swiglu', {
            m: S,
            x: n,
            out: cat,
            columns: F,
            rowA: 3 * H,
            rowB: 3 * H + F,
            outStride: H + F,
            outOffset: H,
            quantised: true,
        });
        bound(
            qk.bind({
                tokens: S,
                qkv,
                rowStride: 3 * H,
                columns: { q: 0, k: H, v: 2 * H },
                norms: normBuffers[c.doubleBlocks + i],
                rope: io.rope,
                q: qh,
                k: kh,
                v: vh,
            }),
        );
        dispatches.push((pass) => singleAttention.dispatch(pass, { q: qh, k: kh, v: vh, out: cat }));
        addLinear(`${at}.to_out`, 'gate_residual', {
            m: S,
            x: cat,
            out: x,
            gate: modBuffer,
            gateOffset: mods.single.gate,
        });
    }
    // The final norm on the image rows, then the projection to the velocity.
    bound(
        adaln.bind({
            rows: I,
            x,
            xRow: T,
            out: n,
            a: { buffer: modBuffer, shift: mods.out.shift, scale: mods.out.scale },
        }),
    );
    addLinear('proj_out', 'store', { m: I, x: n, out: io.out });

    // Bind the linears; the int8 paths share one scratch for their quantised activations.
    const made = await Promise.all(pendingLinears.map((p) => p.use));
    const scratchBytes = Math.max(0, ...made.map((l, i) => l.scratchBytes(pendingLinears[i].buffers.m)));
    const scratch =
        scratchBytes > 0
            ? device.createBuffer({ label: 'step/int8-scratch', size: scratchBytes, usage: GPUBufferUsage.STORAGE })
            : undefined;
    if (scratch) owned.push(scratch);
    made.forEach((use, i) => {
        const { path, ...buffers } = pendingLinears[i].buffers;
        const weight = /** @type {import('./step_types.js').StepLinear} */ (weights.linears.get(path));
        const b = use.bind({ ...buffers, weight: weight.buffers, ...(scratch ? { scratch } : {}) });
        bindings.push(b);
        dispatches[linearSlots[i]] = b.dispatch;
    });
    return {
        buffers: io,
        dispatches,
        destroy() {
            for (const b of bindings) b.destroy();
            for (const b of owned) b.destroy();
            attention.destroy();
            singleAttention.destroy();
        },
    };
}

/**
 * @param {GPUBuffer} buffer
 * @param {{shift: number, scale: number}} offsets
 * @returns {import('../kernels/adaln.js').Modulation}
 */
function modOf(buffer, { shift, scale }) {
    return { buffer, shift, scale };
}
