// @ts-check
/**
 * @file shared/browser_needs.js: the decision for recorded capability profiles of the browsers people use.
 *
 * The profiles, with their sources, are in tests/js/browser_profiles.mjs.
 * @module tests/js/test_browser_needs
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { FULL_SIZE_MODEL, TOKEN_EMBEDDING_BYTES, decide, sizeFits } from '../../web_src/src/shared/browser_needs.js';
import { LIMITS } from '../../web_src/src/shared/limits.js';
import { GiB, MiB, PROFILES, profile } from './browser_profiles.mjs';

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
    assert.deepEqual(
        linux.missing.map((m) => m.need),
        ['webgpu'],
    );
    const brave = decide(PROFILES.brave);
    assert.equal(brave.canRun, false);
    assert.deepEqual(
        brave.missing.map((m) => m.need),
        ['adapter'],
    );
    assert.match(brave.missing[0].what, /requestAdapter\(\) gave none/);
    // An older worker that reports no gpuApi: the probe's own sentence tells the two apart.
    const { gpuApi: _a, ...olderLinux } = PROFILES.firefoxLinux;
    const { gpuApi: _b, ...olderBrave } = PROFILES.brave;
    assert.deepEqual(
        decide(olderLinux).missing.map((m) => m.need),
        ['webgpu'],
    );
    assert.deepEqual(
        decide(olderBrave).missing.map((m) => m.need),
        ['adapter'],
    );
});

test('Chrome on Android with the 128 MiB default binding limit cannot hold the token embedding on the GPU', () => {
    // The 4-bit embedding is one buffer on the GPU with and without shader-f16.
    for (const caps of [PROFILES.chromeAndroid, PROFILES.chromeAndroidNoF16]) {
        const decision = decide(caps);
        assert.equal(decision.canRun, false);
        assert.deepEqual(
            decision.missing.map((m) => m.need),
            ['buffer-size'],
        );
        assert.match(decision.missing[0].what, /185 MiB/);
        assert.match(decision.missing[0].what, /128 MiB per buffer/);
        assert.equal(decision.bufferLimit, 128 * MiB);
        // Attention is split to the limit: smaller images, not none.
        assert.ok(decision.largestSide >= 512 && decision.largestSide < LIMITS.sizeMax, String(decision.largestSide));
        assert.ok(sizeFits(decision.largestSide, decision.largestSide, 128 * MiB, caps.shaderF16));
        assert.ok(!sizeFits(decision.largestSide + 16, decision.largestSide + 16, 128 * MiB, caps.shaderF16));
    }
    // fp32 VAE scores (no shader-f16) need more room than fp16 ones: never a larger side than with shader-f16.
    assert.ok(decide(PROFILES.chromeAndroidNoF16).largestSide <= decide(PROFILES.chromeAndroid).largestSide);
});

test('a 256 MiB binding limit holds the 4-bit embedding, with or without shader-f16', () => {
    for (const shaderF16 of [true, false]) {
        const decision = decide(
            profile({ shaderF16, maxBufferSize: 256 * MiB, maxStorageBufferBindingSize: 256 * MiB }),
        );
        assert.equal(decision.canRun, true, JSON.stringify(decision.missing));
        assert.equal(decision.lacks.find((l) => l.feature === 'buffer-size')?.tone, 'warn');
    }
});

test('a phone-sized memory runs with a warning; 8 GB or an unknown memory does not warn', () => {
    for (const caps of [PROFILES.phone2, PROFILES.phone4]) {
        const decision = decide(caps);
        assert.equal(decision.canRun, true);
        const memory = decision.lacks.find((l) => l.feature === 'memory');
        assert.ok(
            memory && memory.tone === 'warn' && memory.cost.includes(`${caps.deviceMemory} GB`),
            JSON.stringify(decision.lacks),
        );
    }
    assert.equal(
        decide(profile({ deviceMemory: 8 })).lacks.some((l) => l.feature === 'memory'),
        false,
    );
    assert.equal(
        decide(PROFILES.safari26).lacks.some((l) => l.feature === 'memory'),
        false,
    );
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
    const noSync = decide(
        profile({ opfs: { directory: true, syncAccessHandle: false, createWritable: true, move: true } }),
    );
    assert.deepEqual([noSync.canRun, noSync.missing.map((m) => m.need)], [false, ['sync-access-handle']]);
    const none = decide(
        profile({ opfs: { directory: false, syncAccessHandle: false, createWritable: false, move: false } }),
    );
    assert.deepEqual([none.canRun, none.missing.map((m) => m.need)], [false, ['opfs']]);
    // A worker that reports nothing about OPFS is not refused for it.
    const { opfs: _o, ...unreported } = profile({});
    assert.equal(decide(unreported).canRun, true);
});

test("the token embedding is the full-size text encoder's: 151,936 x 2,560 values at 4 bits", () => {
    assert.equal(TOKEN_EMBEDDING_BYTES, (151936 * 2560) / 2);
    // A model whose largest buffer is smaller runs where the limit allows it; a larger one (the seed layout's fp16
    // table) is refused where the 4-bit one runs.
    const small = { ...FULL_SIZE_MODEL, tokenEmbeddingBytes: 100 * MiB };
    assert.equal(decide(PROFILES.chromeAndroid, { model: small }).canRun, true);
    const seedLayout = { ...FULL_SIZE_MODEL, tokenEmbeddingBytes: 151936 * 2560 * 2 };
    const limit512 = profile({ maxBufferSize: 512 * MiB, maxStorageBufferBindingSize: 512 * MiB });
    assert.equal(decide(limit512).canRun, true);
    assert.match(decide(limit512, { model: seedLayout }).missing[0].what, /742 MiB/);
});

test('a limit too small for any image is missing once, with the figure', () => {
    const tiny = decide(
        profile({ shaderF16: false, maxBufferSize: 256 * 1024, maxStorageBufferBindingSize: 256 * 1024 }),
    );
    assert.equal(tiny.canRun, false);
    assert.equal(tiny.largestSide, 0);
    assert.deepEqual(
        tiny.missing.map((m) => m.need),
        ['buffer-size'],
    );
    assert.match(tiny.missing[0].what, /256 KiB/);
    const both = decide(
        profile({ shaderF16: true, maxBufferSize: 256 * 1024, maxStorageBufferBindingSize: 256 * 1024 }),
    );
    assert.deepEqual(
        both.missing.map((m) => m.need),
        ['buffer-size'],
    );
});
