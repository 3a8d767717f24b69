// @ts-check
/**
 * @file Node tests of what the page decides about running offline: the app shell's status line
 * (page/ui/offline_status.js) and which model repository an offline visit uses (page/model_source.js).
 * @module tests/js/test_offline_page
 */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import { LOCAL_MODELS_KEY, resolveModelSource } from '../../web_src/src/page/model_source.js';
import { shellStatus } from '../../web_src/src/page/ui/offline_status.js';

/**
 * @param {Partial<import('../../web_src/src/page/ui/offline_status.js').ShellFacts>} overrides
 * @returns {import('../../web_src/src/page/ui/offline_status.js').ShellFacts}
 */
function facts(overrides) {
    return {
        supported: true,
        online: true,
        workerBuild: 'b1',
        cachesShell: true,
        pageBuild: 'b1',
        waiting: false,
        ...overrides,
    };
}

test('the line follows the shell: storing, stored, offline, and hidden without service workers', () => {
    assert.equal(shellStatus(facts({ workerBuild: null })).kind, 'storing');
    assert.equal(shellStatus(facts({})).kind, 'stored');
    assert.equal(shellStatus(facts({ online: false })).kind, 'offline');
    assert.equal(shellStatus(facts({ supported: false, online: false, waiting: true })).kind, 'hidden');
    assert.equal(shellStatus(facts({ cachesShell: false })).kind, 'development');
});

test('a waiting build, or a page of another build than the shell worker, asks for a reload first', () => {
    for (const update of [
        facts({ waiting: true }),
        facts({ workerBuild: 'b2' }),
        facts({ workerBuild: 'b2', online: false }),
    ]) {
        const status = shellStatus(update);
        assert.deepEqual([status.kind, status.action], ['update', true]);
    }
    for (const quiet of [facts({}), facts({ online: false })]) assert.equal(shellStatus(quiet).action, false);
});

test('a worker that keeps no shell serves the newest page, so another build there is no update', () => {
    assert.equal(shellStatus(facts({ cachesShell: false, workerBuild: 'b0' })).kind, 'development');
});

/** A Storage with only what model_source uses. */
class MemoryStorage {
    constructor() {
        /** @type {Map<string, string>} */
        this.items = new Map();
    }
    /** @param {string} key */
    getItem(key) {
        return this.items.get(key) ?? null;
    }
    /** @param {string} key @param {string} value */
    setItem(key, value) {
        this.items.set(key, value);
    }
    /** @param {string} key */
    removeItem(key) {
        this.items.delete(key);
    }
}

const PAGE = 'http://127.0.0.1:8000/';
const DEFAULT_BASE = 'https://huggingface.co/owner/repo/resolve/main/';
/** @type {typeof fetch} */
const localRepo = async () => new Response(JSON.stringify({ format: 'klein-web-model-repo' }), { status: 200 });
/** @type {typeof fetch} */
const noRepo = async () => new Response('not found', { status: 404 });
/** @type {typeof fetch} */
const offline = async () => {
    throw new TypeError('Failed to fetch');
};

/**
 * @param {typeof fetch} fetch
 * @param {MemoryStorage | null} storage
 */
async function kind(fetch, storage) {
    const source = await resolveModelSource({
        href: PAGE,
        defaultBase: DEFAULT_BASE,
        fetch,
        storage: /** @type {any} */ (storage),
    });
    return source.kind;
}

test('offline, the page uses the local repository the last visit found', async () => {
    const storage = new MemoryStorage();
    assert.equal(await kind(localRepo, storage), 'local');
    assert.equal(storage.getItem(LOCAL_MODELS_KEY), `${PAGE}models/`);
    assert.equal(await kind(offline, storage), 'local');
});

test('offline without a remembered local repository, or after one went away, the page uses the default', async () => {
    assert.equal(await kind(offline, new MemoryStorage()), 'default');
    assert.equal(await kind(offline, null), 'default');
    const storage = new MemoryStorage();
    await kind(localRepo, storage);
    assert.equal(await kind(noRepo, storage), 'default');
    assert.equal(await kind(offline, storage), 'default');
});
