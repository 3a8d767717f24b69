// @ts-check
/**
 * @file Which linear paths a device runs, fastest first: read from its features, its limits and the adapter's
 * subgroup-matrix configurations, so a linear runs on every adapter (kernels/linear.js).
 * @module kernels/linear_paths
 */

import { MATRIX_SUBGROUP, matrixStorageBytes } from './linear_matrix.js';

/** @typedef {'int8-matrix' | 'f16-matrix' | 'int8-dp4a' | 'tiled'} LinearPath */

export const LINEAR_PATHS = /** @type {const} */ (['int8-matrix', 'f16-matrix', 'int8-dp4a', 'tiled']);

/**
 * @typedef {Object} AdapterFacts  What GPUAdapterInfo says that decides the matrix paths.
 * @property {number} [subgroupMinSize]
 * @property {number} [subgroupMaxSize]
 * @property {Iterable<{componentType: string, resultComponentType: string, M: number, N: number, K: number}>}
 *   [subgroupMatrixConfigs]
 */

/**
 * The adapter facts of `device`: `adapterInfo` (GPUAdapter.info) where given, since some browser builds leave the
 * subgroup-matrix configurations out of the device's own info.
 * @param {GPUDevice} device
 * @param {AdapterFacts | null} [adapterInfo]
 * @returns {AdapterFacts}
 */
function facts(device, adapterInfo) {
    return adapterInfo ?? /** @type {any} */ (device).adapterInfo ?? {};
}

/**
 * Whether the matrix kernels' 32-lane subgroups are guaranteed: by @subgroup_size (true), by an adapter whose
 * subgroups are all 32 lanes (false), or not at all (null: no matrix path).
 * @param {GPUDevice} device
 * @param {AdapterFacts | null} [adapterInfo]
 * @returns {boolean | null}
 */
export function matrixSizeControl(device, adapterInfo = null) {
    const { subgroupMinSize = 0, subgroupMaxSize = 0 } = facts(device, adapterInfo);
    if (
        device.features.has('subgroup-size-control') &&
        subgroupMinSize <= MATRIX_SUBGROUP &&
        MATRIX_SUBGROUP <= subgroupMaxSize
    )
        return true;
    return subgroupMinSize === MATRIX_SUBGROUP && subgroupMaxSize === MATRIX_SUBGROUP ? false : null;
}

/**
 * @param {GPUDevice} device
 * @param {AdapterFacts | null} adapterInfo
 * @param {{component: string, result: string, K: number}} want  A 16×16×K configuration.
 */
function hasConfig(device, adapterInfo, { component, result, K }) {
    if (!device.features.has('chromium-experimental-subgroup-matrix')) return false;
    return [...(facts(device, adapterInfo).subgroupMatrixConfigs ?? [])].some(
        (c) =>
            String(c.componentType) === component &&
            String(c.resultComponentType) === result &&
            Number(c.M) === 16 &&
            Number(c.N) === 16 &&
            Number(c.K) === K,
    );
}

/**
 * The paths `device` runs for activations and outputs of these types, fastest first ([] when float16 is asked
 * for and the device lacks shader-f16).
 * @param {GPUDevice} device
 * @param {{activation: 'f32' | 'f16', output?: 'f32' | 'f16'}} types
 * @param {AdapterFacts | null} [adapterInfo]
 * @returns {LinearPath[]}
 */
export function linearPaths(device, { activation, output = activation }, adapterInfo = null) {
    const f16 = device.features.has('shader-f16');
    if ((activation === 'f16' || output === 'f16') && !f16) return [];
    const storage = device.limits.maxComputeWorkgroupStorageSize;
    const matrices =
        matrixSizeControl(device, adapterInfo) !== null &&
        device.limits.maxComputeInvocationsPerWorkgroup >= 4 * MATRIX_SUBGROUP;
    /** @type {LinearPath[]} */
    const paths = [];
    if (
        matrices &&
        storage >= matrixStorageBytes('int8') &&
        hasConfig(device, adapterInfo, { component: 'i8', result: 'i32', K: 32 })
    )
        paths.push('int8-matrix');
    if (
        matrices &&
        activation === 'f16' &&
        storage >= matrixStorageBytes('f16') &&
        hasConfig(device, adapterInfo, { component: 'f16', result: 'f32', K: 16 })
    )
        paths.push('f16-matrix');
    if (globalThis.navigator?.gpu?.wgslLanguageFeatures?.has('packed_4x8_integer_dot_product')) paths.push('int8-dp4a');
    paths.push('tiled');
    return paths;
}
