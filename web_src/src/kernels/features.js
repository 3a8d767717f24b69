// @ts-check
/**
 * @file What the device offers our kernels, read once per device: shader-f16, subgroups (with the subgroup sizes
 * the adapter reports) and the subgroup-matrix configurations. A kernel module picks its variant from this, so
 * that every kernel runs on every adapter: the matrix-unit variant where the configuration it needs exists, the
 * subgroup variant where subgroups exist, and a plain one everywhere else.
 * @module kernels/features
 */

/**
 * @typedef {Object} MatrixConfig  One entry of adapter.info.subgroupMatrixConfigs.
 * @property {string} componentType  'f16', 'f32', 'i8', 'u8', ...
 * @property {string} resultComponentType
 * @property {number} M
 * @property {number} N
 * @property {number} K
 */

/**
 * @typedef {Object} KernelFeatures
 * @property {boolean} f16  shader-f16: kernels may keep their inputs and outputs in fp16.
 * @property {boolean} subgroups
 * @property {number} subgroupMinSize  0 where the adapter does not say.
 * @property {number} subgroupMaxSize
 * @property {boolean} subgroupMatrix  chromium-experimental-subgroup-matrix is on the device.
 * @property {MatrixConfig[]} matrixConfigs  The configurations the adapter lists ([] without the feature).
 */

/** @type {WeakMap<GPUDevice, KernelFeatures>} */
const cache = new WeakMap();

/**
 * The features of `device` that decide kernel variants. `adapterInfo` is the adapter's info (GPUAdapter.info):
 * the device's own info lacks the subgroup-matrix configurations in some browser builds.
 * @param {GPUDevice} device
 * @param {GPUAdapterInfo | null} [adapterInfo]
 * @returns {KernelFeatures}
 */
export function kernelFeatures(device, adapterInfo = null) {
    const known = cache.get(device);
    if (known) return known;
    const info = /** @type {any} */ (adapterInfo ?? /** @type {any} */ (device).adapterInfo ?? {});
    const subgroupMatrix = device.features.has('chromium-experimental-subgroup-matrix');
    /** @type {KernelFeatures} */
    const features = {
        f16: device.features.has('shader-f16'),
        subgroups: device.features.has('subgroups'),
        subgroupMinSize: Number(info.subgroupMinSize ?? 0),
        subgroupMaxSize: Number(info.subgroupMaxSize ?? 0),
        subgroupMatrix,
        matrixConfigs: subgroupMatrix
            ? [...(info.subgroupMatrixConfigs ?? [])].map((c) => ({
                  componentType: String(c.componentType),
                  resultComponentType: String(c.resultComponentType),
                  M: Number(c.M),
                  N: Number(c.N),
                  K: Number(c.K),
              }))
            : [],
    };
    cache.set(device, features);
    return features;
}

/**
 * Whether the adapter lists a matrix configuration.
 * @param {KernelFeatures} features
 * @param {{component: string, result: string, M: number, N: number, K: number}} want
 * @returns {boolean}
 */
export function hasMatrixConfig(features, { component, result, M, N, K }) {
    return features.matrixConfigs.some(
        (c) => c.componentType === component && c.resultComponentType === result && c.M === M && c.N === N && c.K === K,
    );
}

/**
 * The one subgroup size every subgroup of a compute shader has, or 0 when the adapter reports a range (then a
 * kernel whose layout depends on the size cannot be laid out ahead of time).
 * @param {KernelFeatures} features
 * @returns {number}
 */
export function fixedSubgroupSize(features) {
    return features.subgroupMinSize > 0 && features.subgroupMinSize === features.subgroupMaxSize
        ? features.subgroupMinSize
        : 0;
}
