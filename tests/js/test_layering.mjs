// @ts-check
/**
 * @file The web app's layering, from its imports: data flows page -> protocol -> worker -> pipeline -> models ->
 * runtime | store -> shared, and only runtime/ort.js imports onnxruntime-web. Our WGSL kernels (kernels/) import
 * nothing of the app; the transformer step on them (step/) imports only them, and models/ hands it its device and
 * weights; the kernel lab's page (lab/) drives the kernels on the runtime's device. Every import counts, JSDoc
 * type imports (`import('...')`) included, since a type import is still a dependency a reader has to follow.
 * @module tests/js/test_layering
 */

import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const SRC = fileURLToPath(new URL('../../web_src/src/', import.meta.url));

/** Which layers each layer may import (its own included); a file at the top of src/ is its own layer. */
const ALLOWED = Object.freeze({
    page: ['page', 'protocol', 'shared'],
    protocol: ['shared'],
    worker: ['worker', 'protocol', 'pipeline', 'models', 'runtime', 'store', 'shared'],
    pipeline: ['pipeline', 'protocol', 'models', 'shared'],
    models: ['models', 'protocol', 'step', 'runtime', 'store', 'shared'],
    runtime: ['runtime', 'shared'],
    step: ['step', 'kernels'],
    kernels: ['kernels'],
    lab: ['lab', 'kernels', 'runtime', 'shared'],
    store: ['store', 'shared'],
    shared: ['shared'],
    coi_register: [],
    service_worker: ['shared'],
});
/** The modules that node tests without a browser: no runtime, no store, not even by a detour. */
const PURE = Object.freeze([
    ...['tokenizer', 'rng', 'schedule', 'latents', 'image', 'guidance'].map((name) => `pipeline/${name}.js`),
    ...['graph_choice', 'graph_weights', 'memory_mode', 'meter', 'model_report'].map((name) => `models/${name}.js`),
]);
const ORT_IMPORTER = 'runtime/ort.js';
/** Data files outside src/ that the app imports (JSON, bundled at build time), each with the one module reading it. */
const DATA_FILES = Object.freeze({ '../../builder/repo/manifest_schema.json': 'shared/model_repo.js' });

const STATIC_IMPORT = /^\s*import\s+(?:[\w*{}\s,]+?\s+from\s+)?['"]([^'"]+)['"]/gm;
const RE_EXPORT = /^\s*export\s+(?:\*|\{[^}]*\})(?:\s+as\s+\w+)?\s+from\s+['"]([^'"]+)['"]/gm;
const DYNAMIC_OR_TYPE_IMPORT = /import\(\s*['"]([^'"]+)['"]\s*\)/g;

/**
 * @typedef {Object} Graph
 * @property {Map<string, Set<string>>} local  src-relative file -> src-relative files it imports.
 * @property {Map<string, Set<string>>} packages  src-relative file -> npm specifiers it imports.
 * @property {Map<string, Set<string>>} [data]  src-relative file -> src-relative JSON files it imports.
 */

/**
 * @param {string} dir
 * @returns {string[]} Every .js file under `dir`, src-relative with '/' separators.
 */
function sourceFiles(dir) {
    return fs
        .readdirSync(dir, { recursive: true, encoding: 'utf-8' })
        .filter((name) => name.endsWith('.js'))
        .map((name) => name.split(path.sep).join('/'))
        .sort();
}

/**
 * @param {string} text  A module's source.
 * @returns {string[]} The specifiers it imports, in order of appearance per kind.
 */
export function specifiers(text) {
    return [STATIC_IMPORT, RE_EXPORT, DYNAMIC_OR_TYPE_IMPORT].flatMap((pattern) =>
        [...text.matchAll(pattern)].map((match) => match[1]),
    );
}

/** @returns {Graph} */
function readGraph() {
    /** @type {Graph} */
    const graph = { local: new Map(), packages: new Map(), data: new Map() };
    for (const file of sourceFiles(SRC)) {
        const local = new Set();
        const packages = new Set();
        const data = new Set();
        for (const specifier of specifiers(fs.readFileSync(path.join(SRC, file), 'utf-8'))) {
            if (specifier.startsWith('.')) {
                const target = path.posix.normalize(path.posix.join(path.posix.dirname(file), specifier));
                (target.endsWith('.json') ? data : local).add(target);
            } else {
                packages.add(specifier);
            }
        }
        graph.local.set(file, local);
        graph.packages.set(file, packages);
        graph.data.set(file, data);
    }
    return graph;
}

/**
 * @param {string} file  src-relative
 * @returns {string}
 */
function layerOf(file) {
    return file.includes('/') ? file.slice(0, file.indexOf('/')) : file.replace(/\.js$/, '');
}

/**
 * Everything `file` reaches through imports.
 * @param {Graph} graph
 * @param {string} file
 * @returns {Set<string>}
 */
function reachable(graph, file) {
    const seen = new Set();
    const queue = [...(graph.local.get(file) ?? [])];
    while (queue.length > 0) {
        const next = /** @type {string} */ (queue.pop());
        if (seen.has(next)) continue;
        seen.add(next);
        queue.push(...(graph.local.get(next) ?? []));
    }
    return seen;
}

/**
 * Every broken rule, as one line each (empty when the graph keeps them all).
 * @param {Graph} graph
 * @returns {string[]}
 */
