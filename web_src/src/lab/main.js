// @ts-check
/**
 * @file The kernel lab's page (builder/check/kernel_lab): runs every case of cases.json, in every variant and
 * dtype the device offers, on a device created the way the app creates it (runtime/gpu.js), beside
 * onnxruntime-web's equivalent graph on the same device, and posts each result to the lab's server, which checks
 * it against numpy. Inputs come from lab/prng.js, which the server reproduces.
 * @module lab/main
 */

import { Gpu } from '../runtime/gpu.js';
import { configureOrt } from '../runtime/ort.js';
import { runtimeFiles } from '../runtime/wasm_parts.js';
import { runOrt } from './ort_compare.js';
import { randomFloats, randomWords, toHalfBits } from './prng.js';
import { KERNELS } from './registry.js';
import { timeKernel } from './timing.js';

/** @typedef {import('./registry.js').LabCase} LabCase */

/** The onnxruntime runtime files beside the bundle, named by the lab's build (worker/build_defines.d.ts). */
const ORT_WASM = typeof KLEIN_ORT_WASM === 'undefined' ? undefined : KLEIN_ORT_WASM;

const logElement = document.getElementById('log');

/**
 * @param {string} path
 * @param {unknown} body
 */
async function post(path, body) {
    await fetch(path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

/** @param {string} line */
async function log(line) {
    if (logElement) logElement.textContent += `${line}\n`;
    await post('api/log', { line });
}

/**
 * @param {Uint8Array} bytes
 * @returns {string}
 */
function base64(bytes) {
    let text = '';
    for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    return btoa(text);
}

/**
 * The values of one input, as they are uploaded (and fed to onnxruntime).
 * @param {LabCase['inputs'][number]} input
 * @param {'f16' | 'f32'} dtype  The run's activation dtype ('act' inputs take it).
 * @returns {{dtype: string, data: Float32Array | Uint16Array | Uint32Array}}
 */
function inputValues(input, dtype) {
    const count = input.dims.reduce((a, b) => a * b, 1);
    const type = input.type === 'act' ? dtype : input.type;
    if (type === 'u32') return { dtype: type, data: randomWords(input.seed, count) };
    const floats = randomFloats(input.seed, count, { scale: input.scale, offset: input.offset });
    return { dtype: type, data: type === 'f16' ? toHalfBits(floats) : floats };
}

/**
 * @param {GPUDevice} device
 * @param {ArrayBufferView} data
 * @returns {GPUBuffer}
 */
function upload(device, data) {
    const size = Math.ceil(data.byteLength / 16) * 16;
    const buffer = device.createBuffer({
        size,
        usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
        mappedAtCreation: true,
    });
    new Uint8Array(buffer.getMappedRange()).set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    buffer.unmap();
    return buffer;
}

/**
 * @param {GPUDevice} device
 * @param {GPUBuffer} buffer
 * @returns {Promise<Uint8Array>}
 */
async function download(device, buffer) {
    const readback = device.createBuffer({
        size: buffer.size,
        usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(buffer, 0, readback, 0, buffer.size);
    device.queue.submit([encoder.finish()]);
    await readback.mapAsync(GPUMapMode.READ);
    const bytes = new Uint8Array(readback.getMappedRange().slice(0));
    readback.unmap();
    readback.destroy();
    return bytes;
}

/**
 * The case's output rows (last axis) out of the whole output's bytes.
 * @param {Uint8Array} bytes
 * @param {LabCase} kase
 * @param {number} itemBytes
 * @returns {string}
 */
function rowsOf(bytes, kase, itemBytes) {
    const rowBytes = kase.output.dims[kase.output.dims.length - 1] * itemBytes;
    const out = new Uint8Array(kase.rows.length * rowBytes);
    kase.rows.forEach((row, i) => out.set(bytes.subarray(row * rowBytes, (row + 1) * rowBytes), i * rowBytes));
    return base64(out);
}

/**
 * @param {GPUDevice} device
 * @param {() => Promise<T>} body
 * @returns {Promise<T>}
 * @template T
 */
async function withErrorScope(device, body) {
    device.pushErrorScope('out-of-memory');
    device.pushErrorScope('validation');
    let value;
    try {
        value = await body();
    } finally {
        const validation = await device.popErrorScope();
        const memory = await device.popErrorScope();
        const error = validation ?? memory;
        if (error) throw new Error(`WebGPU: ${error.message}`);
    }
    return value;
}

/**
 * One case in one dtype and variant: our kernel's output rows and time, then onnxruntime's (once per dtype).
 * @param {GPUDevice} device
 * @param {GPUAdapterInfo} adapterInfo
 * @param {LabCase} kase
 * @param {'f16' | 'f32'} dtype
 * @param {string} variant
 * @param {boolean} withOrt
 */
async function runCase(device, adapterInfo, kase, dtype, variant, withOrt) {
    const values = Object.fromEntries(kase.inputs.map((input) => [input.name, inputValues(input, dtype)]));
    const outType = kase.output.type === 'act' ? dtype : kase.output.type;
    const itemBytes = outType === 'f16' ? 2 : 4;
    const outCount = kase.output.dims.reduce((a, b) => a * b, 1);
    /** @type {Record<string, GPUBuffer>} */
    const buffers = Object.fromEntries(Object.entries(values).map(([name, { data }]) => [name, upload(device, data)]));
    buffers[kase.output.name] = device.createBuffer({
        size: Math.ceil((outCount * itemBytes) / 16) * 16,
        // COPY_DST: a kernel that updates its output in place (the linear's residual add) starts it from an input.
        usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST,
    });
    /** @type {Record<string, unknown>} */
    const result = { id: kase.id, kernel: kase.kernel, dtype, variant, out_type: outType };
    try {
        const kernel = await withErrorScope(device, () =>
            KERNELS[kase.kernel].create(device, { ...kase, dtype, variant }, adapterInfo),
        );
        try {
            result.flops = kernel.flops;
            const bytes = await withErrorScope(device, async () => {
                const encoder = device.createCommandEncoder();
                kernel.record(encoder, buffers);
                device.queue.submit([encoder.finish()]);
                return download(device, buffers[kase.output.name]);
            });
            result.rows = rowsOf(bytes, kase, itemBytes);
            if (kase.timing && device.features.has('timestamp-query')) {
                result.timing = await withErrorScope(device, () =>
                    timeKernel(device, (encoder) => kernel.record(encoder, buffers), kase.timing ?? {}),
                );
            }
        } finally {
            kernel.destroy();
        }
    } catch (err) {
        result.error = err instanceof Error ? err.message : String(err);
    }
    for (const buffer of Object.values(buffers)) buffer.destroy();
    if (withOrt && kase.ort && kase.ort.graphs[dtype]) {
        try {
            const graph = new Uint8Array(await (await fetch(kase.ort.graphs[dtype])).arrayBuffer());
            /** @type {Record<string, {dtype: string, data: any, dims: number[]}>} */
            const feeds = {};
            for (const [name, dims] of Object.entries(kase.ort.feeds)) feeds[name] = { ...values[name], dims };
            const ort = await runOrt(device, graph, feeds, kase.ort.output, kase.ort.runs);
            result.ort = {
                ms: ort.ms,
                runs: ort.runs,
                kernels: ort.kernels,
                programs: ort.programs,
                rows: rowsOf(ort.output, kase, itemBytes),
            };
        } catch (err) {
            result.ort = { error: err instanceof Error ? err.message : String(err) };
        }
    }
    return result;
}

async function main() {
    const cases = /** @type {LabCase[]} */ (await (await fetch('cases.json')).json());
    configureOrt({ runtime: ORT_WASM ? runtimeFiles(ORT_WASM, import.meta.url) : null, threads: 1 });
    const gpu = new Gpu();
    const device = await gpu.getDevice();
    const adapter = /** @type {GPUAdapter} */ (gpu.adapter);
    const info = /** @type {any} */ (adapter.info);
    await post('api/env', {
        userAgent: navigator.userAgent,
        adapter: {
            vendor: info.vendor,
            architecture: info.architecture,
            device: info.device,
            description: info.description,
            subgroupMinSize: info.subgroupMinSize,
            subgroupMaxSize: info.subgroupMaxSize,
            subgroupMatrixConfigs: [...(info.subgroupMatrixConfigs ?? [])].map((c) => ({
                componentType: c.componentType,
                resultComponentType: c.resultComponentType,
                M: c.M,
                N: c.N,
                K: c.K,
            })),
        },
        features: [...device.features].sort(),
        limits: gpu.grant?.limits ?? {},
    });
    for (const kase of cases) {
        const entry = KERNELS[kase.kernel];
        if (!entry) {
            await post('api/result', {
                id: kase.id,
                kernel: kase.kernel,
                error: `the lab page has no kernel ${kase.kernel}`,
            });
            continue;
        }
        for (const dtype of kase.dtypes) {
            const variants = entry.variants(device, dtype, info);
            if (variants.length === 0) await log(`${kase.id} ${dtype}: no variant on this device`);
            for (const [i, variant] of variants.entries()) {
                await log(`${kase.id} ${dtype} ${variant}`);
                await post('api/result', await runCase(device, info, kase, dtype, variant, i === 0));
                if (gpu.lost) throw new Error(`the GPU device was lost: ${gpu.lostMessage}`);
            }
        }
    }
}

main().then(
    () => post('api/done', { ok: true }),
    (err) =>
        post('api/done', { ok: false, error: err instanceof Error ? `${err.message}\n${err.stack}` : String(err) }),
);
