// @ts-check
/**
 * @file tests/manifest_corpus.json for the app's loader (store/manifest.js): its cases built as
 * tests/test_manifest_schema.py builds them, and each loader's verdict in the form both tests compare.
 *
 * Run as `node tests/js/manifest_corpus.mjs MUTATIONS.json`, it prints the app's verdicts, as JSON, on the corpus's
 * bad cases, its good cases, then each manifest text of MUTATIONS.json (a list of strings); tests/test_manifest_schema.py
 * compares them with its own.
 * @module tests/js/manifest_corpus
 */

import fs from 'node:fs';
import { pathToFileURL } from 'node:url';

import { parseManifest } from '../../web_src/src/store/manifest.js';

/** @type {{valid: any, good: {name: string, change: any[]}[], bad: {name: string, change?: any[], text?: string, error: string}[]}} */
export const CORPUS = JSON.parse(fs.readFileSync(new URL('../manifest_corpus.json', import.meta.url), 'utf-8'));
export const BASE = 'https://example.org/repo/';

/**
 * The corpus's valid manifest with `change` applied: set (a value, or one given as JSON text), delete, rename.
 * @param {any[]} change
 * @returns {any}
 */
export function changed(change) {
    let data = structuredClone(CORPUS.valid);
    for (const op of change) {
        const kind = ['set', 'delete', 'rename'].find((k) => k in op);
        const path = op[/** @type {string} */ (kind)];
        const value = 'json' in op ? JSON.parse(op.json) : structuredClone(op.to);
        if (kind === 'set' && path.length === 0) {
            data = value;
            continue;
        }
        let target = data;
        for (const key of path.slice(0, -1)) target = target[key];
        const last = path.at(-1);
        if (kind === 'set') target[last] = value;
        else if (kind === 'delete' && Array.isArray(target)) target.splice(last, 1);
        else if (kind === 'delete') delete target[last];
        else {
            target[value] = target[last];
            delete target[last];
        }
    }
    return data;
}

/**
 * The app's verdict on one manifest: the problem's sentence (the field and what is wrong there, or the newer format
 * version), or the manifest as read, in the fields and order tests/test_manifest_schema.py `verdict` uses.
 * @param {() => any} read  Parses the manifest (throws its error).
 */
export function verdict(read) {
    let manifest;
    try {
        manifest = read();
    } catch (err) {
        const message = String(/** @type {Error} */ (err).message);
        if (err instanceof SyntaxError) return { error: 'not JSON' };
        if (message.includes(' is malformed: ')) {
            const detail = message.split(' is malformed: ').slice(1).join(' is malformed: ');
            return { error: detail.slice(0, detail.lastIndexOf('. Re-create it')) };
        }
        if (message.includes(' is format version '))
            return { error: `newer: ${message.split(' is format version ')[1].split(';')[0]}` };
        throw err;
    }
    return {
        source: manifest.source,
        files: Object.fromEntries(
            Object.entries(manifest.files).map(([rel, f]) => [
                rel,
                [f.size, f.sha256, f.blocks && [f.blocks.size, f.blocks.sha256]],
            ]),
        ),
        graphs: manifest.graphs.map((g) => [
            g.component,
            g.variant,
            g.path,
            g.externalData,
            g.precision,
            g.requiresF16,
            g.cpuNodesWithoutF16,
            g.attentionQueryBlocks,
            g.attentionMaxTokens,
            g.attentionHeads,
        ]),
        loras: manifest.loras.map((l) => [l.file, l.sha256, l.scale]),
        pipeline: [
            manifest.pipeline.isDistilled,
            manifest.pipeline.steps,
            manifest.pipeline.guidanceScale,
            manifest.pipeline.inpaintGuidanceScale,
        ],
    };
}

/**
 * The manifest a corpus case stands for, parsed by the app (its text through JSON.parse, as fetch's json() reads it).
 * @param {{change?: any[], text?: string}} item
 */
export function parseCase(item) {
    return parseManifest(item.text !== undefined ? JSON.parse(item.text) : changed(item.change ?? []), BASE);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
    /** @type {string[]} */
    const mutations = JSON.parse(fs.readFileSync(process.argv[2], 'utf-8'));
    const verdicts = [
        ...[...CORPUS.bad, ...CORPUS.good].map((item) => verdict(() => parseCase(item))),
        ...mutations.map((text) => verdict(() => parseManifest(JSON.parse(text), BASE))),
    ];
    process.stdout.write(JSON.stringify(verdicts));
}
