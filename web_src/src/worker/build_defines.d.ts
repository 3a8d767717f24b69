/**
 * @file Names builder/site/bundle.py gives the worker bundle through esbuild's `--define` (absent in a plain
 * esbuild bundle), declared so that tsc checks their use.
 */

/** The onnxruntime wasm files, relative to the worker script's folder (the kernel lab's page: to its bundle's). */
declare const KLEIN_ORT_WASM: { mjs: string; wasm: string } | undefined;

/** The store's helper worker script (store/store_worker.js bundled), relative to the worker script's folder. */
declare const KLEIN_STORE_WORKER: string | undefined;

/** The tokenizer's helper worker script (pipeline/tokenizer_worker.js bundled), relative to the worker script's folder. */
declare const KLEIN_TOKENIZER_WORKER: string | undefined;
