// @ts-check
/**
 * @file Shapes that cross layers: produced by runtime/ or store/, carried by the protocol to the page.
 * Types only (JSDoc), so runtime/ and store/ describe what they return without importing the protocol.
 * @module shared/types
 */

/**
 * @typedef {Object} DownloadProgress  Bytes of the model download (store/download.js reports them).
 * @property {string} file          Repo-relative path being downloaded.
 * @property {number} fileLoaded
 * @property {number} fileTotal
 * @property {number} loaded        Bytes of all files needed for this run now in the store.
 * @property {number} total
 * @property {number} bytesPerSecond
 * @property {number | null} etaSeconds
 */

/**
 * @typedef {Object} AdapterSummary  The GPU adapter, as `adapter.info` names it.
 * @property {string} vendor
 * @property {string} architecture
 * @property {string} description
 * @property {boolean} isFallbackAdapter
 */

/**
 * @typedef {Object} Capabilities  What the worker's probe found (runtime/gpu.js), before any download.
 * @property {boolean} webgpu
 * @property {string | null} error    Why WebGPU is unusable, with the fix (null when usable).
 * @property {AdapterSummary | null} adapter
 * @property {boolean} software       SwiftShader / fallback adapter: works, but very slowly.
 * @property {boolean} shaderF16
 * @property {number} maxBufferSize
 * @property {number} maxStorageBufferBindingSize
 * @property {{usage: number, quota: number, persisted: boolean}} storage
 * @property {boolean} crossOriginIsolated
 * @property {number} threads
 */

// Makes this file a module, so that other modules can import the types above.
export {};
