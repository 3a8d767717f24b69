// @ts-check
/**
 * @file WebGPU adapter and device: the capability probe, software-adapter detection, and the one
 * GPUDevice every onnxruntime session shares.
 *
 * Why we own the device: onnxruntime-web 1.30 destroys its *default* device when the last session is
 * released (onnxruntime PR #23144), which would kill the GPU buffers of any session we keep. Passing
 * our own device to every session keeps it alive across release(). When the browser loses the device
 * (driver reset, GPU process crash), `device.lost` fires; the next job gets a fresh device and the
 * sessions are reloaded (models/sessions.js watches `generation`).
 * @module runtime/gpu
 */

import { DeviceLostError, NoWebGPUError } from '../shared/errors.js';

/**
 * Features and limits we ask the device for, at whatever the adapter offers: the ones onnxruntime's WebGPU EP
 * requests when it creates a device itself (webgpu_context.cc, GetRequiredDeviceFeatures and
 * GetRequiredDeviceLimits), plus chromium-experimental-subgroup-matrix. A device handed to onnxruntime has only
 * what its creator asked for, and its kernels size workgroups and shared memory from the device's limits:
 * WebGPU's defaults (16 KiB of workgroup storage, 256 invocations) would mean smaller tiles than the GPU allows.
 * shader-f16 enables the fp16 graphs; subgroups, onnxruntime's subgroup kernels (among them the DP4A int8
 * MatMulNBits the q4 graphs run on); subgroup-matrix, its matrix-unit kernels, which onnxruntime-web's own device
 * creation leaves out but its kernels use when the device has it. docs/machines.md has what each is worth.
 */
const WANTED_FEATURES = Object.freeze([
    'shader-f16',
    'subgroups',
    'timestamp-query',
    'chromium-experimental-subgroup-matrix',
]);

/**
 * The features the app can do without, most experimental first: the order in which they are given up when one
 * fails at its first use and the failure names none of them (Gpu.dropFeature). Each only changes which kernels
 * and graphs run. timestamp-query is left out: only a profiled run uses it.
 */
export const OPTIONAL_FEATURES = Object.freeze(['chromium-experimental-subgroup-matrix', 'subgroups', 'shader-f16']);

/**
 * The app's own GPU work that is given up like a feature when it fails: the transformer step on our WGSL kernels
 * (step/). Without it onnxruntime runs the step. Not a device feature: the device is the same either way.
 */
export const STEP_KERNELS = 'step-kernels';

/** Everything the recovery may give up (worker/recovery.js), the device's features and the app's own. */
export const FALLIBLE = Object.freeze([...OPTIONAL_FEATURES, STEP_KERNELS]);

/** The first line of every shader of our kernels (kernels/compile.js): what `gpu-fault=step-kernels` breaks. */
const KERNEL_SHADER = /^\/\/ klein-web kernel /;

/** The WGSL extension each optional feature's shaders enable (`enable f16;`): what a `gpu-fault` breaks. */
const WGSL_EXTENSIONS = Object.freeze({
    'chromium-experimental-subgroup-matrix': 'chromium_experimental_subgroup_matrix',
    subgroups: 'subgroups',
    'shader-f16': 'f16',
});

const WANTED_LIMITS = Object.freeze([
    'maxBindGroups',
    'maxBufferSize',
    'maxStorageBufferBindingSize',
    'maxStorageBuffersPerShaderStage',
    'maxComputeWorkgroupStorageSize',
    'maxComputeInvocationsPerWorkgroup',
    'maxComputeWorkgroupSizeX',
    'maxComputeWorkgroupSizeY',
    'maxComputeWorkgroupSizeZ',
    'maxComputeWorkgroupsPerDimension',
]);

/** @typedef {import('../shared/types.js').FeatureOff} FeatureOff */
/** @typedef {import('../shared/types.js').DeviceGrant} DeviceGrant */
/** @typedef {import('../shared/types.js').FeatureMemory} FeatureMemory */

/**
 * The requestDevice() descriptor for `adapter`: every wanted feature it has except those turned `off`, every
 * wanted limit at its maximum.
 * @param {{features: {has: (name: string) => boolean}, limits: any}} adapter
 * @param {ReadonlySet<string>} [off]  Features that failed in this browser (Gpu.off).
 * @returns {{requiredFeatures: GPUFeatureName[], requiredLimits: Record<string, number>}}
 */
export function deviceDescriptor(adapter, off = new Set()) {
    const requiredFeatures = /** @type {GPUFeatureName[]} */ (
        WANTED_FEATURES.filter((f) => adapter.features.has(f) && !off.has(f))
    );
    /** @type {Record<string, number>} */
    const requiredLimits = {};
    for (const name of WANTED_LIMITS) {
        const value = adapter.limits[name];
        if (typeof value === 'number') requiredLimits[name] = value;
    }
    return { requiredFeatures, requiredLimits };
}

