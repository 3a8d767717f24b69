// @ts-check
/** @file Node tests of page/ui/capabilities.js's rows: what the panel tells a user about their adapter. @module tests/js/test_capabilities */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { SUPPORT_NOTE, detectBrowser, missingAdvice } from '../../web_src/src/page/ui/browser_support.js';
import { describeCapabilities, NVIDIA_F16_FLAG, summaryNote } from '../../web_src/src/page/ui/capabilities.js';
import { decide } from '../../web_src/src/shared/browser_needs.js';
import { PROFILES } from './browser_profiles.mjs';

/**
 * @param {Partial<import('../../web_src/src/shared/types.js').Capabilities>} overrides
 * @returns {import('../../web_src/src/shared/types.js').Capabilities}
 */
function caps(overrides) {
    return {
        webgpu: true,
        error: null,
        software: false,
        shaderF16: false,
        maxBufferSize: 2 ** 32,
        maxStorageBufferBindingSize: 2 ** 31,
        adapter: { vendor: 'nvidia', architecture: 'hopper', description: 'NVIDIA H200', isFallbackAdapter: false },
        storage: { usage: 0, quota: 1e11, persisted: false },
        crossOriginIsolated: true,
        threads: 4,
        ...overrides,
    };
}

/** @param {ReturnType<typeof describeCapabilities>} rows */
const f16Note = (rows) => rows.find((row) => row.label === 'shader-f16')?.note ?? '';

test('NVIDIA on Linux without shader-f16 names the flag that unlocks the fast path', () => {
    const note = f16Note(describeCapabilities(caps({}), { linux: true }));
    assert.ok(note.includes(NVIDIA_F16_FLAG), note);
});

test('the flag is not suggested where it cannot help', () => {
    // Not Linux: Chrome uses D3D12/Metal there, the Vulkan toggle means nothing.
    assert.ok(!f16Note(describeCapabilities(caps({}), { linux: false })).includes(NVIDIA_F16_FLAG));
    // Another vendor on Linux.
    const amd = caps({ adapter: { vendor: 'amd', architecture: 'rdna-3', description: '', isFallbackAdapter: false } });
    const note = f16Note(describeCapabilities(amd, { linux: true }));
    assert.ok(note.length > 0 && !note.includes(NVIDIA_F16_FLAG), note);
    // shader-f16 already granted: nothing to fix.
    assert.equal(f16Note(describeCapabilities(caps({ shaderF16: true }), { linux: true })), '');
});

test('no recorded browser profile is told "not supported"; each is told what it lacks and what that costs', () => {
    for (const [name, caps] of Object.entries(PROFILES)) {
        const rows = describeCapabilities(caps, { linux: false });
        const note = summaryNote(decide(caps));
        const text = [note.text, ...rows.map((row) => `${row.value} ${row.note ?? ''}`)].join('\n');
        assert.doesNotMatch(text, /not supported/i, name);
        const decision = decide(caps);
        assert.equal(note.tone === 'bad', !decision.canRun, name);
        if (!decision.canRun) {
            for (const missing of decision.missing)
                assert.ok(note.text.includes(missing.what), `${name}: ${missing.need}`);
            continue;
        }
        assert.ok(note.text.includes(decision.family), `${name}: ${note.text}`);
        // Every warning the decision has reaches the top note of a browser that runs the app.
        for (const lack of decision.lacks.filter((l) => l.tone === 'warn'))
            assert.ok(note.text.includes(lack.cost), `${name}: ${lack.feature}`);
    }
});

test('Safari 26: the panel says subgroups are missing and what that costs, and that move() is copied instead', () => {
    const rows = describeCapabilities(PROFILES.safari26, { linux: false });
    const row = (/** @type {string} */ label) => rows.find((r) => r.label === label);
    assert.equal(row('subgroups')?.value, 'no');
    assert.match(row('subgroups')?.note ?? '', /slower/);
    assert.match(row('Graphs')?.value ?? '', /^q4f16, on plain fp16 kernels/);
    assert.match(row('Storage')?.note ?? '', /move\(\)/);
    assert.equal(row('Max buffer size')?.tone, 'ok');
});

test('Chrome on Android with 128 MiB buffers: the buffer row says exactly what is needed', () => {
    const rows = describeCapabilities(PROFILES.chromeAndroid, { linux: false });
    const buffer = rows.find((r) => r.label === 'Max buffer size');
    assert.equal(buffer?.tone, 'bad');
    assert.match(buffer?.note ?? '', /185 MiB.*128 MiB/);
    assert.equal(summaryNote(decide(PROFILES.chromeAndroid)).tone, 'bad');
});

test('what to do when something is missing names the flags or versions for that browser', () => {
    /** @param {string} ua */
    const browser = (ua) => detectBrowser({ userAgent: ua });
    const firefoxLinux = browser('Mozilla/5.0 (X11; Linux x86_64; rv:147.0) Gecko/20100101 Firefox/147.0');
    const safari18 = browser(
        'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.5 Safari/605.1.15',
    );
    const chromeLinux = browser(
        'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/150.0.0.0 Safari/537.36',
    );
    const chromeWindows = browser(
        'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/150.0.0.0 Safari/537.36',
    );
    const firefoxWindows = browser('Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:138.0) Gecko/20100101 Firefox/138.0');
    assert.match(
        missingAdvice({ need: 'webgpu', what: '' }, firefoxLinux),
        /dom\.webgpu\.enabled.*dom\.webgpu\.workers\.enabled/,
    );
    assert.match(missingAdvice({ need: 'webgpu', what: '' }, firefoxWindows), /Firefox 141/);
    assert.match(missingAdvice({ need: 'webgpu', what: '' }, safari18), /Safari 26/);
    const linux = missingAdvice({ need: 'webgpu', what: '' }, chromeLinux);
    assert.ok(linux.includes('--enable-unsafe-webgpu') && linux.includes(NVIDIA_F16_FLAG), linux);
    assert.match(missingAdvice({ need: 'adapter', what: '' }, chromeWindows), /Brave: turn Shields off/);
    assert.doesNotMatch(missingAdvice({ need: 'webgpu', what: '' }, chromeWindows), /Shields/);
    assert.match(missingAdvice({ need: 'sync-access-handle', what: '' }, safari18), /Safari 15\.2/);
    for (const who of [firefoxLinux, safari18, chromeLinux, chromeWindows, firefoxWindows]) {
        for (const need of /** @type {const} */ (['webgpu', 'adapter', 'opfs', 'sync-access-handle', 'buffer-size'])) {
            assert.doesNotMatch(missingAdvice({ need, what: '' }, who), /not supported/i);
        }
    }
    assert.doesNotMatch(SUPPORT_NOTE, /not supported/i);
});
