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
 * @property {boolean} subgroups
 * @property {boolean} subgroupMatrix  chromium-experimental-subgroup-matrix (onnxruntime's matrix-unit kernels).
 * @property {number} maxBufferSize
 * @property {number} maxStorageBufferBindingSize
 * @property {{usage: number, quota: number, persisted: boolean}} storage
 * @property {boolean} crossOriginIsolated
 * @property {number} threads
 * @property {boolean} [gpuApi]  Whether the worker has navigator.gpu at all (false: WebGPU is off, not just adapterless).
 * @property {OpfsSupport} [opfs]  The OPFS methods the worker has (store/backend.js opfsSupport).
 * @property {number | null} [deviceMemory]  navigator.deviceMemory in GB (coarse; null where the browser hides it).
 */

/**
 * @typedef {Object} OpfsSupport  The OPFS methods a worker has (shared/browser_needs.js decides from them).
 * @property {boolean} directory        navigator.storage.getDirectory
 * @property {boolean} syncAccessHandle FileSystemFileHandle.createSyncAccessHandle (workers only)
 * @property {boolean} createWritable   FileSystemFileHandle.createWritable (Safari from 26)
 * @property {boolean} move             FileSystemHandle.move (not standard: whatwg/fs#180; not in Safari)
 */

/**
 * @typedef {Object} FeatureOff  An optional GPU feature the device is created without, and why.
 * @property {string} feature
 * @property {string} reason  The failure it caused (onnxruntime's or the browser's message).
 * @property {boolean} remembered  Turned off by an earlier visit of this browser version (FeatureMemory).
 */

/**
 * @typedef {Object} DeviceGrant  What the shared GPU device was given (runtime/gpu.js; the timings panel shows it).
 * @property {string[]} features
 * @property {Record<string, number>} limits
 * @property {FeatureOff[]} off  Optional features the adapter offers that the device was created without.
 */

/**
 * @typedef {Object} FeatureMemory  Where the optional GPU features that failed in a browser version are kept
 *   across visits (store/feature_memory.js implements it; runtime/gpu.js uses it; the worker entry wires them).
 * @property {(key: string) => Promise<Record<string, string>>} recall  feature -> why it was turned off.
 * @property {(key: string, off: Record<string, string>) => Promise<void>} remember  Adds to what `key` has.
 */

/**
 * @typedef {Object} ProfileEvent  One event of onnxruntime's Chrome-trace profile (runtime/ort.js profileEvents).
 * @property {string} cat   'Session' (model_run, ...), 'Node' (a node's CPU side) or 'Api' (a WebGPU program's GPU time)
 * @property {string} name  For 'Api': `<node>&<op>&<program>`.
 * @property {number} dur   Microseconds.
 * @property {Record<string, any>} [args]  For 'Node': op_name, provider, shapes.
 */

/**
 * @typedef {Object} KernelTime  One kernel program's share of a component's GPU time (pipeline/kernel_times.js).
 * @property {string} op        The node's op type (MatMulNBits, MatMul, Softmax, ...); 'other' for the summed rest.
 * @property {string} program   The WebGPU program that ran it (the kernel path); for 'other', how many programs.
 * @property {number} calls     Dispatches per run.
 * @property {number} gpuMs     GPU milliseconds per run.
 * @property {number} share     Of the component's GPU time, 0..1.
 */

/**
 * @typedef {Object} ComponentKernels  Where one component's GPU time went in a profiled run.
 * @property {number} runs          Session runs profiled (the denoising steps for the transformer).
 * @property {number} runMs         Mean wall time of one run inside onnxruntime (its 'model_run' events).
 * @property {number} gpuMs         GPU time of one run: the sum of its programs' times.
 * @property {number} cpuNodeMs     Time of one run's nodes placed on the CPU (wasm).
 * @property {number} hostMs        The CPU side of one run's GPU nodes (the EP preparing and recording each
 *   dispatch); runMs well above gpuMs + hostMs + cpuNodeMs is time outside the nodes (waiting, copies).
 * @property {number} dispatches    GPU programs one run dispatched (onnxruntime's kernels, counted by its profiler).
 * @property {KernelTime[]} kernels Most GPU time first.
 */

/**
 * @typedef {Object} StepRunner  What ran the transformer's steps (models/step_session.js).
 * @property {'kernels' | 'onnxruntime'} runner  Our WGSL kernels (step/), or onnxruntime's session.
 * @property {string} [kernels]  Our kernels' paths and variants, e.g. 'int8-dp4a, flash-attention-subgroups'.
 * @property {string} [why]  Why onnxruntime ran it and not our kernels.
 * @property {number | null} [dispatches]  Our kernels' dispatches per step, exactly.
 * @property {number} [graphNodes]  onnxruntime's graph nodes that are not constants: an upper bound of its
 *   dispatches per step (it folds and fuses some; a profiled run counts them: ComponentKernels.dispatches).
 */

/**
 * @typedef {Object} StepCheck  Our kernels' first step against onnxruntime's on the same inputs (noise_pred).
 * @property {number} maxAbs  The largest absolute difference.
 * @property {number} rms  The root mean square of the difference.
 * @property {number} scale  The root mean square of onnxruntime's prediction.
 * @property {number} values  Values compared.
 */

/**
 * @typedef {Object} GraphReport  How one component ran (GenerateResult.graphs).
 * @property {string} variant
 * @property {string} ep
 * @property {string} detail  e.g. "attention unsplit, graph capture"; "our kernels (…), 38 dispatches a step".
 * @property {number} loadMs
 * @property {number} readMs
 * @property {number} streamedBytes
 * @property {StepRunner} [step]  The transformer: what ran its steps.
 */

// Makes this file a module, so that other modules can import the types above.
export {};