/**
 * @param {GPUDevice} device
 * @param {FeatureOff[]} off
 * @returns {DeviceGrant}
 */
function grantOf(device, off) {
    const limits = /** @type {any} */ (device.limits);
    return {
        features: WANTED_FEATURES.filter((f) => device.features.has(f)),
        limits: Object.fromEntries(
            WANTED_LIMITS.filter((n) => typeof limits[n] === 'number').map((n) => [n, limits[n]]),
        ),
        off,
    };
}

/**
 * Make every shader that enables `feature`'s WGSL extension fail to compile on `device`, as in a browser whose
 * implementation of the feature is broken (Chromium 150's subgroup-matrix shaders): the worker's `?gpu-fault=`
 * parameter, with which the tests and GPU runs exercise the fallback on adapters where the feature works.
 * onnxruntime creates every shader module through the GPUDevice it was handed, so wrapping this one is enough.
 * For STEP_KERNELS: every shader of our kernels.
 * @param {GPUDevice} device
 * @param {string} feature  One of FALLIBLE.
 */
function breakShadersOf(device, feature) {
    const extension = WGSL_EXTENSIONS[/** @type {keyof typeof WGSL_EXTENSIONS} */ (feature)];
    const broken = feature === STEP_KERNELS ? KERNEL_SHADER : new RegExp(`^\\s*enable\\s[^;]*\\b${extension}\\b`, 'm');
    const create = device.createShaderModule.bind(device);
    device.createShaderModule = (descriptor) =>
        create(
            broken.test(descriptor.code)
                ? { ...descriptor, code: `${descriptor.code}\nfn gpu_fault() { gpu_fault_injected(); }\n` }
                : descriptor,
        );
}

/** requestAdapter() tries before "no adapter" is the answer, and the pause between them. */
const ADAPTER_ATTEMPTS = 3;
const ADAPTER_RETRY_MS = 250;

/** Adapter architectures / descriptions that mean "software rasteriser": works, but very slowly. */
const SOFTWARE_PATTERN = /swiftshader|llvmpipe|lavapipe|software|microsoft basic render/i;

const HOW_TO_GET_WEBGPU =
    'Use a browser with WebGPU: Chrome or Edge 113 or newer, Safari 26 on macOS, Firefox 141 or newer on Windows. ' +
    'On Linux, start Chrome with --enable-unsafe-webgpu --enable-features=Vulkan (NVIDIA: also ' +
    '--enable-dawn-features=vulkan_enable_f16_on_nvidia) and check chrome://gpu ' +
    '("WebGPU: Hardware accelerated"); on other systems make sure hardware acceleration is on in the settings.';

/** @typedef {import('../shared/types.js').AdapterSummary} AdapterSummary */
/** @typedef {import('../shared/types.js').Capabilities} Capabilities */

/**
 * @typedef {Object} GpuInfo  What the pipeline needs to choose graph variants.
 * @property {AdapterSummary} adapter
 * @property {boolean} software
 * @property {boolean} shaderF16
 * @property {boolean} subgroups
 * @property {boolean} subgroupMatrix  chromium-experimental-subgroup-matrix: onnxruntime's matrix-unit kernels.
 * @property {number} maxBufferSize
 * @property {number} maxStorageBufferBindingSize
 */

/**
 * Name the adapter from `adapter.info` (requestAdapterInfo() was removed from Chrome).
 * @param {GPUAdapter} adapter
 * @returns {AdapterSummary}
 */
export function describeAdapter(adapter) {
    // Older Chrome has no adapter.info at all, and before 135 isFallbackAdapter was on the adapter itself.
    /** @type {Partial<GPUAdapterInfo>} */
    const info = adapter.info ?? {};
    const legacy = /** @type {GPUAdapter & {isFallbackAdapter?: boolean}} */ (adapter);
    return {
        vendor: String(info.vendor ?? ''),
        architecture: String(info.architecture ?? ''),
        description: String(info.description ?? ''),
        isFallbackAdapter: Boolean(info.isFallbackAdapter ?? legacy.isFallbackAdapter ?? false),
    };
}

/**
 * @param {AdapterSummary} summary
 * @returns {boolean} True for SwiftShader and other CPU rasterisers.
 */
export function isSoftwareAdapter(summary) {
    return (
        summary.isFallbackAdapter ||
        SOFTWARE_PATTERN.test(`${summary.vendor} ${summary.architecture} ${summary.description}`)
    );
}

/**
 * Ask the browser for an adapter, or explain why there is none and how to fix it.
 * @returns {Promise<GPUAdapter>}
 */
