// @ts-check
/**
 * @file Recorded capability profiles: the worker's probe answer (shared/browser_needs.js CapabilityRecord) as each
 * browser people use would give it, from /work/shared/reference/browsers-runtimes-weights-2026.md ("Browsers") and
 * the Chromium runs of /work/shared/reference/chromium-on-the-gpu-machine.md; a field the reference does not state is
 * marked "assumed", with the value that makes the profile the harder case. Shared by test_browser_needs.mjs and
 * test_capabilities.mjs.
 * @module tests/js/browser_profiles
 */

/** @typedef {import('../../web_src/src/shared/browser_needs.js').CapabilityRecord} CapabilityRecord */

export const GiB = 2 ** 30;
export const MiB = 2 ** 20;
const OPFS_ALL = Object.freeze({ directory: true, syncAccessHandle: true, createWritable: true, move: true });

/**
 * @param {Partial<CapabilityRecord>} fields
 * @returns {CapabilityRecord}
 */
export function profile(fields) {
    return {
        webgpu: true,
        gpuApi: true,
        error: null,
        adapter: { vendor: 'nvidia', architecture: 'ampere', description: '', isFallbackAdapter: false },
        software: false,
        shaderF16: true,
        subgroups: true,
        subgroupMatrix: false,
        maxBufferSize: 4 * GiB - 4,
        maxStorageBufferBindingSize: 2 * GiB - 4,
        storage: { usage: 0, quota: 1e11, persisted: false },
        crossOriginIsolated: true,
        threads: 4,
        opfs: OPFS_ALL,
        deviceMemory: 8,
        ...fields,
    };
}

/** The recorded profiles: what each browser's probe answers, and where that comes from. */
export const PROFILES = Object.freeze({
    // Safari 26, macOS, Apple silicon. WebKit HardwareCapabilities.mm: shader-f16 always on Apple GPUs; maxBufferSize
    // = maxStorageBufferBindingSize between 1 GiB and 2 GiB - 4 (the low end here). Subgroups not in a shipping Safari
    // (WebKit#68713 landed mid-2026, unverified). OPFS with sync access handles since 15.2, createWritable since 26, no
    // FileSystemHandle.move (whatwg/fs#180). navigator.deviceMemory is not exposed by Safari.
    safari26: profile({
        adapter: { vendor: 'apple', architecture: 'metal-3', description: '', isFallbackAdapter: false },
        shaderF16: true,
        subgroups: false,
        subgroupMatrix: false,
        maxBufferSize: GiB,
        maxStorageBufferBindingSize: GiB,
        opfs: { ...OPFS_ALL, move: false },
        deviceMemory: null,
    }),
    // Safari 26 on a Mac with more memory: the top of the same range.
    safari26Large: profile({
        adapter: { vendor: 'apple', architecture: 'metal-3', description: '', isFallbackAdapter: false },
        shaderF16: true,
        subgroups: false,
        maxBufferSize: 2 * GiB - 4,
        maxStorageBufferBindingSize: 2 * GiB - 4,
        opfs: { ...OPFS_ALL, move: false },
        deviceMemory: null,
    }),
    // Safari 18-25 with WebGPU switched on in the feature flags: OPFS without createWritable (26+) or move.
    safariOlder: profile({
        adapter: { vendor: 'apple', architecture: 'metal-3', description: '', isFallbackAdapter: false },
        subgroups: false,
        maxBufferSize: GiB,
        maxStorageBufferBindingSize: GiB,
        opfs: { directory: true, syncAccessHandle: true, createWritable: false, move: false },
        deviceMemory: null,
    }),
    // Firefox 141+ on Windows: WebGPU in workers (MDN: all contexts but service workers); wgpu's limit on non-Metal
    // backends at most 2 GiB - 1. OPFS since 111. Assumed: no shader-f16 and no subgroups (the slower case).
    firefoxWindows: profile({
        adapter: { vendor: 'nvidia', architecture: '', description: '', isFallbackAdapter: false },
        shaderF16: false,
        subgroups: false,
        maxBufferSize: 2 * GiB - 1,
        maxStorageBufferBindingSize: 2 * GiB - 1,
        deviceMemory: 8,
    }),
    // Firefox 145-147 on Apple-silicon macOS (Metal). Assumed: shader-f16 (Apple GPUs have it), no subgroups, the
    // Metal buffer limit at Safari's low end.
    firefoxMac: profile({
        adapter: { vendor: 'apple', architecture: '', description: '', isFallbackAdapter: false },
        shaderF16: true,
        subgroups: false,
        maxBufferSize: GiB,
        maxStorageBufferBindingSize: GiB,
        deviceMemory: 8,
    }),
    // Firefox on Linux without dom.webgpu.enabled: no navigator.gpu in the worker.
    firefoxLinux: profile({
        webgpu: false,
        gpuApi: false,
        adapter: null,
        shaderF16: false,
        subgroups: false,
        maxBufferSize: 0,
        maxStorageBufferBindingSize: 0,
        error: 'This browser does not expose WebGPU (navigator.gpu is missing).',
    }),
    // Chrome 121+ on Android 12+ (Qualcomm): some devices report only the 128 MiB default binding limit. Assumed:
    // shader-f16 and subgroups (Adreno has both), the 256 MiB default maxBufferSize, 8 GB of memory.
    chromeAndroid: profile({
        adapter: { vendor: 'qualcomm', architecture: 'adreno-7xx', description: '', isFallbackAdapter: false },
        shaderF16: true,
        subgroups: true,
        maxBufferSize: 256 * MiB,
        maxStorageBufferBindingSize: 128 * MiB,
        deviceMemory: 8,
    }),
    // The same limits on a GPU without shader-f16.
    chromeAndroidNoF16: profile({
        adapter: { vendor: 'arm', architecture: 'valhall', description: '', isFallbackAdapter: false },
        shaderF16: false,
        subgroups: true,
        maxBufferSize: 256 * MiB,
        maxStorageBufferBindingSize: 128 * MiB,
        deviceMemory: 8,
    }),
    // A phone-sized memory on an otherwise capable browser (navigator.deviceMemory 2 and 4).
    phone2: profile({ deviceMemory: 2 }),
    phone4: profile({ deviceMemory: 4 }),
    // Desktop Chrome 156 on Linux + NVIDIA with the f16 toggle (chromium-on-the-gpu-machine.md): every feature.
    chromeAll: profile({ subgroupMatrix: true }),
    // Chromium 150 on the same GPU once the broken matrix feature is dropped: shader-f16 and subgroups.
    chromeNoMatrix: profile({ subgroupMatrix: false }),
    // Desktop Chrome on Linux + NVIDIA without the f16 toggle: subgroups, no shader-f16.
    chromeNoF16: profile({ shaderF16: false, subgroups: true }),
    // A desktop Chrome with shader-f16 and neither subgroups nor matrix units.
    chromeF16Only: profile({ shaderF16: true, subgroups: false }),
    // Desktop Chrome with neither (an old driver): the slowest GPU path.
    chromeNone: profile({ shaderF16: false, subgroups: false }),
    // Brave with Shields: navigator.gpu is there, requestAdapter() returns null.
    brave: profile({
        webgpu: false,
        gpuApi: true,
        adapter: null,
        shaderF16: false,
        subgroups: false,
        maxBufferSize: 0,
        maxStorageBufferBindingSize: 0,
        error: 'WebGPU is present but no GPU adapter is available (it may be blocklisted).',
    }),
});
