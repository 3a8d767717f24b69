// @ts-check
/** @file store/identity: which stored copy is which version, and when a partial copy may be resumed. @module tests/js/test_store_identity */

import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
    UNKNOWN,
    compareIdentity,
    fromManifest,
    ifRangeValidator,
    parseIdentity,
    resumePlan,
} from '../../web_src/src/store/identity.js';

const A = 'a'.repeat(64);
const B = 'b'.repeat(64);
const DATE = 'Tue, 01 Dec 2026 10:00:00 GMT';

test('with a manifest hash, only the hash decides: equal sizes are not enough', () => {
    const want = fromManifest({ size: 10, sha256: A.toUpperCase() });
    assert.equal(want.sha256, A);
    assert.equal(compareIdentity(want, { ...UNKNOWN, size: 10, sha256: A, etag: '"x"' }), 'same');
    assert.equal(compareIdentity(want, { ...UNKNOWN, size: 10, sha256: B }), 'changed');
    assert.equal(compareIdentity(want, { ...UNKNOWN, size: 11, sha256: A }), 'changed');
    // Stored without an identity (or never hashed): unknown, never "same".
    assert.equal(compareIdentity(want, null), 'unknown');
    assert.equal(compareIdentity(want, { ...UNKNOWN, size: 10 }), 'unknown');
});

test('without a manifest hash, the server validators decide: ETag, else Last-Modified, else only the size', () => {
    const stored = { size: 10, sha256: A, etag: '"v1"', lastModified: DATE };
    assert.equal(compareIdentity({ ...UNKNOWN, size: 10, etag: '"v1"' }, stored), 'same');
    assert.equal(compareIdentity({ ...UNKNOWN, size: 10, etag: '"v2"', lastModified: DATE }, stored), 'changed');
    assert.equal(compareIdentity({ ...UNKNOWN, size: 10, lastModified: DATE }, stored), 'same');
    assert.equal(
        compareIdentity({ ...UNKNOWN, size: 10, lastModified: 'Wed, 02 Dec 2026 10:00:00 GMT' }, stored),
        'changed',
    );
    assert.equal(compareIdentity({ ...UNKNOWN, size: 10 }, stored), 'same');
    assert.equal(compareIdentity({ ...UNKNOWN, size: 12 }, stored), 'changed');
    assert.equal(compareIdentity(UNKNOWN, stored), 'unknown');
    assert.equal(compareIdentity({ ...UNKNOWN, size: 10, etag: '"v1"' }, null), 'unknown');
});

test('If-Range carries a strong ETag, or the date only when there is no ETag at all (RFC 9110 13.1.5)', () => {
    assert.equal(ifRangeValidator({ ...UNKNOWN, etag: '"v1"', lastModified: DATE }), '"v1"');
    assert.equal(ifRangeValidator({ ...UNKNOWN, etag: 'W/"v1"', lastModified: DATE }), null);
    assert.equal(ifRangeValidator({ ...UNKNOWN, lastModified: DATE }), DATE);
    assert.equal(ifRangeValidator({ ...UNKNOWN, size: 5 }), null);
    assert.equal(ifRangeValidator(null), null);
});

test('a partial copy is resumed only for the version still wanted, with a validator, within its size', () => {
    const partial = { size: 100, sha256: A, etag: '"v1"', lastModified: null };
    const want = fromManifest({ size: 100, sha256: A });
    assert.deepEqual(resumePlan(partial, 40, want), { from: 40, ifRange: '"v1"' });
    const restart = { from: 0, ifRange: null };
    assert.deepEqual(resumePlan(partial, 0, want), restart);
    assert.deepEqual(resumePlan(null, 40, want), restart, 'no identity beside it: which version it is, is unknown');
    assert.deepEqual(resumePlan(partial, 40, fromManifest({ size: 100, sha256: B })), restart, 'the manifest changed');
    assert.deepEqual(resumePlan(partial, 140, want), restart, 'longer than the file');
    assert.deepEqual(resumePlan({ ...partial, etag: 'W/"v1"' }, 40, want), restart, 'nothing the server can check');
    assert.deepEqual(
        resumePlan({ ...partial, sha256: null, etag: '"v1"' }, 40, { ...UNKNOWN, size: 100, etag: '"v2"' }),
        restart,
        'the server already says it has another version',
    );
});

test('identities read back from the store are checked field by field', () => {
    assert.equal(parseIdentity(null), null);
    assert.equal(parseIdentity('not json'), null);
    assert.deepEqual(parseIdentity('[1]'), UNKNOWN);
    assert.deepEqual(parseIdentity(JSON.stringify({ size: 5, sha256: A, etag: 3 })), {
        size: 5,
        sha256: A,
        etag: null,
        lastModified: null,
    });
    assert.deepEqual(parseIdentity(JSON.stringify({ size: -1 })), UNKNOWN);
});