export async function requestAdapter() {
    if (typeof navigator === 'undefined' || !('gpu' in navigator) || !navigator.gpu) {
        throw new NoWebGPUError(`This browser does not expose WebGPU (navigator.gpu is missing). ${HOW_TO_GET_WEBGPU}`);
    }
    let adapter = null;
    // A browser whose GPU process is still starting answers the first request with null (measured: headless
    // Chromium on Linux + NVIDIA, every launch, about 150 ms in); a second request a moment later gets the GPU.
    for (let attempt = 0; attempt < ADAPTER_ATTEMPTS && !adapter; attempt++) {
        if (attempt > 0) await new Promise((resolve) => setTimeout(resolve, ADAPTER_RETRY_MS));
        try {
            adapter = await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' });
        } catch (err) {
            throw new NoWebGPUError(`navigator.gpu.requestAdapter() failed (${String(err)}). ${HOW_TO_GET_WEBGPU}`);
        }
    }
    if (!adapter) {
        throw new NoWebGPUError(
            `WebGPU is present but no GPU adapter is available (it may be blocklisted). ${HOW_TO_GET_WEBGPU}`,
        );
    }
    return adapter;
}

/**
 * @param {GPUAdapter} adapter
 * @param {ReadonlySet<string>} [off]  Features the device is created without: the graphs are chosen as if the
 *   adapter lacked them.
 * @returns {GpuInfo}
 */
export function summarizeAdapter(adapter, off = new Set()) {
    const summary = describeAdapter(adapter);
    const has = (/** @type {string} */ feature) => adapter.features.has(feature) && !off.has(feature);
    return {
        adapter: summary,
        software: isSoftwareAdapter(summary),
        shaderF16: has('shader-f16'),
        subgroups: has('subgroups'),
        subgroupMatrix: has('chromium-experimental-subgroup-matrix'),
        maxBufferSize: Number(adapter.limits.maxBufferSize),
        maxStorageBufferBindingSize: Number(adapter.limits.maxStorageBufferBindingSize),
    };
}

/**
 * The `probe` request: everything the page shows in its capability panel, never throwing for a
 * missing WebGPU (the answer then says why in `error`).
 * @param {{threads: number}} options  The wasm thread count runtime/ort.js uses.
 * @returns {Promise<Capabilities>}
 */
export async function probe({ threads }) {
    const storage = await storageState();
    const base = {
        webgpu: false,
        error: /** @type {string | null} */ (null),
        adapter: /** @type {AdapterSummary | null} */ (null),
        software: false,
        shaderF16: false,
        subgroups: false,
        subgroupMatrix: false,
        maxBufferSize: 0,
        maxStorageBufferBindingSize: 0,
        storage,
        crossOriginIsolated: Boolean(globalThis.crossOriginIsolated),
        threads,
    };
    let adapter;
    try {
        adapter = await requestAdapter();
    } catch (err) {
        return { ...base, error: err instanceof Error ? err.message : String(err) };
    }
    return { ...base, webgpu: true, ...summarizeAdapter(adapter) };
}

/** @returns {Promise<{usage: number, quota: number, persisted: boolean}>} */
async function storageState() {
    const manager = typeof navigator !== 'undefined' ? navigator.storage : undefined;
    if (!manager) return { usage: 0, quota: 0, persisted: false };
    const estimate = await manager.estimate().catch(() => ({ usage: 0, quota: 0 }));
    const persisted = manager.persisted ? await manager.persisted().catch(() => false) : false;
    return { usage: estimate.usage ?? 0, quota: estimate.quota ?? 0, persisted };
}

/**
 * The key features that failed are remembered under: the browser's user agent, which carries its version (a
 * browser update tries the feature again), and the adapter's name (so does another GPU).
 * @param {AdapterSummary} adapter
 * @returns {string}
 */
export function browserKey(adapter) {
    const agent = typeof navigator !== 'undefined' ? navigator.userAgent : '';
    return `${agent} | ${adapter.vendor}/${adapter.architecture}/${adapter.description}`;
}

/**
 * Owns the adapter and the shared GPUDevice, and which optional features the device is created without. Created
 * once by the worker entry and passed down.
 *
 * An optional feature that fails at its first use is given up (dropFeature): the device is destroyed, the next
 * getDevice() creates one without it and the caller runs its request again. Once a request succeeds without it,
 * remember() keeps that for this browser version (FeatureMemory); if the request fails anyway the feature was
 * not the cause and restore() turns it back on.
 */
