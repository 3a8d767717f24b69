// @ts-check
/**
 * @file kernels/linear_paths.js: every adapter gets a linear path, the matrix paths only where the adapter lists
 * their configuration, has the workgroup memory they declare and 32-lane subgroups, and float16 only with
 * shader-f16.
 * @module tests/js/test_linear_paths
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { linearPaths, matrixSizeControl } from '../../web_src/src/kernels/linear_paths.js';

const H100_CONFIGS = [
    { componentType: 'f16', resultComponentType: 'f32', M: 16, N: 16, K: 16 },
    { componentType: 'i8', resultComponentType: 'i32', M: 16, N: 16, K: 32 },
    { componentType: 'i8', resultComponentType: 'i32', M: 16, N: 8, K: 32 },
];

/**
 * A stand-in GPUDevice with these features and limits (a new object each time: kernels/features.js caches per
 * device).
 * @param {{features?: string[], storage?: number, invocations?: number}} options
 * @returns {GPUDevice}
 */
function device({ features = [], storage = 49152, invocations = 1024 } = {}) {
    return /** @type {any} */ ({
        features: new Set(features),
        limits: {
            maxComputeWorkgroupStorageSize: storage,
            maxComputeInvocationsPerWorkgroup: invocations,
        },
    });
}

/**
 * @param {{min?: number, max?: number, configs?: object[]}} options
 * @returns {GPUAdapterInfo}
 */
function info({ min = 32, max = 32, configs = H100_CONFIGS } = {}) {
    return /** @type {any} */ ({
        subgroupMinSize: min,
        subgroupMaxSize: max,
        subgroupMatrixConfigs: configs,
    });
}

const MATRIX = ['shader-f16', 'subgroups', 'chromium-experimental-subgroup-matrix'];

test('an H100 in Chromium 156 gets both matrix paths first, the plain ones after', () => {
    const paths = linearPaths(device({ features: MATRIX }), { activation: 'f16' }, info());
    assert.deepEqual(paths.slice(0, 2), ['int8-matrix', 'f16-matrix']);
    assert.deepEqual(paths.slice(-2), ['tiled', 'simple']);
    // fp32 activations: the int8 units still, not the fp16 ones.
    assert.deepEqual(linearPaths(device({ features: MATRIX }), { activation: 'f32' }, info()).slice(0, 1), [
        'int8-matrix',
    ]);
    assert.ok(!linearPaths(device({ features: MATRIX }), { activation: 'f32' }, info()).includes('f16-matrix'));
});

test('no matrix path without the feature, the configuration, the memory or 32-lane subgroups', () => {
    const none = (/** @type {LinearPathsArgs} */ [dev, adapter]) =>
        !linearPaths(dev, { activation: 'f16' }, adapter).some((p) => p.endsWith('matrix'));
    /** @typedef {[GPUDevice, GPUAdapterInfo]} LinearPathsArgs */
    assert.ok(none([device({ features: ['shader-f16', 'subgroups'] }), info()]));
    assert.ok(none([device({ features: MATRIX }), info({ configs: [] })]));
    assert.ok(none([device({ features: MATRIX, storage: 16384 }), info()]));
    assert.ok(none([device({ features: MATRIX }), info({ min: 16, max: 64 })]));
    assert.ok(none([device({ features: MATRIX.filter((f) => f !== 'subgroups') }), info()]));
    // Only the int8 configuration: the int8 path and not the fp16 one.
    const int8Only = linearPaths(
        device({ features: MATRIX }),
        { activation: 'f16' },
        info({ configs: H100_CONFIGS.slice(1) }),
    );
    assert.ok(int8Only.includes('int8-matrix') && !int8Only.includes('f16-matrix'));
});

test('a range of subgroup sizes needs subgroup-size-control for the matrix kernels', () => {
    assert.equal(matrixSizeControl(device({ features: MATRIX }), info({ min: 16, max: 64 })), null);
    assert.equal(
        matrixSizeControl(device({ features: [...MATRIX, 'subgroup-size-control'] }), info({ min: 16, max: 64 })),
        true,
    );
    assert.equal(matrixSizeControl(device({ features: MATRIX }), info()), false);
    assert.equal(
        matrixSizeControl(device({ features: [...MATRIX, 'subgroup-size-control'] }), info({ min: 4, max: 16 })),
        null,
    );
});

test('float16 activations need shader-f16; every adapter runs the tiled and simple paths, last', () => {
    assert.deepEqual(linearPaths(device(), { activation: 'f16' }, info()), []);
    assert.deepEqual(linearPaths(device(), { activation: 'f32', output: 'f16' }, info()), []);
    assert.deepEqual(linearPaths(device(), { activation: 'f32' }, info({ configs: [] })).slice(-2), [
        'tiled',
        'simple',
    ]);
});
