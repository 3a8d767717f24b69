// @ts-check
/**
 * @file shared/browser_needs.js: the decision for recorded capability profiles of the browsers people use, and the
 * twins it must agree with (pipeline/graph_choice.js's variant order, size classes and VAE check).
 *
 * Each profile is the worker's probe answer as that browser would give it, from
 * /work/shared/reference/browsers-runtimes-weights-2026.md ("Browsers") and the Chromium runs of
 * /work/shared/reference/chromium-on-the-gpu-machine.md; a field the reference does not state is marked
 * "assumed" with the value that makes the profile the harder case.
 * @module tests/js/test_browser_needs
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { checkDecodeFits, sizeClass, variantOrder } from '../../web_src/src/pipeline/graph_choice.js';
import { FULL_SIZE_MODEL, TOKEN_EMBEDDING_BYTES, decide, graphFamily, sizeFits } from '../../web_src/src/shared/browser_needs.js';
import { LIMITS } from '../../web_src/src/shared/limits.js';

/** @typedef {import('../../web_src/src/shared/browser_needs.js').CapabilityRecord} CapabilityRecord */

const GiB = 2 ** 30;
const MiB = 2 ** 20;
const OPFS_ALL = Object.freeze({ directory: true, syncAccessHandle: true, createWritable: true, move: true });

/**
 * @param {Partial<CapabilityRecord>} fields
 * @returns {CapabilityRecord}
 */
