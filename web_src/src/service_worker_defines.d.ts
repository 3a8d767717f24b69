/**
 * @file Names builder/site/bundle.py gives the service worker through esbuild's `--define`, declared so that tsc
 * checks their use.
 */

/** A hash over the shell's files: names the shell's cache. */
declare const KLEIN_BUILD: string | undefined;
/** The shell's files relative to the site root (`index.html` first); empty when the shell is not cached. */
declare const KLEIN_SHELL: string[] | undefined;
/** The onnxruntime `.wasm`'s parts and the name of the copy joined from them, relative to the site root
 * (builder/site/runtime_files.py); undefined when the shell is not cached. */
declare const KLEIN_RUNTIME: import('./shared/runtime_parts.js').RuntimeNames | undefined;