export function violations(graph) {
    const problems = [];
    for (const [file, imports] of graph.local) {
        const layer = layerOf(file);
        const allowed = /** @type {Record<string, readonly string[]>} */ (ALLOWED)[layer];
        if (!allowed) problems.push(`${file}: the layer ${layer} is not in the layer table`);
        for (const target of imports) {
            if (!graph.local.has(target)) problems.push(`${file} imports ${target}, which does not exist`);
            if (allowed && !allowed.includes(layerOf(target))) problems.push(`${file} (${layer}) imports ${target}`);
        }
        for (const specifier of graph.packages.get(file) ?? []) {
            if (specifier.startsWith('onnxruntime') && file !== ORT_IMPORTER) {
                problems.push(`${file} imports ${specifier}: only ${ORT_IMPORTER} imports onnxruntime`);
            }
            if (layer === 'shared') {
                problems.push(`${file} imports the npm package ${specifier}: shared/ imports nothing`);
            }
        }
        for (const target of graph.data?.get(file) ?? []) {
            const reader = /** @type {Record<string, string>} */ (DATA_FILES)[target];
            if (!reader) problems.push(`${file} imports ${target}, a data file DATA_FILES does not list`);
            else if (reader !== file) problems.push(`${file} imports ${target}: only ${reader} reads it`);
        }
        if (reachable(graph, file).has(file)) problems.push(`${file} is part of an import cycle`);
    }
    for (const file of PURE) {
        const reached = [...reachable(graph, file)].filter((target) => ['runtime', 'store'].includes(layerOf(target)));
        if (reached.length > 0) problems.push(`${file} is pure but reaches ${reached.join(', ')}`);
    }
    return problems;
}

test('the import scanner sees every kind of import', () => {
    const text = [
        "import { a, b as c } from './one.js';",
        'import {',
        '    d,',
        "} from '../two.js';",
        "import './three.js';",
        "import * as ort from 'onnxruntime-web/webgpu';",
        "export { e } from './four.js';",
        "/** @typedef {import('./five.js').Five} Five */",
        "const later = await import('./six.js');",
    ].join('\n');
    assert.deepEqual(specifiers(text).sort(), [
        '../two.js',
        './five.js',
        './four.js',
        './one.js',
        './six.js',
        './three.js',
        'onnxruntime-web/webgpu',
    ]);
});

test('the rules catch each kind of breach', () => {
    /** @param {Record<string, string[]>} imports */
    const graphOf = (imports) => {
        const entries = Object.entries(imports);
        return {
            local: new Map(entries.map(([file, list]) => [file, new Set(list.filter((s) => s.endsWith('.js')))])),
            packages: new Map(
                entries.map(([file, list]) => [file, new Set(list.filter((s) => !/\.js(on)?$/.test(s)))]),
            ),
            data: new Map(entries.map(([file, list]) => [file, new Set(list.filter((s) => s.endsWith('.json')))])),
        };
    };
    const clean = {
        'page/main.js': ['protocol.js', 'shared/errors.js'],
        'protocol.js': ['shared/errors.js'],
        'models/model.js': ['runtime/ort.js', 'store/weights.js', 'models/graph_choice.js'],
        'models/graph_choice.js': ['shared/errors.js'],
        'pipeline/generate.js': ['models/model.js'],
        'runtime/ort.js': ['onnxruntime-web/webgpu', 'shared/errors.js'],
        'store/weights.js': ['shared/errors.js'],
        'shared/errors.js': [],
        'shared/model_repo.js': ['../../builder/repo/manifest_schema.json'],
    };
    assert.deepEqual(violations(graphOf(clean)), []);
    const breaches = [
        ['page/main.js', 'models/model.js', /page\/main.js \(page\) imports models\/model.js/],
        ['store/weights.js', 'runtime/ort.js', /store\/weights.js \(store\) imports runtime\/ort.js/],
        ['runtime/ort.js', 'protocol.js', /runtime\/ort.js \(runtime\) imports protocol.js/],
        ['shared/errors.js', 'protocol.js', /shared\/errors.js \(shared\) imports protocol.js/],
        ['store/weights.js', 'onnxruntime-web', /only runtime\/ort.js imports onnxruntime/],
        ['models/graph_choice.js', 'models/model.js', /graph_choice.js is pure but reaches/],
        ['pipeline/generate.js', 'store/weights.js', /generate.js \(pipeline\) imports store\/weights.js/],
        ['models/model.js', 'pipeline/generate.js', /model.js \(models\) imports pipeline\/generate.js/],
        ['shared/errors.js', 'shared/errors.js', /part of an import cycle/],
        ['store/weights.js', '../../builder/repo/manifest_schema.json', /only shared\/model_repo.js reads it/],
        ['shared/errors.js', '../../builder/data.json', /data.json, a data file DATA_FILES does not list/],
    ];
    for (const [file, extra, message] of /** @type {[string, string, RegExp][]} */ (breaches)) {
        const graph = graphOf({ ...clean, [file]: [.../** @type {Record<string, string[]>} */ (clean)[file], extra] });
        const found = violations(graph);
        const why = `${file} -> ${extra}: ${found.join('; ') || 'nothing found'}`;
        assert.ok(
            found.some((line) => message.test(line)),
            why,
        );
    }
});

test('web_src/src keeps its layering', () => {
    const graph = readGraph();
    assert.ok(graph.local.size >= 30, `only ${graph.local.size} modules found under ${SRC}`);
    const ortImports = graph.packages.get(ORT_IMPORTER);
    assert.ok(ortImports?.has('onnxruntime-web/webgpu'), `${ORT_IMPORTER} must import onnxruntime`);
    for (const file of PURE) assert.ok(graph.local.has(file), `${file} is listed but does not exist`);
    for (const data of Object.keys(DATA_FILES))
        assert.ok(fs.existsSync(path.join(SRC, data)), `${data} does not exist`);
    assert.deepEqual(violations(graph), []);
});