function profile(fields) {
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
const PROFILES = Object.freeze({
    // Safari 26, macOS, Apple silicon. WebKit HardwareCapabilities.mm: shader-f16 always on Apple GPUs; maxBufferSize
    // = maxStorageBufferBindingSize between 1 GiB and 2 GiB - 4 (the low end here). Subgroups not in a shipping Safari
    // (WebKit#68713 landed mid-2026, unverified). OPFS with sync access handles since 15.2, createWritable since 26, no
    // FileSystemHandle.move (whatwg/fs#180). navigator.deviceMemory is not exposed by Safari.
    safari26: profile({
        adapter: { vendor: 'apple', architecture: 'metal-3', description: '', isFallbackAdapter: false },
        shaderF16: true, subgroups: false, subgroupMatrix: false, maxBufferSize: GiB, maxStorageBufferBindingSize: GiB,
        opfs: { ...OPFS_ALL, move: false }, deviceMemory: null,
    }),
    // Safari 26 on a Mac with more memory: the top of the same range.
    safari26Large: profile({
        adapter: { vendor: 'apple', architecture: 'metal-3', description: '', isFallbackAdapter: false },
        shaderF16: true, subgroups: false, maxBufferSize: 2 * GiB - 4, maxStorageBufferBindingSize: 2 * GiB - 4,
        opfs: { ...OPFS_ALL, move: false }, deviceMemory: null,
    }),
    // Safari 18-25 with WebGPU switched on in the feature flags: OPFS without createWritable (26+) or move.
    safariOlder: profile({
        adapter: { vendor: 'apple', architecture: 'metal-3', description: '', isFallbackAdapter: false },
        subgroups: false, maxBufferSize: GiB, maxStorageBufferBindingSize: GiB,
        opfs: { directory: true, syncAccessHandle: true, createWritable: false, move: false }, deviceMemory: null,
    }),
    // Firefox 141+ on Windows: WebGPU in workers (MDN: all contexts but service workers); wgpu's limit on non-Metal
    // backends at most 2 GiB - 1. OPFS since 111. Assumed: no shader-f16 and no subgroups (the slower case).
    firefoxWindows: profile({
        adapter: { vendor: 'nvidia', architecture: '', description: '', isFallbackAdapter: false },
        shaderF16: false, subgroups: false, maxBufferSize: 2 * GiB - 1, maxStorageBufferBindingSize: 2 * GiB - 1,
        deviceMemory: 8,
    }),
    // Firefox 145-147 on Apple-silicon macOS (Metal). Assumed: shader-f16 (Apple GPUs have it), no subgroups, the
    // Metal buffer limit at Safari's low end.
    firefoxMac: profile({
        adapter: { vendor: 'apple', architecture: '', description: '', isFallbackAdapter: false },
        shaderF16: true, subgroups: false, maxBufferSize: GiB, maxStorageBufferBindingSize: GiB, deviceMemory: 8,
    }),
    // Firefox on Linux without dom.webgpu.enabled: no navigator.gpu in the worker.
    firefoxLinux: profile({
        webgpu: false, gpuApi: false, adapter: null, shaderF16: false, subgroups: false, maxBufferSize: 0,
        maxStorageBufferBindingSize: 0, error: 'This browser does not expose WebGPU (navigator.gpu is missing).',
    }),
    // Chrome 121+ on Android 12+ (Qualcomm): some devices report only the 128 MiB default binding limit. Assumed:
    // shader-f16 and subgroups (Adreno has both), the 256 MiB default maxBufferSize, 8 GB of memory.
    chromeAndroid: profile({
        adapter: { vendor: 'qualcomm', architecture: 'adreno-7xx', description: '', isFallbackAdapter: false },
        shaderF16: true, subgroups: true, maxBufferSize: 256 * MiB, maxStorageBufferBindingSize: 128 * MiB, deviceMemory: 8,
    }),
    // The same limits on a GPU without shader-f16: the token embedding then runs on the CPU.
    chromeAndroidNoF16: profile({
        adapter: { vendor: 'arm', architecture: 'valhall', description: '', isFallbackAdapter: false },
        shaderF16: false, subgroups: true, maxBufferSize: 256 * MiB, maxStorageBufferBindingSize: 128 * MiB, deviceMemory: 8,
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
        webgpu: false, gpuApi: true, adapter: null, shaderF16: false, subgroups: false, maxBufferSize: 0,
        maxStorageBufferBindingSize: 0,
        error: 'WebGPU is present but no GPU adapter is available (it may be blocklisted).',
    }),
});

/** @param {import('../../web_src/src/shared/browser_needs.js').Decision} decision */
const lacked = (decision) => decision.lacks.map((lack) => lack.feature).sort();

test('Safari 26 on macOS runs the q4f16 graphs on plain fp16 kernels, every size fits, and says what it lacks', () => {
    for (const caps of [PROFILES.safari26, PROFILES.safari26Large]) {
        const decision = decide(caps);
        assert.equal(decision.canRun, true, JSON.stringify(decision.missing));
        assert.equal(decision.family, 'q4f16');
        assert.match(decision.kernels, /plain fp16/);
        assert.equal(decision.largestSide, LIMITS.sizeMax);
        assert.deepEqual(lacked(decision), ['move', 'subgroup-matrix', 'subgroups']);
        assert.equal(decision.lacks.find((l) => l.feature === 'move')?.tone, 'info');
    }
    assert.deepEqual(lacked(decide(PROFILES.safariOlder)), ['create-writable', 'move', 'subgroup-matrix', 'subgroups']);
});

test('Firefox on Windows and on Apple-silicon macOS run; what each lacks decides the graphs', () => {
    const windows = decide(PROFILES.firefoxWindows);
    assert.equal(windows.canRun, true, JSON.stringify(windows.missing));
    assert.equal(windows.family, 'q4');
    assert.match(windows.kernels, /plain fp32/);
    assert.equal(windows.bufferLimit, 2 * GiB - 1);
    assert.deepEqual(lacked(windows), ['shader-f16', 'subgroups']);
    const mac = decide(PROFILES.firefoxMac);
    assert.equal(mac.canRun, true);
    assert.equal(mac.family, 'q4f16');
    assert.equal(mac.largestSide, LIMITS.sizeMax);
});

test('without navigator.gpu, or with no adapter behind it, the app cannot run and says which', () => {
    const linux = decide(PROFILES.firefoxLinux);
    assert.equal(linux.canRun, false);
    assert.deepEqual(linux.missing.map((m) => m.need), ['webgpu']);
    const brave = decide(PROFILES.brave);
    assert.equal(brave.canRun, false);
    assert.deepEqual(brave.missing.map((m) => m.need), ['adapter']);
    assert.match(brave.missing[0].what, /requestAdapter\(\) gave none/);
    // An older worker that reports no gpuApi: the probe's own sentence tells the two apart.
    const { gpuApi: _a, ...olderLinux } = PROFILES.firefoxLinux;
    const { gpuApi: _b, ...olderBrave } = PROFILES.brave;
    assert.deepEqual(decide(olderLinux).missing.map((m) => m.need), ['webgpu']);
    assert.deepEqual(decide(olderBrave).missing.map((m) => m.need), ['adapter']);
});

test('Chrome on Android with the 128 MiB default binding limit cannot hold the token embedding on the GPU', () => {
    const decision = decide(PROFILES.chromeAndroid);
    assert.equal(decision.canRun, false);
    assert.deepEqual(decision.missing.map((m) => m.need), ['buffer-size']);
    assert.match(decision.missing[0].what, /742 MiB/);
    assert.match(decision.missing[0].what, /128 MiB per buffer/);
    assert.equal(decision.bufferLimit, 128 * MiB);
    // Attention is split to the limit: smaller images, not none.
    assert.ok(decision.largestSide >= 512 && decision.largestSide < LIMITS.sizeMax, String(decision.largestSide));
    assert.ok(sizeFits(decision.largestSide, decision.largestSide, 128 * MiB, true));
    assert.ok(!sizeFits(decision.largestSide + 16, decision.largestSide + 16, 128 * MiB, true));
});

test('the same limits without shader-f16 run (the embedding is on the CPU), at the sizes that fit', () => {
    const decision = decide(PROFILES.chromeAndroidNoF16);
    assert.equal(decision.canRun, true, JSON.stringify(decision.missing));
    assert.equal(decision.family, 'q4');
    assert.match(decision.kernels, /DP4A/);
    const size = decision.lacks.find((l) => l.feature === 'buffer-size');
    assert.ok(size && size.cost.includes(`${decision.largestSide}x${decision.largestSide}`), JSON.stringify(decision.lacks));
    // fp32 VAE scores (no shader-f16) need more room than fp16 ones: never a larger side than with shader-f16.
    assert.ok(decision.largestSide <= decide(PROFILES.chromeAndroid).largestSide);
});

test('a phone-sized memory runs with a warning; 8 GB or an unknown memory does not warn', () => {
    for (const caps of [PROFILES.phone2, PROFILES.phone4]) {
        const decision = decide(caps);
        assert.equal(decision.canRun, true);
        const memory = decision.lacks.find((l) => l.feature === 'memory');
        assert.ok(memory && memory.tone === 'warn' && memory.cost.includes(`${caps.deviceMemory} GB`), JSON.stringify(decision.lacks));
    }
    assert.equal(decide(profile({ deviceMemory: 8 })).lacks.some((l) => l.feature === 'memory'), false);
    assert.equal(decide(PROFILES.safari26).lacks.some((l) => l.feature === 'memory'), false);
});

test('desktop Chrome: the family and kernels follow shader-f16, subgroups and matrix units', () => {
    /** @type {[keyof typeof PROFILES, string, RegExp, string[]][]} */
    const cases = [
        ['chromeAll', 'q4f16', /matrix-unit/, []],
        ['chromeNoMatrix', 'q4', /DP4A/, ['subgroup-matrix']],
        ['chromeF16Only', 'q4f16', /plain fp16/, ['subgroup-matrix', 'subgroups']],
        ['chromeNoF16', 'q4', /DP4A/, ['shader-f16']],
        ['chromeNone', 'q4', /plain fp32/, ['shader-f16', 'subgroups']],
    ];
    for (const [name, family, kernels, lacks] of cases) {
        const decision = decide(PROFILES[name]);
        assert.equal(decision.canRun, true, name);
        assert.equal(decision.family, family, name);
        assert.match(decision.kernels, kernels, name);
        assert.deepEqual(lacked(decision), lacks, name);
        assert.equal(decision.largestSide, LIMITS.sizeMax, name);
    }
});

test('an OPFS without sync access handles, or none, is what is missing', () => {
    const noSync = decide(profile({ opfs: { directory: true, syncAccessHandle: false, createWritable: true, move: true } }));
    assert.deepEqual([noSync.canRun, noSync.missing.map((m) => m.need)], [false, ['sync-access-handle']]);
    const none = decide(profile({ opfs: { directory: false, syncAccessHandle: false, createWritable: false, move: false } }));
    assert.deepEqual([none.canRun, none.missing.map((m) => m.need)], [false, ['opfs']]);
    // A worker that reports nothing about OPFS is not refused for it.
    const { opfs: _o, ...unreported } = profile({});
    assert.equal(decide(unreported).canRun, true);
});

test('the graph family is pipeline/graph_choice.js variantOrder\'s first choice for every feature set', () => {
    for (const shaderF16 of [false, true]) {
        for (const subgroups of [false, true]) {
            for (const subgroupMatrix of [false, true]) {
                for (const vendor of ['nvidia', 'apple', 'qualcomm']) {
                    const gpu = { shaderF16, subgroups, subgroupMatrix, adapter: { vendor } };
                    assert.equal(graphFamily(gpu).family, variantOrder(gpu)[0], JSON.stringify(gpu));
                }
            }
        }
    }
});

test('sizeFits agrees with the app\'s own size checks on the full-size model\'s most-split graphs', () => {
    const transformer = {
        component: 'transformer', variant: 'q4', attentionHeads: FULL_SIZE_MODEL.transformerHeads,
        attentionQueryBlocks: FULL_SIZE_MODEL.transformerQueryBlocks, attentionMaxTokens: null,
    };
    const manifest = /** @type {any} */ ({ graphs: [transformer] });
    for (const limit of [128 * MiB, 256 * MiB, 512 * MiB, GiB]) {
        for (const shaderF16 of [false, true]) {
            const vae = /** @type {any} */ ({
                graph: { component: 'vae_decoder', variant: shaderF16 ? 'fp16' : 'fp32', attentionQueryBlocks: FULL_SIZE_MODEL.vaeQueryBlocks },
                ep: 'webgpu',
            });
            for (let side = 256; side <= LIMITS.sizeMax; side += 128) {
                let appFits = true;
                try {
                    sizeClass(manifest, /** @type {any} */ (transformer), (side / 16) ** 2 + 512, limit);
                    checkDecodeFits(vae, { width: side, height: side }, { maxStorageBufferBindingSize: limit });
                } catch {
                    appFits = false;
                }
                assert.equal(sizeFits(side, side, limit, shaderF16), appFits, `${side}px, ${limit} B, f16 ${shaderF16}`);
            }
        }
    }
});

test('the token embedding is the full-size text encoder\'s: 151,936 x 2,560 fp16 values', () => {
    assert.equal(TOKEN_EMBEDDING_BYTES, 151936 * 2560 * 2);
    // A model whose largest buffer is smaller (e.g. a 4-bit embedding) runs where the limit allows it.
    const small = { ...FULL_SIZE_MODEL, tokenEmbeddingBytes: 100 * MiB };
    assert.equal(decide(PROFILES.chromeAndroid, { model: small }).canRun, true);
});