export class Gpu {
    /**
     * @param {{memory?: FeatureMemory | null, fault?: string | null}} [options]  `fault`: an optional feature
     *   whose shaders are made to fail (breakShadersOf), for tests and GPU runs of the fallback.
     */
    constructor({ memory = null, fault = null } = {}) {
        /** @type {GPUAdapter | null} */
        this.adapter = null;
        /** @type {GPUDevice | null} */
        this.device = null;
        /** @type {GpuInfo | null} */
        this.info = null;
        /** @type {DeviceGrant | null} What the current device was given. */
        this.grant = null;
        /** Bumped for every new device: sessions created on an older generation are dead. */
        this.generation = 0;
        /** @type {string | null} Why the current device was lost (null while it is alive). */
        this.lostMessage = null;
        /** Whether a run has finished on the current device (a loss before that may be a feature's fault). */
        this.used = false;
        /** @type {Map<string, {reason: string, remembered: boolean}>} Optional features the device is made without. */
        this.off = new Map();
        this.memory = memory;
        this.fault = fault;
        /** @type {string | null} The browserKey() whose remembered features are in `off`. */
        this.memoryKey = null;
    }

    /** @returns {boolean} */
    get lost() {
        return this.lostMessage !== null;
    }

    /**
     * The shared device, created on first use and again after a loss or a dropped feature.
     * @returns {Promise<GPUDevice>}
     */
    async getDevice() {
        if (this.device && !this.lost) return this.device;
        // A lost device is never revived: a fresh adapter is needed too (the old one is "consumed").
        const adapter = await requestAdapter();
        await this.recall(describeAdapter(adapter));
        const off = new Set(this.off.keys());
        const info = summarizeAdapter(adapter, off);
        let device;
        try {
            device = await adapter.requestDevice(deviceDescriptor(adapter, off));
        } catch (err) {
            throw new NoWebGPUError(
                `The GPU adapter refused to create a device (${String(err)}). Close other GPU-heavy tabs and reload.`,
            );
        }
        if (this.fault && (device.features.has(this.fault) || this.fault === STEP_KERNELS))
            breakShadersOf(device, this.fault);
        this.adapter = adapter;
        this.info = info;
        this.device = device;
        const offered = [...this.off].filter(([feature]) => adapter.features.has(feature) || feature === STEP_KERNELS);
        this.grant = grantOf(
            device,
            offered.map(([feature, { reason, remembered }]) => ({ feature, reason, remembered })),
        );
        this.lostMessage = null;
        this.used = false;
        this.generation += 1;
        const generation = this.generation;
        device.lost.then((lostInfo) => {
            // Only the current device's loss matters; an old one resolving late is ignored.
            if (generation === this.generation) {
                this.lostMessage = `${lostInfo.reason}: ${lostInfo.message || 'no message'}`;
            }
        });
        return device;
    }

    /**
     * Turn off what earlier visits of this browser version found broken on this adapter (once per adapter).
     * @param {AdapterSummary} adapter
     */
    async recall(adapter) {
        const key = browserKey(adapter);
        if (!this.memory || this.memoryKey === key) return;
        this.memoryKey = key;
        const remembered = await this.memory.recall(key).catch(() => ({}));
        for (const [feature, reason] of Object.entries(remembered)) {
            if (FALLIBLE.includes(feature) && !this.off.has(feature))
                this.off.set(feature, { reason, remembered: true });
        }
    }

    /**
     * Give up an optional feature that failed: the current device is destroyed (release its sessions first) and
     * the next getDevice() creates one without it.
     * @param {string} feature
     * @param {string} reason
     */
    dropFeature(feature, reason) {
        this.off.set(feature, { reason, remembered: false });
        const device = this.device;
        this.device = null;
        device?.destroy();
    }

    /**
     * A request succeeded without `features`: keep them off for this browser version on this adapter.
     * @param {string[]} features
     */
    async remember(features) {
        if (!this.memory || !this.memoryKey || features.length === 0) return;
        /** @type {Record<string, string>} */
        const off = {};
        for (const feature of features) off[feature] = this.off.get(feature)?.reason ?? '';
        await this.memory.remember(this.memoryKey, off).catch(() => {});
    }

    /**
     * A request failed even without `features`: they were not the cause, so the next device has them again.
     * @param {string[]} features
     */
    restore(features) {
        if (features.length === 0) return;
        for (const feature of features) this.off.delete(feature);
        const device = this.device;
        this.device = null;
        device?.destroy();
    }

    /**
     * Adapter facts without creating a device twice.
     * @returns {Promise<GpuInfo>}
     */
    async getInfo() {
        await this.getDevice();
        return /** @type {GpuInfo} */ (this.info);
    }

    /** The error a job reports when the device died under it. */
    lostError() {
        return new DeviceLostError(
            `The GPU device was lost (${this.lostMessage ?? 'unknown reason'}). This happens when the GPU driver resets ` +
                'or runs out of memory. Press Generate again: a fresh device is created and the model reloaded from the local cache.',
        );
    }
}
