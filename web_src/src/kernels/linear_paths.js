// @ts-check
/**
 * @file Which linear paths a device runs, fastest first: read from its features, its limits and the adapter's
 * subgroup-matrix configurations (kernels/features.js), so a linear runs on every adapter (kernels/linear.js).
 * @module kernels/linear_paths
 */

import { hasMatrixConfig, kernelFeatures } from './features.js';
import { MATRIX_SUBGROUP, matrixStorageBytes } from './linear_matrix.js';

/** @typedef {'int8-matrix' | 'f16-matrix' | 'int8-dp4a' | 'tiled' | 'simple'} LinearPath */

export const LINEAR_PATHS = /** @type {const} */ (['int8-matrix', 'f16-matrix', 'int8-dp4a', 'tiled', 'simple']);

/**
 * How the matrix kernels get their 32-lane subgroups: by @subgroup_size (true: the device has
 * subgroup-size-control and 32 is among the adapter's sizes), by an adapter whose subgroups are all 32 lanes
 * (false), or not at all (null: no matrix path).
 * @param {GPUDevice} device
 * @param {GPUAdapterInfo | null} [adapterInfo]
 * @returns {boolean | null}
 */
export function matrixSizeControl(device, adapterInfo = null) {
    const { subgroupMinSize: min, subgroupMaxSize: max } = kernelFeatures(device, adapterInfo);
    if (device.features.has('subgroup-size-control') && min <= MATRIX_SUBGROUP && MATRIX_SUBGROUP <= max) return true;
    return min === MATRIX_SUBGROUP && max === MATRIX_SUBGROUP ? false : null;
}

/**
 * The paths `device` runs for activations and outputs of these types, fastest first ([] when float16 is asked
 * for and the device lacks shader-f16).
 * @param {GPUDevice} device
 * @param {{activation: 'f32' | 'f16', output?: 'f32' | 'f16'}} types
 * @param {GPUAdapterInfo | null} [adapterInfo]
 * @returns {LinearPath[]}
 */
export function linearPaths(device, { activation, output = activation }, adapterInfo = null) {
    const features = kernelFeatures(device, adapterInfo);
    if ((activation === 'f16' || output === 'f16') && !features.f16) return [];
    const storage = device.limits.maxComputeWorkgroupStorageSize;
    const matrices =
        features.subgroups &&
        matrixSizeControl(device, adapterInfo) !== null &&
        device.limits.maxComputeInvocationsPerWorkgroup >= 4 * MATRIX_SUBGROUP;
    /** @type {LinearPath[]} */
    const paths = [];
    if (
        matrices &&
        storage >= matrixStorageBytes('int8') &&
        hasMatrixConfig(features, { component: 'i8', result: 'i32', M: 16, N: 16, K: 32 })
    )
        paths.push('int8-matrix');
    if (
        matrices &&
        activation === 'f16' &&
        storage >= matrixStorageBytes('f16') &&
        hasMatrixConfig(features, { component: 'f16', result: 'f32', M: 16, N: 16, K: 16 })
    )
        paths.push('f16-matrix');
    if (globalThis.navigator?.gpu?.wgslLanguageFeatures?.has('packed_4x8_integer_dot_product')) paths.push('int8-dp4a');
    // One thread an output value: for one-row linears and small dense ones, never the fastest over many rows.
    paths.push('tiled', 'simple');
    return paths;
}
