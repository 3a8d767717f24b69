// @ts-check
/** @file Node tests of page/ui/capabilities.js's rows: what the panel tells a user about their adapter. @module tests/js/test_capabilities */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { describeCapabilities, NVIDIA_F16_FLAG } from '../../web_src/src/page/ui/capabilities.js';

/**
 * @param {Partial<import('../../web_src/src/shared/types.js').Capabilities>} overrides
 * @returns {import('../../web_src/src/shared/types.js').Capabilities}
 */
function caps(overrides) {
    return {
        webgpu: true, error: null, software: false, shaderF16: false, maxBufferSize: 2 ** 32, maxStorageBufferBindingSize: 2 ** 31,
        adapter: { vendor: 'nvidia', architecture: 'hopper', description: 'NVIDIA H200', isFallbackAdapter: false },
        storage: { usage: 0, quota: 1e11, persisted: false }, crossOriginIsolated: true, threads: 4,
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
