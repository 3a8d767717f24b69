// @ts-check
/**
 * @file The checker of builder/repo/manifest_schema.json: a JSON value against the schema, to the first problem, as
 * one sentence. The Python tool checks manifests with its own copy of this checker (builder/repo/schema_check.py,
 * whose header lists the order of the checks and what each keyword means); tests/test_manifest_schema.py holds the
 * two to the same verdict and the same sentence on every manifest of tests/manifest_corpus.json and on random
 * mutations of it.
 * @module store/schema_check
 */

/** @typedef {Record<string, any>} Schema */

const TYPE_WORDS = Object.freeze({
    object: 'an object',
    array: 'a list',
    string: 'a string',
    integer: 'an integer',
    number: 'a finite number',
    boolean: 'true or false',
    null: 'null',
});

/** The first place a value breaks the schema: `where` (e.g. `graphs[0].path`) and what is wrong there. */
export class SchemaProblem extends Error {
    /** @param {string} where @param {string} what */
    constructor(where, what) {
        super(`${where} ${what}`);
        this.name = 'SchemaProblem';
        this.where = where;
        this.what = what;
    }
}

/**
 * Throw SchemaProblem at the first place `value` breaks `schema` (the root of a schema file with its $defs).
 * @param {Schema} schema
 * @param {unknown} value
 */
export function check(schema, value) {
    node(schema, schema, value, '');
}

/**
 * A value as a problem quotes it: compact JSON (non-finite numbers as JavaScript writes them), at most 60
 * characters.
 * @param {unknown} value
 * @returns {string}
 */
export function shown(value) {
    const text = typeof value === 'number' && !Number.isFinite(value) ? String(value) : JSON.stringify(value);
    const chars = [...text];
    return chars.length <= 60 ? text : `${chars.slice(0, 59).join('')}…`;
}

/**
 * The JSON type of a parsed value.
 * @param {unknown} value
 * @returns {string}
 */
export function typeOf(value) {
    if (value === null) return 'null';
    if (Array.isArray(value)) return 'array';
    if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
    return typeof value;
}

/** @param {unknown} value @param {string} wanted */
function hasType(value, wanted) {
    const actual = typeOf(value);
    if (wanted === 'number') return actual === 'integer' || (actual === 'number' && Number.isFinite(value));
    return actual === wanted;
}

/**
 * Why `rel` is not a safe repo-relative path, or null (builder/repo/paths.py unsafe_reason).
 * @param {string} rel
 * @returns {string | null}
 */
export function unsafeReason(rel) {
    if (rel === '') return 'is empty';
    if (rel.includes('\0')) return 'contains a NUL character';
    if (rel.includes('\\')) return 'contains a backslash';
    if (rel.startsWith('/')) return 'is an absolute path';
    if ([...rel].length > 1024) return 'is longer than 1024 characters';
    for (const part of rel.split('/')) {
        if (part === '') return 'has an empty segment (`//` or a trailing `/`)';
        if (part === '.' || part === '..') return `has a \`${part}\` segment`;
    }
    // eslint-disable-next-line no-control-regex
    if (/[\x00-\x1f]/.test(rel)) return 'contains a control character';
    return null;
}

/** @param {string} format @param {string} value @returns {string | null} */
function formatProblem(format, value) {
    const reason = unsafeReason(value);
    if (reason === null && format === 'file-name' && value.includes('/')) return 'contains a /';
    return reason;
}

/** @param {string} where @param {number} index */
const item = (where, index) => `${where}[${index}]`;
/** @param {string} where @param {string} key */
const field = (where, key) => (where ? `${where}.${key}` : key);
/** @param {string} where @param {string} key */
const entry = (where, key) => `${where}[${JSON.stringify(key)}]`;

/**
 * @param {string} where
 * @param {string} what
 * @returns {never}
 */
function fail(where, what) {
    throw new SchemaProblem(where || 'the top level', what);
}

/**
 * `where must be ...`: in the words of the schema's description where it has one.
 * @param {Schema} schema @param {string} where @param {string} words @param {unknown} value
 * @returns {never}
 */
function mustBe(schema, where, words, value) {
    return fail(where, `must be ${schema.description ?? words}, got ${shown(value)}`);
}

/**
 * @param {Schema} root
 * @param {Schema} schema
 * @param {any} value
 * @param {string} where
 */
function node(root, schema, value, where) {
    if ('$ref' in schema) node(root, root.$defs[schema.$ref.replace('#/$defs/', '')], value, where);
    if ('type' in schema) {
        const wanted = Array.isArray(schema.type) ? schema.type : [schema.type];
        if (!wanted.some((/** @type {string} */ t) => hasType(value, t))) {
            const words = wanted.map((/** @type {keyof TYPE_WORDS} */ t) => TYPE_WORDS[t]).join(' or ');
            mustBe(schema, where, words, value);
        }
    }
    if ('const' in schema && value !== schema.const) mustBe(schema, where, shown(schema.const), value);
    if ('enum' in schema && !schema.enum.includes(value))
        mustBe(schema, where, `one of ${schema.enum.join(', ')}`, value);
    const kind = typeOf(value);
    if (kind === 'string') string(schema, value, where);
    else if (kind === 'integer' || kind === 'number') number(schema, value, where);
    else if (kind === 'array') array(root, schema, value, where);
    else if (kind === 'object') object(root, schema, value, where);
    for (const part of schema.allOf ?? []) node(root, part, value, where);
    if (
        'contains' in schema &&
        kind === 'array' &&
        !value.some((/** @type {unknown} */ v) => fits(root, schema.contains, v))
    ) {
        const [key, rule] = Object.entries(schema.contains.properties)[0];
        fail(where, `has no entry whose ${key} is ${shown(rule.const)}`);
    }
    if (kind === 'object') across(schema, value, where);
}

