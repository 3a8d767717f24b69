// @ts-check
/**
 * @file Compiling a kernel's WGSL into a compute pipeline, with the compiler's messages in the error when it fails
 * (a shader that uses a feature the browser implements badly fails here, and the caller falls back to another
 * variant), and the uniform buffer most kernels take.
 * @module kernels/compile
 */

export class KernelCompileError extends Error {
    /**
     * @param {string} label
     * @param {string} messages
     */
    constructor(label, messages) {
        super(`WGSL kernel ${label} failed to compile: ${messages}`);
        this.name = 'KernelCompileError';
    }
}

/** @type {WeakMap<GPUDevice, Map<string, Promise<GPUComputePipeline>>>} Pipelines by their WGSL, per device. */
const compiled = new WeakMap();

/**
 * A compute pipeline from `code` (entry point `main`), compiled once per device: kernels whose sizes are uniforms
 * (a transformer's many linears of one path and epilogue) share one pipeline, and a browser that compiles shaders
 * slowly (SwiftShader: seconds each) compiles each once. Throws KernelCompileError naming the compiler's errors, or
 * the validation error the pipeline creation raised (a failure is not kept: the next call tries again).
 * @param {GPUDevice} device
 * @param {string} label
 * @param {string} code
 * @returns {Promise<GPUComputePipeline>}
 */
export function computePipeline(device, label, code) {
    let byCode = compiled.get(device);
    if (!byCode) {
        byCode = new Map();
        compiled.set(device, byCode);
    }
    let pipeline = byCode.get(code);
    if (!pipeline) {
        const made = compile(device, label, code);
        const cache = byCode;
        made.catch(() => cache.delete(code));
        byCode.set(code, made);
        pipeline = made;
    }
    return pipeline;
}

/**
 * @param {GPUDevice} device
 * @param {string} label
 * @param {string} code
 * @returns {Promise<GPUComputePipeline>}
 */
async function compile(device, label, code) {
    device.pushErrorScope('validation');
    // The first line names the kernel: the app tells our shaders from onnxruntime's by it (runtime/gpu.js).
    const module = device.createShaderModule({ label, code: `// klein-web kernel ${label}\n${code}` });
    const info = await module.getCompilationInfo();
    const errors = info.messages.filter((m) => m.type === 'error');
    if (errors.length > 0) {
        await device.popErrorScope();
        throw new KernelCompileError(label, errors.map((m) => `${m.lineNum}:${m.linePos} ${m.message}`).join('; '));
    }
    let pipeline;
    try {
        pipeline = await device.createComputePipelineAsync({
            label,
            layout: 'auto',
            compute: { module, entryPoint: 'main' },
        });
    } catch (err) {
        await device.popErrorScope();
        throw new KernelCompileError(label, err instanceof Error ? err.message : String(err));
    }
    const scoped = await device.popErrorScope();
    if (scoped) throw new KernelCompileError(label, scoped.message);
    return pipeline;
}

/**
 * A uniform buffer holding `words` (u32 and f32 values as 32-bit words, in order).
 * @param {GPUDevice} device
 * @param {string} label
 * @param {ArrayBuffer} words
 * @returns {GPUBuffer}
 */
export function uniformBuffer(device, label, words) {
    const buffer = device.createBuffer({
        label,
        size: Math.max(16, Math.ceil(words.byteLength / 16) * 16),
        usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
    });
    device.queue.writeBuffer(buffer, 0, words);
    return buffer;
}
