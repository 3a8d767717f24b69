/**
 * @file Names builder/site/bundle.py gives the worker bundle through esbuild's `--define` (absent in a plain
 * esbuild bundle), declared so that tsc checks their use.
 */

/** The onnxruntime runtime files, relative to the worker script's folder (the kernel lab's page: to its bundle's):
 * its loader and its .wasm in parts, with the whole .wasm's name (the service worker's joined copy), length and
 * SHA-256 (builder/site/runtime_files.py). */
declare const KLEIN_ORT_WASM: ({ mjs: string } & import('../shared/runtime_parts.js').RuntimeNames) | undefined;

/** The store's helper worker script (store/store_worker.js bundled), relative to the worker script's folder. */
declare const KLEIN_STORE_WORKER: string | undefined;

/** The tokenizer's helper worker script (pipeline/tokenizer_worker.js bundled), relative to the worker script's folder. */
declare const KLEIN_TOKENIZER_WORKER: string | undefined;