/** @param {Schema} root @param {Schema} schema @param {unknown} value */
function fits(root, schema, value) {
    try {
        node(root, schema, value, '');
    } catch (err) {
        if (err instanceof SchemaProblem) return false;
        throw err;
    }
    return true;
}

/** @param {Schema} schema @param {string} value @param {string} where */
function string(schema, value, where) {
    if ('format' in schema) {
        const reason = formatProblem(schema.format, value);
        if (reason !== null) fail(where, `${shown(value)} ${reason}`);
    }
    if ('pattern' in schema && !new RegExp(`^(?:${schema.pattern})$`, 'u').test(value)) {
        mustBe(schema, where, `text matching ${schema.pattern}`, value);
    }
    const length = [...value].length;
    const low = schema.minLength ?? 0;
    const high = schema.maxLength;
    if (length < low || (high !== undefined && length > high)) {
        let words = high !== undefined ? `${low} to ${high} characters long` : `at least ${low} characters long`;
        if (low === 0) words = `at most ${high} characters long`;
        mustBe(schema, where, `a string ${words}`, value);
    }
}

/** @param {Schema} schema @param {number} value @param {string} where */
function number(schema, value, where) {
    const low = schema.minimum;
    const high = schema.maximum;
    if ((low !== undefined && value < low) || (high !== undefined && value > high)) {
        let words = low !== undefined && high !== undefined ? `from ${low} to ${high}` : `at least ${low}`;
        if (low === undefined) words = `at most ${high}`;
        mustBe(schema, where, words, value);
    }
}

/** @param {Schema} root @param {Schema} schema @param {unknown[]} value @param {string} where */
function array(root, schema, value, where) {
    if (value.length < (schema.minItems ?? 0)) {
        mustBe(schema, where, schema.minItems === 1 ? 'a non-empty list' : 'a longer list', value);
    }
    if ('maxItems' in schema && value.length > schema.maxItems) {
        mustBe(schema, where, `a list of at most ${schema.maxItems} entries`, value);
    }
    if ('items' in schema) value.forEach((v, index) => node(root, schema.items, v, item(where, index)));
}

/** @param {Schema} root @param {Schema} schema @param {Record<string, unknown>} value @param {string} where */
function object(root, schema, value, where) {
    const missing = (schema.required ?? []).filter((/** @type {string} */ key) => !Object.hasOwn(value, key));
    if (missing.length > 0) fail(where, `lacks ${missing.join(', ')}`);
    const properties = schema.properties ?? {};
    const extra = schema.additionalProperties ?? true;
    if (extra === false) {
        const unknown = Object.keys(value)
            .filter((key) => !Object.hasOwn(properties, key))
            .sort();
        if (unknown.length > 0) fail(where, `has unknown field(s) ${unknown.map(shown).join(', ')}`);
    }
    if ('propertyNames' in schema)
        for (const key of Object.keys(value)) node(root, schema.propertyNames, key, `${where} key`);
    if (Object.keys(value).length < (schema.minProperties ?? 0)) mustBe(schema, where, 'a non-empty object', value);
    for (const [key, rule] of Object.entries(properties)) {
        if (Object.hasOwn(value, key)) node(root, rule, value[key], field(where, key));
    }
    if (typeof extra === 'object') {
        for (const [key, v] of Object.entries(value)) {
            if (!Object.hasOwn(properties, key)) node(root, extra, v, entry(where, key));
        }
    }
    for (const [key, rule] of Object.entries(schema.dependentSchemas ?? {})) {
        if (Object.hasOwn(value, key)) node(root, rule, value, where);
    }
}

/**
 * The x- keywords: rules between fields of one object, checked once its fields are.
 * @param {Schema} schema @param {Record<string, any>} value @param {string} where
 */
function across(schema, value, where) {
    if ('x-path-in-folder' in schema) {
        const folder = `${value[schema['x-path-in-folder']]}/`;
        if (!value.path.startsWith(folder))
            fail(field(where, 'path'), `must be in ${folder}, got ${shown(value.path)}`);
    }
    if (schema['x-blocks-cover-size'] && value.blocks !== undefined && value.blocks !== null) {
        const count = Math.ceil(value.size / value.blocks.size);
        if (value.blocks.sha256.length !== count) {
            fail(field(where, 'blocks.sha256'), `must hold ${count} digest(s), one per block`);
        }
    }
    if (schema['x-graph-files-listed']) {
        value.graphs.forEach((/** @type {any} */ graph, /** @type {number} */ index) => {
            const folder = graph.path.slice(0, graph.path.lastIndexOf('/'));
            for (const rel of [graph.path, ...graph.external_data.map((/** @type {string} */ n) => `${folder}/${n}`)]) {
                if (!Object.hasOwn(value.files, rel))
                    fail(item('graphs', index), `names ${rel}, which files does not list`);
            }
        });
    }
}
