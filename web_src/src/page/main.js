// @ts-check
/**
 * @file Placeholder created by the build engineer so `klein-web build` has an entry point; the owner replaces it.
 * @module page/main
 */
export {};
